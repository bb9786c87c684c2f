"""The experiment runner: one sequential pass of a suite under one experiment config.

For each task, in order: build the layered context (``ContextBuilder``, budgets checked
on every build), run the agent once per rollout, run the suite's deterministic checks,
judge when the config learns or has several rollouts, keep the best rollout by the
judge, grade it against gold (reported only), and, when learning, extract candidates and
write them back through the closed loop (``trajectories.loop.learn``). With
``retrieval.dense`` on, L2 ranks strategies lexical + dense, and every strategy seeded
or learned is embedded as it is written. With ``door: memory`` the context and the tools
come from ``Memory``'s verbs instead (``door.py``). Each task's result is appended to
``results.jsonl`` as soon as it is known, so an interrupted run loses at most the task
in flight and ``resume=True`` picks up after the last one.

A run directory holds ``config.json``, ``run.json`` (commit, code version, model,
suite, task order, the database state before and after), ``results.jsonl``,
``trajectories.jsonl`` (every recorded run: agent iterations, tool calls, verdicts,
extractions, bank decisions), ``memory.db`` (the store the run used, checkpointed so
the one file is complete), ``summary.json`` and ``summary.md``.

With ``program`` (``memstrata experiment --program FILE``) the agent is a compiled
program (``memstrata compile sparql``) instead of one built for each task: the file's
path and SHA-256 are named in ``run.json`` and the summary's ``meta`` (``program``), on
every line of ``results.jsonl`` and in every agent run's record, and a run is only
resumed with the program it began with.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from tqdm import tqdm

from memstrata.api import Memory
from memstrata.memory.bank import active_strategies, embed_strategies
from memstrata.memory.embed import Embedder, default_embedder
from memstrata.memory.models import StrategyItem
from memstrata.memory.retrieval import Retriever
from memstrata.memory.store import ITEM_PREFIX, Store, content_hash
from memstrata.memory.store.protocol import MemoryStore
from memstrata.packers.context import EMPTY, BuiltContext, ContextBuilder, check_sent
from memstrata.programs.distill import Attempt
from memstrata.programs.errors import ProgramParseError
from memstrata.programs.executors import Executor, ExecutorRun, render_trajectory, run_executor
from memstrata.programs.judging import Check, Verdict
from memstrata.programs.lm import ModelHandle
from memstrata.programs.refs import ProgramRef
from memstrata.tools import ToolSession
from memstrata.trajectories import Recorder, code_version, export_jsonl, git_commit
from memstrata.trajectories.loop import learn

from .config import ExperimentConfig
from .door import door_context, read_layers
from .health import memory_health
from .records import BankAction, RunSummary, TaskResult, read_results
from .report import summarise, write_summary
from .suites import LayerSources, Suite, SuiteTask

RESULTS = "results.jsonl"


def ordered(tasks: Sequence[SuiteTask], seed: int | None, limit: int | None
            ) -> list[SuiteTask]:
    """The pass's task order: shuffled by ``seed`` (None: as given), then cut to ``limit``.

    Suites list tasks easiest first; a learning curve over that order would show the
    difficulty, not the learning, so configs shuffle by default with a fixed seed.
    """
    out = list(tasks)
    if seed is not None:
        random.Random(seed).shuffle(out)
    return out[:limit] if limit is not None else out


def _seed_id(item: StrategyItem) -> str:
    """A seed-pack strategy's id, derived from its tenant, kind and content."""
    key = "\0".join((item.user_id, item.kind, content_hash(item)))
    return ITEM_PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


def _seed_bank(store: MemoryStore, suite: Suite) -> int:
    """Add the suite's seed pack to ``store`` (a strategy already there is skipped), each
    strategy under the same id in every store (:func:`_seed_id`). The ids are in the
    memory text the agent is shown: random ones made a compile on that text irreproducible
    (``memstrata compile sparql``: BootstrapFewShot draws each ReAct step demo by a hash
    of its inputs) and left a compiled agent's demos naming ids no run's store holds. (A
    strategy edited since it was seeded keeps that id; its original gets a fresh one.)"""
    added = 0
    for item in suite.seed_pack():
        if store.duplicate_of(item) is None:
            sid = _seed_id(item)
            store.add(item if store.get(item.user_id, sid) is not None
                      else item.model_copy(update={"id": sid}))
            added += 1
    return added


