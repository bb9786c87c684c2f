"""``PromptTap``: what each iteration of an executor put in front of the model.

A DSPy callback. It watches the executor's step predictors (RLM's ``generate_action``,
ReAct's ``react``, the scratchpad's ``step``) and its final-answer predictors, and
records the size of every prompt the adapter formats inside a step (one number per
iteration; a parse retry re-sends the same prompt, so the largest is kept). LLM calls
made outside both kinds of predictor come from the agent's own code: sub-calls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from dspy.utils.callback import BaseCallback


def _chars(messages: Any) -> int:
    total = 0
    for message in messages or ():
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, list):
            total += sum(len(str(part.get("text", part)) if isinstance(part, dict) else part)
                         for part in content)
        else:
            total += len(str(content or ""))
    return total


class PromptTap(BaseCallback):
    """Per-iteration prompt sizes and sub-call counts for one executor run.

    Args:
        step_modules: the predictors whose calls are iterations.
        final_modules: the predictors that produce the final answer (not iterations,
            not sub-calls).
        marker: called as each iteration starts; its values (``step_marks``) let the
            caller tell which tool calls happened in which iteration.
    """

    def __init__(self, step_modules: list[Any], final_modules: list[Any],
                 marker: Callable[[], int] | None = None) -> None:
        self._step = {id(m) for m in step_modules}
        self._final = {id(m) for m in final_modules}
        self._active: dict[str, str] = {}  # call id -> "step" | "final"
        self._lock = threading.Lock()
        self.context_chars: list[int] = []
        self.final_context_chars: list[int] = []
        self.step_marks: list[int] = []
        self.sub_calls = 0
        self.llm_calls = 0
        self._marker = marker

    def _role(self) -> str | None:
        roles = set(self._active.values())
        return "step" if "step" in roles else "final" if "final" in roles else None

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        """Note a step (a new iteration) or final predictor starting."""
        with self._lock:
            if id(instance) in self._step:
                self._active[call_id] = "step"
                self.context_chars.append(0)
                self.step_marks.append(self._marker() if self._marker else 0)
            elif id(instance) in self._final:
                self._active[call_id] = "final"
                self.final_context_chars.append(0)

    def on_module_end(self, call_id: str, outputs: Any, exception: Exception | None = None
                      ) -> None:
        """Close it."""
        with self._lock:
            self._active.pop(call_id, None)

    def on_adapter_format_end(self, call_id: str, outputs: Any,
                              exception: Exception | None = None) -> None:
        """Size the prompt the adapter just built, against the current iteration."""
        with self._lock:
            role = self._role()
            sizes = {"step": self.context_chars, "final": self.final_context_chars}.get(role or "")
            if sizes:
                sizes[-1] = max(sizes[-1], _chars(outputs))

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        """Count the call; outside any step or final predictor it is a sub-call."""
        with self._lock:
            self.llm_calls += 1
            if self._role() is None:
                self.sub_calls += 1
