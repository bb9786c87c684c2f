"""``PromptTap``: what each iteration of an executor put in front of the model.

A DSPy callback. It watches the executor's step predictors (RLM's ``generate_action``,
ReAct's ``react``, the scratchpad's ``step``) and its final-answer predictors, and
records the size of every prompt the adapter formats inside a step (one number per
iteration; a parse retry re-sends the same prompt, so the largest is kept). LLM calls
made outside both kinds of predictor come from the agent's own code: sub-calls.

It also measures how much of given context texts (``watch``) really reached the model:
for each, the longest prefix of it found in any formatted prompt. A budget check on
that number checks the prompt that was sent, not the packer's report of what it packed.
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


def _prompt_text(messages: Any) -> str:
    parts: list[str] = []
    for message in messages or ():
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, list):
            parts += [str(p.get("text", p)) if isinstance(p, dict) else str(p)
                      for p in content]
        else:
            parts.append(str(content or ""))
    return "\n".join(parts)


def chars_in_prompt(text: str, prompt: str) -> int:
    """The length of the longest prefix of ``text`` that occurs in ``prompt``.

    A context shown whole counts whole, one shown as a preview (an RLM variable) counts
    as far as the preview goes, one not shown counts 0. Prefixes are monotone (a prefix
    found means every shorter one is), so a binary search finds it.
    """
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if text[:mid] in prompt:
            lo = mid
        else:
            hi = mid - 1
    return lo


class PromptTap(BaseCallback):
    """Per-iteration prompt sizes and sub-call counts for one executor run.

    Args:
        step_modules: the predictors whose calls are iterations.
        final_modules: the predictors that produce the final answer (not iterations,
            not sub-calls).
        marker: called as each iteration starts; its values (``step_marks``) let the
            caller tell which tool calls happened in which iteration.
        watch: context texts by name; ``in_prompt[name]`` is the most of each that any
            formatted prompt carried (:func:`chars_in_prompt`).
    """

    def __init__(self, step_modules: list[Any], final_modules: list[Any],
                 marker: Callable[[], int] | None = None,
                 watch: dict[str, str] | None = None) -> None:
        self._watch = {n: t for n, t in (watch or {}).items() if t}
        self.in_prompt: dict[str, int] = dict.fromkeys(self._watch, 0)
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
            if self._watch and outputs:
                prompt = _prompt_text(outputs)
                for name, text in self._watch.items():
                    self.in_prompt[name] = max(self.in_prompt[name],
                                               chars_in_prompt(text, prompt))

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        """Count the call; outside any step or final predictor it is a sub-call."""
        with self._lock:
            self.llm_calls += 1
            if self._role() is None:
                self.sub_calls += 1
