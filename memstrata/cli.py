"""The ``memstrata`` command: load memories, search them, and run the benchmarks.

Every subcommand explains itself with ``--help``. Errors are one clear line on stderr and
a non-zero exit; results go to stdout (JSON for machine-readable ones).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import re
import sys
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, TextIO

from memstrata import __version__
from memstrata.agent_commands import (
    THREADS_HELP,
    add_model_args,
    add_prefix_cache_arg,
    caps_from_json,
    cmd_rlm,
    cmd_runs,
    cmd_sandbox,
    executor_settings_from_args,
    lm_help,
    model_from_args,
)
from memstrata.chat_commands import cmd_chat, cmd_facts
from memstrata.cli_support import (
    NotFound,
    add_embedder_arg,
    at_least,
    audit_beside,
    audit_path,
    csv_list,
    embedder_from_flag,
    no_store,
    one_line,
    opener_embedder,
    print_report,
    query_arg,
    weights_from_json,
    when_arg,
)
from memstrata.cognitive_commands import add_cognitive_parsers
from memstrata.compile_commands import add_compile_parsers
from memstrata.demo_commands import add_demo_parser
from memstrata.errors import MemstrataWarning
from memstrata.experiment_commands import add_experiment_parser
from memstrata.ingest_commands import add_ingest_args, cmd_bench_facts, cmd_ingest, cmd_persona
from memstrata.layer_commands import add_layer_parsers
from memstrata.mcp_commands import add_mcp_parser
from memstrata.memory.retrieval import DEFAULT_MIN_SCORE
from memstrata.memory.store.opener import describe, open_store, store_missing
from memstrata.memory_commands import add_durability_arg, add_memory_parsers
from memstrata.model_commands import add_doctor_parser, add_models_parser
from memstrata.personal_commands import add_reconcile_args, cmd_reconcile
from memstrata.programs.models import EMBEDDED
from memstrata.server_commands import add_serve_bench_parser, add_server_parsers
from memstrata.ui_commands import add_ui_parser
from memstrata.verify_commands import add_verify_parser
from memstrata.worker_commands import (
    add_background_bench_parser,
    add_jobs_parser,
    add_worker_parser,
)

DEFAULT_DB = "memstrata.db"
EXIT_CODES = ("exit status: 0 done; 1 not found (no store at --db, no such memory or run) "
              "or a negative answer (migrate --check with migrations pending, a benchmark "
              "or doctor check that failed, a confirmation declined); 2 a usage error or "
              "refused input (a bad argument, a file that is not in its format, text or "
              "metadata the store refuses), a file that cannot be read or written, or a "
              "store fault (full disk, read-only, corrupt); 130 interrupted; 141 the reader "
              "of the output went away (a pipe into head). Errors are one line on stderr.")
_SHARED = Path("..") / "shared" / "data" / "locomo"


def cmd_load(args: argparse.Namespace) -> int:
    """Load a LoCoMo-format file into a store, each conversation its own tenant."""
    from tqdm import tqdm

    from memstrata.bench.locomo import load_locomo, read_locomo

    convs = read_locomo(args.file)
    embedder = opener_embedder(not args.no_embed, args.embedder)
    with open_store(args.db, embedder=embedder, durability=args.durability) as store, tqdm(
        total=sum(c.turn_count for c in convs), unit="turn", desc="load"
    ) as bar:
        stats = load_locomo(store, convs, embedder=store.embedder, progress=bar.update)
    print(json.dumps({"db": describe(args.db), "conversations": stats.conversations,
                      "turns": stats.turns, "embedded": stats.embedded,
                      "tenants": [c.sample_id for c in convs]}))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    """Hybrid search over one tenant; prints one JSON object per hit (none when nothing
    scores at least --min-score; a user with nothing stored is said on stderr)."""
    from memstrata.memory import Filters, Retriever

    if store_missing(args.db):
        raise no_store(args.db)
    filters = Filters(
        kinds=args.kind, speaker=args.speaker, conversation_id=args.conversation,
        start=args.since, end=args.until,
    )
    with open_store(args.db, embedder=opener_embedder(not args.no_dense, args.embedder)
                    ) as store:
        counts = store.counts(args.user)
        retriever = Retriever(store, store.embedder if counts["embeddings"] else None,
                              weights_from_json(args.weights))
        hits = retriever.search(args.user, args.query, k=args.k, filters=filters,
                                min_score=args.min_score)
        for hit in hits:
            print(hit.model_dump_json(exclude_none=True))
    if not hits and not counts["turns"] and not counts["items"]:
        # Tenant ids are exact: a misspelt --user finds an empty tenant, not an error.
        print(f"memstrata: nothing is stored for user {args.user!r} in {describe(args.db)}",
              file=sys.stderr)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Bring a store's schema up to date: a SQLite file or a postgresql:// database. Prints
    the versions recorded before, those applied now and the latest known, as JSON. With
    --check nothing is written, and the exit status is 1 when migrations are pending.
    Every command also migrates on open; this one lets operations do it first, once."""
    from memstrata.memory.store.opener import is_url, schema_versions

    before, known = schema_versions(args.db)
    unknown = sorted(set(before) - set(known))
    if unknown:
        raise SystemExit(f"memstrata: {describe(args.db)} has schema versions {unknown} that "
                         f"this memstrata does not know (latest known: {max(known)}): "
                         "upgrade memstrata")
    pending = [v for v in known if v not in before]
    report: dict[str, Any] = {"db": describe(args.db),
                              "backend": "postgresql" if is_url(args.db) else "sqlite",
                              "recorded": before, "latest": max(known)}
    if args.check:
        print(json.dumps({**report, "pending": pending}))
        return 1 if pending else 0
    if pending:
        open_store(args.db, embedder=None).close()
    after = schema_versions(args.db)[0]
    print(json.dumps({**report, "applied": [v for v in after if v not in before],
                      "recorded": after}))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    """Row counts of a store (all tenants, or one)."""

    if store_missing(args.db):
        raise no_store(args.db)
    with open_store(args.db) as store:
        print(json.dumps(store.counts(args.user), indent=2))
    return 0