def prepare_memory(store: MemoryStore, suite: Suite, config: ExperimentConfig,
                   embedder: Embedder | None, *, seed: bool = True
                   ) -> tuple[ContextBuilder, LayerSources, int]:
    """Make ``store`` ready for ``suite``'s tasks under ``config``, as a run does: the
    suite's data, the curated seed pack when the config seeds the bank (and ``seed``),
    every active strategy embedded when ``embedder`` is given (the dense channel).

    Returns the builder of each task's memory, the layers' raw material (built to the
    config's budgets) and how many strategies were seeded. ``memstrata compile sparql``
    builds its examples' memory with it, so a compiled agent learns from the very
    context a run shows it.
    """
    suite.prepare(store)
    seeded = _seed_bank(store, suite) if config.seed_bank and seed else 0
    sources = suite.sources(config.budgets)
    if embedder is not None:
        # The seed pack, and on resume a bank grown before dense was on: every active
        # strategy needs a vector before the first L2 build ranks them.
        embed_strategies(store, suite.user_id, embedder)
    return ContextBuilder(store, suite.user_id, Retriever(store, embedder)), sources, seeded


def task_context(builder: ContextBuilder, suite: Suite, config: ExperimentConfig,
                 sources: LayerSources, question: str) -> BuiltContext:
    """The layered memory a run shows the agent for ``question`` (its text, or
    ``EMPTY``, is the agent's ``memory`` input)."""
    cfg = config
    return builder.build(
        question, scope=suite.scope if cfg.retrieval.scoped else None,
        layers=set(cfg.layers), budgets=cfg.budgets, mode=cfg.mode, card=sources.card,
        constraints=sources.constraints, derived=sources.derived,
        artefact=sources.artefact)


def _prepare_dir(out: Path, config: ExperimentConfig, resume: bool) -> list[TaskResult]:
    out.mkdir(parents=True, exist_ok=True)
    results_path, config_path = out / RESULTS, out / "config.json"
    if not results_path.exists() or not results_path.read_text().strip():
        return []
    if not resume:
        raise ValueError(f"{out} already holds a run ({RESULTS}); pass --resume to continue "
                         "it or choose another --out")
    saved = json.loads(config_path.read_text()) if config_path.exists() else None
    if saved is not None:
        # Through the model: a field added since the run began reads as its default.
        try:
            saved = ExperimentConfig.model_validate(saved).model_dump(mode="json")
        except ValidationError as exc:
            raise ValueError(f"{out}: the saved config.json is not a valid experiment "
                             f"config: {exc.errors()[0]['msg']}") from exc
    if saved != config.model_dump(mode="json"):
        raise ValueError(f"{out}: the saved config.json differs from this config; "
                         "a run can only be resumed with the config it started with")
    text = results_path.read_text(encoding="utf-8")
    if not text.endswith("\n"):  # killed mid-write: drop the task in flight, redo it
        results_path.write_text(text[:text.rfind("\n") + 1], encoding="utf-8")
    return read_results(results_path)


