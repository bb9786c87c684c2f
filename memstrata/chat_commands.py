"""``memstrata chat`` (the VoE loop, interactive) and ``memstrata facts`` (its fact store)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from memstrata.cli_support import NotFound, no_store
from memstrata.memory.store.opener import describe, open_store, store_missing

if TYPE_CHECKING:
    from collections.abc import Sequence

    from memstrata.memory.models import FactItem

PROMPT = "you> "


def _internals(turn: ChatTurn, out: TextIO) -> None:
    """The loop's state for one turn, for people."""
    checked = turn.expectation.checked
    score = "-" if checked is None else f"{checked.score:.0f}"
    verdict = "no prediction yet" if checked is None else (
        "VIOLATION" if checked.violation else "as expected")
    exp = turn.expectation
    lines = [f"  cached prediction: {checked.expected if checked else '-'}",
             f"  VoE: {verdict} (score {score})",
             f"  stored fact: {exp.fact or '-'}" + (f" {exp.fact_tags}" if exp.fact else ""),
             f"  needed info: {', '.join(exp.needed_info) or '-'}",
             "  retrieved: " + ("; ".join(turn.facts) or "-"),
             f"  next prediction: {exp.prediction or '-'}",
             f"  local check + retrieval: {turn.local_ms} ms · LLM calls: {turn.llm_calls}"]
    print("\n".join(lines), file=out)


class ChatTurn:
    """One turn of ``memstrata chat``: the reply, the expectation step, the facts shown."""

    def __init__(self, reply: str, expectation: Any, facts: list[str], local_ms: float,
                 llm_calls: int) -> None:
        self.reply, self.expectation, self.facts = reply, expectation, facts
        self.local_ms, self.llm_calls = local_ms, llm_calls


CHAT = "chat"
"""The conversation ``memstrata chat`` keeps its messages in."""


def chat_turn(memory: Any, user: str, text: str, *, settings: Any, predictor: Any = None,
              responder: Any = None) -> ChatTurn:
    """One user message through the verbs: ``add`` it, ``expect`` (the check against the
    pending expectation, a surprise distilled, the next move predicted: call 1), the VoE
    facts from ``context``, the reply (call 2), and ``add`` the reply."""
    import time

    import dspy

    from memstrata.memory.models import utcnow
    from memstrata.packers.memory_context import ContextSettings
    from memstrata.programs.voe import NO_FACTS, VoEResponder, history_text

    handle = memory.lm
    mark = handle.meter.mark()
    memory.add({"role": "user", "content": text}, user_id=user, conversation_id=CHAT,
               timestamp=utcnow(), infer=False)
    expectation = memory.expect(user, conversation_id=CHAT, settings=settings,
                                predictor=predictor)
    started = time.perf_counter()
    ctx = memory.context(text, user_id=user, layers=["voe"], conversation_id=CHAT,
                         settings=ContextSettings(voe_k=settings.top_k,
                                                  voe_min_score=settings.min_score))
    facts = [row["text"] for i in ctx.ids if i != expectation.id
             and (row := memory.get(i, user_id=user)) is not None]
    local = time.perf_counter() - started
    recent = memory.store.turns(user, conversation_id=CHAT, newest=True,
                                limit=settings.history_turns)
    history = history_text([(t.speaker, t.text) for t in reversed(recent)],
                           settings.history_turns)
    with dspy.context(lm=handle.lm):
        answer = (responder or VoEResponder())(
            history=history, facts="\n".join(f"- {f}" for f in facts) or NO_FACTS)
    memory.add({"role": "assistant", "content": answer.reply}, user_id=user,
               conversation_id=CHAT, timestamp=utcnow(), infer=False)
    return ChatTurn(answer.reply, expectation, facts, round(local * 1000, 3),
                    handle.meter.since(mark).calls)


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
    Each turn runs on Memory's verbs (add, expect, context: two LLM calls a turn, one to
    expect and one to reply). Type /quit (or end the input) to leave."""
    from memstrata import Memory
    from memstrata.agent_commands import model_from_args
    from memstrata.programs import ProgramParseError
    from memstrata.programs.voe import check_message

    stdin = stdin if stdin is not None else sys.stdin.buffer
    out = out or sys.stdout
    if not args.user.strip():
        raise SystemExit("memstrata: --user must not be empty")
    settings = _settings(args)
    programs = _programs(getattr(args, "program", None))
    handle = model_from_args(args)
    predictor = programs.get("voe.predictor", (None, ""))[0]
    responder = programs.get("voe.responder", (None, ""))[0]
    with Memory.open(args.db, lm=handle) as memory:
        earlier = len(memory.store.turns(args.user, conversation_id=CHAT))
        print(f"memstrata chat · {args.user} on {handle.name} · {earlier} earlier "
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
                text = check_message(line)
            except ValueError as exc:
                print(f"memstrata: {exc}; nothing was stored", file=out)
                continue
            try:
                turn = chat_turn(memory, args.user, text, settings=settings,
                                 predictor=predictor, responder=responder)
            except ProgramParseError as exc:
                print(f"memstrata: the model's answer could not be read ({exc.program}); "
                      "your message is kept, try again", file=out)
                continue
            print(f"assistant> {turn.reply}", file=out, flush=True)
            if args.show_internals:
                _internals(turn, out)


def cmd_facts(args: argparse.Namespace) -> int:
    """List, search or delete what the VoE loop has learned about a user. A user with no
    facts is said on stderr; --delete prints each fact deleted and names each id that is
    not one of the user's facts on stderr, exiting 1 when any was not."""
    from memstrata.memory.voe_facts import VoEFacts

    if store_missing(args.db):
        raise no_store(args.db)
    with open_store(args.db) as store:
        facts = VoEFacts(store)
        if args.delete:
            missing = []
            for fact_id in args.delete:
                if facts.delete(args.user, fact_id):
                    print(json.dumps({"deleted": fact_id}))
                else:
                    missing.append(fact_id)
            if missing:  # the others are deleted: say which were not there, then exit 1
                raise NotFound(f"memstrata: no fact {', '.join(map(repr, missing))} for "
                               f"user {args.user!r}")
            return 0
        rows = facts.facts(args.user)
        if not rows:
            print(f"memstrata: no facts learned for user {args.user!r} in {describe(args.db)} "
                  "(the VoE loop of 'memstrata chat' learns them)", file=sys.stderr)
        shown: Sequence[tuple[FactItem, float | None]]
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
