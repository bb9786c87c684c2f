"""Compiling one of memstrata's programs with DSPy's optimizers: the core of
``memstrata compile`` (and of the compile benchmark, which scores the result on held-out
data).

What differs per program is a :class:`ProgramTask`: which data units it splits, the program
to start from, its metric (``programs.metrics``), its train and validation examples, and
how a program file is scored on the held-out units. What is shared lives here:

**The split.** Train, validation and held-out sets are whole units (leave-units-out):
:class:`Split` refuses an empty train or validation set and any unit in two sets, and
``ProgramTask.read`` refuses ids the data lacks, before any model loads, so nothing of a
unit the compile saw is ever scored as held-out.

**The optimizers**, as DSPy ships them, one model thread (a local model runs in-process):

* ``bootstrap``: ``BootstrapFewShot`` with ``as_score(metric)`` and the task's threshold;
  the teacher (``--teacher-lm``, default the student) runs train examples until
  ``max_bootstrapped_demos`` pass. Budget: train examples tried.
* ``mipro``: ``MIPROv2`` with explicit small settings (``auto=None``); the instruction
  writer is ``--reflection-lm`` (default ``--teacher-lm``, then the student). Budget:
  trials (each one minibatch of the validation set); the best is evaluated on the whole
  validation set once, at the end. Needs optuna (the ``optimize`` extra).
* ``gepa``: ``GEPA`` with the feedback metric and ``--reflection-lm``. Budget: metric calls
  in all (the seed's evaluation on the validation set counts); resumable (``log_dir``).
* ``simba``: ``SIMBA`` on the train set (it has no validation set: it picks its result
  on the train examples, so ``--val`` is unused). Budget: steps.

:data:`BUDGETS` holds the defaults, sized for the embedded model on a small CPU;
:data:`BUDGET_MEANS` says what each budget counts.

Every LLM call of a compile is counted by the meters of the models' handles, and the
compile is one recorded run (``Recorder``) whose steps are the data, the optimizer and one
``llm`` step per call; wall time and calls go into the program file's ``meta`` too.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import dspy
from pydantic import BaseModel, Field
from tqdm import tqdm

from memstrata.memory import Embedder, MemoryStore, SearchWeights
from memstrata.trajectories import Recorder

from .compile_plan import (
    BUDGET_MEANS,
    BUDGETS,
    DEFAULT_LIMIT,
    OPTIMIZERS,
    Budget,
    Optimizer,
    Split,
    budget_help,
)
from .compiled import program_ref, read_program_file, save_program
from .lm import ModelHandle
from .meter import Usage
from .metrics import Metric, as_score
from .refs import ProgramRef

T = TypeVar("T")
COMPILE_TENANT = "compile"
"""The tenant a compile's run is recorded under (it spans several conversations)."""


@dataclass
class SplitData:
    """A split's units (LoCoMo conversations, a suite's tasks by level), read from the
    data and checked against it."""

    split: Split
    data: str
    units: dict[str, Any]

    def of(self, ids: Sequence[str]) -> list[Any]:
        """The units of ``ids``, in that order."""
        return [self.units[c] for c in ids]


@dataclass
class CompileSets:
    """The examples a compile trains and validates on."""

    train: list[dspy.Example]
    val: list[dspy.Example]

    @property
    def ids(self) -> set[str]:
        """Every example id (``example.id``) the compile sees."""
        return {str(e.id) for e in (*self.train, *self.val)}