def cmd_bench_retrieval(args: argparse.Namespace) -> int:
    """Evidence recall@5/10/25 of memstrata, its lexical and dense channels alone and two
    rank-bm25 baselines, on every corpus given (LoCoMo, LongMemEval or labelled-messages
    files; by default LoCoMo dev and the shipped assistant corpus) in one run."""
    from memstrata.bench.corpora import ASSISTANT
    from memstrata.bench.report import retrieval_table, write_retrieval_outputs
    from memstrata.bench.retrieval import run_retrieval_bench
    from memstrata.bench.retrieval_md import retrieval_markdown, write_retrieval_markdown

    data = args.data or [str(_SHARED / "locomo_dev.json"), str(ASSISTANT)]
    rerank_lm = None
    if args.rerank_lm:
        from memstrata.programs import setup_lm

        if args.rerank_depth < 2:
            raise SystemExit("memstrata: --rerank-depth must be 2 or more")
        rerank_lm = setup_lm(args.rerank_lm)
    # An audit file sits beside a LoCoMo file as <data>_audit_errors.json unless named.
    audits = {path: args.audit or audit_beside(path) for path in data}
    doc = run_retrieval_bench(
        data, audit=audits, embedder=embedder_from_flag(not args.no_dense, args.embedder),
        weights=weights_from_json(args.weights), db_path=args.db, limit=args.limit,
        cv=args.cv, cv_rounds=args.cv_rounds,
        encoders=[embedder_from_flag(True, name, "--encoders")
                  for name in csv_list(args.encoders, "--encoders") or []],
        rerank_lm=rerank_lm, rerank_depth=args.rerank_depth, ablate=args.ablate,
    )
    paths = [*write_retrieval_outputs(doc, args.out), write_retrieval_markdown(doc, args.out)]
    locomo_only = doc["benchmark"] == "locomo-retrieval"
    return print_report(retrieval_table(doc) if locomo_only else retrieval_markdown(doc), paths)


def _unit_interval(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"not a number from 0 to 1: {raw!r}")
    return value


def _days(raw: str) -> float:
    try:
        days = float(raw)
    except ValueError:
        days = -1.0
    if days < 0:
        raise argparse.ArgumentTypeError(f"not a number of days >= 0: {raw!r}")
    return days


def cmd_bench_locomo(args: argparse.Namespace) -> int:
    """LoCoMo question answering: memstrata against no memory, full context and naive RAG,
    all on the same model in one run (F1, EM, BLEU-1, optional LLM judge, abstention, cost,
    and how often every evidence turn reached the model, with paired intervals against
    naive RAG). Answers are cached in --out, so an interrupted run resumes where it
    stopped."""
    from memstrata.bench.qa import ALL_SYSTEMS, SYSTEMS, QASettings, run_locomo_bench
    from memstrata.bench.qa_report import locomo_table, write_locomo_outputs
    from memstrata.programs import setup_lm
    from memstrata.programs.ingest import IngestSettings

    systems = tuple(csv_list(args.systems, "--systems") or SYSTEMS)
    if unknown := set(systems) - set(ALL_SYSTEMS):
        raise SystemExit(f"memstrata: unknown system(s) {sorted(unknown)}; choose from "
                         f"{', '.join(ALL_SYSTEMS)}")
    convs = csv_list(args.conversations, "--conversations")
    cats = csv_list(args.categories, "--categories", int)
    if cats and not set(cats) <= {1, 2, 3, 4, 5}:
        raise SystemExit("memstrata: --categories are LoCoMo's 1-5")
    if args.budget is not None and args.budget < 0:
        raise SystemExit("memstrata: --budget must be >= 0")
    budget = {"budget": args.budget} if args.budget is not None else {}
    handle = setup_lm(args.lm, api_base=args.api_base, n_ctx=args.n_ctx, n_threads=args.threads,
                      prefix_cache=args.prefix_cache)
    judge = setup_lm(args.judge, api_base=args.judge_api_base) if args.judge else None
    try:
        doc = run_locomo_bench(
            args.data, handle, args.out, audit=audit_path(args), judge=judge, systems=systems,
            settings=QASettings.for_model(handle.name, **budget),
            embedder=embedder_from_flag(not args.no_dense),
            weights=weights_from_json(args.weights), conversations=set(convs) if convs else None,
            categories=set(cats) if cats else None, limit=args.limit,
            ingest=IngestSettings() if args.facts else None, program=args.program)
    except ValueError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    return print_report(locomo_table(doc), write_locomo_outputs(doc, args.out))


