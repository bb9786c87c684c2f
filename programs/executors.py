"""Executors over one tool session: ``dspy.RLM``, ``dspy.ReAct`` and the scratchpad.

``run_executor`` builds the executor with a tenant-bound tool session, runs it on the
configured LM, and records the run (``trajectories.Recorder``): each iteration's prompt
size, reasoning, code and output, every tool call with the ids it returned, the LLM calls
and tokens, and the leakage figures. Every step and final predictor goes through
``StructuredPredict`` (constrained JSON, one retry, then a specific error), as every
memstrata program does; small models otherwise break RLM's free-text format.

The RLM and scratchpad run code in the offline Deno/Pyodide sandbox by default
(``programs/sandbox.py``); ``interpreter="local"`` uses ``dspy.LocalInterpreter``, which
is not a sandbox and is labelled so wherever it is chosen.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Annotated, Any, Literal

import dspy
from dspy.primitives.code_interpreter import CodeInterpreterError
from dspy.primitives.repl_types import REPLVariable
from dspy.primitives.sandbox_serializable import SandboxSerializable, build_repl_variable
from dspy.utils.exceptions import ContextWindowExceededError
from pydantic import BaseModel, Field, StringConstraints, WithJsonSchema

from memstrata.tools import BlobRef, ToolCall, ToolSession
from memstrata.trajectories import Leakage, Recorder, measure, redact_text

from .binding import UnboundProgramError
from .errors import ProgramParseError
from .handles import SandboxBlobRef
from .instrument import PromptTap
from .judge import Judge
from .lm import ModelHandle
from .meter import Usage
from .refs import ProgramRef
from .sandbox import InterpreterKind, SandboxLimits, interpreter_factory
from .scratchpad import Scratchpad
from .structured import StructuredPredict

ExecutorKind = Literal["rlm", "react", "scratchpad"]
ToolStyle = Literal["handles", "naive"]
EXECUTORS: tuple[str, ...] = ("rlm", "react", "scratchpad")
# Failures a weak model or a small window cause: the run is recorded as failed and the
# caller goes on. Anything else is a bug and propagates.
EXPECTED_FAILURES = (ProgramParseError, ContextWindowExceededError, CodeInterpreterError)


class ExecutorSettings(BaseModel):
    """How an executor runs; every field is a knob of ``memstrata rlm`` and the benches.

    Attributes:
        executor: ``rlm``, ``react`` or ``scratchpad``.
        interpreter: ``sandbox`` (Deno/Pyodide, offline) or ``local`` (not a sandbox).
        tools: ``handles`` (the bounded tools) or ``naive`` (full payloads, for E7 only).
        max_iters: most iterations before the executor must answer.
        max_llm_calls: most sub-LLM calls the agent's code may make (RLM).
        max_output_chars: printed output shown back per step is cut to this.
        history_steps: steps of history the scratchpad shows.
        sandbox_time_s: wall-clock seconds one sandbox step may run (host tool time
            excluded); past it the step ends with a recorded error and the sandbox restarts.
        sandbox_memory_mb: memory one sandbox step may take (``SandboxLimits.memory_mb``).
        writes: whether the agent gets the memory tools that write (:data:`WRITE_TOOLS`).
            Turn it off for a task that only reads: then no text the agent reads (a
            poisoned memory saying "write this") can make it write, whatever the model.
    """

    executor: ExecutorKind = "rlm"
    interpreter: InterpreterKind = "sandbox"
    tools: ToolStyle = "handles"
    max_iters: int = Field(6, ge=1, le=50)
    max_llm_calls: int = Field(4, ge=0, le=100)
    max_output_chars: int = Field(2000, ge=100)
    history_steps: int = Field(3, ge=1)
    sandbox_time_s: float = Field(30.0, gt=0)
    sandbox_memory_mb: int = Field(1024, ge=256)
    writes: bool = True

    def sandbox_limits(self) -> SandboxLimits:
        """The sandbox limits these settings ask for."""
        return SandboxLimits(time_s=self.sandbox_time_s, memory_mb=self.sandbox_memory_mb)


WRITE_TOOLS = frozenset({"mem_add", "event_log"})
"""The memory tools that write (``ExecutorSettings.writes`` gives or withholds them)."""


class ExecutorRun(BaseModel):
    """The outcome of one executor run (what ``memstrata rlm`` shows)."""

    run_id: str
    executor: str
    answer: str
    converged: bool
    steps: list[dict[str, Any]] = Field(default_factory=list)
    leakage: Leakage
    usage: Usage
    wall_s: float
    error: str | None = None
    verdict: dict[str, Any] | None = None
    context_in_prompt: dict[str, int] = Field(
        default_factory=dict, description="per text context: the most of it any prompt sent "
        "to the model carried, in chars (``instrument.chars_in_prompt``)")


class AnswerWithTools(dspy.Signature):
    """Answer the question about this user's conversations. Find the evidence with the
    tools: mem_search(query) returns ids and one-line descriptions, mem_get(ids) the full
    records of a few of them; a BlobRef is read with ctx_find(ref, pattern) and
    ctx_slice(ref, start, end). Answer in a short phrase. If nothing you found answers
    it, say you don't know."""

    question: str = dspy.InputField()
    answer: Annotated[str, StringConstraints(max_length=200)] = dspy.OutputField(
        desc="a short phrase")


