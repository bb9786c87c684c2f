"""Suite (a): natural-language questions answered by SPARQL over Brick and a building."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

import dspy
from pydantic import StringConstraints

from memstrata.memory.models import StrategyItem
from memstrata.packers.context import Mode
from memstrata.packers.layers import LayerBudgets, derived_constraints
from memstrata.programs.compiled import register_program
from memstrata.programs.executors import Executor, ExecutorRun, ExecutorSettings
from memstrata.programs.judging import Check
from memstrata.programs.refs import ProgramRef
from memstrata.tools import Binding, ToolSession

from ..ontology import (
    OntologyTask,
    QueryOutcome,
    check_antipatterns,
    execute,
    load_tasks,
    score,
)
from ..ontology.antipatterns import ADVICE
from ..ontology.card import sense_card
from ..ontology.guide import ontology_guide
from .names import SEEDS_DIR
from .suites import (
    MEMORY_DESC,
    MEMORY_TOOLS,
    Grade,
    LayerSources,
    Suite,
    SuiteTask,
    load_seed,
    memory_tools,
)


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
QUERY_TIMEOUT_S = 10.0
CHECK_ROWS = 1_000  # rows the checks look at (returns rows? duplicates? too large?)
GRADE_ROWS = 10_000  # rows grading compares with gold (``score``'s own default)
# Final queries remembered per suite: the runner checks up to 8 rollouts of one task and
# then grades the selected one, so this covers a task with room to spare; an evicted
# query is simply run again.
OUTCOMES_KEPT = 16


def _capped(outcome: QueryOutcome, max_rows: int) -> QueryOutcome:
    """``outcome`` as ``execute`` would have returned it with the smaller ``max_rows``.

    ``execute`` keeps rows in solution order and marks ``truncated`` when a row beyond the
    cap exists, so the first ``max_rows`` rows and "more rows existed" are exactly what a
    separate capped run gives.
    """
    if len(outcome.rows) <= max_rows:
        return outcome
    return outcome.model_copy(update={"rows": outcome.rows[:max_rows], "truncated": True})


def _sparql_tool(naive: bool) -> Callable[..., dict[str, Any]]:
    def run_sparql(b: Binding, query: str) -> dict[str, Any]:
        """Run a SPARQL SELECT query; returns status, error, variables, row count and rows.

        Args:
            query: the whole query, PREFIX lines included.
        """
        out = execute(str(query), timeout_s=QUERY_TIMEOUT_S,
                      max_rows=GRADE_ROWS if naive else CHECK_ROWS)
        rows = out.rows if naive else out.rows[:ROWS_SHOWN]
        return {"status": out.status, "error": (out.error or "")[:300] or None,
                "variables": out.variables, "n_rows": len(out.rows),
                "truncated": out.truncated,
                "rows": [[str(c)[:CELL_CHARS] if not naive else str(c) for c in r]
                         for r in rows]}
    return run_sparql


def sparql_agent(settings: ExecutorSettings | None = None, mode: Mode = "inject"
                 ) -> Executor:
    """The suite's SPARQL-writing agent as a program an optimizer can hold: an
    :class:`Executor` over ``WriteSparql`` with the ``memory`` context and the suite's
    tools as slots (``run_sparql``, plus the memory tools in tools mode), bound per call
    (``run_executor(..., executor=agent, tools=suite.tools(session, ...))``).

    Built from the unbound tool functions, so it needs no store; with ``settings.tools``
    ``naive`` the slots are the naive tools (same names, other docstrings).
    """
    from memstrata.tools import HANDLE_TOOLS, NAIVE_TOOLS

    settings = settings or ExecutorSettings()
    pool = HANDLE_TOOLS if settings.tools == "handles" else NAIVE_TOOLS
    memory = [fn for fn in pool if fn.__name__ in MEMORY_TOOLS] if mode == "tools" else []
    agent = Executor(settings, [_sparql_tool(settings.tools == "naive"), *memory], WriteSparql,
                     context=["memory"], drop_first=True)
    agent.program_name, agent.mode = "sparql", mode  # what save_program records
    return agent


def _rebuild_sparql_agent(options: dict[str, Any]) -> Executor:
    # What load_program calls with the options program_options recorded.
    return sparql_agent(ExecutorSettings.model_validate(options.get("settings", {})),
                        mode=options.get("mode", "inject"))


register_program("sparql", _rebuild_sparql_agent)


def compiled_sparql_agent(path: str | Path, settings: ExecutorSettings, mode: Mode
                          ) -> tuple[Executor, ProgramRef]:
    """The compiled SPARQL agent in the program file at ``path`` (``memstrata compile
    sparql``), for a run with ``settings`` in ``mode``, and its reference (path and checked
    SHA-256).

    Raises:
        ValueError: the file is not a program file, fails its hash check, holds another
            program, or was compiled for other executor settings or another mode than the
            run's (its tool slots, iteration cap and demos are those of the compile).
    """
    from memstrata.programs.compiled import load_program, program_ref

    ref = program_ref(path, "sparql")
    agent = load_program("sparql", path)
    assert isinstance(agent, Executor)
    if agent.settings != settings:
        theirs, ours = agent.settings.model_dump(), settings.model_dump()
        diff = {k: (theirs[k], ours[k]) for k in theirs if theirs[k] != ours[k]}
        raise ValueError(f"{path} was compiled for other executor settings than this run's "
                         "(" + ", ".join(f"{k}: {a!r} there, {b!r} here"
                                         for k, (a, b) in diff.items()) + ")")
    compiled_mode = getattr(agent, "mode", "inject")
    if compiled_mode != mode:
        raise ValueError(f"{path} was compiled for the {compiled_mode} mode, not this run's "
                         f"{mode}")
    return agent, ref


class OntologySuite(Suite):
    """Suite (a): natural-language questions answered by SPARQL over Brick + a building.

    Its agent may be a compiled ``sparql`` program (``program``; see
    :func:`compiled_sparql_agent`).

    Args:
        task_file: an ``ontology_tasks.json``-format file (default: the shipped 62 tasks).
        only: keep only these task ids (file order kept); None keeps every task.

    Raises:
        ValueError: an id of ``only`` is not in the file.
    """

    name = "ontology"
    scope = "ontology:brick"
    user_id = "experiment"
    program = "sparql"

    def __init__(self, task_file: Path | None = None, only: Iterable[str] | None = None
                 ) -> None:
        self._tasks = {t.id: t for t in load_tasks(task_file)}
        if only is not None:
            wanted = set(only)
            if missing := sorted(wanted - set(self._tasks)):
                raise ValueError(f"no task {', '.join(missing)} in "
                                 f"{task_file or 'the shipped task file'}")
            self._tasks = {i: t for i, t in self._tasks.items() if i in wanted}
        self._seed = SEEDS_DIR / "ontology.json"
        self._outcomes: OrderedDict[str, QueryOutcome] = OrderedDict()

    def _outcome(self, query: str) -> QueryOutcome:
        """The final query's result at ``GRADE_ROWS``, run once for checks and grade.

        The runner checks every rollout and then grades the selected one with the same
        query text; each run forks a process, so the result is remembered (the graph is
        read-only, so a query's result never changes). Keyed by the stripped text:
        surrounding whitespace changes no SPARQL result.
        """
        key = query.strip()
        if key in self._outcomes:
            self._outcomes.move_to_end(key)
            return self._outcomes[key]
        outcome = execute(key, timeout_s=QUERY_TIMEOUT_S, max_rows=GRADE_ROWS)
        self._outcomes[key] = outcome
        if len(self._outcomes) > OUTCOMES_KEPT:
            self._outcomes.popitem(last=False)
        return outcome

    def tasks(self) -> list[SuiteTask]:
        """Every task of the file, in file order."""
        return [SuiteTask(id=t.id, level=f"L{int(t.level)}", question=t.question)
                for t in self._tasks.values()]

    def task(self, task_id: str) -> OntologyTask:
        """The full task (gold included) behind a runner task."""
        return self._tasks[task_id]

    def sources(self, budgets: LayerBudgets | None = None) -> LayerSources:
        """The card (built to L0's budget: a smaller card re-selects its items rather
        than losing its last lines), curated + derived constraints, and the guide."""
        constraints, _ = load_seed(self._seed, self.user_id, self.scope)
        card = sense_card((budgets or LayerBudgets()).l0)
        return LayerSources(card=card, constraints=constraints,
                            derived=derived_constraints(ADVICE),
                            artefact=("guide:brick", ontology_guide()))

    def seed_pack(self) -> list[StrategyItem]:
        """The curated strategies and guardrails of ``seeds/ontology.json``."""
        return load_seed(self._seed, self.user_id, self.scope)[1]

    def signature(self) -> type[dspy.Signature]:
        """``WriteSparql``."""
        return WriteSparql

    def tools(self, session: ToolSession, settings: ExecutorSettings, mode: Mode
              ) -> list[Callable[..., Any]]:
        """``run_sparql`` (rows capped unless the tools are naive), plus the memory tools
        in tools mode."""
        return [session.bind(_sparql_tool(settings.tools == "naive")),
                *memory_tools(session, settings, mode)]

    def compiled_agent(self, path: str | Path, settings: ExecutorSettings, mode: Mode
                       ) -> tuple[Executor, ProgramRef]:
        """The compiled SPARQL agent in ``path`` (:func:`compiled_sparql_agent`)."""
        return compiled_sparql_agent(path, settings, mode)

    def checks(self, task: SuiteTask, run: ExecutorRun) -> list[Check]:
        """The query exists, parses and runs, returns rows, and shows no error-level
        anti-pattern (checks that need the task's gold tags are left to grading)."""
        query = run.answer.strip()
        if "select" not in query.lower():
            return [Check(name="has_query", passed=False, message="no SELECT query given")]
        outcome = _capped(self._outcome(query), CHECK_ROWS)
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
        out = score(self._tasks[task.id], run.answer, outcome=self._outcome(run.answer))
        return Grade(success=out.success, score=out.f1, status=out.status,
                     findings=out.finding_names)


