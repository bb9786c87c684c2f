"""The ``sparql`` compile task: the ontology suite's SPARQL agent, split by level.

**The program** is the suite's agent as ``memstrata experiment`` runs it
(``bench.experiments.ontology_suite.sparql_agent``): a ReAct :class:`Executor` over
``WriteSparql`` with the ``run_sparql`` tool (plus the memory tools in tools mode), built
with the executor settings and mode of one experiment config, :data:`DEFAULT_EXPERIMENT`
unless told. Its demos land on the ReAct step (which writes and tests queries) and on the
final ``extract`` (which gives the query).

**The data** is an ontology task file (default the shipped 62 tasks); its units are the
levels, named as the suite reports them (``L1`` .. ``L5``: entity lookup,
relationships, multi-hop, filtering, aggregation). :data:`LEVEL_SPLIT`, the default,
trains on L1-L2 (26 tasks: the easiest, so a small model solves the most of them and
BootstrapFewShot finds solved traces to keep), validates on L3 (12) and holds out L4-L5
(24: filtering and aggregation), which no compile ever sees: the held-out success is the
target's "success on tasks of levels not used in compiling". Sets take at most ``limit``
tasks, spread over their levels and evenly within each (a level lists its ontology
questions before its building ones).

**Each example** is one task: the inputs ``question`` and ``memory`` (the layered
context a run of the config shows the agent for that question: ``runner.task_context``
over a store prepared as the run prepares it, seed pack included), the labels ``task``
(the ``OntologyTask``: ``sparql_metric`` scores against its gold answer), ``sparql`` (the
gold query: what a labeled demo shows the final step), ``id`` and ``level``. Every run of
the program, and of each copy an optimizer makes, finds its tools in
:meth:`SparqlTask.running`: the suite's tools over a fresh ``ToolSession`` on the compile's
store for each call (``executors.tools_from``).

**The metric** is ``sparql_metric`` (result-set F1, 1 on an exact match, with feedback);
the threshold is 1.0, so a bootstrapped demo is a *solved* task: a near miss (the right
shape, a missing ``FILTER``) would teach its mistake as the way to answer.

**The held-out score** runs the held-out tasks through the experiment runner itself
(``Runner``: the same context, tools, caps, iteration limit and grading as ``memstrata
experiment`` with that config, the compiled agent given as ``--program`` would give it;
the uncompiled system is the run without a program), one run directory per (program
hash, model, config, task file) under ``out``, resumed task by task: a re-run makes no
repeated call. Headline ``success`` (share of tasks whose result set matches gold);
``f1`` (mean result-set F1), ``by_level`` (success per level), ``tasks`` and
``failures`` (runs that ended in an error: an unparsable reply, the window exceeded).

**Cost.** A run is one ReAct loop: at most ``max_iters`` (3) step calls and one final
call, each retried once on a reply that will not parse; 2-4 calls a task in practice
(E6 with the embedded 1.5B: ~4). The optimizers' budgets count runs, so a sparql
compile makes ~3-4x the calls of a ``qa`` one on the same budget.

Nothing here imports the ontology suite at module level: ``memstrata --help`` lists this
task without the ``ontology`` extra installed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dspy

from memstrata.memory import Embedder, MemoryStore, SearchWeights
from memstrata.programs.compiler import (
    CompileSets,
    HeldoutScore,
    Models,
    ProgramTask,
    Split,
    SplitData,
    spread,
)
from memstrata.programs.metrics import Metric, metric_result
from memstrata.programs.refs import ProgramRef

from ..compile_specs import LEVEL_SPLIT, PROGRAMS

if TYPE_CHECKING:
    from memstrata.bench.experiments.config import ExperimentConfig
    from memstrata.bench.experiments.ontology_suite import OntologySuite
    from memstrata.bench.ontology import OntologyTask


DEFAULT_EXPERIMENT = "E6"
"""The config whose agent is compiled and scored: E6, the full layer cake (L0 card, L1
constraints, seeded L2 strategies, L3 guide; ReAct, handle tools, 3 iterations, inject
mode). Without memory the embedded 1.5B invents Brick's namespace and no query returns a
row (docs/benchmarks/experiments.md: E1 0/6); E6's card gives it the real prefixes, so
solved traces, and so demos, are possible at all."""
TASK_FILE = Path(__file__).resolve().parents[1] / "ontology" / "data" / "ontology_tasks.json"
"""The shipped task file (its path, without importing the suite)."""


def level_name(task: OntologyTask) -> str:
    """A task's level as the suite names it (``L1`` .. ``L5``)."""
    return f"L{int(task.level)}"


