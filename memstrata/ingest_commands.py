"""``memstrata ingest`` and ``memstrata bench facts``: extraction at ingest, measured."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memstrata.agent_commands import from_flags, model_from_args
from memstrata.cli_support import no_store
from memstrata.memory.store.opener import is_url, open_store, store_missing


def _ingest_settings(args: argparse.Namespace):
    """``IngestSettings`` from the flags; a bad value exits naming its flag."""
    from memstrata.memory.chunking import ChunkSettings
    from memstrata.programs.ingest import IngestSettings

    chunking = from_flags(ChunkSettings, {
        "strategy": ("strategy", args.strategy), "min-turns": ("min_turns", args.min_turns),
        "max-turns": ("max_turns", args.max_turns)})
    if chunking.max_turns < chunking.min_turns:
        raise SystemExit("memstrata: --max-turns must be at least --min-turns")
    return from_flags(IngestSettings, {"extract-tokens": ("max_tokens", args.extract_tokens),
                                       "chunking": ("chunking", chunking)})


def add_ingest_args(p: argparse.ArgumentParser) -> None:
    """The chunking and extraction flags shared by ``ingest`` and ``bench facts``."""
    p.add_argument("--strategy", default="topic", choices=("turns", "gap", "topic"),
                   help="where chunks end: equal splits, session changes and silences, or "
                   "those plus topic shifts (default)")
    p.add_argument("--min-turns", type=int, default=10,
                   help="fewest turns per chunk = per LLM call (default 10: the call cap)")
    p.add_argument("--max-turns", type=int, default=19, help="most turns per chunk (19)")
    p.add_argument("--extract-tokens", type=int, default=1024,
                   help="the extractor's output budget per call (default 1024)")
    p.add_argument("--conversations", help="comma-separated sample ids (default: all)")


def _conversations(args: argparse.Namespace) -> set[str] | None:
    ids = {c.strip() for c in (args.conversations or "").split(",") if c.strip()}
    return ids or None


def cmd_ingest(args: argparse.Namespace) -> int:
    """Load LoCoMo-format conversations and extract their facts, QA pairs, entities and
    persona with the model (one call per chunk of >= --min-turns turns; raw turns are kept
    beside them). Extractions are cached next to the store, so a re-run makes no call it
    made before; chunks that failed to parse are retried and reported (exit 1)."""
    from tqdm import tqdm

    from memstrata.bench.locomo import load_locomo, read_subset
    from memstrata.cli_support import opener_embedder
    from memstrata.compile_commands import program_file
    from memstrata.programs.ingest import IngestError, ingest_conversation, weak_model_warning

    settings = _ingest_settings(args)
    try:
        convs = read_subset(args.data, _conversations(args))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    program = program_file(args.program, ("extractor",), "ingest")
    handle = model_from_args(args)
    embedder = opener_embedder(not args.no_embed)
    # Beside a store file; for a database, in the working folder (never a URL as a name).
    cache = Path(args.cache or ("extractions.jsonl" if is_url(args.db)
                                else f"{args.db}.extractions.jsonl"))
    reports = []
    with open_store(args.db, embedder=embedder) as store:
        embedder = store.embedder
        load_locomo(store, convs, embedder=embedder, tenant=args.tenant)
        with tqdm(total=sum(c.turn_count for c in convs), unit="turn", desc="extract") as bar:
            for conv in convs:
                try:
                    reports.append(ingest_conversation(
                        store, args.tenant or conv.sample_id, conv.sample_id, handle,
                        settings=settings, cache_path=cache, embedder=embedder,
                        progress=bar.update, program=program))
                except IngestError as exc:
                    raise SystemExit(f"memstrata: {exc}") from None
    for r in reports:
        line = r.model_dump(exclude={"hierarchy"}) if args.json else (
            f"{r.conversation_id}: {r.turns} turns, {r.chunks} chunks, {r.llm_calls} LLM calls "
            f"({r.cached_chunks} cached), {r.seconds:.0f} s; kept {r.kept}, rejected "
            f"{r.rejected}, superseded {r.hierarchy.superseded}, persona {r.persona}")
        print(json.dumps(line) if args.json else line)
        for failure in r.failed_chunks:
            print(f"  failed chunk {failure}")
    warning = weak_model_warning(sum(r.chunks for r in reports),
                                 sum(r.empty_chunks for r in reports))
    if warning:
        print(f"memstrata: warning: {warning}", file=sys.stderr)
    failed = sum(len(r.failed_chunks) for r in reports)
    if failed:
        print(f"memstrata: {failed} chunks failed to parse; run again to retry them "
              "(the rest is cached)")
    return 1 if failed else 0


def cmd_bench_facts(args: argparse.Namespace) -> int:
    """Extraction at ingest on the dev split, then evidence recall@5/10/25 through facts
    against the raw-turn hybrid in the same run, with the ingest's calls and time."""
    from memstrata.bench.facts import facts_table, run_facts_bench
    from memstrata.cli_support import (
        audit_path,
        embedder_from_flag,
        print_report,
        weights_from_json,
    )

    settings = _ingest_settings(args)
    handle = model_from_args(args)
    doc = run_facts_bench(args.data, handle, args.out, audit=audit_path(args),
                          embedder=embedder_from_flag(not args.no_dense),
                          weights=weights_from_json(args.weights),
                          settings=settings, conversations=_conversations(args))
    out = Path(args.out)
    paths = [out / "facts.json", out / "facts.md"]
    paths[0].write_text(json.dumps(doc, indent=2))
    paths[1].write_text(facts_table(doc) + "\n")
    return print_report(facts_table(doc), paths)


def cmd_persona(args: argparse.Namespace) -> int:
    """What memory holds about one person, as a conversation knows them (and every
    conversation the reconciler merged them with): one line per attribute, with the turns
    it cites. Built at ingest from the person's current facts (superseded ones left out)."""
    from memstrata.memory.dates import render_day
    from memstrata.memory.persona import persona

    if store_missing(args.db):
        raise no_store(args.db)
    with open_store(args.db) as store:
        rows = persona(store, args.user, args.person, args.conversation)
    if args.json:
        print(json.dumps([r.model_dump(mode="json", include={
            "person", "attribute", "value", "evidence", "conversation_id", "confidence",
            "event_time"}) for r in rows], indent=2))
        return 0
    if not rows:
        print(f"no persona rows for {args.person} in {args.conversation} (run memstrata ingest "
              "with a model that extracts facts)")
    for r in rows:
        when = f" · {render_day(r.event_time)}" if r.event_time else ""
        print(f"{r.attribute}: {r.value}  [{r.conversation_id}: {', '.join(r.evidence)}{when}]")
    return 0
