"""``memstrata bench verify``: the answer path's attribution check, measured without an LLM."""

from __future__ import annotations

import argparse
from pathlib import Path

_DEFAULT_DATA = Path("..") / "shared" / "data" / "locomo" / "locomo_dev.json"


def cmd_bench_verify(args: argparse.Namespace) -> int:
    """The attribution check of the memstrata answer path alone, over every LoCoMo question
    (no LLM, seconds): category-5 abstention and category 1-4 false abstention, overall, per
    conversation and held out, plus a threshold sweep. Writes verify.json, verify.md and
    verdicts.jsonl (every question's scores and decision)."""
    from memstrata.bench.verify import run_verify_bench, verify_markdown
    from memstrata.memory.verify import VerifySettings

    try:
        settings = VerifySettings(margin=args.margin, floor=args.floor, window=args.window)
    except ValueError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    convs = {c.strip() for c in (args.conversations or "").split(",") if c.strip()}
    doc = run_verify_bench(args.data, args.out, settings=settings,
                           conversations=convs or None)
    print(verify_markdown(doc))
    out = Path(args.out)
    print("wrote " + ", ".join(str(out / n) for n in ("verify.json", "verify.md",
                                                       "verdicts.jsonl")))
    return 0


def add_verify_parser(bsub: argparse._SubParsersAction) -> None:
    """Register ``bench verify`` under the ``bench`` subcommands."""
    from memstrata.memory.verify import VerifySettings

    d = VerifySettings()
    p = bsub.add_parser("verify", help="the answer path's attribution check alone (no LLM)",
                        description=cmd_bench_verify.__doc__)
    p.add_argument("--data", default=str(_DEFAULT_DATA),
                   help="LoCoMo-format JSON (default ../shared/data/locomo/locomo_dev.json)")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    p.add_argument("--conversations", help="comma-separated sample ids (default: all)")
    p.add_argument("--margin", type=float, default=d.margin,
                   help=f"support margin to abstain (default {d.margin})")
    p.add_argument("--floor", type=float, default=d.floor,
                   help=f"least support the other person needs (default {d.floor})")
    p.add_argument("--window", type=int, default=d.window,
                   help=f"neighbouring turns joined to a turn (default {d.window})")
    p.set_defaults(func=cmd_bench_verify)