def read_levels(data: str | Path, split: Split) -> SplitData:
    """Read the ontology task file ``data`` and check ``split`` against its levels; no
    model, no store, no graph. Its units are the split's levels, each the list of its
    tasks in file order.

    Raises:
        ValueError: a level of the split has no task in the file (the message names the
            levels it holds), or the file is malformed.
        OSError: the file cannot be read.
    """
    from memstrata.bench.ontology import load_tasks

    by_level: dict[str, list[OntologyTask]] = {}
    for task in load_tasks(Path(data)):
        by_level.setdefault(level_name(task), []).append(task)
    split.check(by_level, data)
    wanted = (*split.train, *split.val, *split.heldout)
    return SplitData(split=split, data=str(data), units={lv: by_level[lv] for lv in wanted})


ITEMS_SHOWN = 5  # missing / extra items named in a feedback


def sparql_metric(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None,
                  pred_name: str | None = None, pred_trace: Any = None) -> dspy.Prediction:
    """Score and feedback for a final SPARQL query (``pred.sparql``, else ``pred.answer``):
    the result-set F1 of the query against the gold answer, 1 on an exact match; feedback:
    the query's status or error, the gold items missing, the extra ones, and the
    anti-patterns found (GEPA's feedback protocol, as ``programs.metrics``).

    ``gold.task`` is the ``OntologyTask`` (gold answer and tags). The query runs as the
    suite runs it (isolated, time-limited); a bad query is a status, never an exception.
    """
    from memstrata.bench.ontology import execute, score
    from memstrata.bench.ontology.scoring import difference

    task = gold.task
    query = str(getattr(pred, "sparql", None) or getattr(pred, "answer", "") or "").strip()
    if "select" not in query.lower():
        return metric_result(
            0.0, ["No SELECT query was given: answer with one SPARQL SELECT query."])
    outcome = execute(query, timeout_s=10.0, max_rows=10_000, isolate=True)
    verdict = score(task, query, outcome=outcome)
    if verdict.success:
        parts = ["The query's result matches the gold answer exactly."]
    elif verdict.status != "ok":
        parts = [f"The query did not run: {verdict.status}: {(verdict.error or '')[:300]}."]
    else:
        missing, extra = difference(task, outcome)
        parts = [f"Result-set precision {verdict.precision:.2f}, recall {verdict.recall:.2f}"
                 f" over {verdict.n_rows} rows" + (" (truncated)" if verdict.truncated else "")
                 + "."]
        if missing:
            parts.append(f"Missing from the result ({len(missing)}): "
                         + ", ".join(map(str, missing[:ITEMS_SHOWN])) + ".")
        if extra:
            parts.append(f"Not in the gold answer ({len(extra)}): "
                         + ", ".join(map(str, extra[:ITEMS_SHOWN])) + ".")
    parts += [f"Anti-pattern {f.name}: {f.message}" for f in verdict.findings]
    return metric_result(1.0 if verdict.success else verdict.f1, parts)


