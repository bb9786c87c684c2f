"""Task suites an experiment runs: (a) SPARQL over Brick, (b) LoCoMo questions.

A suite supplies the tasks in order, what the memory layers are made of (the L0 card,
L1 constraints, the L3 artefact, the curated L2 seed pack), the agent's signature and
tools, the deterministic checks a judge may use (never gold), and the grade against
gold (used only to report, never to learn).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import dspy
from memstrata.memory.models import StrategyItem
from memstrata.memory.store import Store
from memstrata.packers.context import Mode
from memstrata.packers.layers import derived_constraints
from memstrata.programs.executors import AnswerWithTools, ExecutorRun, ExecutorSettings
from memstrata.programs.judging import Check
from memstrata.tools import Binding, ToolSession
from pydantic import BaseModel, Field, StringConstraints

from ..locomo import load_locomo, read_locomo
from ..ontology import OntologyTask, check_antipatterns, execute, load_tasks, score
from ..ontology.antipatterns import ADVICE
from ..ontology.card import sense_card
from ..ontology.guide import ontology_guide
from ..qa_metrics import score_answer
from .names import SEEDS_DIR

MEMORY_DESC = "what memory holds for this task (sense card, constraints, strategies, guide)"
# Tools the agent may use to reach L2/L3 itself in tools mode (seed 002's mode 2).
MEMORY_TOOLS = ("mem_search", "mem_get", "ctx_peek", "ctx_slice", "ctx_find")


class SuiteTask(BaseModel):
    """One task as the runner sees it."""

    id: str
    level: str
    question: str


class Grade(BaseModel):
    """A task's outcome against gold: reported, never learned from."""

    success: bool
    score: float = 0.0
    status: str = ""
    findings: list[str] = Field(default_factory=list)


class LayerSources(BaseModel):
    """The raw material of the layers, before packing (None or empty: layer has none)."""

    card: str | None = None
    constraints: list[str] = Field(default_factory=list)
    derived: list[str] = Field(default_factory=list)
    artefact: tuple[str, str] | None = None


class Suite(ABC):
    """A sequence of tasks with their layers, agent, checks and gold grading."""

    name: str
    scope: str
    user_id: str

    @abstractmethod
    def tasks(self) -> list[SuiteTask]:
        """The tasks, in the suite's own order."""

    def prepare(self, store: Store) -> None:  # noqa: B027 - most suites need no data
        """Load what the tasks need into ``store`` (nothing by default)."""

    def sources(self) -> LayerSources:
        """The layers' raw material (none by default)."""
        return LayerSources()

    def seed_pack(self) -> list[StrategyItem]:
        """The curated strategies that seed the bank in E5-E8 (none by default)."""
        return []

    @abstractmethod
    def signature(self) -> type[dspy.Signature]:
        """The agent's signature: the task and a ``memory`` input in, one answer out."""

    @abstractmethod
    def tools(self, session: ToolSession, settings: ExecutorSettings, mode: Mode
              ) -> list[Callable[..., Any]]:
        """The agent's tools, bound to ``session`` so every call is logged."""

    @abstractmethod
    def checks(self, task: SuiteTask, run: ExecutorRun) -> list[Check]:
        """Deterministic checks of an attempt that need no gold answer."""

    @abstractmethod
    def grade(self, task: SuiteTask, run: ExecutorRun) -> Grade:
        """The attempt against gold."""


def _memory_tools(session: ToolSession, settings: ExecutorSettings, mode: Mode
                  ) -> list[Callable[..., Any]]:
    if mode != "tools":
        return []
    pool = session.handle_tools() if settings.tools == "handles" else session.naive_tools()
    return [t for t in pool if t.__name__ in MEMORY_TOOLS]


def _load_seed(path: Path, user_id: str, scope: str) -> tuple[list[str], list[StrategyItem]]:
    data = json.loads(path.read_text())
    items = [StrategyItem(user_id=user_id, title=s["title"], description=s["description"],
                          text=s["text"], polarity=s["polarity"], source="seed",
                          tags=[scope, "seed"]) for s in data.get("strategies", [])]
    return list(data.get("constraints", [])), items