def cmd_bench_scale(args: argparse.Namespace) -> int:
    """Synthetic single-tenant stores of growing size: ingest rate and search latency.
    With --db URL, also a PostgreSQL store with concurrent writer and reader processes
    (each size in a fresh schema memstrata_scale_<N> of that database, dropped after)."""
    from memstrata.bench.scale import format_scale_table, run_scale_bench, write_scale_outputs

    try:
        sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(
            f"memstrata: --sizes must be comma-separated integers, got {args.sizes!r}"
        ) from None
    doc = run_scale_bench(sizes, queries=args.queries, bm25_sample=args.bm25_sample,
                          seed=args.seed, db=args.db, writers=args.writers,
                          readers=args.readers, fresh=args.fresh, own_tenants=args.own_tenants)
    return print_report(format_scale_table(doc), write_scale_outputs(doc, args.out))


def cmd_bench_leakage(args: argparse.Namespace) -> int:
    """E7, the prompt-leakage ablation: LoCoMo questions answered by an executor that must
    search the whole conversation (one blob), once with naive tools (full payloads, no
    caps) and once with the handle tools, on the same model and budgets. Writes
    leakage.json, leakage.md, leakage.png and every run's trajectory (leakage.db)."""
    from memstrata.bench.leakage import leakage_table, run_leakage_bench, write_leakage_outputs
    from memstrata.bench.policy import NAME, SearchReadPolicy
    from memstrata.programs import setup_lm

    settings = executor_settings_from_args(args)
    cats = csv_list(args.categories, "--categories", int)
    convs = csv_list(args.conversations, "--conversations")
    handle = setup_lm(NAME, engine=SearchReadPolicy()) if args.lm == NAME else model_from_args(args)
    try:
        doc = run_leakage_bench(args.data, handle, args.out, settings=settings,
                                caps=caps_from_json(args.caps),
                                limit=args.limit, categories=set(cats) if cats else None,
                                conversations=set(convs) if convs else None)
    except ValueError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    return print_report(leakage_table(doc), write_leakage_outputs(doc, args.out))


def cmd_bench_voe(args: argparse.Namespace) -> int:
    """The VoE loop's A/B test (seed 000, H1): LoCoMo sessions replayed through the loop
    and through a baseline without facts, on the same model; prediction hits by fuzzy
    ratio and embedding cosine, a chi-squared test, pass if p < 0.05 and the VoE arm's
    hit rate is >= 20% higher. Writes voe.json, voe.md, every turn (voe_turns.jsonl)."""
    from memstrata.bench.voe import run_voe_bench, voe_table, write_voe_outputs

    convs = csv_list(args.conversations, "--conversations")
    if args.limit is not None and args.limit < 1:
        raise SystemExit("memstrata: --limit must be >= 1")
    handle = model_from_args(args)
    try:
        doc = run_voe_bench(args.data, handle, args.out,
                            embedder=embedder_from_flag(not args.no_dense),
                            limit=args.limit, max_turns=args.max_turns,
                            conversations=set(convs) if convs else None)
    except ValueError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    return print_report(voe_table(doc), write_voe_outputs(doc, args.out))


def cmd_bench_tools(args: argparse.Namespace) -> int:
    """Latency of every handle tool through a bound session, at N items (plus a 1M-char
    blob), with a bare Store.get measured in the same run as the floor."""
    from memstrata.bench.tool_latency import run_tool_bench, tool_table, write_tool_outputs

    if args.items < 1000 or args.calls < 1:
        raise SystemExit("memstrata: --items must be >= 1000 and --calls >= 1")
    doc = run_tool_bench(args.items, args.calls, seed=args.seed)
    return print_report(tool_table(doc), write_tool_outputs(doc, args.out))


def cmd_bench_long(args: argparse.Namespace) -> int:
    """One tenant of N long user/assistant messages (a technical assistant's history):
    ingest rate through Memory.add (batched and one message a call), file size, and
    Memory.search latency p50/p95/p99 by query shape, beside rank-bm25 on the same
    messages. Writes long.json."""
    from memstrata.bench.long_messages import (
        format_long_table,
        run_long_bench,
        write_long_outputs,
    )

    try:
        doc = run_long_bench(args.messages, queries=args.queries, batch=args.batch,
                             singles=args.singles, seed=args.seed,
                             db=Path(args.db) if args.db else None, bm25=not args.no_bm25)
    except ValueError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    return print_report(format_long_table(doc), write_long_outputs(doc, args.out))


