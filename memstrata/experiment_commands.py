"""``memstrata experiment``: run E1-E12 over a task suite, and compare runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from memstrata.agent_commands import add_model_args, model_from_args

if TYPE_CHECKING:  # the suites load DSPy: imported by the command, not for --help
    from memstrata.bench.experiments.config import ExperimentConfig
    from memstrata.bench.experiments.suites import Suite

_DEFAULT_DATA = Path("..") / "shared" / "data" / "locomo" / "locomo_dev.json"
_INTERFACE = ("experiment", "tasks", "success_rate", "steps_per_task", "llm_calls",
              "budget_violations")


def _suite(args: argparse.Namespace):
    from memstrata.bench.experiments import LocomoSuite, OntologySuite

    if args.suite == "ontology":
        return OntologySuite(Path(args.task_file) if args.task_file else None)
    categories = tuple(int(c) for c in args.categories.split(",") if c.strip())
    if not categories or any(c not in (1, 2, 3, 4, 5) for c in categories):
        raise SystemExit(f"memstrata: --categories: LoCoMo categories are 1-5, got "
                         f"{args.categories!r}")
    return LocomoSuite(Path(args.data), args.conversation, categories)


def _check_program(args: argparse.Namespace, suite: Suite, config: ExperimentConfig
                   ) -> None:
    """--program checked before any model loads: the suite's agent must be a compiled
    program (the ontology suite's SPARQL agent; the locomo suite's RLM is not one), the
    file must hold that program, and it must have been compiled for the config's executor
    settings and mode. Exits naming what is wrong."""
    if args.program is None:
        return
    from memstrata.compile_commands import program_file

    if suite.program is None:
        raise SystemExit(f"memstrata: --program: the {suite.name} suite's agent is not a "
                         "compiled program; --program is for --suite ontology (its SPARQL "
                         "agent, `memstrata compile sparql`)")
    program_file(args.program, (suite.program,), "experiment")
    try:
        suite.compiled_agent(args.program, config.executor, config.mode)
    except ValueError as exc:
        raise SystemExit(f"memstrata: --program: {exc}") from None


def cmd_experiment(args: argparse.Namespace) -> int:
    """Run one experiment config over a task suite: a sequential pass of the tasks, with
    the config's memory layers, budgets, mode and closed-loop policies. Writes
    config.json, run.json, results.jsonl, trajectories.jsonl, memory.db, summary.json
    and summary.md under --out, and prints the summary's headline figures. With
    --program FILE (ontology suite only) the SPARQL agent is the compiled program in FILE
    (`memstrata compile sparql`), named with its SHA-256 in run.json, summary.json,
    every results.jsonl line and every agent run's record."""
    from memstrata.bench.experiments import Runner, load_config

    overrides = list(args.set)
    if args.suite == "locomo" and not any(o.startswith("executor.executor=") for o in overrides):
        overrides.insert(0, "executor.executor=rlm")  # suite (b) is specified on the RLM
    try:
        config = load_config(args.config or args.experiment, overrides)
        suite = _suite(args)  # a malformed --task-file or --data fails here, named
    except ValueError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    if args.config and config.experiment not in (args.experiment, "custom"):
        raise SystemExit(f"memstrata: {args.config} is experiment {config.experiment}, "
                         f"not {args.experiment}")
    if args.tasks is not None and args.tasks < 1:
        raise SystemExit("memstrata: --tasks must be at least 1")
    _check_program(args, suite, config)
    handle = model_from_args(args)
    out = Path(args.out)
    try:
        summary = Runner(config, suite, handle, out, program=args.program).run(
            limit=args.tasks, resume=args.resume)
    except ValueError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    head = summary.model_dump(include=set(_INTERFACE))
    print(json.dumps({k: head[k] for k in _INTERFACE}))
    print(f"wrote {out / 'summary.md'} and the run's files under {out}", file=sys.stderr)
    return 0 if summary.budget_violations == 0 else 1


def cmd_experiment_compare(args: argparse.Namespace) -> int:
    """Put two or more experiment runs side by side: headline figures, deltas against the
    first run, a paired per-task table, and a chart of the learning curves. Writes
    compare.json, compare.md and compare.png under --out."""
    from memstrata.bench.experiments import compare_runs

    try:
        result = compare_runs([Path(r) for r in args.runs], Path(args.out))
    except ValueError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    print((Path(args.out) / "compare.md").read_text())
    for warning in result.warnings:
        print(f"memstrata: warning: {warning}", file=sys.stderr)
    return 0


def add_experiment_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``experiment E1..E12`` and ``experiment compare``."""
    from memstrata.bench.experiments.names import EXPERIMENTS, title

    exp = sub.add_parser(
        "experiment", help="the layer-cake and closed-loop experiments E1-E12, and compare",
        description="Run one of seed 002's experiments over a task suite (E1 no memory ... "
        "E9 closed loop ... E12 MaTTS rollouts), or compare runs. Each experiment is a "
        "config file; see `memstrata experiment E9 --help`.")
    esub = exp.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    for name in EXPERIMENTS:
        p = esub.add_parser(name, help=title(name), description=f"{title(name)}. "
                            + (cmd_experiment.__doc__ or ""))
        p.add_argument("--suite", choices=("ontology", "locomo"), default="ontology",
                       help="(a) SPARQL over Brick (default; ReAct with a run_sparql tool) "
                       "or (b) LoCoMo questions (the RLM with the memory tools, in the "
                       "offline sandbox, unless --set executor.executor=react)")
        p.add_argument("--out", required=True, help="the run directory")
        p.add_argument("--tasks", type=int, help="run only the first N tasks of the order")
        p.add_argument("--task-file", help="ontology suite: a task file in the "
                       "ontology_tasks.json format (default: the 62 shipped tasks)")
        p.add_argument("--data", default=str(_DEFAULT_DATA),
                       help="locomo suite: LoCoMo-format JSON (default the dev split)")
        p.add_argument("--conversation", help="locomo suite: sample id (default: first)")
        p.add_argument("--categories", default="1,2,3,4",
                       help="locomo suite: question categories (default 1,2,3,4)")
        p.add_argument("--config", help=f"a config file to run instead of {name}'s own")
        p.add_argument("--program", metavar="FILE",
                       help="ontology suite: the SPARQL agent is the compiled program in FILE "
                       "(`memstrata compile sparql`; compiled for this config's executor "
                       "settings and mode), named with its SHA-256 in every record")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config field, e.g. executor.max_iters=2, "
                       "extraction.method=trace, or door=memory (the layers through "
                       "Memory.read/context/tools); JSON values; repeatable")
        p.add_argument("--resume", action="store_true",
                       help="continue an interrupted run in --out (same config)")
        add_model_args(p)
        p.set_defaults(func=cmd_experiment)
    p = esub.add_parser("compare", help="put runs side by side, with a chart",
                        description=cmd_experiment_compare.__doc__)
    p.add_argument("runs", nargs="+", help="run directories (two or more)")
    p.add_argument("--out", default="out/compare", help="output folder (default out/compare)")
    p.set_defaults(func=cmd_experiment_compare)