def executor_signature(context_names: list[str],
                       base: type[dspy.Signature] = AnswerWithTools) -> type[dspy.Signature]:
    """``base`` with one extra input per context variable it lacks (blob handles)."""
    signature = base
    for name in context_names:
        if name not in signature.input_fields:
            signature = signature.insert(-1, name, dspy.InputField(
                desc="a BlobRef handle (or text) to search"), type_=str)
    return signature


# Free-text outputs of DSPy's executors carry no bound; under a JSON grammar a small model
# then fills "reasoning" until max_tokens cuts the object (seen with SmolLM2 in RLM).
OUTPUT_BOUNDS = {"reasoning": 400, "next_thought": 400, "code": 800}


def _structured(signature: type[dspy.Signature], name: str) -> StructuredPredict:
    """``StructuredPredict`` over ``signature`` with its free-text outputs bounded."""
    for field, limit in OUTPUT_BOUNDS.items():
        info = signature.output_fields.get(field)
        if info is not None and info.annotation is str and not info.metadata:
            signature = signature.with_updated_fields(
                field, type_=Annotated[str, StringConstraints(max_length=limit)])
    return StructuredPredict(signature, name)


def tool_args_schema(tools: dict[str, dspy.Tool]) -> dict[str, Any]:
    """The JSON schema of ReAct's ``next_tool_args``: one closed object per tool, holding
    the tool's required arguments with their declared types.

    DSPy types the field as an open mapping and shows each tool's arguments as their JSON
    schema (``{'query': {'type': 'string'}}``); small local models then echo the schema
    (``{"query": {"type": "string", "value": "..."}}``) and no tool is ever called. Under
    this schema a constrained decoder can only write some tool's real arguments. Optional
    arguments are left out: DSPy makes every property of a schema required before it
    reaches the engine, so offering them would oblige the model to fill them all in.
    """
    options = []
    for tool in tools.values():
        props = {name: spec or {} for name, spec in (tool.args or {}).items()
                 if "default" not in (spec or {})}
        options.append({"type": "object", "properties": props, "required": list(props),
                        "additionalProperties": False})
    return {"anyOf": options} if len(options) > 1 else options[0]


class NoRepeats:
    """Tools for ``dspy.ReAct`` that answer a repeated identical call (same tool, same
    arguments) with a notice instead of running it again.

    Greedy small models loop on one call; the notice says where the first result is and
    what to do instead (``StopOnRepeat`` ends the loop if the call comes a third time).
    ``clear`` starts a new task (calls made for an earlier one no longer count).

    Inside an :class:`Executor` call the calls seen are the call's own (kept with its bound
    tools, not here): a copy of the executor an optimizer makes then shares no state with
    the original, whose wrapped functions it shares.
    """

    def __init__(self, tools: list[Callable[..., Any]]) -> None:
        self._seen: set[str] = set()
        self._noticed: set[str] = set()
        self.tools = [dspy.Tool(self._wrap(fn)) for fn in tools]

    @property
    def seen(self) -> set[str]:
        """The calls made so far (this executor call's, inside one)."""
        bound = _BOUND.get()
        return bound.seen if bound is not None else self._seen

    @property
    def noticed(self) -> set[str]:
        """The repeated calls that got the notice (this executor call's, inside one)."""
        bound = _BOUND.get()
        return bound.noticed if bound is not None else self._noticed

    def clear(self) -> None:
        """Forget the calls made so far."""
        self.seen.clear()
        self.noticed.clear()

    def was_noticed(self, name: str, args: Any) -> bool:
        """Whether this call (tool name, keyword arguments) already got the notice."""
        return isinstance(args, dict) and _call_key(name, (), args) in self.noticed

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            key = _call_key(fn.__name__, args, kwargs)
            if key in self.seen:
                self.noticed.add(key)
                return {"note": f"{fn.__name__} was already called with these arguments; its "
                        "result is in the trajectory above. Call another tool, or finish."}
            self.seen.add(key)
            return fn(*args, **kwargs)

        return call