def cmd_bench_reliability(args: argparse.Namespace) -> int:
    """Faults, load and hostile input: kill -9 mid-write, many writers, disk faults, fuzzed
    tools and commands, memory poisoning, sandbox escapes and planted secrets, each scenario
    bounded in count and time. Exits 1 when any write was lost, the file failed its
    integrity check, anything crashed, an injection or escape got through, or a secret
    reached a written byte."""
    from memstrata.bench.reliability.suite import run_suite, table

    only = {n.strip() for n in args.only.split(",") if n.strip()} if args.only else None
    try:
        doc = run_suite(args.out, quick=args.quick, seed=args.seed, only=only,
                        work=args.work, keep=args.work is not None)
    except ValueError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    print_report(table(doc), [Path(p) for p in doc["files"]])
    return 0 if doc["ok"] else 1


def _add_data_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=str(_SHARED / "locomo_dev.json"),
                   help="LoCoMo-format JSON (default ../shared/data/locomo/locomo_dev.json)")


def _add_audit_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--audit", help="audit corrections JSON (default: <data>_audit_errors.json "
                   "beside --data, if present)")


def _add_executor_args(p: argparse.ArgumentParser, max_output_chars: int) -> None:
    p.add_argument("--executor", default="rlm", choices=("rlm", "react", "scratchpad"),
                   help="dspy.RLM (default), dspy.ReAct, or the scratchpad executor")
    p.add_argument("--interpreter", default="sandbox", choices=("sandbox", "local"),
                   help="where code runs: the offline Deno/Pyodide sandbox (default) or "
                   "dspy.LocalInterpreter, which is NOT a sandbox")
    p.add_argument("--max-iters", type=int, default=5, help="most iterations (default 5)")
    p.add_argument("--max-llm-calls", type=int, default=4,
                   help="most sub-LLM calls from the agent's code (default 4)")
    p.add_argument("--max-output-chars", type=int, default=max_output_chars,
                   help=f"printed output shown back per step (default {max_output_chars:,})")
    p.add_argument("--caps", help='tool caps as JSON, e.g. \'{"max_get": 3}\' (see ToolCaps)')
    p.add_argument("--sandbox-time-s", type=float, default=30.0, metavar="S",
                   help="a sandbox step running longer (host tool time aside) is stopped "
                   "with a recorded error (default 30)")
    p.add_argument("--sandbox-memory-mb", type=int, default=1024, metavar="MB",
                   help="memory one sandbox step may take before it is stopped (default "
                   "1024, at least 256)")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage error stays one line whatever the arguments it
    quotes hold (a newline, a record or line separator; subcommands' parsers are of this
    class too)."""

    _argv: tuple[str, ...] = ()

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """argparse's, keeping the arguments for :meth:`error`'s suggestions."""
        self._argv = tuple(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """Print the usage and the message on one line, and exit with code 2; a misspelt
        command, choice or option gets the nearest valid one suggested."""
        message = " ".join(message.split())
        if found := _INVALID_CHOICE.search(message):
            choices = re.findall(r"'([^']*)'", found["choices"])
            if near := difflib.get_close_matches(found["given"], choices, n=1, cutoff=0.6):
                message += f"; did you mean '{near[0]}'?"
        elif message.startswith(("unrecognized arguments:",
                                 "the following arguments are required:")):
            command = self._command()
            if command is not self:
                # argparse reports a subcommand's unknown arguments from the top parser:
                # the subcommand says it, with its usage and its options to suggest.
                command.error(message)
            # A misspelt --user also leaves the real one missing: either message.
            message += self._near_options()
        super().error(message)

    def _command(self) -> argparse.ArgumentParser:
        """The parser of the deepest (sub)command the arguments name."""
        parser: argparse.ArgumentParser = self
        for arg in self._argv:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if subs and arg in subs[0].choices:
                parser = subs[0].choices[arg]
        return parser

    def _near_options(self) -> str:
        """``; did you mean '--user' for '--usr'?`` for the first unknown option of the
        arguments that is near one of this (sub)command's own options; empty when none
        is."""
        known = [o for a in self._actions for o in a.option_strings]
        for arg in self._argv:
            given = arg.split("=", 1)[0]
            if (given.startswith("--") and given not in known
                    and (near := difflib.get_close_matches(given, known, n=1, cutoff=0.6))):
                return f"; did you mean '{near[0]}' for '{given}'?"
        return ""


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)")
"""argparse's message for a value outside an argument's choices (quoted choices)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = _Parser(
        prog="memstrata",
        description="Layered long-term memory for DSPy agents, in one SQLite file. "
        "Runs offline on the embedded embedding model; nothing is sent anywhere.",
        epilog=EXIT_CODES,
    )
    parser.add_argument("--version", action="version", version=f"memstrata {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("load", help="load a LoCoMo-format JSON file into a store",
                       description=cmd_load.__doc__)
    p.add_argument("file", help="LoCoMo-format JSON (a list of conversations)")
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("--no-embed", action="store_true", help="skip embeddings (lexical only)")
    add_embedder_arg(p)
    add_durability_arg(p)
    p.set_defaults(func=cmd_load)

    p = sub.add_parser("ingest", help="load conversations and extract facts, QA pairs, "
                       "entities and persona with a model", description=cmd_ingest.__doc__)
    _add_data_arg(p)
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("--tenant", help="one tenant for all conversations (default: each its own)")
    p.add_argument("--cache", help="extraction cache (default <db>.extractions.jsonl; "
                   "./extractions.jsonl for a postgresql:// --db)")
    p.add_argument("--no-embed", action="store_true", help="skip embeddings (lexical only)")
    p.add_argument("--json", action="store_true", help="one JSON report per conversation")
    p.add_argument("--program", metavar="FILE", help="a compiled extractor program file to "
                   "extract with (its ingest runs and cache keys name the file and its hash)")
    add_ingest_args(p)
    add_model_args(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("search", help="hybrid search over one tenant's memory",
                       description=cmd_search.__doc__)
    p.add_argument("query", type=query_arg, help="what to look for, in words")
    p.add_argument("--user", required=True, help="tenant id (LoCoMo: the sample_id)")
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("-k", type=at_least(1), default=10, help="number of hits (default 10)")
    p.add_argument("--min-score", type=_unit_interval, default=DEFAULT_MIN_SCORE,
                   help="leave out hits scoring under this, from 0 to 1 (default "
                   f"{DEFAULT_MIN_SCORE}: a query nothing answers returns nothing)")
    p.add_argument("--kind", action="append", help="only this kind ('turn', 'fact', ...)")
    p.add_argument("--speaker", help="only what this speaker said")
    p.add_argument("--conversation", help="only this conversation")
    p.add_argument("--since", type=when_arg("start"), help="event time from: an ISO date, or "
                   "a phrase such as yesterday or 'last week' (from its start)")
    p.add_argument("--until", type=when_arg("end"), help="event time until: an ISO date, or "
                   "a phrase such as yesterday or 'last week' (to its end)")
    p.add_argument("--no-dense", action="store_true", help="skip the embedding channel")
    p.add_argument("--weights", help='fusion knobs as JSON, e.g. \'{"dense": 0.5}\'')
    add_embedder_arg(p)
    p.set_defaults(func=cmd_search)

    add_memory_parsers(sub, DEFAULT_DB)
    add_layer_parsers(sub, DEFAULT_DB)

    p = sub.add_parser("migrate", help="bring a store's schema up to date (file or URL)",
                       description=cmd_migrate.__doc__)
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when migrations are pending")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("stats", help="row counts of a store", description=cmd_stats.__doc__)
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("--user", help="one tenant only")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("rlm", help="one RLM (or ReAct, scratchpad) session over a user's "
                       "memories, steps shown", description=cmd_rlm.__doc__)
    p.add_argument("question")
    p.add_argument("--user", required=True, help="the tenant whose memories the tools see")
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("--blob", action="append", help="a blob key to hand over as a BlobRef "
                   "(repeatable; default: all of the user's blobs, at most 5)")
    p.add_argument("--json", action="store_true", help="print the run as JSON")
    p.add_argument("--judge", help="a model that grades the run (success and a rationale), "
                   "recorded with it; same forms as --lm")
    p.add_argument("--judge-api-base", help="server address for --judge")
    add_model_args(p)
    _add_executor_args(p, 2000)
    p.set_defaults(func=cmd_rlm)

    p = sub.add_parser("chat", help="chat through the VoE loop (remembers across runs)",
                       description=cmd_chat.__doc__)
    p.add_argument("--user", required=True, help="who is chatting (a tenant of the store)")
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("--show-internals", action="store_true", help="print, per turn, the "
                   "cached prediction, the VoE verdict and score, the stored fact, the "
                   "needed-info keywords and the retrieved facts")
    p.add_argument("--max-facts", type=at_least(1), default=200, help="facts kept per user (200)")
    p.add_argument("--threshold", type=float, default=60.0,
                   help="fuzzy score below which a prediction is violated (60)")
    p.add_argument("--top-k", type=at_least(1), default=10,
                   help="facts shown to the responder (10)")
    p.add_argument("--program", metavar="FILE", action="append",
                   help="a compiled voe.predictor or voe.responder program file to chat with "
                   "(repeatable: one of each); the banner names each file and its hash")
    add_model_args(p, prefix_cache="ram")  # its two programs alternate
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("facts", help="list, search or delete a user's VoE facts",
                       description=cmd_facts.__doc__)
    p.add_argument("--user", required=True)
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("--search", help="only facts matching this (fuzzy, text and tags)")
    p.add_argument("--delete", nargs="+", metavar="ID", help="delete these facts")
    p.add_argument("-n", "--limit", type=at_least(1), default=50, help="at most N (default 50)")
    p.set_defaults(func=cmd_facts)

    p = sub.add_parser("sandbox", help="install or check the offline RLM sandbox",
                       description=cmd_sandbox.__doc__)
    p.add_argument("action", choices=("install", "check"))
    p.add_argument("--from", dest="from_tarball", metavar="TGZ",
                   help="install from a pyodide-VERSION.tgz instead of the npm registry")
    p.add_argument("--force", action="store_true", help="reinstall even if present")
    p.set_defaults(func=cmd_sandbox)

    p = sub.add_parser("runs", help="recorded runs: list, show, export as JSONL, prune",
                       description=cmd_runs.__doc__)
    p.add_argument("action", choices=("list", "show", "export", "prune"))
    p.add_argument("run_id", nargs="?", help="the run to show")
    p.add_argument("--user", help="one tenant only (required by show and prune)")
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("--out", default="runs.jsonl",
                   help="export file (default runs.jsonl; '-': stdout)")
    p.add_argument("-n", "--limit", type=at_least(1), default=50, help="newest N runs (default 50)")
    prune = p.add_argument_group(
        "prune", "delete runs matching every rule given; running runs and runs that a "
        "current item cites as evidence are kept")
    prune.add_argument("--before", type=when_arg("start"), metavar="DATE",
                       help="runs started before this ISO date or datetime (UTC if no zone), "
                       "or the start of a phrase's span ('last month')")
    prune.add_argument("--older-than", type=_days, metavar="DAYS",
                       help="runs started more than DAYS days ago")
    prune.add_argument("--keep", type=at_least(0), metavar="N",
                       help="spare this tenant's N newest runs")
    prune.add_argument("--drop-evidence", action="store_true",
                       help="prune runs cited as evidence too (provenance then dangles)")
    prune.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    prune.add_argument("--vacuum", action="store_true",
                       help="then VACUUM the file so it shrinks (rewrites the whole file)")
    p.set_defaults(func=cmd_runs)

    add_mcp_parser(sub, DEFAULT_DB)
    add_worker_parser(sub)
    add_jobs_parser(sub, DEFAULT_DB)
    add_server_parsers(sub, DEFAULT_DB)
    add_ui_parser(sub)
    add_demo_parser(sub)

    p = sub.add_parser("persona", help="what memory holds about one person, with citations",
                       description=cmd_persona.__doc__)
    p.add_argument("person", help="the person's name as the conversation spells it")
    p.add_argument("--user", required=True, help="tenant id")
    p.add_argument("--conversation", required=True, help="the conversation that knows them")
    p.add_argument("--db", default=DEFAULT_DB,
                   help=f"store file or postgresql:// URL (default {DEFAULT_DB})")
    p.add_argument("--json", action="store_true", help="JSON rows instead of lines")
    p.set_defaults(func=cmd_persona)

    p = sub.add_parser("reconcile", help="one name in several conversations: one person "
                       "or several? (MERGE/SEPARATE, with reasons)",
                       description=cmd_reconcile.__doc__)
    _add_data_arg(p)
    add_reconcile_args(p)
    add_model_args(p)
    p.set_defaults(func=cmd_reconcile)

    add_experiment_parser(sub)
    add_models_parser(sub)
    add_doctor_parser(sub, _SHARED / "locomo_dev.json")

    bench = sub.add_parser("bench", help="benchmarks (retrieval, locomo, scale, leakage, tools)",
                           description="Benchmarks; each writes JSON and a PNG chart to --out.")
    bsub = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")

    p = bsub.add_parser("retrieval", help="evidence recall on several corpora, memstrata "
                        "beside BM25 and its own channels alone",
                        description=(cmd_bench_retrieval.__doc__ or "")
                        + " No LLM is used unless --rerank-lm is given.")
    p.add_argument("--data", action="append", metavar="FILE",
                   help="a corpus: LoCoMo, LongMemEval or labelled-messages JSON (told apart "
                   "by shape); repeat for several (default: ../shared/data/locomo/"
                   "locomo_dev.json and the shipped assistant corpus)")
    p.add_argument("--audit", help="audit corrections JSON for the LoCoMo files (default: "
                   "<data>_audit_errors.json beside each, if present)")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    p.add_argument("--db", help="build the store in this file instead of a temporary one; a "
                   "postgresql:// URL (an empty database) also builds it there and scores "
                   "memstrata@postgres beside the SQLite systems in the same run")
    p.add_argument("--limit", type=int, help="first N questions per conversation (quick runs)")
    p.add_argument("--no-dense", action="store_true",
                   help="no embedding model: skip the dense channel and the 'dense' system")
    add_embedder_arg(p, store=False)
    p.add_argument("--weights", help="memstrata fusion knobs as JSON (see SearchWeights)")
    p.add_argument("--cv", action="store_true",
                   help="also cross-validate memstrata's knobs on each corpus: each "
                   "conversation scored with knobs chosen on the others of its corpus "
                   "(leave-one-conversation-out); needs two conversations or more per corpus")
    p.add_argument("--encoders", metavar="NAMES",
                   help="more embedders to measure in the same run, comma-separated names "
                   "or model2vec folders (e.g. mpnet,minilm): each adds dense:<model> and "
                   "memstrata:<model> systems")
    p.add_argument("--rerank-lm", metavar="MODEL",
                   help="add memstrata+rerank: memstrata's top hits reordered by one call of "
                   "this LLM per question (e.g. local/qwen2.5-coder-1.5b), its cost reported; "
                   "slow on a CPU: combine with --limit")
    p.add_argument("--rerank-depth", type=int, default=20, metavar="N",
                   help="hits the reranker sees per question (default 20)")
    p.add_argument("--cv-rounds", type=int, default=2, metavar="N",
                   help="coordinate-ascent rounds of each fold's knob search (default 2)")
    p.add_argument("--ablate", action="store_true",
                   help="also switch each channel and prior off alone on each corpus: its "
                   "recall cost with a paired bootstrap interval, and leave-one-conversation-"
                   "out (an ablation table in retrieval.json and retrieval.md)")
    p.set_defaults(func=cmd_bench_retrieval)

    p = bsub.add_parser("facts", help="extraction at ingest; evidence recall through facts "
                        "vs raw turns", description=cmd_bench_facts.__doc__)
    _add_data_arg(p)
    _add_audit_arg(p)
    p.add_argument("--out", default="out", help="output folder (default ./out); the store "
                   "and the extraction cache stay there")
    p.add_argument("--no-dense", action="store_true", help="skip the dense channel")
    p.add_argument("--weights", help="memstrata fusion knobs as JSON (see SearchWeights)")
    add_ingest_args(p)
    add_model_args(p)
    p.set_defaults(func=cmd_bench_facts)

    p = bsub.add_parser("locomo", help="LoCoMo question answering, four systems, one model",
                        description=cmd_bench_locomo.__doc__)
    _add_data_arg(p)
    _add_audit_arg(p)
    p.add_argument("--lm", default=EMBEDDED, help=lm_help("the answering model"))
    p.add_argument("--api-base", help="server address for --lm (Ollama, vLLM, llama.cpp)")
    p.add_argument("--judge", help="model for LLM-as-judge accuracy (same forms as --lm); "
                   "without it the judge columns are null")
    p.add_argument("--judge-api-base", help="server address for --judge")
    p.add_argument("--limit", type=int, help="at most N questions, spread evenly over "
                   "conversations and categories (quick runs)")
    p.add_argument("--conversations", help="comma-separated sample ids (default: all)")
    p.add_argument("--categories", help="comma-separated categories 1-5")
    p.add_argument("--systems", help="comma-separated subset of memstrata, naive_rag, "
                   "no_memory, full_context (default: all four), and memory_routed "
                   "(Memory.answer with routing; only when named)")
    p.add_argument("--budget", type=int,
                   help="memory tokens packed per question (default 600; 200 for "
                   "local/smollm2, which reads best from a few lines)")
    p.add_argument("--n-ctx", type=int, default=8192,
                   help="context window of a local model in tokens (default 8192)")
    p.add_argument("--threads", type=int, help=THREADS_HELP)
    add_prefix_cache_arg(p)
    p.add_argument("--out", default="out", help="output folder and answer cache (default ./out)")
    p.add_argument("--no-dense", action="store_true", help="memstrata without embeddings")
    p.add_argument("--weights", help="memstrata fusion knobs as JSON (see SearchWeights)")
    p.add_argument("--facts", action="store_true",
                   help="extract facts with --lm before answering (memstrata retrieves them "
                   "beside the turns); one call per chunk of >= 10 turns, cached in --out")
    p.add_argument("--program", metavar="FILE",
                   help="a compiled qa or answerer program (memstrata compile qa|answerer): "
                   "the memstrata system answers with its QA (the baselines keep the "
                   "hand-written QA); locomo.json and every memstrata run record name the file "
                   "and its SHA-256")
    p.set_defaults(func=cmd_bench_locomo)
    add_verify_parser(bsub)
    add_serve_bench_parser(bsub)

    p = bsub.add_parser("scale", help="ingest rate and search latency at 10k-1M items",
                        description=cmd_bench_scale.__doc__)
    p.add_argument("--sizes", default="10000,100000", help="comma-separated item counts")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    p.add_argument("--queries", type=int, default=200, help="queries per size (default 200)")
    p.add_argument("--bm25-sample", type=int, default=100_000,
                   help="rank-bm25 runs on at most this many items (default 100000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--db", metavar="URL|PATH",
                   help="a postgresql:// URL: also measure PostgreSQL with concurrent clients "
                   "(SQLite stays the baseline); a path: the SQLite store goes to that file "
                   "(kept) instead of a temporary one")
    p.add_argument("--writers", type=int, metavar="N",
                   help="writer processes on PostgreSQL (default 8 with a URL; SQLite: 1)")
    p.add_argument("--readers", type=int, metavar="M",
                   help="concurrent reader processes on PostgreSQL (default 4)")
    p.add_argument("--fresh", action="store_true",
                   help="drop what an earlier run left (memstrata_scale_* schemas at the URL, "
                   "or the file at the path); without it they are an error")
    p.add_argument("--own-tenants", action=argparse.BooleanOptionalAction, default=True,
                   help="with a URL, also time the ingest with one tenant per writer "
                   "(default: on)")
    p.set_defaults(func=cmd_bench_scale)

    p = bsub.add_parser("leakage", help="E7: naive vs handle tools, same model and budgets",
                        description=cmd_bench_leakage.__doc__)
    _add_data_arg(p)
    p.add_argument("--limit", type=int, default=10,
                   help="questions, spread over conversations and categories (default 10)")
    p.add_argument("--conversations", help="comma-separated sample ids")
    p.add_argument("--categories", help="comma-separated categories (default 1,2,3,4)")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    add_model_args(p)
    p.epilog = ("--lm policy/search-read runs a scripted tool-using policy instead of a "
                "model: the same code in both arms, so the tool contract alone differs.")
    _add_executor_args(p, 10_000)
    p.set_defaults(func=cmd_bench_leakage)

    p = bsub.add_parser("voe", help="A/B test of the VoE loop against a no-facts baseline",
                        description=cmd_bench_voe.__doc__)
    _add_data_arg(p)
    p.add_argument("--limit", type=int, default=60,
                   help="sessions per arm, spread over conversations (default 60)")
    p.add_argument("--max-turns", type=int, help="score at most N user turns per session")
    p.add_argument("--conversations", help="comma-separated sample ids")
    p.add_argument("--no-dense", action="store_true", help="skip the embedding cosine")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    add_model_args(p, prefix_cache="ram")  # its two programs alternate
    p.set_defaults(func=cmd_bench_voe)

    p = bsub.add_parser("tools", help="latency of every handle tool at N items",
                        description=cmd_bench_tools.__doc__)
    p.add_argument("--items", type=int, default=100_000, help="items in the store (default 100k)")
    p.add_argument("--calls", type=int, default=200, help="calls per tool (default 200)")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_bench_tools)

    p = bsub.add_parser("long", help="ingest rate and search latency on long messages",
                        description=cmd_bench_long.__doc__)
    p.add_argument("--messages", type=int, default=40_000,
                   help="messages in the tenant (default 40000)")
    p.add_argument("--queries", type=int, default=200, help="timed searches (default 200)")
    p.add_argument("--batch", type=int, default=20, help="messages a batched add (default 20)")
    p.add_argument("--singles", type=int, default=200,
                   help="messages added one a call at full size (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--db", help="build the store at this new path and keep it")
    p.add_argument("--no-bm25", action="store_true", help="skip the rank-bm25 baseline")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    p.set_defaults(func=cmd_bench_long)

    p = bsub.add_parser("reliability", help="crash, concurrency, fault, fuzzing, injection, "
                        "sandbox and secret scenarios", description=cmd_bench_reliability.__doc__)
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    p.add_argument("--quick", action="store_true",
                   help="the fast slice (a few kills, a few hundred fuzz cases, every kind once)")
    p.add_argument("--only", metavar="NAMES",
                   help="comma-separated scenarios or modules (crash, concurrency, faults, "
                   "fuzz, poisoning, sandbox_escape, deleted, parity, imports, http_fuzz, "
                   "worker_kills, secrets)")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    p.add_argument("--work", help="write the scenarios' stores here and keep them "
                   "(default: a temporary folder, removed after)")
    p.set_defaults(func=cmd_bench_reliability)
    add_background_bench_parser(bsub)
    add_cognitive_parsers(sub, bsub)
    add_compile_parsers(sub, bsub)
    return parser