def spread(groups: Sequence[Sequence[T]], limit: int | None) -> list[T]:
    """At most ``limit`` items of ``groups`` (one group a conversation, a level), returned
    group by group, each in its order. ``None``: every item.

    The quota goes round-robin over the groups (a small ``limit`` still sees every group),
    and inside each group the picks are evenly spaced (late sessions as well as the first
    turns). Deterministic: the same groups and limit, the same picks.
    """
    if limit is None:
        return [item for group in groups for item in group]
    quota = [0] * len(groups)
    left = limit
    while left > 0 and any(q < len(g) for q, g in zip(quota, groups, strict=True)):
        for n, group in enumerate(groups):
            if left > 0 and quota[n] < len(group):
                quota[n] += 1
                left -= 1
    # Centred picks: j-th of q from n items at floor((2j + 1) n / 2q), distinct as n >= q.
    return [group[(2 * j + 1) * len(group) // (2 * q)]
            for group, q in zip(groups, quota, strict=True) for j in range(q)]


class HeldoutScore(BaseModel):
    """One system's score on the held-out units: ``score`` is the task's headline
    (``ProgramTask.headline``), ``metrics`` its other figures (JSON values)."""

    score: float | None
    metrics: dict[str, Any] = Field(default_factory=dict)
    llm_calls: int = 0
    items: int = 0
    """Examples scored (questions, chunks, tasks)."""


@dataclass
class Models:
    """The models of a compile: the student answers; the teacher bootstraps demos; the
    reflection model writes instructions (MIPROv2's prompt model, GEPA's reflection LM,
    SIMBA's rule writer). Each role defaults to the one before it."""

    student: ModelHandle
    teacher: ModelHandle | None = None
    reflection: ModelHandle | None = None

    @property
    def teacher_lm(self) -> dspy.LM:
        """The model that bootstraps demos."""
        return (self.teacher or self.student).lm

    @property
    def reflection_lm(self) -> dspy.LM:
        """The model that writes instructions."""
        return (self.reflection or self.teacher or self.student).lm

    def roles(self) -> dict[str, ModelHandle]:
        """Each distinct handle once, by the first role it plays (one meter, counted once)."""
        out: dict[str, ModelHandle] = {}
        for role, handle in (("student", self.student), ("teacher", self.teacher),
                             ("reflection", self.reflection)):
            if handle is not None and all(h is not handle for h in out.values()):
                out[role] = handle
        return out

    def names(self) -> dict[str, str]:
        """The model of each role, by name."""
        return {"lm": self.student.name,
                "teacher_lm": (self.teacher or self.student).name,
                "reflection_lm": (self.reflection or self.teacher or self.student).name}


class ProgramTask(ABC):
    """How one program is compiled and scored: one subclass a program, in ``TASKS`` by the
    name ``memstrata compile`` takes. Built per command from the models and the options
    the task reads (:meth:`options`); it holds no store (the compile's is passed in).

    Class attributes: ``program`` (the name its file records: ``programs.compiled.
    BUILDERS``), ``summary`` (one line of ``--help``), ``unit`` (what the split's ids
    name), ``headline`` (the held-out score's key in ``compile.json``), ``threshold`` (the
    score a bootstrapped demo must reach), ``default_split``, ``default_data`` and
    ``columns`` (metrics shown in the table beside the headline).
    """

    program: ClassVar[str]
    summary: ClassVar[str]
    unit: ClassVar[str] = "conversation"
    headline: ClassVar[str]
    threshold: ClassVar[float] = 0.5
    default_split: ClassVar[Split]
    default_data: ClassVar[str | None] = None
    """The data ``--data`` defaults to (None: LoCoMo's dev file in ``../shared``)."""
    columns: ClassVar[tuple[str, ...]] = ()
    labeled_demos: ClassVar[bool] = True
    """Whether a training example is a whole demo (its labels are the program's outputs);
    when not, the optimizers add no labelled demos (``max_labeled_demos`` 0)."""

    def __init__(self, models: Models, *, embedder: Embedder | None = None,
                 weights: SearchWeights | None = None, audit: str | Path | None = None,
                 ) -> None:
        self.models = models
        self.embedder = embedder
        self.weights = weights
        self.audit = audit

    @classmethod
    @abstractmethod
    def read(cls, data: str | Path, split: Split) -> SplitData:
        """The split's units from ``data``; no model, no store (the commands check a split
        with it before any model loads).

        Raises:
            ValueError: an id of the split is not in ``data``, or ``data`` is malformed.
        """

    @abstractmethod
    def student(self) -> dspy.Module:
        """The uncompiled program the optimizers start from."""

    @abstractmethod
    def metric(self) -> Metric:
        """The program's metric with feedback (``programs.metrics``)."""

    @abstractmethod
    def sets(self, store: MemoryStore, data: SplitData, limit: int | None) -> CompileSets:
        """Load what the train and validation units need into ``store`` and build their
        examples (at most ``limit`` a set). Every example carries an ``id``.

        Raises:
            ValueError: a set has no example.
        """

    @abstractmethod
    def score(self, data: SplitData, program: ProgramRef | None, out: Path, *,
              limit: int | None, progress: bool) -> HeldoutScore:
        """Score ``program`` (``None``: the uncompiled one) on the held-out units, caching
        what it computes in ``out`` so a re-run resumes."""

    def options(self) -> dict[str, Any]:
        """What else makes a compile the same compile (settings, retrieval): part of the
        recipe a reused program file must match."""
        return {}

    def running(self, store: MemoryStore) -> AbstractContextManager[None]:
        """A context the optimizers run in (the program's live resources bound for every
        copy they make, when it has any)."""
        return nullcontext()


class _Counted:
    """A metric with a progress bar: one tick per metric call (per program run)."""

    def __init__(self, metric: Callable[..., dspy.Prediction], bar: tqdm) -> None:
        self.metric = metric
        self.bar = bar
        self.__name__ = getattr(metric, "__name__", "metric")

    def __call__(self, gold: dspy.Example, pred: dspy.Prediction, trace: Any = None,
                 pred_name: str | None = None, pred_trace: Any = None) -> dspy.Prediction:
        self.bar.update()
        return self.metric(gold, pred, trace, pred_name, pred_trace)


def optimize(optimizer: Optimizer, student: dspy.Module, sets: CompileSets, models: Models,
             budget: Budget, *, metric: Metric, threshold: float, log_dir: Path | None = None,
             progress: bool = True) -> dspy.Module:
    """Run one DSPy optimizer on ``student`` as DSPy ships it; returns the compiled copy.

    ``metric`` returns a score with feedback; ``threshold`` is the score a bootstrapped
    demo must reach (BootstrapFewShot, MIPROv2's demo bootstrapping).

    ``log_dir`` is GEPA's: a compile run again with the same folder resumes from it. The
    program runs on one thread (a local model is one in-process engine), and failed runs
    (a reply that would not parse) score 0 instead of stopping the compile.
    """
    train, val = sets.train, sets.val
    teacher = {"lm": models.teacher.lm} if models.teacher is not None else None
    # GEPA draws its own progress bar; the others get one of metric calls.
    total = {"bootstrap": min(budget.main, len(train)), "gepa": None}.get(optimizer)
    bar = tqdm(total=total, desc=f"compile {optimizer}", unit="run",
               disable=not progress or optimizer == "gepa")
    counted = _Counted(metric, bar)
    errors = 10 * (len(train) + len(val)) + 100  # never stop on unparsable replies
    with bar, dspy.context(lm=models.student.lm, max_errors=errors):
        if optimizer == "bootstrap":
            return dspy.BootstrapFewShot(
                metric=as_score(counted), metric_threshold=threshold, teacher_settings=teacher,
                max_bootstrapped_demos=budget.max_bootstrapped_demos,
                max_labeled_demos=budget.max_labeled_demos, max_rounds=1, max_errors=errors,
            ).compile(student, trainset=train[:budget.main])
        if optimizer == "mipro":
            from memstrata.memory.extras import require

            require("optuna", "optimize", "MIPROv2 (memstrata compile --optimizer mipro)")
            size = min(budget.minibatch_size, len(val))
            return dspy.MIPROv2(
                metric=counted, prompt_model=models.reflection_lm, task_model=models.student.lm,
                teacher_settings=teacher, max_bootstrapped_demos=budget.max_bootstrapped_demos,
                max_labeled_demos=budget.max_labeled_demos, auto=None,
                num_candidates=budget.num_candidates, num_threads=1, max_errors=errors,
                metric_threshold=threshold, verbose=False, track_stats=False, seed=0,
            ).compile(student, trainset=train, valset=val, num_trials=budget.main,
                      minibatch=len(val) > size, minibatch_size=size,
                      minibatch_full_eval_steps=budget.main)
        if optimizer == "gepa":
            return dspy.GEPA(
                metric=counted, max_metric_calls=budget.main, reflection_lm=models.reflection_lm,
                reflection_minibatch_size=budget.minibatch_size, num_threads=1,
                log_dir=str(log_dir) if log_dir is not None else None, track_stats=False,
                seed=0,
            ).compile(student, trainset=train, valset=val)
        if optimizer == "simba":
            # SIMBA has no validation set: it picks its result on the train set. Giving it
            # the validation questions too would add up to 3 runs of each to the end.
            pool = train
            return dspy.SIMBA(
                metric=counted, bsize=min(budget.minibatch_size, len(pool)),
                num_candidates=budget.num_candidates, max_steps=budget.main,
                max_demos=budget.max_bootstrapped_demos, prompt_model=models.reflection_lm,
                teacher_settings=teacher, num_threads=1,
            ).compile(student, trainset=pool, seed=0)
    raise ValueError(f"unknown optimizer {optimizer!r}: one of {', '.join(OPTIMIZERS)}")


class CompileResult(BaseModel):
    """A compile's program file and cost (also the file's ``meta``)."""

    program: ProgramRef
    optimizer: str
    wall_s: float
    llm_calls: int
    usage: dict[str, Usage]
    run_id: str | None = None
    reused: bool = False


@dataclass
class CompileJob:
    """Everything one compile needs, and what it records in the file's ``meta``."""

    task: ProgramTask
    optimizer: Optimizer
    data: SplitData
    out: Path
    budget: Budget
    limit: int | None = DEFAULT_LIMIT

    def __post_init__(self) -> None:
        if not self.task.labeled_demos and self.budget.max_labeled_demos:
            self.budget = self.budget.model_copy(update={"max_labeled_demos": 0})

    def recipe(self) -> dict[str, Any]:
        """What makes a compile the same compile: a file whose ``meta`` holds this recipe
        is reused by ``bench compile`` instead of compiled again."""
        return {"program": self.task.program, "optimizer": self.optimizer,
                **self.task.models.names(), "data": self.data.data,
                "train": list(self.data.split.train), "val": list(self.data.split.val),
                "limit": self.limit, "budget": self.budget.model_dump(), **self.task.options()}


def compile_program(job: CompileJob, store: MemoryStore, *, progress: bool = True) -> CompileResult:
    """Compile ``job.task``'s program with ``job.optimizer`` and write it to ``job.out``.

    What the train and validation units need is loaded into ``store`` and the compile is
    recorded there as one run (tenant :data:`COMPILE_TENANT`): its data, its optimizer and
    budget, and one ``llm`` step per LLM call of every model. The program file's ``meta``
    holds the recipe (:meth:`CompileJob.recipe`), the example ids trained and validated
    on, the wall time and the calls.
    """
    task, models = job.task, job.task.models
    roles = models.roles()
    marks = {role: h.meter.mark() for role, h in roles.items()}
    config = job.recipe()
    with Recorder(store, COMPILE_TENANT, f"compile.{task.program}",
                  task=f"compile {task.program} with {job.optimizer}", config=config,
                  layers=["turns"]) as run:
        started = time.perf_counter()
        try:
            sets = task.sets(store, job.data, job.limit)
            run.step("data", task.unit, output={"train": len(sets.train), "val": len(sets.val)},
                     data={"train": [e.id for e in sets.train], "val": [e.id for e in sets.val]})
            run.step("optimize", job.optimizer, data=job.budget.model_dump())
            log_dir = (job.out.with_name(job.out.name + ".gepa") if job.optimizer == "gepa"
                       else None)
            with task.running(store):
                compiled = optimize(job.optimizer, task.student(), sets, models, job.budget,
                                    metric=task.metric(), threshold=task.threshold,
                                    log_dir=log_dir, progress=progress)
        except BaseException as exc:  # an interrupted or failed compile keeps its calls
            run.fail(exc, usage=_record_calls(run, roles, marks)[1].model_dump())
            raise
        wall = round(time.perf_counter() - started, 1)
        usage, total = _record_calls(run, roles, marks)
        meta = {**config, "train_ids": [e.id for e in sets.train],
                "val_ids": [e.id for e in sets.val], "wall_s": wall, "llm_calls": total.calls,
                "usage": {r: u.model_dump() for r, u in usage.items()}, "run_id": run.run_id}
        digest = save_program(compiled, job.out, name=task.program, meta=meta)
        ref = ProgramRef(path=str(job.out), name=task.program, sha256=digest)
        run.finish(output=ref.model_dump(), usage=total.model_dump())
    return CompileResult(program=ref, optimizer=job.optimizer, wall_s=wall,
                         llm_calls=total.calls, usage=usage, run_id=run.run_id)


def _record_calls(run: Recorder, roles: dict[str, ModelHandle], marks: dict[str, int]
                  ) -> tuple[dict[str, Usage], Usage]:
    """Each model's calls since ``marks`` as ``llm`` steps of ``run``; their usage by role
    and in all."""
    usage = {role: h.meter.since(marks[role]) for role, h in roles.items()}
    for role, h in roles.items():
        for record in h.meter.records[marks[role]:]:
            run.step("llm", role, data=record.model_dump())
    values = list(usage.values())
    return usage, Usage(calls=sum(u.calls for u in values),
                        input_tokens=sum(u.input_tokens for u in values),
                        output_tokens=sum(u.output_tokens for u in values),
                        seconds=round(sum(u.seconds for u in values), 4),
                        errors=sum(u.errors for u in values))


def reusable(job: CompileJob) -> CompileResult | None:
    """The compile already in ``job.out`` when its recipe is ``job``'s (a resumed bench)."""
    if not job.out.exists():
        return None
    try:
        doc = read_program_file(job.out)
    except ValueError:
        return None
    meta = doc.get("meta", {})
    recipe = job.recipe()
    if {k: meta.get(k) for k in recipe} != recipe:
        return None
    return CompileResult(program=program_ref(job.out, job.task.program),
                         optimizer=job.optimizer, wall_s=float(meta.get("wall_s", 0)),
                         llm_calls=int(meta.get("llm_calls", 0)),
                         usage={r: Usage(**u) for r, u in meta.get("usage", {}).items()},
                         run_id=meta.get("run_id"), reused=True)


__all__ = ["BUDGETS", "BUDGET_MEANS", "COMPILE_TENANT", "DEFAULT_LIMIT", "OPTIMIZERS", "Budget",
           "CompileJob", "CompileResult", "CompileSets", "HeldoutScore", "Models", "Optimizer",
           "ProgramTask", "Split", "SplitData", "budget_help", "compile_program", "optimize",
           "reusable", "spread"]
