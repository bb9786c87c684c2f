"""Write the assistant corpus: ``python -m memstrata.bench.corpora.assistant --out FILE``.

Each user (one conversation of several sessions over months) is given scripted facts
(:mod:`.assistant_slots`): single facts, facts that change later, standing instructions and
preferences, things the assistant recommended, and facts told in two messages. The
conversation is written from them: one exchange (a user message, the assistant's reply)
states each fact, the rest are the user's everyday requests and same-topic distractors,
each answered at length (:mod:`.assistant_text`). Questions are asked about the facts and
labelled with the ids of the messages that state them, so the labels are right by
construction; :func:`build` also checks that no other message of the conversation states a
value the user holds. The same seed always writes the same file.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from .assistant_slots import ADVICE, CHANGED, INSTRUCTIONS, MULTI, PREFERENCES, SINGLE, Slot
from .assistant_text import SHORT, THANKS, TOPICS, reply, request

SEED = 43
USERS = 20


@dataclass
class _Fact:
    """One scripted fact of a user and the messages that will state it."""

    slot: Slot
    fields: dict[str, str]
    first: int  # session of the first statement
    second: int | None = None  # session of the change / second part
    ids: list[str] = field(default_factory=list)  # ids of the stating messages, in order


def _instruction_slot(entry: dict[str, str], key: str) -> Slot:
    return Slot(key, "preference/instruction", "productivity", values=({"v": entry["v"]},),
                states=tuple(entry["states"].split("|")), asks=tuple(entry["asks"].split("|")))


def _plan(rng: random.Random, sessions: int) -> list[_Fact]:
    """The user's facts and the sessions in which each is stated."""
    early = max(1, sessions // 2)
    facts: list[_Fact] = []
    for slot in rng.sample(CHANGED, 3):
        first = rng.randrange(0, early)
        facts.append(_Fact(slot, dict(rng.choice(slot.values)), first,
                           rng.randrange(first + 1, sessions)))
    for slot in rng.sample(SINGLE, 4):
        facts.append(_Fact(slot, dict(rng.choice(slot.values)), rng.randrange(sessions)))
    kinds = (("instruction", INSTRUCTIONS, 2), ("preference", PREFERENCES, 2))
    for key, pool, n in kinds:
        for entry in rng.sample(pool, n):
            facts.append(_Fact(_instruction_slot(entry, key), {"v": entry["v"]},
                               rng.randrange(sessions)))
    for slot in rng.sample(ADVICE, 2):
        facts.append(_Fact(slot, dict(rng.choice(slot.values)), rng.randrange(sessions)))
    for slot in rng.sample(MULTI, rng.randint(1, 2)):
        first = rng.randrange(0, early)
        facts.append(_Fact(slot, dict(rng.choice(slot.values)), first,
                           rng.randrange(first + 1, sessions)))
    return facts


def _stating(rng: random.Random, fact: _Fact, part: int) -> tuple[str, str, int]:
    """(user text, assistant text, index of the stating message: 0 user, 1 assistant)."""
    slot, f = fact.slot, fact.fields
    if slot.category == "assistant-said":
        advice = rng.choice(slot.advice).format(**f)
        return rng.choice(slot.states).format(**f), reply(rng, slot.topic, (advice,)), 1
    said = rng.choice(slot.states if part == 0 else slot.second).format(**f)
    topic = slot.topic if rng.random() < 0.6 else rng.choice(sorted(TOPICS))
    if rng.random() < 0.7:
        said = f"{said} {request(rng, topic)}"
    return said, reply(rng, topic), 0


def _distractor(rng: random.Random, facts: list[_Fact]) -> tuple[str, str]:
    """A same-topic user message that states none of the user's values, and its reply."""
    fact = rng.choice([f for f in facts if f.slot.distract])
    slot = fact.slot
    mine = {fact.fields.get("v"), fact.fields.get("w")}
    others = sorted({x for row in slot.values for x in (row.get("v"), row.get("w"))
                     if x and x not in mine})
    text = rng.choice(slot.distract).format(**fact.fields, other=rng.choice(others))
    return text, reply(rng, slot.topic)


def _questions(rng: random.Random, conv: str, facts: list[_Fact], asked_at: datetime
               ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def ask(templates: tuple[str, ...], fact: _Fact, evidence: list[str], category: str,
            answer: list[str]) -> None:
        out.append({"id": f"{conv}#q{len(out) + 1}", "conversation_id": conv,
                    "question": rng.choice(templates).format(**fact.fields),
                    "evidence": evidence, "category": category, "fact": fact.slot.key,
                    "answer": answer,
                    "asked_at": asked_at.isoformat()})

    for fact in facts:
        slot, f = fact.slot, fact.fields
        if slot.category == "changed-fact":
            ask(slot.asks, fact, [fact.ids[1]], "changed-fact/current", [f["w"]])
            if rng.random() < 0.6:
                ask(slot.asks_before, fact, [fact.ids[0]], "changed-fact/previous", [f["v"]])
        elif slot.category == "multi-message":
            ask(slot.asks, fact, list(fact.ids), "multi-message", [f["v"], f["w"]])
        else:
            ask(slot.asks, fact, list(fact.ids), slot.category, [f["v"]])
    rng.shuffle(out)
    return out


def _check(conv: dict[str, Any], facts: list[_Fact]) -> None:
    """Every stated value is in its own messages and in no other message of the user."""
    texts = {m["metadata"]["source_id"]: m["content"]
             for s in conv["sessions"] for m in s["messages"]}
    for fact in facts:
        values = [fact.fields["v"], *([fact.fields["w"]] if "w" in fact.fields else [])]
        for value, mid in zip(values, fact.ids, strict=True):
            if value.lower() not in texts[mid].lower():
                raise ValueError(f"{conv['id']}: {value!r} missing from {mid}")
        pattern = re.compile(r"(?<!\w)" + "|".join(map(re.escape, values)) + r"(?!\w)", re.I)
        stray = [mid for mid, text in texts.items()
                 if mid not in fact.ids and pattern.search(text)]
        if stray:
            raise ValueError(f"{conv['id']}: {values} also stated in {stray[0]}")


def _conversation(seed: int, user: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    rng = random.Random(f"{seed}:{user}")
    conv_id = f"user-{user:02d}"
    n_sessions = rng.randint(5, 8)
    facts = _plan(rng, n_sessions)
    exchanges = rng.randint(50, 125)
    # Per session: (fact, part) events and filler kinds, shuffled within the session.
    slots: list[list[Any]] = [[] for _ in range(n_sessions)]
    for fact in facts:
        slots[fact.first].append((fact, 0))
        if fact.second is not None:
            slots[fact.second].append((fact, 1))
    for _ in range(max(0, exchanges - sum(map(len, slots)))):
        kind = rng.choices(("distract", "request", "thanks"), (0.4, 0.5, 0.1))[0]
        slots[rng.randrange(n_sessions)].append(kind)
    start = datetime(2023, 1, 1, 8) + timedelta(days=rng.randrange(300))
    sessions = []
    for s, events in enumerate(slots):
        rng.shuffle(events)
        # A changed fact's two statements are in different sessions, so order holds.
        started = start.replace(hour=rng.randint(7, 21), minute=rng.randrange(60))
        clock = started
        messages: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, tuple):
                fact, part = event
                user_text, bot_text, stating = _stating(rng, fact, part)
            elif event == "distract":
                (user_text, bot_text), stating = _distractor(rng, facts), -1
            elif event == "request":
                topic = rng.choice(sorted(TOPICS))
                user_text, bot_text, stating = request(rng, topic), reply(rng, topic), -1
            else:
                user_text, bot_text, stating = rng.choice(THANKS), rng.choice(SHORT), -1
            for n, (role, text) in enumerate((("user", user_text), ("assistant", bot_text))):
                clock += timedelta(minutes=rng.randint(1, 6))
                mid = f"{conv_id}:s{s + 1}:m{len(messages) + 1}"
                messages.append({"role": role, "content": text, "timestamp": clock.isoformat(),
                                 "metadata": {"source_id": mid}})
                if n == stating:
                    fact.ids.append(mid)
        sessions.append({"id": f"s{s + 1}", "started_at": started.isoformat(),
                         "messages": messages})
        start = clock + timedelta(days=rng.randint(12, 45))
    conv = {"id": conv_id, "sessions": sessions}
    _check(conv, facts)
    return conv, _questions(rng, conv_id, facts, start)


def build(seed: int = SEED, users: int = USERS) -> dict[str, Any]:
    """The corpus as a labelled-messages document (see ``bench/corpora/README.md``)."""
    conversations, questions = [], []
    for user in range(1, users + 1):
        conv, asked = _conversation(seed, user)
        conversations.append(conv)
        questions += asked
    return {"name": "assistant", "seed": seed, "conversations": conversations,
            "questions": questions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--seed", type=int, default=SEED, help=f"default {SEED}")
    parser.add_argument("--users", type=int, default=USERS, help=f"default {USERS}")
    args = parser.parse_args(argv)
    doc = build(args.seed, args.users)
    Path(args.out).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n",
                              encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