def _call_key(name: str, args: Any, kwargs: dict[str, Any]) -> str:
    return json.dumps([name, list(args), kwargs], sort_keys=True, default=str)


class StopOnRepeat(dspy.Module):
    """A ReAct step that finishes instead of repeating a call that already got
    ``NoRepeats``' notice: a model that ignores the notice once repeats the call to the
    iteration cap, each repeat one more LLM call that adds nothing."""

    def __init__(self, step: Any, tools: NoRepeats) -> None:
        super().__init__()
        self.step, self.repeats = step, tools

    def forward(self, **inputs: Any) -> dspy.Prediction:
        """The step's prediction, or ``finish`` when it repeats a noticed call."""
        pred = self.step(**inputs)
        if self.repeats.was_noticed(str(pred.next_tool_name), pred.next_tool_args):
            return dspy.Prediction(next_thought=f"{pred.next_thought} (The same call again "
                                   "after the repeat notice: finishing.)",
                                   next_tool_name="finish", next_tool_args={})
        return pred


def react_step(react: dspy.ReAct, name: str) -> StructuredPredict:
    """ReAct's step predictor, structured, with ``next_tool_args`` held to the tools'
    argument schemas (``tool_args_schema``); parsing still yields a plain dict."""
    schema = tool_args_schema(react.tools)
    signature = react.react.signature.with_updated_fields(
        "next_tool_args", type_=Annotated[dict[str, Any], WithJsonSchema(schema)])
    return _structured(signature, name)


def build_executor(settings: ExecutorSettings, tools: list[Callable[..., Any]],
                   signature: type[dspy.Signature], factory: Callable[[], Any] | None
                   ) -> tuple[dspy.Module, list[Any], list[Any]]:
    """The executor module, its step predictors and its final-answer predictors."""
    if settings.executor == "rlm":
        rlm = dspy.RLM(signature, max_iters=settings.max_iters,
                       max_llm_calls=settings.max_llm_calls,
                       max_output_chars=settings.max_output_chars, tools=tools,
                       interpreter_factory=factory or interpreter_factory(
                           "sandbox", limits=settings.sandbox_limits()))
        rlm.generate_action = _structured(rlm.generate_action.signature, "rlm.action")
        rlm.extract = _structured(rlm.extract.signature, "rlm.extract")
        return rlm, [rlm.generate_action], [rlm.extract]
    if settings.executor == "react":
        repeats = NoRepeats(tools)
        react = dspy.ReAct(signature, tools=repeats.tools, max_iters=settings.max_iters)
        step = react_step(react, "react.step")
        react.react = StopOnRepeat(step, repeats)
        react.extract = _structured(react.extract.predict.signature, "react.extract")
        return react, [step], [react.extract]
    if settings.executor == "scratchpad":
        pad = Scratchpad(tools, factory or interpreter_factory(
                             "sandbox", limits=settings.sandbox_limits()),
                         max_iters=settings.max_iters, history_steps=settings.history_steps,
                         max_output_chars=settings.max_output_chars)
        return pad, [pad.step], [pad.finish]
    raise ValueError(f"executor must be one of {EXECUTORS}, not {settings.executor!r}")


@dataclass
class _Bound:
    """One executor call's live side: its tools by name, and the calls ``NoRepeats`` saw."""

    tools: dict[str, Callable[..., Any]]
    seen: set[str] = dc_field(default_factory=set)
    noticed: set[str] = dc_field(default_factory=set)


# The tools bound to the executor call running in this context. A context variable, not
# an attribute: the executor (and every copy an optimizer makes of it) holds only tool
# *slots*, and each call, in whatever thread, reaches its own session's tools.
_BOUND: ContextVar[_Bound | None] = ContextVar("memstrata_executor_tools", default=None)

