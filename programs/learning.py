"""``learn_from``: one judged agent run distilled into strategies (the ReasoningBank loop).

What ``Memory.learn`` does for any agent, a ``dspy.ReAct`` over ``Memory.tools`` say:
the run is read as an :class:`~memstrata.programs.distill.Attempt`, the extraction
policy distils at most three strategies (a success) or guardrails (a failure) from it,
and the closed loop's write-back (``trajectories.loop.learn``) counts a use of every
strategy the run was shown (and a win when it succeeded) and consolidates the new ones
into the tenant's bank (merge / supersede / discard / add, each decision logged). The
next ``Memory.context`` ranks them in its ``strategies`` layer.

A run is one of:

- a ``dspy.Prediction`` of ``dspy.ReAct`` (its ``trajectory`` dict of ``thought_i``,
  ``tool_name_i``, ``tool_args_i``, ``observation_i``; its other fields are the answer);
  the prediction does not carry the task, so ``task`` is required;
- a recorded run of this store (its id, ``run_...``, or its ``RunRecord``): the task,
  the steps and the output as the ``Recorder`` wrote them;
- a mapping with ``trajectory`` (text, a ReAct dict or a list of steps), and optionally
  ``task`` and ``answer``;
- the trajectory as text.

LLM calls: one with ``method="llm"`` (two on a parse retry), none with ``"trace"`` (the
run's answer or failure is kept as it is).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any, Literal

from pydantic import BaseModel, Field

from memstrata.memory import MemoryStore
from memstrata.memory.bank import ConsolidationPolicy
from memstrata.memory.runs import RunRecord
from memstrata.trajectories.loop import learn
from memstrata.trajectories.recorder import as_text

from .distill import Attempt, ExtractionPolicy
from .judging import Verdict
from .lm import ModelHandle
from .verb_calls import counting_calls

MAX_TRAJECTORY_CHARS = 20_000


class Lesson(BaseModel):
    """What one ``learn`` wrote: the strategies (new or merged into), the decisions,
    the drafts dropped and the strategies counted as used."""

    task: str
    success: bool
    method: Literal["llm", "trace"]
    strategies: list[str] = Field(default_factory=list, description="ids stored or merged")
    decisions: list[dict[str, Any]] = Field(default_factory=list)
    dropped: list[str] = Field(default_factory=list)
    used: list[str] = Field(default_factory=list)
    llm_calls: int = 0
    run_id: str | None = None



def render_react(trajectory: Mapping[str, Any]) -> str:
    """A ReAct trajectory dict as numbered steps: thought, tool call, observation."""
    lines: list[str] = []
    n = 0
    while f"thought_{n}" in trajectory or f"tool_name_{n}" in trajectory:
        lines.append(f"{n + 1}. thought: {as_text(trajectory.get(f'thought_{n}', ''))}")
        lines.append(f"   call: {trajectory.get(f'tool_name_{n}', '')}"
                     f"({as_text(trajectory.get(f'tool_args_{n}', {}))})")
        lines.append(f"   observation: {as_text(trajectory.get(f'observation_{n}', ''))}"[:1500])
        n += 1
    return "\n".join(lines) if lines else as_text(dict(trajectory))


def _trajectory(value: Any) -> str:
    if isinstance(value, Mapping):
        return render_react(value)
    if isinstance(value, list | tuple):
        return "\n".join(f"{n}. {as_text(step)}" for n, step in enumerate(value, 1))
    return as_text(value)


def attempt_of(run: Any, *, store: MemoryStore, user_id: str, task: str | None, success: bool,
               rationale: str = "") -> Attempt:
    """``run`` (any form the module docstring names) as a judged attempt.

    Raises:
        ValueError: no task (neither given nor in the run), or a run of no known form.
    """
    answer, trajectory, run_id, found_task = "", "", "", None
    if isinstance(run, str) and run.startswith("run_") and (
            record := store.runs.get(user_id, run)) is not None:
        run = record
    if isinstance(run, RunRecord):
        found_task, run_id = run.task, run.id
        steps = store.runs.steps(user_id, run.id)
        trajectory = "\n".join(f"{s.idx + 1}. {s.kind} {s.name}: {s.input} -> {s.output}"
                               for s in steps)
        answer = as_text(run.output) if run.output is not None else ""
    elif isinstance(run, str):
        trajectory = run
    elif isinstance(run, Mapping):
        found_task = run.get("task")
        trajectory = _trajectory(run.get("trajectory", ""))
        answer = as_text(run.get("answer", ""))
    elif hasattr(run, "trajectory"):  # a dspy.Prediction of ReAct (or alike)
        trajectory = _trajectory(run.trajectory)
        fields = {k: v for k, v in dict(run.items()).items() if k != "trajectory"} \
            if hasattr(run, "items") else {}
        answer = "; ".join(f"{k}: {as_text(v)}" for k, v in fields.items())
    else:
        raise ValueError("a run is a dspy.Prediction with a trajectory, a recorded run (its "
                         "id or RunRecord), a dict with 'trajectory', or the trajectory as "
                         f"text; not a {type(run).__name__}")
    what = (task or found_task or "").strip()
    if not what:
        raise ValueError("learn needs the task the run attempted: pass task=...")
    verdict = Verdict(success=success, confidence=1.0, source="caller",
                      rationale=rationale or ("the run succeeded" if success else
                                              "the run failed"))
    return Attempt(task=what, trajectory=trajectory[-MAX_TRAJECTORY_CHARS:], answer=answer,
                   verdict=verdict, run_id=run_id)


def learn_from(run: Any, *, store: MemoryStore, user_id: str, success: bool,
               task: str | None = None, used: Sequence[str] = (), rationale: str = "",
               method: Literal["llm", "trace"] = "llm", handle: ModelHandle | None = None,
               tags: Sequence[str] = (), lock: threading.RLock | None = None) -> Lesson:
    """Distil ``run`` into the tenant's strategy bank (see the module docstring).

    ``used`` are the strategy ids the run was shown (``MemoryContext.ids`` of the
    context it ran with: ids of other kinds are ignored). The model is called outside
    ``lock``; the store is read and written under it.

    Raises:
        ValueError: see :func:`attempt_of`; ``method="llm"`` without a model.
        ProgramParseError: the model's output did not parse after the retry.
    """
    if method == "llm" and handle is None:
        raise ValueError("learning with method='llm' needs an LM (or method='trace')")
    held = lock if lock is not None else nullcontext()
    with held:
        attempt = attempt_of(run, store=store, user_id=user_id, task=task, success=success,
                             rationale=rationale)
    policy = ExtractionPolicy(method=method)
    with counting_calls() as counter:
        extraction = policy.extract(user_id=user_id, attempts=[attempt], handle=handle,
                                    tags=["learned", *tags])
    with held:
        update = learn(store, user_id, used=list(used), won=success,
                       candidates=extraction.items, consolidation=ConsolidationPolicy(),
                       embedder=store.embedder)
    return Lesson(task=attempt.task, success=success, method=method,
                  strategies=[d.item_id for d in update.decisions if d.item_id],
                  decisions=[{"action": d.action, "rule": d.rule, "item_id": d.item_id,
                              "title": d.candidate.title} for d in update.decisions],
                  dropped=extraction.dropped, used=update.used, llm_calls=counter.calls)
