"""``memstrata compile`` and ``memstrata bench compile``: memstrata's ``QA`` compiled by
DSPy's optimizers on LoCoMo dev conversations, and scored on conversations it never saw.

**The data.** Train, validation and held-out sets are whole conversations
(leave-conversations-out): :class:`Split` refuses an unknown id, an empty train or
validation set and any conversation in two sets, before any model loads, so no question of
a conversation the compile saw is ever scored as held-out. Each question becomes
``dspy.Example(question=..., memories=..., answer=gold).with_inputs("question",
"memories")`` (:func:`qa_examples`), its ``memories`` exactly the block the ``memstrata``
system of ``bench locomo`` shows ``QA``: the same answer path (``bench.qa.
memstrata_answerer``: routing, hybrid retrieval, the verifier, the line packer, the
model's own token counter, LoCoMo's answer style) over a store loaded the same way
(``bench.locomo.load_locomo``: turns, no extracted facts), up to
``PersonalAnswerer.prepare``, the step before the model is called. Questions the verifier
answers itself (an abstention crediting another person) never reach ``QA`` and are left
out. LoCoMo's category 5 (adversarial) keeps its place: its gold answer is the style's
abstention cue ("Not mentioned"), which ``qa_metric`` scores as the bench does (1 for an
abstention). Questions are chosen per set with ``bench.qa.select_questions`` (at most
``limit``, spread over conversations and categories).

**The optimizers**, as DSPy ships them, one model thread (a local model runs in-process):

* ``bootstrap``: ``BootstrapFewShot`` with ``as_score(qa_metric)`` and a 0.5 F1 threshold;
  the teacher (``--teacher-lm``, default the student) answers train questions until
  ``max_bootstrapped_demos`` pass. Budget: train questions tried (one teacher call each).
* ``mipro``: ``MIPROv2`` with explicit small settings (``auto=None``); the instruction
  writer is ``--reflection-lm`` (default ``--teacher-lm``, then the student). Budget:
  trials (each one minibatch of the validation set); the best is evaluated on the whole
  validation set once, at the end. Needs optuna (the ``optimize`` extra).
* ``gepa``: ``GEPA`` with the feedback metric and ``--reflection-lm``. Budget: metric calls
  in all (the seed's evaluation on the validation set counts); resumable (``log_dir``).
* ``simba``: ``SIMBA`` on the train set (it has no validation set: it picks its result
  on the train questions, so ``--val`` is unused). Budget: steps.

:data:`BUDGETS` holds the defaults; each was chosen to finish in about half an hour with
the embedded 1.5B model on a 2-core CPU (about 10 s an answer with the prefix cache warm)
for BootstrapFewShot; MIPROv2 and GEPA take about three times as long, SIMBA six (the
call counts of :data:`BUDGET_MEANS` are estimates for the default ``limit``).

Every LLM call of a compile is counted by the meters of the models' handles, and the
compile is one recorded run (``Recorder``) whose steps are the data, the optimizer and one
``llm`` step per call; wall time and calls go into the program file's ``meta`` too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import dspy
from memstrata.memory import Embedder, SearchWeights, Store
from memstrata.programs import ModelHandle
from memstrata.programs.compiled import ProgramRef, program_ref, read_program_file, save_program
from memstrata.programs.meter import Usage
from memstrata.programs.metrics import as_score, qa_metric
from memstrata.programs.qa import QA
from memstrata.trajectories import Recorder
from pydantic import BaseModel, ConfigDict, model_validator
from tqdm import tqdm

from .locomo import LoCoMoConversation, Question, apply_audit, load_locomo, read_locomo
from .qa import QASettings, memstrata_answerer, run_locomo_bench, select_questions

Optimizer = Literal["bootstrap", "mipro", "gepa", "simba"]
OPTIMIZERS: tuple[Optimizer, ...] = ("bootstrap", "mipro", "gepa", "simba")
COMPILABLE = ("qa",)
"""The programs ``memstrata compile`` compiles."""
DEFAULT_TRAIN = ("conv-26", "conv-30", "conv-41")
DEFAULT_VAL = ("conv-43",)
DEFAULT_HELDOUT = ("conv-47",)
DEFAULT_LIMIT = 40
"""Questions per train and validation set unless told: what the budgets below were sized
for (MIPROv2 summarises the train set, GEPA evaluates its seed on the validation set)."""
THRESHOLD = 0.5
"""F1 a bootstrapped demo must reach (BootstrapFewShot and MIPROv2's demo bootstrapping)."""
COMPILE_TENANT = "compile"
"""The tenant a compile's run is recorded under (it spans several conversations)."""


class Budget(BaseModel):
    """How much one optimizer may do. ``main`` is the knob ``--budget N`` sets (see
    :data:`BUDGET_MEANS`); the others are fixed small settings."""

    model_config = ConfigDict(frozen=True)

    main: int
    max_bootstrapped_demos: int = 2
    max_labeled_demos: int = 0
    num_candidates: int = 3
    minibatch_size: int = 8

    @model_validator(mode="after")
    def _positive(self) -> Budget:
        if self.main < 1:
            raise ValueError("the budget must be at least 1")
        return self


BUDGETS: dict[Optimizer, Budget] = {
    "bootstrap": Budget(main=30, max_bootstrapped_demos=3, max_labeled_demos=1),
    "mipro": Budget(main=6, max_bootstrapped_demos=2, max_labeled_demos=1, num_candidates=3,
                    minibatch_size=8),
    "gepa": Budget(main=100, minibatch_size=3),
    "simba": Budget(main=2, max_bootstrapped_demos=2, num_candidates=3, minibatch_size=8),
}
BUDGET_MEANS: dict[Optimizer, str] = {
    "bootstrap": "train questions tried, one teacher call each (it stops at 3 demos that "
                 "pass): at most ~30 calls",
    "mipro": "trials, each on a minibatch of 8 validation questions, after 3 demo sets and "
             "3 instructions are proposed, then one pass over the validation set: ~100 calls",
    "gepa": "metric calls in all, the seed's pass over the validation set included, plus one "
            "reflection call per ~6 of them: ~115 calls",
    "simba": "steps, each 3 candidates on a batch of 8 train questions (~50 calls), then up "
             "to 3 programs on every train question: ~200 calls",
}


def budget_help() -> str:
    """The budgets as ``--help`` states them."""
    return "; ".join(f"{name}: {BUDGETS[name].main} {BUDGET_MEANS[name]}" for name in OPTIMIZERS)


class Split(BaseModel):
    """Which conversations train, validate and test a compile (leave-conversations-out).

    Raises (on construction, ``ValueError``): an empty train or validation set, or a
    conversation named in two sets. :meth:`check` refuses ids a data file lacks.
    """

    model_config = ConfigDict(frozen=True)

    train: tuple[str, ...]
    val: tuple[str, ...]
    heldout: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _disjoint(self) -> Split:
        if not self.train or not self.val:
            raise ValueError("--train and --val must each name at least one conversation")
        sets = {"--train": self.train, "--val": self.val, "--heldout": self.heldout}
        for name, ids in sets.items():
            if len(set(ids)) != len(ids):
                raise ValueError(f"{name} names a conversation twice: {','.join(ids)}")
        seen: dict[str, str] = {}
        for name, ids in sets.items():
            for conv in ids:
                if conv in seen:
                    raise ValueError(f"conversation {conv} is in both {seen[conv]} and {name}: "
                                     "the sets must be disjoint (no question of a conversation "
                                     "used in compiling may be scored as held-out)")
                seen[conv] = name
        return self

    @classmethod
    def parse(cls, train: str, val: str, heldout: str | None = None) -> Split:
        """A split from comma-separated ids (``conv-26,conv-30``)."""

        def ids(raw: str | None) -> tuple[str, ...]:
            return tuple(x.strip() for x in (raw or "").split(",") if x.strip())

        return cls(train=ids(train), val=ids(val), heldout=ids(heldout))

    def check(self, available: Iterable[str], data: str | Path) -> None:
        """Raise ``ValueError`` naming every id of the split that ``data`` lacks."""
        known = set(available)
        missing = [c for c in (*self.train, *self.val, *self.heldout) if c not in known]
        if missing:
            raise ValueError(f"no conversation {', '.join(missing)} in {data} (it holds "
                             f"{', '.join(sorted(known))})")


@dataclass
class SplitData:
    """A split's conversations, read from the data file and checked against it."""

    split: Split
    data: str
    conversations: dict[str, LoCoMoConversation]

    def of(self, ids: Sequence[str]) -> list[LoCoMoConversation]:
        """The conversations of ``ids``, in that order."""
        return [self.conversations[c] for c in ids]


def read_split(data: str | Path, split: Split, audit: str | Path | None = None) -> SplitData:
    """Read ``data`` and check ``split`` against it; nothing else (no model, no store).

    Raises:
        ValueError: a conversation of the split is not in the file.
        LoCoMoError: the file is not LoCoMo's format.
    """
    convs = read_locomo(data)
    split.check((c.sample_id for c in convs), data)
    wanted = {*split.train, *split.val, *split.heldout}
    kept = [c for c in convs if c.sample_id in wanted]
    if audit:
        apply_audit(kept, audit)
    return SplitData(split=split, data=str(data), conversations={c.sample_id: c for c in kept})


def qa_examples(store: Store, handle: ModelHandle, settings: QASettings,
                questions: Sequence[Question], *, embedder: Embedder | None = None,
                weights: SearchWeights | None = None) -> list[dspy.Example]:
    """The QA examples of ``questions``, their memories as ``bench locomo``'s memstrata
    system packs them (the questions' conversations must be loaded in ``store``).

    Each example has the inputs ``question`` and ``memories`` and the labels ``answer``
    (the gold answer; the style's abstention cue for category 5), ``evidence`` (gold turn
    ids; none for category 5), ``category`` and ``qid``. Questions the verifier answers
    without ``QA``, and questions without a gold answer outside category 5, are left out.
    """
    style = settings.style
    answerer = memstrata_answerer(store, handle, settings, qa=QA(style), embedder=embedder,
                                  weights=weights)
    out = []
    for q in questions:
        adversarial = q.category == 5
        if not adversarial and not q.answer:
            continue
        ready = answerer.prepare(q.question, q.sample_id)
        if ready.packed is None:  # the verifier answers it: QA is never shown it
            continue
        out.append(dspy.Example(
            question=q.question, memories=ready.memories,
            answer=style.abstain_cue if adversarial else q.answer,
            evidence=[] if adversarial else list(q.evidence), category=q.category, qid=q.qid,
        ).with_inputs("question", "memories"))
    return out


@dataclass
class CompileSets:
    """The examples a compile trains and validates on."""

    train: list[dspy.Example]
    val: list[dspy.Example]

    @property
    def qids(self) -> set[str]:
        """Every question id the compile sees."""
        return {str(e.qid) for e in (*self.train, *self.val)}


def compile_sets(store: Store, handle: ModelHandle, settings: QASettings, data: SplitData, *,
                 limit: int | None = DEFAULT_LIMIT, embedder: Embedder | None = None,
                 weights: SearchWeights | None = None) -> CompileSets:
    """Load the train and validation conversations into ``store`` (as ``bench locomo``
    loads them) and build their examples (:func:`qa_examples`), at most ``limit``
    questions a set before the verifier's own answers are left out."""
    convs = data.of([*data.split.train, *data.split.val])
    load_locomo(store, convs, embedder=embedder)

    def examples(ids: Sequence[str]) -> list[dspy.Example]:
        questions = select_questions(data.of(ids), categories=None, limit=limit)
        return qa_examples(store, handle, settings, questions, embedder=embedder,
                           weights=weights)

    sets = CompileSets(train=examples(data.split.train), val=examples(data.split.val))
    if not sets.train or not sets.val:
        raise ValueError("the train or validation set has no question QA would be asked")
    return sets


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


class _Counted:
    """``qa_metric`` with a progress bar: one tick per metric call (per program run)."""

    def __init__(self, metric: Callable[..., dspy.Prediction], bar: tqdm) -> None:
        self.metric = metric
        self.bar = bar
        self.__name__ = getattr(metric, "__name__", "metric")

    def __call__(self, gold: dspy.Example, pred: dspy.Prediction, trace: Any = None,
                 pred_name: str | None = None, pred_trace: Any = None) -> dspy.Prediction:
        self.bar.update()
        return self.metric(gold, pred, trace, pred_name, pred_trace)


def optimize(optimizer: Optimizer, student: dspy.Module, sets: CompileSets, models: Models,
             budget: Budget, *, log_dir: Path | None = None, progress: bool = True
             ) -> dspy.Module:
    """Run one DSPy optimizer on ``student`` as DSPy ships it; returns the compiled copy.

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
    metric = _Counted(qa_metric, bar)
    errors = 10 * (len(train) + len(val)) + 100  # never stop on unparsable replies
    with bar, dspy.context(lm=models.student.lm, max_errors=errors):
        if optimizer == "bootstrap":
            return dspy.BootstrapFewShot(
                metric=as_score(metric), metric_threshold=THRESHOLD, teacher_settings=teacher,
                max_bootstrapped_demos=budget.max_bootstrapped_demos,
                max_labeled_demos=budget.max_labeled_demos, max_rounds=1, max_errors=errors,
            ).compile(student, trainset=train[:budget.main])
        if optimizer == "mipro":
            from memstrata.memory.extras import require

            require("optuna", "optimize", "MIPROv2 (memstrata compile --optimizer mipro)")
            size = min(budget.minibatch_size, len(val))
            return dspy.MIPROv2(
                metric=metric, prompt_model=models.reflection_lm, task_model=models.student.lm,
                teacher_settings=teacher, max_bootstrapped_demos=budget.max_bootstrapped_demos,
                max_labeled_demos=budget.max_labeled_demos, auto=None,
                num_candidates=budget.num_candidates, num_threads=1, max_errors=errors,
                metric_threshold=THRESHOLD, verbose=False, track_stats=False, seed=0,
            ).compile(student, trainset=train, valset=val, num_trials=budget.main,
                      minibatch=len(val) > size, minibatch_size=size,
                      minibatch_full_eval_steps=budget.main)
        if optimizer == "gepa":
            return dspy.GEPA(
                metric=metric, max_metric_calls=budget.main, reflection_lm=models.reflection_lm,
                reflection_minibatch_size=budget.minibatch_size, num_threads=1,
                log_dir=str(log_dir) if log_dir is not None else None, track_stats=False,
                seed=0,
            ).compile(student, trainset=train, valset=val)
        if optimizer == "simba":
            # SIMBA has no validation set: it picks its result on the train set. Giving it
            # the validation questions too would add up to 3 runs of each to the end.
            pool = train
            return dspy.SIMBA(
                metric=metric, bsize=min(budget.minibatch_size, len(pool)),
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
    """Everything one compile of ``QA`` needs, and what it records in the file's ``meta``."""

    optimizer: Optimizer
    models: Models
    data: SplitData
    settings: QASettings
    out: Path
    budget: Budget
    limit: int | None = DEFAULT_LIMIT
    embedder: Embedder | None = None
    weights: SearchWeights | None = None

    def recipe(self) -> dict[str, Any]:
        """What makes a compile the same compile: a file whose ``meta`` holds this recipe
        is reused by ``bench compile`` instead of compiled again."""
        return {"program": "qa", "optimizer": self.optimizer, **self.models.names(),
                "data": self.data.data, "train": list(self.data.split.train),
                "val": list(self.data.split.val), "limit": self.limit,
                "budget": self.budget.model_dump(), "settings": self.settings.model_dump(
                    mode="json"), "embedder": getattr(self.embedder, "name", None),
                "weights": self.weights.model_dump() if self.weights is not None else None}


def compile_qa(job: CompileJob, store: Store, *, progress: bool = True) -> CompileResult:
    """Compile LoCoMo's ``QA`` with ``job.optimizer`` and write it to ``job.out``.

    The train and validation conversations are loaded into ``store`` and the compile is
    recorded there as one run (tenant :data:`COMPILE_TENANT`): its data, its optimizer and
    budget, and one ``llm`` step per LLM call of every model. The program file's ``meta``
    holds the recipe (:meth:`CompileJob.recipe`), the question ids trained and validated
    on, the wall time and the calls.
    """
    models = job.models
    roles = models.roles()
    marks = {role: h.meter.mark() for role, h in roles.items()}
    config = job.recipe()
    with Recorder(store, COMPILE_TENANT, "compile.qa", task=f"compile qa with {job.optimizer}",
                  config=config, layers=["turns"]) as run:
        started = time.perf_counter()
        sets = compile_sets(store, models.student, job.settings, job.data, limit=job.limit,
                            embedder=job.embedder, weights=job.weights)
        run.step("data", "locomo", output={"train": len(sets.train), "val": len(sets.val)},
                 data={"train": [e.qid for e in sets.train], "val": [e.qid for e in sets.val]})
        run.step("optimize", job.optimizer, data=job.budget.model_dump())
        log_dir = job.out.with_name(job.out.name + ".gepa") if job.optimizer == "gepa" else None
        try:
            compiled = optimize(job.optimizer, QA(job.settings.style), sets, models, job.budget,
                                log_dir=log_dir, progress=progress)
        except BaseException as exc:  # an interrupted or failed compile keeps its calls
            run.fail(exc, usage=_record_calls(run, roles, marks)[1].model_dump())
            raise
        wall = round(time.perf_counter() - started, 1)
        usage, total = _record_calls(run, roles, marks)
        meta = {**config, "train_qids": [e.qid for e in sets.train],
                "val_qids": [e.qid for e in sets.val], "wall_s": wall, "llm_calls": total.calls,
                "usage": {r: u.model_dump() for r, u in usage.items()}, "run_id": run.run_id}
        digest = save_program(compiled, job.out, name="qa", meta=meta)
        ref = ProgramRef(path=str(job.out), name="qa", sha256=digest)
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
    return CompileResult(program=program_ref(job.out, "qa"), optimizer=job.optimizer,
                         wall_s=float(meta.get("wall_s", 0)),
                         llm_calls=int(meta.get("llm_calls", 0)),
                         usage={r: Usage(**u) for r, u in meta.get("usage", {}).items()},
                         run_id=meta.get("run_id"), reused=True)


def run_compile_bench(
    data: str | Path, models: Models, out_dir: str | Path, *, split: Split,
    optimizers: Sequence[Optimizer] = OPTIMIZERS, budgets: dict[Optimizer, Budget] | None = None,
    limit: int | None = DEFAULT_LIMIT, heldout_limit: int | None = None,
    audit: str | Path | None = None, embedder: Embedder | None = None,
    weights: SearchWeights | None = None, progress: bool = True,
) -> dict[str, Any]:
    """Compile ``QA`` with each optimizer, then score the uncompiled and every compiled
    program on the held-out conversations in one run; returns ``compile.json``.

    Each system is ``bench locomo``'s memstrata system (``run_locomo_bench``, its answers
    cached in ``DIR/heldout/SYSTEM``) answering with that program, so its F1 is the one
    ``memstrata bench locomo --program`` reports. Programs go to ``DIR/programs/``; one
    whose recipe matches is reused (an interrupted bench resumes), and the compiles are
    recorded in ``DIR/compile.db``.

    Raises:
        ValueError: no held-out conversation, or the split does not fit ``data``.
    """
    if not split.heldout:
        raise ValueError("bench compile needs --heldout conversations to score on")
    budgets = {**BUDGETS, **(budgets or {})}
    split_data = read_split(data, split)
    student = models.student
    settings = QASettings.for_model(student.name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    compiles: dict[str, CompileResult] = {}
    with Store.open(out / "compile.db") as store:  # opened as bench locomo opens its own
        for name in optimizers:
            job = CompileJob(optimizer=name, models=models, data=split_data, settings=settings,
                             out=out / "programs" / f"{name}.json", budget=budgets[name],
                             limit=limit, embedder=embedder, weights=weights)
            compiles[name] = reusable(job) or compile_qa(job, store, progress=progress)
    systems: dict[str, Any] = {}
    heldout = set(split.heldout)
    for name in ("uncompiled", *optimizers):
        done = compiles.get(name)
        doc = run_locomo_bench(
            data, student, out / "heldout" / name, audit=audit, systems=("memstrata",),
            settings=settings, embedder=embedder, weights=weights, conversations=heldout,
            limit=heldout_limit, progress=progress,
            program=done.program.path if done is not None else None)
        scored = doc["systems"]["memstrata"]
        systems[name] = {
            "f1": scored["f1"]["overall"], "llm_calls": done.llm_calls if done else 0,
            "compile_s": done.wall_s if done else 0,
            "f1_by_category": scored["f1"], "f1_corrected": scored["corrected"]["f1"]["overall"],
            "abstention_cat5": scored["abstention_cat5"], "questions": scored["questions"],
            "heldout_llm_calls": scored["llm_calls"], "failures": scored["failures"],
            "program": done.program.model_dump() if done else None,
            "reused": done.reused if done else False}
    base = systems["uncompiled"]["f1"]
    for row in systems.values():
        row["gain"] = round(row["f1"] / base, 3) if base and row["f1"] is not None else None
    return {"program": "qa", "model": student.name, **{k: v for k, v in models.names().items()
                                                       if k != "lm"},
            "data": str(data), "train": list(split.train), "val": list(split.val),
            "heldout": list(split.heldout), "limit": limit, "heldout_limit": heldout_limit,
            "budgets": {n: budgets[n].model_dump() for n in optimizers},
            "settings": settings.model_dump(mode="json"), "systems": systems}


def compile_table(doc: dict[str, Any]) -> str:
    """The held-out comparison as a markdown table, compile cost beside the gain."""
    lines = [f"# Compiling `{doc['program']}` — {doc['model']}", "",
             f"train {', '.join(doc['train'])} · validation {', '.join(doc['val'])} · "
             f"held-out {', '.join(doc['heldout'])} (leave-conversations-out; F1 is "
             "bench locomo's memstrata F1, categories 1-4, on the held-out questions)", "",
             "| system | F1 held-out | × uncompiled | cat-5 abstention | compile s | "
             "compile LLM calls | held-out LLM calls |",
             "|---|---|---|---|---|---|---|"]

    def fmt(value: Any, spec: str = ".3f") -> str:
        return "-" if value is None else format(value, spec)

    for name, row in doc["systems"].items():
        lines.append(f"| {name} | {fmt(row['f1'])} | {fmt(row['gain'], '.2f')} | "
                     f"{fmt(row['abstention_cat5'])} | {fmt(row['compile_s'], '.0f')} | "
                     f"{row['llm_calls']} | {row['heldout_llm_calls']} |")
    return "\n".join(lines) + "\n"


def compile_chart(doc: dict[str, Any], path: Path) -> None:
    """Held-out F1 per system beside its compile time and calls, as PNG."""
    from memstrata.memory.extras import require

    matplotlib = require("matplotlib", "bench", "the benchmark charts")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(doc["systems"])
    rows = [doc["systems"][n] for n in names]
    colours = [f"C{i}" for i in range(len(names))]
    fig, (ax, cost) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax.bar(names, [r["f1"] or 0.0 for r in rows], color=colours)
    ax.set_title("held-out F1 (categories 1-4)")
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    cost.bar(names, [r["compile_s"] / 60 for r in rows], color=colours)
    for n, r in enumerate(rows):
        cost.annotate(f"{r['llm_calls']} calls", (n, r["compile_s"] / 60), ha="center",
                      va="bottom", fontsize=8)
    cost.set_title("compile time (min) and LLM calls")
    for a in (ax, cost):
        a.tick_params(axis="x", rotation=20)
    fig.suptitle(f"Compiling {doc['program']} — {doc['model']}, held-out "
                 f"{', '.join(doc['heldout'])}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_compile_outputs(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``compile.json``, ``compile.md`` and ``compile.png``; returns the paths."""
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compile.json", out / "compile.md", out / "compile.png"]
    paths[0].write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    paths[1].write_text(compile_table(doc), encoding="utf-8")
    compile_chart(doc, paths[2])
    return paths


__all__ = ["BUDGETS", "OPTIMIZERS", "Budget", "CompileJob", "CompileResult", "Models", "Split",
           "compile_qa", "compile_sets", "optimize", "qa_examples", "read_split",
           "run_compile_bench", "write_compile_outputs"]