# -- (a) SPARQL over Brick ---------------------------------------------------------------


class WriteSparql(dspy.Signature):
    """Write one SPARQL SELECT query over the Brick building graph that answers the
    question. Declare every prefix you use. Test a query with run_sparql(query), which
    returns its status, error and first rows; fix it and finish when it answers."""

    question: str = dspy.InputField()
    memory: str = dspy.InputField(desc=MEMORY_DESC)
    sparql: Annotated[str, StringConstraints(max_length=1500)] = dspy.OutputField(
        desc="the final SPARQL query")


ROWS_SHOWN = 5  # rows run_sparql shows; the handle-style result is bounded
CELL_CHARS = 80


def _sparql_tool(naive: bool) -> Callable[..., dict[str, Any]]:
    def run_sparql(b: Binding, query: str) -> dict[str, Any]:
        """Run a SPARQL SELECT query; returns status, error, variables, row count and rows.

        Args:
            query: the whole query, PREFIX lines included.
        """
        out = execute(str(query), timeout_s=10.0, max_rows=10_000 if naive else 1_000)
        rows = out.rows if naive else out.rows[:ROWS_SHOWN]
        return {"status": out.status, "error": (out.error or "")[:300] or None,
                "variables": out.variables, "n_rows": len(out.rows),
                "truncated": out.truncated,
                "rows": [[str(c)[:CELL_CHARS] if not naive else str(c) for c in r]
                         for r in rows]}
    return run_sparql


class OntologySuite(Suite):
    """Suite (a): natural-language questions answered by SPARQL over Brick + a building.

    Args:
        task_file: an ``ontology_tasks.json``-format file (default: the shipped 62 tasks).
    """

    name = "ontology"
    scope = "ontology:brick"
    user_id = "experiment"

    def __init__(self, task_file: Path | None = None) -> None:
        self._tasks = {t.id: t for t in load_tasks(task_file)}
        self._seed = SEEDS_DIR / "ontology.json"

    def tasks(self) -> list[SuiteTask]:
        """Every task of the file, in file order."""
        return [SuiteTask(id=t.id, level=f"L{int(t.level)}", question=t.question)
                for t in self._tasks.values()]

    def task(self, task_id: str) -> OntologyTask:
        """The full task (gold included) behind a runner task."""
        return self._tasks[task_id]

    def sources(self) -> LayerSources:
        """The card, curated + derived constraints, and the materialised guide."""
        constraints, _ = _load_seed(self._seed, self.user_id, self.scope)
        return LayerSources(card=sense_card(), constraints=constraints,
                            derived=derived_constraints(ADVICE),
                            artefact=("guide:brick", ontology_guide()))

    def seed_pack(self) -> list[StrategyItem]:
        """The curated strategies and guardrails of ``seeds/ontology.json``."""
        return _load_seed(self._seed, self.user_id, self.scope)[1]

    def signature(self) -> type[dspy.Signature]:
        """``WriteSparql``."""
        return WriteSparql

    def tools(self, session: ToolSession, settings: ExecutorSettings, mode: Mode
              ) -> list[Callable[..., Any]]:
        """``run_sparql`` (rows capped unless the tools are naive), plus the memory tools
        in tools mode."""
        return [session.bind(_sparql_tool(settings.tools == "naive")),
                *_memory_tools(session, settings, mode)]

    def checks(self, task: SuiteTask, run: ExecutorRun) -> list[Check]:
        """The query exists, parses and runs, returns rows, and shows no error-level
        anti-pattern (checks that need the task's gold tags are left to grading)."""
        query = run.answer.strip()
        if "select" not in query.lower():
            return [Check(name="has_query", passed=False, message="no SELECT query given")]
        outcome = execute(query, timeout_s=10.0, max_rows=1_000)
        checks = [Check(name="has_query", passed=True),
                  Check(name="runs", passed=outcome.status == "ok",
                        message=f"{outcome.status}: {outcome.error or ''}"[:200]
                        if outcome.status != "ok" else "")]
        if outcome.status == "ok":
            checks.append(Check(name="returns_rows", passed=bool(outcome.rows),
                                message="" if outcome.rows else "the query returned no rows"))
        errors = [f for f in check_antipatterns(query, outcome=outcome)
                  if f.severity == "error"]
        checks.append(Check(name="no_anti_pattern", passed=not errors,
                            message="; ".join(f"{f.name}: {f.message}" for f in errors)[:300]))
        return checks

    def grade(self, task: SuiteTask, run: ExecutorRun) -> Grade:
        """Result-set match against the gold answer, with F1 and every anti-pattern."""
        out = score(self._tasks[task.id], run.answer)
        return Grade(success=out.success, score=out.f1, status=out.status,
                     findings=out.finding_names)


