"""``memstrata chat`` (the VoE loop, interactive) and ``memstrata facts`` (its fact store)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from memstrata.memory.store.opener import describe, open_store, store_missing

PROMPT = "you> "


def _internals(result, out: TextIO) -> None:
    """The loop's state for one turn, for people."""
    score = "-" if result.score is None else f"{result.score:.0f}"
    verdict = "no prediction yet" if result.cached_prediction is None else (
        "VIOLATION" if result.violation else "as expected")
    lines = [f"  cached prediction: {result.cached_prediction or '-'}",
             f"  VoE: {verdict} (score {score})",
             f"  stored fact: {result.fact or '-'}" + (f" {result.fact_tags}" if result.fact
                                                       else ""),
             f"  needed info: {', '.join(result.needed_info) or '-'}",
             "  retrieved: " + ("; ".join(f"{r['text']} ({r['score']})"
                                           for r in result.retrieved) or "-"),
             f"  next prediction: {result.next_prediction or '-'}",
             f"  local check + retrieval: {result.local_ms} ms · LLM calls: {result.llm_calls}"]
    print("\n".join(lines), file=out)


def _settings(args: argparse.Namespace):
    from memstrata.agent_commands import from_flags
    from memstrata.programs.voe import VoESettings

    return from_flags(VoESettings, {"max-facts": ("max_facts", args.max_facts),
                                    "threshold": ("fuzzy_threshold", args.threshold),
                                    "top-k": ("top_k", args.top_k)})


def _programs(paths: list[str] | None) -> dict[str, tuple[Any, str]]:
    """The compiled VoE programs of ``--program`` (before any model loads), by name, each
    with a line naming its file and hash; one file a program."""
    from memstrata.compile_commands import program_file
    from memstrata.programs.compiled import load_program, program_ref

    out: dict[str, tuple[Any, str]] = {}
    for path in paths or []:
        program_file(path, ("voe.predictor", "voe.responder"), "chat")
        ref = program_ref(path)
        if ref.name in out:
            raise SystemExit(f"memstrata: --program: two {ref.name} files")
        out[ref.name] = (load_program(ref.name, path), f"{ref.path} (sha256 {ref.sha256[:12]})")
    return out


def cmd_chat(args: argparse.Namespace, stdin=None, out: TextIO | None = None) -> int:
    """Chat with the configured model (embedded by default) through the violation-of-
    expectation loop: it predicts your next message, learns a fact when you surprise it,
    and brings the relevant facts back. History and facts persist in --db across runs.
    Type /quit (or end the input) to leave."""
    from memstrata.agent_commands import model_from_args
    from memstrata.programs import ProgramParseError
    from memstrata.programs.voe import VoELoop, check_message, run_turn

    stdin = stdin if stdin is not None else sys.stdin.buffer
    out = out or sys.stdout
    if not args.user.strip():
        raise SystemExit("memstrata: --user must not be empty")
    settings = _settings(args)
    programs = _programs(getattr(args, "program", None))
    handle = model_from_args(args)
    with open_store(args.db) as store:
        loop = VoELoop(store, args.user, settings,
                       predictor=programs.get("voe.predictor", (None, ""))[0],
                       responder=programs.get("voe.responder", (None, ""))[0])
        print(f"memstrata chat · {args.user} on {handle.name} · {len(loop.messages)} earlier "
              "messages · /quit to leave", file=out)
        for name, (_, named) in programs.items():
            print(f"  {name}: {named}", file=out)
        while True:
            print(PROMPT, end="", file=out, flush=True)
            raw = stdin.readline()
            if not raw:
                print("", file=out)
                return 0
            try:
                line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
            except UnicodeDecodeError as exc:
                print(f"memstrata: that message is not valid UTF-8 (byte {exc.start}); "
                      "nothing was stored, please type it again", file=out)
                continue
            if line.strip() in ("/quit", "/exit"):
                return 0
            try:
                check_message(line)
            except ValueError as exc:
                print(f"memstrata: {exc}; nothing was stored", file=out)
                continue
            try:
                result = run_turn(loop, handle, line)
            except ProgramParseError as exc:
                print(f"memstrata: the model's answer could not be read ({exc.program}); "
                      "your message is kept, try again", file=out)
                continue
            print(f"assistant> {result.reply}", file=out, flush=True)
            if args.show_internals:
                _internals(result, out)


def cmd_facts(args: argparse.Namespace) -> int:
    """List, search or delete what the VoE loop has learned about a user."""
    from memstrata.memory.voe_facts import VoEFacts

    if store_missing(args.db):
        raise SystemExit(f"memstrata: no store at {describe(args.db)}")
    with open_store(args.db) as store:
        facts = VoEFacts(store)
        if args.delete:
            for fact_id in args.delete:
                ok = facts.delete(args.user, fact_id)
                print(json.dumps({"deleted": fact_id} if ok else
                                 {"error": f"no fact {fact_id!r} for user {args.user!r}"}))
            return 0
        rows = facts.facts(args.user)
        if args.search:
            hits = facts.search(rows, [args.search], k=args.limit, min_score=50)
            shown = [(h.fact, h.score) for h in hits]
        else:
            shown = [(f, None) for f in reversed(rows)][: args.limit]
        for fact, score in shown:
            row = {"id": fact.id, "text": fact.text, "tags": fact.tags,
                   "created_at": str(fact.recorded_at), "turn": fact.evidence[:1]}
            print(json.dumps(row | ({"score": score} if score is not None else {})))
    return 0