class Runner:
    """Runs one experiment config over one suite with one model, writing ``out``.

    Args:
        config: the experiment.
        suite: the tasks and their layers, agent, checks and grading.
        handle: the model the agent, the judge and the extractor use.
        out: the run directory.
        factory: an interpreter factory for the RLM/scratchpad executors (tests).
        embedder: the dense channel's encoder when ``config.retrieval.dense`` is on
            (default: the embedded static MiniLM, loaded offline); unused when it is off.
        program: a compiled program file to run as the agent (``suite.compiled_agent``),
            named in every record of the run.

    Raises:
        ValueError: ``program`` does not fit the suite or the config (another program,
            other executor settings or mode), or fails its hash check.
    """

    def __init__(self, config: ExperimentConfig, suite: Suite, handle: ModelHandle,
                 out: Path, factory: Callable[[], Any] | None = None,
                 embedder: Embedder | None = None, program: str | Path | None = None
                 ) -> None:
        self.config, self.suite, self.handle, self.out = config, suite, handle, out
        self.factory = factory
        self.embedder = (embedder or default_embedder()) if config.retrieval.dense else None
        self.agent: Executor | None = None
        self.memory: Memory | None = None  # the door, when the config takes Memory's
        self.program: ProgramRef | None = None
        if program is not None:
            self.agent, self.program = suite.compiled_agent(program, config.executor,
                                                            config.mode)

    def run(self, *, limit: int | None = None, resume: bool = False,
            progress: bool = True) -> RunSummary:
        """The whole pass; returns the ``RunSummary`` it wrote."""
        cfg, suite = self.config, self.suite
        done = _prepare_dir(self.out, cfg, resume)
        sha = self.program.sha256 if self.program is not None else None
        if ran := sorted({r.program.sha256 if r.program else "none" for r in done}
                         - {sha or "none"}):
            raise ValueError(f"{self.out}: its tasks ran with another program (sha256 "
                             f"{', '.join(ran)}); resume it with the --program it began with")
        store = Store.open(self.out / "memory.db")
        try:
            user = suite.user_id
            builder, sources, seeded = prepare_memory(store, suite, cfg, self.embedder,
                                                      seed=not done)
            read: dict[str, str] = {}
            if cfg.door == "memory":
                self.memory = Memory(store)
                if not done:
                    read = read_layers(self.memory, suite, cfg, sources)
            tasks = ordered(suite.tasks(), cfg.order_seed, limit)
            meta: dict[str, Any] = {
                "commit": git_commit(), "code_version": code_version(),
                "model": self.handle.name, "suite": suite.name, "scope": suite.scope,
                "user_id": user, "db": str((self.out / "memory.db").resolve()),
                "seeded": seeded, "read": read, "order": [t.id for t in tasks],
                "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "db_before": store.state_pointer(user), "resumed_after": len(done),
                "program": self.program.model_dump() if self.program is not None else None}
            (self.out / "config.json").write_text(
                json.dumps(cfg.model_dump(mode="json"), indent=2) + "\n")
            results = list(done)
            finished = {r.task_id for r in done}
            todo = [(i, t) for i, t in enumerate(tasks) if t.id not in finished]
            with (self.out / RESULTS).open("a", encoding="utf-8") as fh:
                for index, task in tqdm(todo, desc=f"{cfg.experiment} {suite.name}",
                                        unit="task", disable=not progress):
                    result = self._task(store, builder, sources, index, task)
                    results.append(result)
                    fh.write(result.model_dump_json() + "\n")
                    fh.flush()
            meta["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
            meta["db_after"] = store.state_pointer(user)
            # Only a learning run's loop writes the bank's usage counters.
            health = memory_health(store, user, results, counted=cfg.learn) \
                if cfg.learn or "L2" in cfg.layers else None
            summary = summarise(experiment=cfg.experiment, title=cfg.title, suite=suite.name,
                                model=self.handle.name, results=results, health=health,
                                meta=meta)
            write_summary(self.out, summary, results, cfg.model_dump(mode="json"))
            (self.out / "run.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
            export_jsonl(store, self.out / "trajectories.jsonl", user_id=user)
            store.checkpoint()  # memory.db is whole
            return summary
        finally:
            store.close()

    def _task(self, store: MemoryStore, builder: ContextBuilder, sources: LayerSources,
              index: int, task: SuiteTask) -> TaskResult:
        cfg, suite, handle = self.config, self.suite, self.handle
        started, mark = time.perf_counter(), handle.meter.mark()
        ctx = task_context(builder, suite, cfg, sources, task.question) \
            if self.memory is None else door_context(self.memory, suite, cfg, task.question)
        judged = cfg.learn or cfg.rollouts.n > 1
        attempts: list[tuple[ExecutorRun, list[Check], Verdict | None]] = []
        for rollout in range(cfg.rollouts.n):
            session = ToolSession(store, suite.user_id) if self.memory is None \
                else self.memory.tool_session(suite.user_id)
            with cfg.rollouts.sampling(handle, rollout):
                run = run_executor(
                    task.question, session, handle, cfg.executor,
                    context={"memory": ctx.text or EMPTY}, factory=self.factory,
                    layers=tuple(cfg.layers), signature=suite.signature(),
                    tools=suite.tools(session, cfg.executor, cfg.mode),
                    executor=self.agent, program=self.program)
            checks = suite.checks(task, run)
            verdict = cfg.judging.judge(
                task=task.question, trajectory=render_trajectory(run.steps),
                output=run.answer, checks=checks, handle=handle) if judged else None
            attempts.append((run, checks, verdict))
        selected = 0 if not judged else cfg.rollouts.select(
            [v for _, _, v in attempts if v is not None], [len(r.steps) for r, _, _ in attempts])
        run, _, verdict = attempts[selected]
        grade = suite.grade(task, run)
        shown = "L2" if self.memory is None else "strategies"
        injected = ctx.layers[shown].ids if shown in ctx.layers and cfg.mode == "inject" \
            else []
        fetched = [i for r, _, _ in attempts for s in r.steps for c in s.get("tools", [])
                   if c.get("name") == "mem_get" for i in c.get("ids", [])]
        result = TaskResult(
            index=index, task_id=task.id, level=task.level, question=task.question,
            answer=run.answer[:2000], success=grade.success, score=grade.score,
            converged=run.converged and grade.status in ("ok", "answered"),
            status=grade.status, findings=grade.findings, rollouts=len(attempts),
            selected=selected, steps=sum(len(r.steps) for r, _, _ in attempts),
            selected_steps=len(run.steps),
            tool_calls=sum(r.leakage.tool_calls for r, _, _ in attempts),
            context_chars=ctx.total_chars,
            layer_chars={ly: p.chars for ly, p in ctx.layers.items()},
            # The build's own check, and the same bound against the prompts really sent.
            budget_violations=[*ctx.violations, *check_sent(max(
                r.context_in_prompt.get("memory", 0) for r, _, _ in attempts), ctx)],
            max_prompt_chars=max((max(r.leakage.context_chars_per_iteration, default=0)
                                  for r, _, _ in attempts), default=0),
            stdout_chars=sum(r.leakage.stdout_chars for r, _, _ in attempts),
            large_returns=sum(r.leakage.large_returns for r, _, _ in attempts),
            injected_ids=injected, verdict=verdict,
            run_ids=[r.run_id for r, _, _ in attempts], program=self.program,
            error="; ".join(r.error for r, _, _ in attempts if r.error)[:1000] or None)
        if judged:
            self._loop(store, task, attempts, selected, [*injected, *fetched], result)
        if cfg.learn or "L2" in cfg.layers:
            result.bank_active = len(active_strategies(store, suite.user_id))
        usage = handle.meter.since(mark)
        result.llm_calls = usage.calls
        result.prompt_tokens, result.completion_tokens = usage.input_tokens, usage.output_tokens
        result.wall_s = round(time.perf_counter() - started, 3)
        return result

    def _loop(self, store: MemoryStore, task: SuiteTask,
              attempts: list[tuple[ExecutorRun, list[Check], Verdict | None]],
              selected: int, used: list[str], result: TaskResult) -> None:
        """Record every rollout's verdict and, when the config learns, extract from the
        judged attempts and write back; all of it one ``loop`` run of the trajectory."""
        cfg, user = self.config, self.suite.user_id
        verdict = attempts[selected][2]
        assert verdict is not None
        with Recorder(store, user, f"loop.{cfg.experiment}", task=task.question,
                      config={"learn": cfg.learn, "extraction": cfg.extraction.model_dump(),
                              "consolidation": cfg.consolidation is not None,
                              "forgetting": cfg.forgetting is not None}) as rec:
            result.run_ids.append(rec.run_id)
            for n, (_, checks, v) in enumerate(attempts):
                rec.step("verdict", f"rollout.{n}", output=v.rationale if v else "",
                         data={"verdict": v.model_dump() if v else None, "selected":
                               n == selected, "checks": [c.model_dump() for c in checks]})
            if not cfg.learn:
                return
            digest = [Attempt(task=task.question, trajectory=render_trajectory(r.steps),
                              answer=r.answer, verdict=v, run_id=r.run_id)
                      for r, _, v in attempts if v is not None]
            try:
                extraction = cfg.extraction.extract(
                    user_id=user, attempts=digest, selected=selected, handle=self.handle,
                    tags=[self.suite.scope])
            except ProgramParseError as exc:
                # Loud, not silent: the task's result and the loop run both carry it.
                result.error = f"{result.error + '; ' if result.error else ''}extraction: {exc}"
                rec.fail(exc)
                return
            result.dropped = extraction.dropped[:20]
            rec.step("extraction", cfg.extraction.method,
                     output=[i.title for i in extraction.items],
                     data={"items": [i.model_dump(mode="json") for i in extraction.items],
                           "dropped": extraction.dropped})
            update = learn(store, user, used=used, won=verdict.success,
                           candidates=extraction.items, consolidation=cfg.consolidation,
                           forgetting=cfg.forgetting, embedder=self.embedder)
            result.extracted = [BankAction(title=d.candidate.title, polarity=d.candidate.polarity,
                                           action=d.action, rule=d.rule, item_id=d.item_id,
                                           target_id=d.target_id) for d in update.decisions]
            result.retired = [r.item_id for r in update.retired]
            rec.step("bank", "learn", output=[d.action for d in update.decisions],
                     data=update.model_dump(mode="json"))
            rec.finish(output={"added": len(extraction.items), "retired": len(update.retired)})
