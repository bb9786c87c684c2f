"""What an experiment run writes: one ``TaskResult`` per task and one ``RunSummary``.

``results.jsonl`` holds the task results in the order the tasks ran (the closed loop is
sequential, so order matters); ``summary.json`` the summary, whose first six keys are
the interface outside checks read (``experiment``, ``tasks``, ``success_rate``,
``steps_per_task``, ``llm_calls``, ``budget_violations``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from memstrata.memory.bank import Action
from memstrata.programs.judging import Verdict
from memstrata.programs.refs import ProgramRef


class BankAction(BaseModel):
    """One extracted strategy and what consolidation did with it."""

    title: str
    polarity: str
    action: Action = Field(description="the consolidation decision: add, merge (a "
                           "duplicate), supersede or discard; append-only runs only add or "
                           "merge exact duplicates")
    rule: str = ""
    item_id: str | None = None
    target_id: str | None = None


class TaskResult(BaseModel):
    """One task of a run: the outcome against gold, the cost, the context, the learning."""

    index: int = Field(ge=0, description="position in the sequential pass")
    task_id: str
    level: str = ""
    question: str
    answer: str = Field("", description="the final answer (SPARQL for the ontology suite)")
    success: bool = Field(description="against gold: result-set match, or answer match")
    score: float = Field(0.0, description="partial credit: F1 against gold")
    converged: bool = Field(description="the agent produced an answer that ran / parsed")
    status: str = ""
    findings: list[str] = Field(default_factory=list, description="anti-pattern names")
    rollouts: int = 1
    selected: int = Field(0, description="index of the rollout kept")
    steps: int = Field(0, description="agent iterations, summed over rollouts (the cost)")
    selected_steps: int = Field(0, description="agent iterations of the rollout kept")
    llm_calls: int = Field(0, description="every LLM call: agent, judge, extraction")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    wall_s: float = 0.0
    context_chars: int = Field(0, description="chars of packed memory injected")
    layer_chars: dict[str, int] = Field(default_factory=dict)
    budget_violations: list[str] = Field(default_factory=list)
    max_prompt_chars: int = Field(0, description="largest prompt of any iteration")
    stdout_chars: int = 0
    large_returns: int = 0
    injected_ids: list[str] = Field(default_factory=list, description="L2 strategies shown")
    verdict: Verdict | None = Field(None, description="the judging policy's verdict")
    extracted: list[BankAction] = Field(default_factory=list)
    dropped: list[str] = Field(default_factory=list,
                               description="drafts the extraction policy dropped, and why")
    retired: list[str] = Field(default_factory=list)
    bank_active: int = Field(0, description="active strategies after this task")
    run_ids: list[str] = Field(default_factory=list, description="trajectory ids")
    program: ProgramRef | None = Field(None, description="the compiled program the agent "
                                       "was (path and SHA-256); None: built per task")
    error: str | None = None


class MemoryHealth(BaseModel):
    """The strategy bank's state after a run, and how it got there."""

    active: int = 0
    total: int = Field(0, description="every strategy row, retired ones included")
    by_polarity: dict[str, int] = Field(default_factory=dict, description="active rows")
    extracted: int = 0
    dropped: int = Field(0, description="drafts dropped as noise before consolidation")
    duplicate_rate: float = Field(0.0, description="extracted items merged or exact dups")
    novelty_rate: float = Field(0.0, description="extracted items added as new")
    discard_rate: float = 0.0
    supersede_rate: float = 0.0
    retired: int = 0
    win_rate_first_half: float | None = None
    win_rate_second_half: float | None = None
    win_rate_drift: float | None = Field(None, description="second half minus first half")
    usage: dict[str, float] = Field(
        default_factory=dict, description="uses per active item: min, median, max, unused")
    usage_source: Literal["bank counters", "injections this run"] = Field(
        "bank counters", description="what ``usage`` counts: the bank's counters (written "
        "by a learning run's loop) or this run's injections (a run that does not learn)")


class RunSummary(BaseModel):
    """``summary.json``: the interface keys first, then everything the report shows."""

    experiment: str
    tasks: int
    success_rate: float
    steps_per_task: float
    llm_calls: int
    budget_violations: int
    suite: str = ""
    model: str = ""
    title: str = ""
    convergence_rate: float = 0.0
    mean_score: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls_per_task: float = 0.0
    selected_steps_per_task: float = Field(
        0.0, description="steps of the kept rollout; steps_per_task sums every rollout")
    wall_s: float = 0.0
    mean_context_chars: float = 0.0
    max_prompt_chars: int = 0
    stdout_chars_per_task: float = 0.0
    large_returns: int = 0
    judge_agreement: float | None = Field(None, description="verdicts matching gold")
    anti_patterns: dict[str, int] = Field(default_factory=dict)
    by_level: dict[str, float] = Field(default_factory=dict, description="success rate")
    curve: list[float] = Field(default_factory=list, description="cumulative success rate")
    health: MemoryHealth | None = None
    errors: int = 0
    meta: dict[str, Any] = Field(default_factory=dict, description="commit, db, times")


def read_results(path: Path) -> list[TaskResult]:
    """The task results of a ``results.jsonl``, in order; blank lines are skipped.

    Raises:
        ValueError: the file is missing, or a line is not a task result (named by number).
    """
    if not path.is_file():
        raise ValueError(f"{path}: missing (is this a run directory?)")
    results = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            results.append(TaskResult.model_validate_json(line))
        except ValidationError as exc:
            raise ValueError(f"{path}:{number}: not a task result ({exc.errors()[0]['msg']})"
                             ) from exc
    return results