class SparqlTask(ProgramTask):
    """``memstrata compile sparql``: the ontology suite's SPARQL agent, compiled on the
    lower levels and scored on the higher ones, run as ``memstrata experiment`` runs it.

    Args:
        models, embedder, weights, audit: as every task's (``embedder``, ``weights`` and
            ``audit`` are unused: retrieval is the experiment config's own, as in a run).
        experiment: the experiment config (``E1`` .. ``E12``, or a config file) whose
            executor settings, mode and memory layers the agent is compiled and scored
            under.

    Raises:
        ValueError: the config learns or takes several rollouts (its memory then changes
            from task to task, so no fixed example can hold it), or is not a config.
    """

    program = "sparql"
    summary = PROGRAMS["sparql"].summary
    unit = "level"
    headline = "success"
    threshold = 1.0
    default_split = LEVEL_SPLIT
    default_data = str(TASK_FILE)
    columns = ("f1",)

    def __init__(self, models: Models, *, embedder: Embedder | None = None,
                 weights: SearchWeights | None = None, audit: str | Path | None = None,
                 experiment: str = DEFAULT_EXPERIMENT) -> None:
        super().__init__(models, embedder=embedder, weights=weights, audit=audit)
        from memstrata.bench.experiments.config import load_config

        self.config: ExperimentConfig = load_config(experiment)
        if self.config.learn or self.config.rollouts.n > 1:
            raise ValueError(f"{experiment} learns or takes several rollouts: its memory "
                             "changes from task to task, so it cannot be compiled on; "
                             "choose one that does neither (E1-E8)")
        self.experiment = experiment

    @classmethod
    def read(cls, data: str | Path, split: Split) -> SplitData:
        return read_levels(data, split)

    def student(self) -> dspy.Module:
        from memstrata.bench.experiments.ontology_suite import sparql_agent

        return sparql_agent(self.config.executor, self.config.mode)

    def metric(self) -> Metric:
        return sparql_metric

    def options(self) -> dict[str, Any]:
        return {"experiment": self.experiment,
                "config": self.config.model_dump(mode="json")}

    def _dense(self) -> Embedder | None:
        """The L2 dense channel's encoder, as the runner picks it (none unless the config
        turns dense retrieval on)."""
        if not self.config.retrieval.dense:
            return None
        from memstrata.memory.embed import default_embedder

        return default_embedder()

    def _suite(self, data: SplitData, only: Sequence[str] | None = None) -> OntologySuite:
        from memstrata.bench.experiments.ontology_suite import OntologySuite

        return OntologySuite(Path(data.data), only=only)

    def sets(self, store: MemoryStore, data: SplitData, limit: int | None) -> CompileSets:
        from memstrata.bench.experiments.runner import prepare_memory, task_context
        from memstrata.packers.context import EMPTY

        suite, cfg = self._suite(data), self.config
        builder, sources, _ = prepare_memory(store, suite, cfg, self._dense())

        def examples(levels: Sequence[str]) -> list[dspy.Example]:
            out = []
            for task in spread(data.of(levels), limit):
                memory = task_context(builder, suite, cfg, sources, task.question).text
                out.append(dspy.Example(
                    question=task.question, memory=memory or EMPTY, sparql=task.gold_sparql,
                    task=task, id=task.id, level=level_name(task),
                ).with_inputs("question", "memory"))
            return out

        sets = CompileSets(train=examples(data.split.train), val=examples(data.split.val))
        if not sets.train or not sets.val:
            raise ValueError("the train or validation levels hold no task")
        return sets

    def running(self, store: MemoryStore) -> AbstractContextManager[None]:
        from memstrata.bench.experiments.ontology_suite import OntologySuite
        from memstrata.programs.executors import tools_from
        from memstrata.tools import ToolSession

        suite, cfg = OntologySuite(), self.config  # the tools do not depend on the tasks
        # A fresh session per call, as the runner opens one per rollout.
        return tools_from(lambda: suite.tools(ToolSession(store, suite.user_id),
                                              cfg.executor, cfg.mode))

    def _key(self, program: ProgramRef | None, data: SplitData) -> str:
        """The held-out run directory's name: the program's hash, then a digest of what
        else changes a run's answers (model, config, task file)."""
        recipe = [self.models.student.name, self.config.model_dump(mode="json"),
                  hashlib.sha256(Path(data.data).read_bytes()).hexdigest()]
        digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()
        return f"{program.sha256[:16] if program is not None else 'uncompiled'}-{digest[:12]}"

    def score(self, data: SplitData, program: ProgramRef | None, out: Path, *,
              limit: int | None, progress: bool) -> HeldoutScore:
        from memstrata.bench.experiments import Runner
        from memstrata.bench.experiments.records import read_results
        from memstrata.bench.experiments.runner import RESULTS

        tasks = spread(data.of(data.split.heldout), limit)
        ids = [t.id for t in tasks]
        run_dir = Path(out) / self._key(program, data)
        Runner(self.config, self._suite(data, ids), self.models.student, run_dir,
               embedder=self._dense(), program=program.path if program is not None else None,
               ).run(resume=True, progress=progress)
        # The run's own results, cut to this call's tasks (an earlier, larger --heldout-
        # limit may have run more of them).
        done = {r.task_id: r for r in read_results(run_dir / RESULTS)}
        rows = [done[i] for i in ids]
        levels: dict[str, list[bool]] = {level_name(t): [] for t in tasks}
        for task, row in zip(tasks, rows, strict=True):
            levels[level_name(task)].append(row.success)

        def mean(values: Sequence[float]) -> float | None:
            return round(sum(values) / len(values), 4) if values else None

        return HeldoutScore(
            score=mean([float(r.success) for r in rows]), items=len(rows),
            llm_calls=sum(r.llm_calls for r in rows),
            metrics={"f1": mean([r.score for r in rows]),
                     "by_level": {lv: mean([float(s) for s in ok]) for lv, ok in levels.items()},
                     "tasks": len(rows), "failures": sum(1 for r in rows if r.error),
                     "run_dir": str(run_dir)})


__all__ = ["DEFAULT_EXPERIMENT", "LEVEL_SPLIT", "TASK_FILE", "SparqlTask", "level_name",
           "read_levels", "sparql_metric"]
