"""``memstrata maintain`` and ``memstrata bench cognitive``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memstrata.cli_support import no_store
from memstrata.memory.store.opener import open_store, store_missing

from .agent_commands import add_model_args, model_from_args

DEFAULT_DB = "memstrata.db"


def cmd_maintain(args: argparse.Namespace) -> int:
    """Run the cognitive lifecycle work that is due for one user: prune expired sensory
    observations, drop expired working-memory slots, trigger intentions whose time has
    come, and, with --consolidate, consolidate every full batch of episodes into a summary (one
    LLM call per batch; the originals are kept and flagged). Prints a JSON report."""
    from memstrata.memory.cognitive import CognitiveMemory, CognitiveSettings

    if store_missing(args.db):
        raise no_store(args.db)
    try:
        settings = CognitiveSettings(sensory_ttl_s=args.sensory_ttl,
                                     consolidation_batch=args.batch)
    except ValueError as exc:
        raise SystemExit(f"memstrata: {' '.join(str(exc).split())}") from None
    summarise = None
    if args.consolidate:
        from memstrata.programs.consolidate import summariser

        summarise = summariser(model_from_args(args))
    with open_store(args.db, embedder=None) as store:
        report = CognitiveMemory(store, args.user, settings=settings).maintain(
            summarise, force=args.force)
    print(report.model_dump_json(indent=2))
    return 0


def cmd_bench_cognitive(args: argparse.Namespace) -> int:
    """Seed 003's progressive evaluation: L1 single-source recall, L2 multi-source
    synthesis, L3 temporal reasoning over changing numbers, L4 procedures applied to new
    input, L5 contradictions, L6 incremental updates. The adaptive reasoner over cognitive
    memory and a plain retrieve-then-answer baseline answer the same questions on the same
    model; per level the median of --runs runs. Writes cognitive.json, cognitive.md,
    cognitive.png and every answer (cognitive_answers.jsonl)."""
    from memstrata.bench.cognitive.run import run_cognitive_bench
    from memstrata.bench.cognitive.scenarios import (
        ScenarioFileError,
        default_scenarios_path,
        load_scenarios,
    )

    levels = {x.strip() for x in args.levels.split(",") if x.strip()} if args.levels else None
    if args.runs < 1:
        raise SystemExit("memstrata: --runs must be at least 1")
    try:
        load_scenarios(args.scenarios or default_scenarios_path())  # before a model loads
    except ScenarioFileError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    handle = model_from_args(args)
    judge = None
    if args.judge:
        from memstrata.programs import setup_lm

        judge = setup_lm(args.judge, api_base=args.judge_api_base, max_tokens=128)
    try:
        doc = run_cognitive_bench(handle, args.out, scenarios=args.scenarios, runs=args.runs,
                                  levels=levels, judge=judge,
                                  through_memory=args.through_memory)
    except (ScenarioFileError, ValueError) as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    from memstrata.bench.cognitive.report import table

    print(table(doc))
    print(json.dumps({"wrote": [str(Path(args.out) / n) for n in (
        "cognitive.json", "cognitive.md", "cognitive.png", "cognitive_answers.jsonl")]}))
    return 0


def add_cognitive_parsers(sub: argparse._SubParsersAction,
                          bsub: argparse._SubParsersAction) -> None:
    """Register ``maintain`` on ``sub`` and ``cognitive`` on the bench parsers ``bsub``."""
    p = sub.add_parser("maintain", help="run the due cognitive-memory lifecycle work "
                       "(TTL pruning, eviction, triggers, consolidation)",
                       description=cmd_maintain.__doc__)
    p.add_argument("--user", required=True, help="tenant id")
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("--consolidate", action="store_true",
                   help="consolidate full batches of episodes with --lm (one call a batch); "
                   "without it the report says whether a batch is due")
    add_model_args(p)
    p.add_argument("--batch", type=int, default=10,
                   help="episodes per consolidation (default 10)")
    p.add_argument("--sensory-ttl", type=float, default=300.0,
                   help="seconds a sensory observation lives unless attended (default 300)")
    p.add_argument("--force", action="store_true",
                   help="also consolidate a last partial batch (two episodes or more)")
    p.set_defaults(func=cmd_maintain)

    p = bsub.add_parser("cognitive", help="L1-L6 progressive evaluation of cognitive memory "
                        "and the adaptive reasoner vs a plain baseline",
                        description=cmd_bench_cognitive.__doc__)
    p.add_argument("--scenarios", help="scenario file (default: the shipped one; the format "
                   "is in docs/guides/cognitive.md)")
    p.add_argument("--runs", type=int, default=3, help="runs; each level reports the median "
                   "(default 3)")
    p.add_argument("--levels", help="comma-separated levels to run (default: all)")
    p.add_argument("--judge", help="score with this model as answer judge instead of the "
                   "scenario's rules")
    p.add_argument("--through-memory", action="store_true",
                   help="read with Memory.read and answer with Memory.answer (routed: a "
                   "simple recall to the personal answerer, the rest to the reasoner) "
                   "instead of the reasoner alone")
    p.add_argument("--judge-api-base", help="server address for --judge")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    add_model_args(p, prefix_cache="ram")  # the reasoner's four programs alternate
    p.set_defaults(func=cmd_bench_cognitive)