ToolBox = Callable[[], list[Callable[..., Any]]]
"""Makes one executor call's tools (a fresh session's bound tools, say)."""

_TOOLBOX: ContextVar[ToolBox | None] = ContextVar("memstrata_executor_toolbox", default=None)


@contextmanager
def tools_from(toolbox: ToolBox) -> Iterator[None]:
    """Inside the block, every :class:`Executor` call given no ``tools=`` (the calls an
    optimizer makes with an example's inputs only) runs with ``toolbox()``'s tools, made
    anew for each call; a call that passes ``tools=`` keeps its own.

    What ``memstrata compile sparql`` runs its optimizer in: the copies stay unbound (they
    hold tool slots only) while each run finds a session over the compile's store.
    """
    token = _TOOLBOX.set(toolbox)
    try:
        yield
    finally:
        _TOOLBOX.reset(token)


def tool_slot(prototype: Callable[..., Any], *, drop_first: bool = False) -> Callable[..., Any]:
    """A stand-in for a tool: the prototype's name, docstring, signature and (resolved)
    annotations, calling the tool of that name bound to the current ``Executor`` call.

    The agent's prompt is built from exactly what the prototype shows, so a slot reads the
    same as the tool; the slot keeps no reference to the prototype (nor to the session it
    may close over), so copying the executor never reaches a store.

    Args:
        prototype: a tool as the agent sees it (a session-bound one), or, with
            ``drop_first``, an unbound tool function whose first parameter is the
            ``Binding`` that ``ToolSession.bind`` fills in.
    """
    name = prototype.__name__
    signature = inspect.signature(prototype)
    if drop_first:
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    try:  # resolved here: the slot's module is not the one its string annotations name
        hints = typing.get_type_hints(prototype)
    except (NameError, TypeError):
        hints = dict(getattr(prototype, "__annotations__", {}))
    hints = {k: v for k, v in hints.items() if k in signature.parameters or k == "return"}

    def slot(*args: Any, **kwargs: Any) -> Any:
        bound = _BOUND.get()
        if bound is None or name not in bound.tools:
            raise UnboundProgramError(f"tool {name!r} was called outside an executor call "
                                      "that binds it (Executor(..., tools=...))")
        return bound.tools[name](*args, **kwargs)

    slot.__name__ = slot.__qualname__ = name
    slot.__doc__ = prototype.__doc__
    slot.__signature__ = signature  # type: ignore[attr-defined]
    slot.__annotations__ = hints
    return slot


