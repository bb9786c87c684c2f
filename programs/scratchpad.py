"""The scratchpad executor: a persistent Python namespace and a short, truncated history.

Each step the model sees the task, the variables in the namespace, and only the last
``history_steps`` steps, each output cut to ``max_output_chars``; it writes reasoning and
code, which runs in the same interpreter as before (so variables persist). It stops when
the code calls ``SUBMIT(...)``; after ``max_iters`` steps a final predictor answers from
the history. Seed 002 reports this shape beating a growing-history loop on some tasks:
the namespace, not the prompt, carries the state.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

import dspy
from dspy.primitives.code_interpreter import CodeExecutionError, FinalOutput
from dspy.primitives.sandbox_serializable import SandboxSerializable
from pydantic import StringConstraints

from .structured import StructuredPredict


class ScratchpadStep(dspy.Signature):
    """Solve the task by running Python, one short step at a time. Variables you define
    persist between steps. Call the tools from your code and print only what you need
    to see (a few lines). When you know the answer, call SUBMIT(answer=...) in code."""

    task: str = dspy.InputField()
    tools: str = dspy.InputField(desc="functions you can call from code")
    variables: str = dspy.InputField(desc="variables already in the namespace")
    history: str = dspy.InputField(desc="your last steps and what they printed")
    reasoning: Annotated[str, StringConstraints(max_length=400)] = dspy.OutputField(
        desc="what you know and what to do next")
    code: Annotated[str, StringConstraints(max_length=800)] = dspy.OutputField(
        desc="Python to run now")


class ScratchpadFinal(dspy.Signature):
    """The steps ran out: answer the task from what the steps found. If they found
    nothing that answers it, say it is not known."""

    task: str = dspy.InputField()
    history: str = dspy.InputField(desc="the steps taken and what they printed")
    answer: Annotated[str, StringConstraints(max_length=200)] = dspy.OutputField()


def _preview(name: str, value: Any, chars: int = 200) -> str:
    if isinstance(value, SandboxSerializable):
        return f"{name}: {value.rlm_preview(chars)}"
    text = str(value)
    cut = text if len(text) <= chars else text[:chars] + f"... ({len(text):,} chars)"
    return f"{name} ({type(value).__name__}, {len(text):,} chars): {cut}"


def tool_docs(tools: list[Callable[..., Any]]) -> str:
    """One line per tool: its signature and the first line of its docstring."""
    lines = []
    for tool in tools:
        doc = (inspect.getdoc(tool) or "").split("\n", 1)[0]
        lines.append(f"{tool.__name__}{inspect.signature(tool)}: {doc}")
    return "\n".join(lines)


class Scratchpad(dspy.Module):
    """Code steps in a persistent namespace with a truncated history.

    Args:
        tools: functions the code may call (they run on the host, as in RLM).
        interpreter_factory: makes the interpreter (the offline sandbox by default).
        max_iters: most steps before the final predictor answers.
        history_steps: how many past steps the model sees.
        max_output_chars: each shown output is cut to this many characters.
    """

    def __init__(self, tools: list[Callable[..., Any]], interpreter_factory: Callable[[], Any],
                 *, max_iters: int = 6, history_steps: int = 3, max_output_chars: int = 1000
                 ) -> None:
        super().__init__()
        self.tools = list(tools)
        self.interpreter_factory = interpreter_factory
        self.max_iters = max_iters
        self.history_steps = history_steps
        self.max_output_chars = max_output_chars
        self.step = StructuredPredict(ScratchpadStep, name="scratchpad.step")
        self.finish = StructuredPredict(ScratchpadFinal, name="scratchpad.final")

    def _history(self, steps: list[dict[str, str]], window: int | None) -> str:
        shown = steps[-window:] if window else steps
        first = len(steps) - len(shown)
        parts = [f"({first} earlier steps not shown)"] if first else []
        for i, s in enumerate(shown, start=first + 1):
            out = s["output"]
            if len(out) > self.max_output_chars:
                out = out[: self.max_output_chars] + f"... ({len(s['output']):,} chars)"
            parts.append(f"Step {i}\nCode:\n{s['code']}\nOutput:\n{out or '(nothing printed)'}")
        return "\n\n".join(parts) or "(no steps yet)"

    def forward(self, question: str, *, interpreter_factory: Callable[[], Any] | None = None,
                **variables: Any) -> dspy.Prediction:
        """Run steps until the code submits an answer or the steps run out, in an
        interpreter from ``interpreter_factory`` (this call's) or the constructor's."""
        interpreter = (interpreter_factory or self.interpreter_factory)()
        interpreter.tools.update({t.__name__: t for t in self.tools})
        if hasattr(interpreter, "output_fields"):
            interpreter.output_fields = [{"name": "answer", "type": "str"}]
        steps: list[dict[str, str]] = []
        try:
            plain = self._inject(interpreter, variables)
            summary = "\n".join(_preview(n, v) for n, v in variables.items()) or "(none)"
            docs = tool_docs(self.tools)
            for _ in range(self.max_iters):
                pred = self.step(task=question, tools=docs, variables=summary,
                                 history=self._history(steps, self.history_steps))
                code = _strip_fences(pred.code)
                try:
                    result = interpreter.execute(code, variables=plain)
                except (CodeExecutionError, SyntaxError) as exc:
                    result = f"[Error] {exc}"
                if isinstance(result, FinalOutput):
                    answer = result.output.get("answer", result.output) if isinstance(
                        result.output, dict) else result.output
                    steps.append({"reasoning": pred.reasoning, "code": code,
                                  "output": f"SUBMIT: {answer}"})
                    return dspy.Prediction(answer=str(answer), trajectory=steps, submitted=True)
                steps.append({"reasoning": pred.reasoning, "code": code,
                              "output": "\n".join(map(str, result)) if isinstance(result, list)
                              else str(result or "")})
            final = self.finish(task=question, history=self._history(steps, None))
            return dspy.Prediction(answer=final.answer, trajectory=steps, submitted=False)
        finally:
            interpreter.shutdown()

    @staticmethod
    def _inject(interpreter: Any, variables: dict[str, Any]) -> dict[str, Any]:
        """Put handle variables into the namespace once; return the plain ones."""
        plain = {}
        for name, value in variables.items():
            if isinstance(value, SandboxSerializable):
                raw = value.to_sandbox()
                interpreter.execute(value.sandbox_assignment(name, f"_raw_{name}"),
                                    variables={f"_raw_{name}": raw.decode("utf-8")})
            else:
                plain[name] = value
        return plain


def _strip_fences(code: str) -> str:
    text = code.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    return text.strip()


__all__ = ["Scratchpad", "ScratchpadFinal", "ScratchpadStep", "tool_docs"]