# -- (b) LoCoMo through the executor with memory tools -----------------------------------


class AnswerFromMemory(AnswerWithTools):
    """Answer the question about this user's conversations. Find the evidence with the
    tools: mem_search(query) returns ids and one-line descriptions, mem_get(ids) the full
    records of a few of them. Answer in a short phrase. If nothing you found answers it,
    say it is not mentioned. The memory input holds strategies from past questions."""

    memory: str = dspy.InputField(desc="strategies and guardrails from past questions")


class LocomoSuite(Suite):
    """Suite (b): one LoCoMo conversation's questions, answered by the executor's tools.

    Args:
        data: a LoCoMo-format JSON file.
        conversation: the conversation to use (default: the file's first).
        categories: the question categories to ask (1-4 by default; 5 is adversarial).
    """

    name = "locomo"
    scope = "locomo"

    def __init__(self, data: Path, conversation: str | None = None,
                 categories: Sequence[int] = (1, 2, 3, 4)) -> None:
        convs = read_locomo(data)
        if not convs:
            raise ValueError(f"{data}: no conversations")
        chosen = [c for c in convs if conversation in (None, c.sample_id)]
        if not chosen:
            raise ValueError(f"{data}: no conversation {conversation!r}; it has "
                             f"{', '.join(c.sample_id for c in convs)}")
        self.conv = chosen[0]
        self.user_id = self.conv.sample_id
        self._questions = {q.qid: q for q in self.conv.questions if q.category in categories}

    def tasks(self) -> list[SuiteTask]:
        """The conversation's questions of the chosen categories, in file order."""
        return [SuiteTask(id=q.qid, level=f"cat{q.category}", question=q.question)
                for q in self._questions.values()]

    def prepare(self, store: Store) -> None:
        """Load the conversation (its turns are what the tools search)."""
        if not store.counts(self.user_id).get("turns"):
            load_locomo(store, [self.conv])

    def signature(self) -> type[dspy.Signature]:
        """``AnswerWithTools`` with the ``memory`` input."""
        return AnswerFromMemory

    def tools(self, session: ToolSession, settings: ExecutorSettings, mode: Mode
              ) -> list[Callable[..., Any]]:
        """The memory tools (the bounded ones, or the naive ones for E7)."""
        return session.handle_tools() if settings.tools == "handles" \
            else session.naive_tools()

    def checks(self, task: SuiteTask, run: ExecutorRun) -> list[Check]:
        """An answer was given, and the agent looked something up before giving it."""
        looked = sum(len(s.get("tools", [])) for s in run.steps)
        return [Check(name="answered", passed=bool(run.answer.strip()),
                      message="" if run.answer.strip() else "empty answer"),
                Check(name="searched", passed=looked > 0,
                      message="" if looked else "answered without any tool call")]

    def grade(self, task: SuiteTask, run: ExecutorRun) -> Grade:
        """LoCoMo's official F1 (adversarial score for category 5); success at F1 >= 0.5."""
        q = self._questions[task.id]
        f1 = score_answer(run.answer, q.answer, q.category)["f1"]
        return Grade(success=f1 >= 0.5, score=round(f1, 4), status="answered"
                     if run.answer.strip() else "empty")