class Executor(dspy.Module):
    """An executor (RLM, ReAct or the scratchpad) built once, its tools bound per call.

    Its state as a DSPy program is its predictors only: the step and final predictors
    persist across calls (an optimizer tunes them; ``save_program`` writes them), while
    the tool session is bound for one call (``tools=``). The agent sees tool *slots*
    made from ``tools`` (names, docstrings, signatures); each call's tools must carry the
    same names. A copy (``copy.deepcopy``) shares no session and no store.

    Args:
        settings: the executor and its budgets.
        tools: prototypes of the tools the agent gets (a session's bound tools, or unbound
            tool functions with ``drop_first``); with ``settings.writes`` off, the write
            tools among them are left out.
        signature: the task's signature (``question`` in, the answer last out).
        context: names of the extra inputs (blob handles or text) the task passes.
        factory: the interpreter factory (RLM and the scratchpad; default: the settings'
            interpreter, created per run); a call may pass another (``interpreter_factory``).
        drop_first: ``tools`` are unbound functions whose first parameter is a ``Binding``.

    Example:
        >>> agent = Executor(ExecutorSettings(executor="react"), session.handle_tools())
        >>> pred = agent(question="Who is Oscar?", tools=session.handle_tools())  # doctest: +SKIP
    """

    def __init__(self, settings: ExecutorSettings | None = None,
                 tools: list[Callable[..., Any]] | None = None,
                 signature: type[dspy.Signature] = AnswerWithTools,
                 context: list[str] | tuple[str, ...] = (),
                 factory: Callable[[], Any] | None = None, *, drop_first: bool = False) -> None:
        super().__init__()
        self.settings = settings = settings or ExecutorSettings()
        prototypes = [t for t in tools or []
                      if settings.writes or t.__name__ not in WRITE_TOOLS]
        self.tool_names = [t.__name__ for t in prototypes]
        self.context_names = list(context)
        self.output_name = list(signature.output_fields)[-1]
        if factory is None and settings.executor != "react":
            factory = (interpreter_factory("local") if settings.interpreter == "local"
                       else _LazySandbox(settings.sandbox_limits()))
        self.agent, steps, finals = build_executor(
            settings, [tool_slot(t, drop_first=drop_first) for t in prototypes],
            executor_signature(self.context_names, signature), factory)
        self._step_ids = [id(m) for m in steps]
        self._final_ids = [id(m) for m in finals]

    def step_modules(self) -> list[Any]:
        """The modules that take a step (watched by ``PromptTap``)."""
        return self._modules(self._step_ids, "step")

    def final_modules(self) -> list[Any]:
        """The modules that give the final answer (watched by ``PromptTap``)."""
        return self._modules(self._final_ids, "final")

    def _modules(self, ids: list[int], role: str) -> list[Any]:
        # By the agent's own attributes, so a copy names its own modules, not the original's.
        roles = {"rlm": ("generate_action", "extract"), "react": ("react", "extract"),
                 "scratchpad": ("step", "finish")}[self.settings.executor]
        module = getattr(self.agent, roles[0 if role == "step" else 1])
        if self.settings.executor == "react" and role == "step":
            module = module.step  # StopOnRepeat wraps the structured step
        return [module]

    def forward(self, question: str, *, tools: list[Callable[..., Any]] | None = None,
                interpreter_factory: Callable[[], Any] | None = None,
                **context: Any) -> dspy.Prediction:
        """Run the agent on ``question`` with ``tools`` bound to its slots for this call
        (``None``: the tools of the enclosing :func:`tools_from` block).

        Raises:
            ValueError: a tool the executor was built with is missing from ``tools``, or
                ``context`` names an input it was not built for.
            UnboundProgramError: no ``tools`` and no :func:`tools_from` block.
        """
        if tools is None:
            toolbox = _TOOLBOX.get()
            if toolbox is None:
                raise UnboundProgramError("this executor was called without tools: pass "
                                          "tools=... or call it inside tools_from(...)")
            tools = toolbox()
        given = {t.__name__: t for t in tools}
        missing = [n for n in self.tool_names if n not in given]
        if missing:
            raise ValueError(f"this executor's tools {missing} are not among the call's "
                             f"tools {sorted(given)}")
        unknown = sorted(set(context) - set(self.context_names))
        if unknown:
            raise ValueError(f"this executor takes the context {self.context_names}, "
                             f"not {unknown}")
        token = _BOUND.set(_Bound(tools=given))
        try:
            if interpreter_factory is not None and self.settings.executor != "react":
                return self.agent(question=question, interpreter_factory=interpreter_factory,
                                  **context)
            return self.agent(question=question, **context)
        finally:
            _BOUND.reset(token)


class _LazySandbox:
    """The offline sandbox's factory, set up on the first interpreter it makes: building an
    executor needs no sandbox installed, running one does (as before, once per run)."""

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits

    def __call__(self) -> Any:
        return interpreter_factory("sandbox", limits=self.limits)()


def _variables_info_chars(executor: str, variables: dict[str, Any], question: str) -> int:
    """Size of the variables summary the model sees each iteration."""
    if executor == "react":  # ReAct has no summary: the inputs themselves are the prompt
        return len(question) + sum(len(str(v)) for v in variables.values())
    shown = {"question": question, **variables}
    return sum(len((build_repl_variable(v, n) if isinstance(v, SandboxSerializable)
                    else REPLVariable.from_value(n, v)).format()) for n, v in shown.items())


def _iterations(executor: str, pred: Any) -> tuple[list[dict[str, Any]], bool]:
    """(steps as reasoning/code/output dicts, whether the agent itself finished)."""
    if pred is None:
        return [], False
    # A dict of named steps (ReAct) or a list of steps (RLM), as DSPy records them.
    trajectory: Any = getattr(pred, "trajectory", None) or []
    if executor == "react":
        steps, i = [], 0
        while f"thought_{i}" in trajectory:
            steps.append({"reasoning": trajectory[f"thought_{i}"],
                          "code": f"{trajectory[f'tool_name_{i}']}({trajectory[f'tool_args_{i}']})",
                          "output": str(trajectory.get(f"observation_{i}", ""))})
            i += 1
        return steps, bool(steps) and steps[-1]["code"].startswith("finish(")
    if executor == "rlm":
        return list(trajectory), getattr(pred, "final_reasoning", "") != \
            "Extract forced final output"
    return list(trajectory), bool(getattr(pred, "submitted", False))


