"""The reconciler agent: is the "Ben" of two conversations one person? MERGE or SEPARATE.

``Reconciler`` is a ``dspy.ReAct`` over the four personal tools (``get_entity_timeline``,
``get_conversation_context``, ``compare_entities_across_conversations``,
``detect_contradictions``), built as ``programs/executors.py`` builds ReAct: every step
and the final extraction go through ``StructuredPredict`` with bounded free-text fields,
so a parse failure after the retry raises ``ProgramParseError`` — never a silent
decision. Iterations and LLM calls are capped by ``ReconcilerSettings``; when the call
budget would run out, the agent is made to finish so the extraction still has its calls.

A deterministic **guard** follows the agent. A MERGE stands only with positive evidence
from the tools: at least ``min_shared`` shared distinctive attributes (named family,
pets, employer, places, names both brought up), an overlap score of at least
``min_overlap``, and no contradiction. Otherwise the decision is SEPARATE, and the record
keeps the agent's proposal beside the guard's reason. The guard is one-sided on purpose:
merging two people is the costly error — it pours one stranger's life into another's
memory, and every later answer about either inherits it — while a wrong SEPARATE only
leaves two records that a later decision can still join. Weak local models (the
embedded SmolLM2-135M) often propose nonsense; they can then never merge two people
because they share a name.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

import dspy
from dspy.utils.callback import BaseCallback
from pydantic import BaseModel, Field, StringConstraints

from memstrata.memory.entities import ensure_entities
from memstrata.tools import ToolCall, ToolError, ToolSession
from memstrata.tools.base import Binding, check_cap
from memstrata.tools.personal_tools import PERSONAL_TOOLS
from memstrata.trajectories import redact_text

from .executors import NoRepeats, StopOnRepeat, _structured, react_step
from .reconcile_guard import Guard, ReconcilerSettings, check

Decision = Literal["MERGE", "SEPARATE"]
__all__ = ["Candidate", "Guard", "Proposal", "ReconcileDecision", "Reconciler",
           "ReconcilerSettings", "check"]


class ReconcileEntities(dspy.Signature):
    """Decide whether the person called `name` in conversation_a and in conversation_b is
    one person (MERGE) or two different people (SEPARATE). Call each tool once: first
    compare_entities_across_conversations, then detect_contradictions, then finish. Read
    each tool's summary. SEPARATE when the comparison finds 0 shared distinctive details
    or any contradiction is found: sharing a name, or finding nothing in common, is not
    evidence of one person. MERGE only when the comparison lists shared distinctive
    details (named family, pets, employer, places) and no contradiction is found."""

    name: str = dspy.InputField()
    conversation_a: str = dspy.InputField()
    conversation_b: str = dspy.InputField()
    decision: Decision = dspy.OutputField()
    reason: Annotated[str, StringConstraints(max_length=300)] = dspy.OutputField(
        desc="one or two sentences citing what the tools found")
    confidence: float = dspy.OutputField(desc="from 0 to 1")


class Candidate(BaseModel):
    """One of the two entities a decision is about."""

    entity_id: str
    name: str
    conversation_id: str


class Proposal(BaseModel):
    """What the agent proposed, as it said it."""

    decision: Decision
    reason: str
    confidence: float


class ReconcileDecision(BaseModel):
    """A decision about two candidate entities, with everything that led to it.

    ``reason`` is the agent's reason and the tools' summary (or, when the guard refused
    a MERGE, why); ``evidence`` holds ``conversation:turn`` ids; ``steps`` is the agent's
    trajectory (thought, tool, arguments) and ``tool_calls`` the calls that reached the
    tools (a call ``dspy.Tool`` refused for malformed arguments shows in ``steps`` only).
    ``confidence``: the agent's for a MERGE; 0.9 for a SEPARATE backed by a
    contradiction; else the agent's (0.6 when the guard overrode a MERGE for lack of
    evidence). ``stored`` says what ``store_decision`` wrote.
    """

    candidates: list[Candidate]
    decision: Decision
    reason: str = Field(max_length=700)
    evidence: list[str] = Field(default_factory=list, max_length=20)
    confidence: float = Field(ge=0.0, le=1.0)
    proposal: Proposal
    guard: Guard
    overridden: bool
    llm_calls: int
    steps: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    model: str = ""
    wall_s: float = 0.0
    stored: dict[str, Any] = Field(default_factory=dict)


class _Counter(BaseCallback):
    """Counts LLM calls (a DSPy callback)."""

    def __init__(self) -> None:
        self.calls = 0

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        """One more call."""
        self.calls += 1


class _Budgeted(dspy.Module):
    """A step predictor that finishes instead of calling the LM when too few calls are
    left for this step (2, with its retry) and the final decision (2)."""

    def __init__(self, step: Any, counter: _Counter, limit: int) -> None:
        super().__init__()
        self.step, self.counter, self.limit = step, counter, limit

    def forward(self, **inputs: Any) -> dspy.Prediction:
        """The wrapped step, or ``finish`` when the budget is spent."""
        if self.counter.calls + 4 > self.limit:
            return dspy.Prediction(next_thought="LLM-call budget reached: deciding now.",
                                   next_tool_name="finish", next_tool_args={})
        return self.step(**inputs)


def capped(fn: Callable[..., dict[str, Any]], max_chars: int) -> Callable[..., dict[str, Any]]:
    """A personal tool that refuses, with a ``ToolError`` naming the cap, any argument
    that is not a string of 1 to ``max_chars`` characters.

    Every argument of the four tools is a name or a conversation id; what the model
    writes there reaches the tools, their refusals and the trajectory, so it is held
    to the same kind of cap as the handle tools' (``ToolCaps``). The signature is kept,
    so ``ToolSession.bind`` logs the refusal like any other.
    """

    @functools.wraps(fn)
    def tool(b: Binding, *args: Any, **kwargs: Any) -> dict[str, Any]:
        for value in (*args, *kwargs.values()):
            if not isinstance(value, str) or not value.strip():
                raise ToolError(f"{fn.__name__}: every argument is a name or a conversation "
                                f"id, a non-empty string; got {type(value).__name__}")
            check_cap(fn.__name__, len(value), max_chars, "an argument of length")
        return fn(b, *args, **kwargs)

    return tool


def _steps(trajectory: dict[str, Any]) -> list[dict[str, Any]]:
    steps, i = [], 0
    while f"tool_name_{i}" in trajectory:
        observation = trajectory.get(f"observation_{i}")
        args = trajectory.get(f"tool_args_{i}", {})
        steps.append({"thought": str(trajectory.get(f"thought_{i}", ""))[:400],
                      "tool": trajectory[f"tool_name_{i}"],
                      "args": {str(k)[:40]: v if isinstance(v, int | float | bool) or v is None
                               else redact_text(str(v))[:200] for k, v in args.items()}
                      if isinstance(args, dict) else redact_text(str(args))[:200],
                      "observation_chars": len(str(observation))})
        i += 1
    return steps


class Reconciler(dspy.Module):
    """ReAct over the personal tools, then the guard. Call it under an LM (dspy.context).

    Args:
        session: the tool session; its tenant holds both conversations.
        settings: budgets and guard thresholds.

    Example:
        >>> with dspy.context(lm=handle.lm):  # doctest: +SKIP
        ...     decision = Reconciler(session)(name="Ben", conversation_a="chat-1",
        ...                                    conversation_b="chat-2")
    """

    def __init__(self, session: ToolSession, settings: ReconcilerSettings | None = None) -> None:
        super().__init__()
        self.session = session
        self.settings = settings or ReconcilerSettings()
        self.counter = _Counter()
        self.tools = NoRepeats([session.bind(capped(fn, self.settings.max_arg_chars))
                                for fn in PERSONAL_TOOLS])
        self.agent = dspy.ReAct(ReconcileEntities, tools=self.tools.tools,
                                max_iters=self.settings.max_iters)
        self.agent.react = _Budgeted(
            StopOnRepeat(react_step(self.agent, "reconciler.step"), self.tools),
            self.counter, self.settings.max_llm_calls)
        self.agent.extract = _structured(self.agent.extract.predict.signature,
                                         "reconciler.decide")

    def candidates(self, name: str, conversation_a: str, conversation_b: str) -> list[Candidate]:
        """The two entities (made from the turns where none is stored yet).

        Raises ``ValueError`` for a name or conversation id that is not a non-empty
        string within ``settings.max_arg_chars``, or that nobody by that name speaks in.
        """
        b = self.session.binding
        for what, value in (("name", name), ("conversation_a", conversation_a),
                            ("conversation_b", conversation_b)):
            if not isinstance(value, str) or not value.strip() or \
                    len(value) > self.settings.max_arg_chars:
                raise ValueError(f"{what} must be a non-empty string of at most "
                                 f"{self.settings.max_arg_chars} characters")
        out = []
        for conv in (conversation_a, conversation_b):
            found = [e for e in ensure_entities(b.store, b.user_id, conv)
                     if e.name.casefold() == name.casefold()]
            if not found:
                raise ValueError(f"nobody named {name!r} speaks in {conv}")
            out.append(Candidate(entity_id=found[0].id, name=found[0].name,
                                 conversation_id=conv))
        return out

    def forward(self, name: str, conversation_a: str, conversation_b: str) -> ReconcileDecision:
        """Decide for one pair; raises ``ProgramParseError`` when the model's output
        cannot be parsed twice over."""
        started, mark = time.perf_counter(), len(self.session.log.calls)
        candidates = self.candidates(name, conversation_a, conversation_b)
        self.counter.calls = 0
        self.tools.clear()
        with dspy.context(callbacks=[*dspy.settings.callbacks, self.counter]):
            pred = self.agent(name=name, conversation_a=conversation_a,
                              conversation_b=conversation_b)
        proposal = Proposal(decision=pred.decision, reason=str(pred.reason)[:300],
                            confidence=min(1.0, max(0.0, float(pred.confidence))))
        guard = check(self.session, name, conversation_a, conversation_b, self.settings)
        merge = proposal.decision == "MERGE" and guard.merge_allowed
        overridden = proposal.decision == "MERGE" and not merge
        if overridden:
            reason = f"Overridden: the agent proposed MERGE, but the tools show {guard.reason}."
            confidence = 0.9 if guard.contradictions else 0.6
        else:
            reason = f"{proposal.reason} | tools: {guard.reason}"
            confidence = proposal.confidence if merge else max(
                proposal.confidence, 0.9 if guard.contradictions else 0.0)
        return ReconcileDecision(
            candidates=candidates, decision="MERGE" if merge else "SEPARATE",
            reason=reason[:700], evidence=guard.evidence, confidence=round(confidence, 3),
            proposal=proposal, guard=guard, overridden=overridden, llm_calls=self.counter.calls,
            steps=_steps(pred.trajectory), tool_calls=self.session.log.since(mark),
            model=str(getattr(dspy.settings.lm, "model", "")),
            wall_s=round(time.perf_counter() - started, 3))
