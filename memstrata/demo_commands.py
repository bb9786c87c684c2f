"""``memstrata demo``: the main job (see :mod:`memstrata.bench.main_job`)."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_DATA = Path("..") / "shared" / "data" / "locomo" / "locomo_dev.json"


def cmd_demo(args: argparse.Namespace) -> int:
    """What memstrata is for, measured: retrieval without a model on every question of two
    corpora beside BM25, answers with their evidence, then LoCoMo question answering
    beside naive RAG and no memory on the same model, every figure with its 95% interval.
    About 15 minutes on 2 cores with the embedded model."""
    from memstrata.bench.main_job import main_markdown, run_main_job
    from memstrata.memory import default_embedder
    from memstrata.programs import setup_lm

    data = Path(args.data)
    if not data.is_file():
        raise SystemExit(f"memstrata: no LoCoMo file at {data} (give one with --data)")
    if args.questions < 1 or args.examples < 1:
        raise SystemExit("memstrata: --questions and --examples must be 1 or more")
    audit = data.with_name(data.stem + "_audit_errors.json")
    handle = setup_lm(args.lm)
    doc = run_main_job(data, handle, args.out, audit=audit if audit.exists() else None,
                       embedder=default_embedder(), questions=args.questions,
                       examples=args.examples)
    print(main_markdown(doc))
    print(f"wrote {Path(args.out) / 'main.md'}, {Path(args.out) / 'main.json'} "
          f"(and the retrieval and qa reports beside them)")
    return 0


def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``memstrata demo``."""
    from memstrata.agent_commands import lm_help
    from memstrata.programs.models import EMBEDDED

    p = sub.add_parser("demo", help="the main job: retrieval beside BM25, answers with "
                       "evidence, QA beside naive RAG, with 95%% intervals",
                       description=cmd_demo.__doc__)
    p.add_argument("--data", default=str(DEFAULT_DATA),
                   help="a LoCoMo-format file (default: %(default)s)")
    p.add_argument("--lm", default=EMBEDDED, help=lm_help("the answering model"))
    p.add_argument("--questions", type=int, default=20,
                   help="LoCoMo questions each QA system answers, spread over "
                   "conversations and categories (default: %(default)s)")
    p.add_argument("--examples", type=int, default=3,
                   help="answers shown with their evidence (default: %(default)s)")
    p.add_argument("--out", default="out", help="report folder (default: %(default)s)")
    p.set_defaults(func=cmd_demo)