def _record_steps(rec: Recorder, executor: str, steps: list[dict[str, Any]],
                  calls: list[ToolCall], marks: list[int], context_chars: list[int]
                  ) -> list[dict[str, Any]]:
    """Write each iteration and the tool calls made during it; return them for display.

    ``marks[i]`` is how many of ``calls`` had been made when iteration ``i`` started.
    """
    bounds = [*marks, len(calls)]
    shown: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        chars = context_chars[i] if i < len(context_chars) else None
        rec.step("iteration", f"{executor}.{i + 1}", input=step.get("code", ""),
                 output=step.get("output", ""),
                 data={"reasoning": step.get("reasoning", ""), "context_chars": chars})
        in_step = calls[bounds[i]:bounds[i + 1]] if i + 1 < len(bounds) else []
        for call in in_step:
            rec.step("tool", call.name, input=call.args, output=call.error or "",
                     output_chars=call.result_chars, ms=call.ms,
                     data={"iteration": i + 1, "ids": call.ids, "error": call.error})
        shown.append({"iteration": i + 1, "context_chars": chars, **step,
                      "tools": [c.model_dump() for c in in_step]})
    return shown


def run_executor(question: str, session: ToolSession, handle: ModelHandle,
                 settings: ExecutorSettings | None = None, *,
                 context: dict[str, BlobRef | str] | None = None,
                 factory: Callable[[], Any] | None = None,
                 layers: tuple[str, ...] = ("turns", "items", "blobs"),
                 judge: ModelHandle | None = None,
                 signature: type[dspy.Signature] = AnswerWithTools,
                 tools: list[Callable[..., Any]] | None = None,
                 executor: Executor | None = None,
                 program: ProgramRef | None = None) -> ExecutorRun:
    """Run one executor session on ``question`` and record it in the session's store.

    Args:
        question: the task.
        session: the tool session (its tenant is the run's tenant).
        handle: the model (``setup_lm``); its meter counts the run's LLM calls.
        settings: the executor and its budgets.
        context: extra inputs by name: ``BlobRef`` handles (shown as handles) or text.
        factory: an interpreter factory to use instead of the settings' one (tests pass
            a mock here).
        layers: the memory layers the run could reach, for the record.
        judge: a model that grades the run with ``Judge`` (task, steps, answer); its
            verdict is recorded with the run.
        signature: the task's signature (``question`` in, ``answer`` out, by default
            ``AnswerWithTools``); a task suite passes its own, with its own inputs.
        tools: the tools to give the agent instead of the settings' memory tools; bind
            extra ones with ``session.bind`` so their calls are logged like the rest.
            With ``settings.writes`` off, the write tools among them are withheld too.
        executor: a persistent (or compiled) :class:`Executor` to run instead of one built
            for this call; its settings are the run's, ``signature`` is not used (its
            own is), and ``tools`` and ``context`` must match what it was built with.
        program: the program file ``executor`` was loaded from, named (path and SHA-256)
            in the run's record.

    Returns:
        The answer, the steps, the leakage figures and the usage. A failure a weak model
        causes (unparseable output, window overflow, sandbox death) is returned with
        ``error`` set and recorded as an ``error`` run; other exceptions propagate.
    """
    if executor is not None and settings is not None and settings != executor.settings:
        raise ValueError("settings differ from the executor's own: pass one or the other")
    settings = executor.settings if executor is not None else settings or ExecutorSettings()
    if tools is None:
        tools = session.handle_tools() if settings.tools == "handles" else session.naive_tools()
    if not settings.writes:
        tools = [t for t in tools if t.__name__ not in WRITE_TOOLS]
    # RLM and the scratchpad put a handle in the sandbox; ReAct's inputs are prompt text,
    # so it gets the handle's repr (the naive arm's full text goes in as it is).
    variables: dict[str, Any] = {
        name: (repr(v) if settings.executor == "react" else SandboxBlobRef(v))
        if isinstance(v, BlobRef) else v for name, v in (context or {}).items()}
    if executor is None:  # one built for this call: today's behaviour, prompt for prompt
        if factory is None and settings.executor != "react":  # fails here when missing
            factory = interpreter_factory(settings.interpreter,
                                          limits=settings.sandbox_limits())
        executor = Executor(settings, tools, signature, list(variables), factory)
        factory = None
    module = executor
    step_mods, final_mods = executor.step_modules(), executor.final_modules()
    calls_mark, meter_mark = len(session.log.calls), handle.meter.mark()
    tap = PromptTap(step_mods, final_mods, marker=lambda: len(session.log.calls),
                    watch={n: v for n, v in (context or {}).items() if isinstance(v, str)})
    config = {**settings.model_dump(), "model": handle.name, "caps": session.caps.model_dump(),
              "context": {n: repr(v) if isinstance(v, BlobRef) else f"text ({len(v)} chars)"
                          for n, v in (context or {}).items()}}
    if program is not None:
        config["program"] = program.model_dump()
    started = time.perf_counter()
    with Recorder(session.binding.store, session.user_id, f"executor.{settings.executor}",
                  task=question, config=config, layers=layers,
                  agent_id=session.binding.agent_id) as rec:
        session.binding.run_id = rec.run_id
        pred, error = None, None
        try:
            with dspy.context(lm=handle.lm, callbacks=[*dspy.settings.callbacks, tap]):
                pred = module(question=question, tools=tools, interpreter_factory=factory,
                              **variables)
        except EXPECTED_FAILURES as exc:
            error = redact_text(f"{type(exc).__name__}: {exc}")[:1000]  # masked, then cut
        finally:
            session.binding.run_id = None
        steps, converged = _iterations(settings.executor, pred)
        calls = session.log.since(calls_mark)
        shown = _record_steps(rec, settings.executor, steps, calls,
                              [m - calls_mark for m in tap.step_marks], tap.context_chars)
        output_name = executor.output_name
        answer = "" if pred is None else str(getattr(pred, output_name, "") or "")
        usage = handle.meter.since(meter_mark)
        leakage = measure(
            context_chars=tap.context_chars,
            stdout_chars=sum(len(str(s.get("output", ""))) for s in steps),
            variables_info_chars=_variables_info_chars(settings.executor, variables, question),
            tool_return_sizes=[c.result_chars for c in calls],
            large_return_threshold=session.caps.large_return_chars,
            sub_calls=tap.sub_calls, llm_calls=usage.calls)
        output = {"answer": answer, "converged": converged and error is None, "error": error}
        verdict = None if judge is None or error else _judge(judge, question, shown, answer)
        if verdict is not None:
            rec.step("verdict", "Judge", output=verdict.get("rationale", ""), data=verdict)
        if error is None:
            rec.finish(output=output, verdict=verdict, usage=usage.model_dump(),
                       leakage=leakage.model_dump())
        else:
            rec.fail(error, output=output, usage=usage.model_dump(),
                     leakage=leakage.model_dump())
    return ExecutorRun(run_id=rec.run_id, executor=settings.executor, answer=answer,
                       converged=converged and error is None, steps=shown, leakage=leakage,
                       usage=usage, wall_s=round(time.perf_counter() - started, 3),
                       error=error, verdict=verdict, context_in_prompt=dict(tap.in_prompt))


def render_trajectory(steps: list[dict[str, Any]], chars: int = 3000) -> str:
    """A run's steps as compact lines for a judge or an extractor: what each iteration
    did and what came back, each part cut to 300 chars, the whole to ``chars``."""
    return "\n".join(
        f"{s['iteration']}. {s.get('code', '')[:300]} -> {str(s.get('output', ''))[:300]}"
        for s in steps)[:chars]


def _judge(judge: ModelHandle, task: str, steps: list[dict[str, Any]], answer: str
           ) -> dict[str, Any]:
    """``Judge``'s verdict on a run (its steps rendered compactly, cut to 3,000 chars)."""
    trajectory = render_trajectory(steps)
    try:
        with dspy.context(lm=judge.lm):
            out = Judge()(task=task, trajectory=trajectory or "(no steps)", output=answer)
    except ProgramParseError as exc:
        return {"judge_model": judge.name, "success": None, "error": str(exc)[:300]}
    return {"judge_model": judge.name, "success": out.success, "rationale": out.rationale}