class CommandExit(SystemExit):
    """A command's refusal on its way out of :func:`main`: ``code`` is the exit status
    (1 or 2, see :data:`EXIT_CODES`), ``str()`` the message (already printed)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(code)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _show_warning(fallback: Callable[..., None], message: Warning | str,
                  category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """memstrata's own warnings as one line on stderr (``memstrata: warning: ...``), the
    rest as ``fallback`` (Python's) shows them."""
    if issubclass(category, MemstrataWarning):
        print(f"memstrata: warning: {one_line(Warning(str(message)))}", file=sys.stderr)
    else:
        fallback(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``memstrata`` console command (exit codes: :data:`EXIT_CODES`).

    Every failure a user can cause or meet ends here as one line on stderr and exit code
    2: bad input (``ValueError``: the library's refusal of an argument, text that is not
    valid Unicode; ``OverflowError``: a number too large for SQLite), files that cannot
    be read or written (``OSError``), a store that is full, read-only or corrupt
    (``StoreError``, any ``sqlite3.Error``), a model that is not set up
    (``RuntimeError``), and a command's own refusal (``SystemExit`` with a message: it is
    printed, and re-raised as :class:`CommandExit` with code 2). Something asked for that
    is not there (``NotFound``: no store, no such memory) exits 1 the same way. Anything
    else is a bug and keeps its traceback. A closed stdout (a pipe into ``head``) ends
    the command quietly with 141, the shell's code for a SIGPIPE.
    """
    import sqlite3

    args = build_parser().parse_args(argv)
    from memstrata.bench.locomo import LoCoMoError

    try:
        if isinstance(getattr(args, "user", None), str):
            # Memory's rule for a user_id, before a command opens (and so perhaps
            # creates) a store: a blank --user made an empty store, then was refused.
            from memstrata.api import _check_id

            _check_id("--user", args.user)
        with warnings.catch_warnings():
            warnings.showwarning = partial(_show_warning, warnings.showwarning)
            return int(args.func(args) or 0)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        print(one_line(SystemExit(exc.code)), file=sys.stderr)
        raise CommandExit(exc.code, 1 if isinstance(exc, NotFound) else 2) from None
    except BrokenPipeError:
        # The reader of stdout closed it (`memstrata export - | head`): stop quietly, as
        # Unix tools do, and keep the interpreter's final flush from failing again.
        with contextlib.suppress(OSError, ValueError):  # ValueError: no file descriptor
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (LoCoMoError, ValueError, OverflowError, OSError, RuntimeError, sqlite3.Error
            ) as exc:
        print(f"memstrata: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("memstrata: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
