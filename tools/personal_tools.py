"""The reconciler's four tools: a person's timeline, a conversation's context, a side-by-side
comparison of one name in two conversations, and the contradictions between them.

Named as seed 001 names them. Like every tool they take a ``Binding`` first (bound to one
tenant by ``ToolSession.bind``; ``personal_tools(session)`` binds all four), return
small JSON-serialisable dicts, and refuse bad input with a ``ToolError`` that lists what
is valid. They are deterministic and read-only: no LLM, no writes. They work from raw
turns alone and use stored facts and entities when an extractor left some (see
``memory/profile.py`` for how statements, names and distinctive terms are computed, and
``memory/person_compare.py`` for the overlap score and what counts as a contradiction).

Example:
    >>> session = ToolSession(store, user_id="u1")  # doctest: +SKIP
    >>> tools = {t.__name__: t for t in personal_tools(session)}  # doctest: +SKIP
    >>> tools["detect_contradictions"]("Ben", "chat-1", "chat-2")["count"]  # doctest: +SKIP
    3
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memstrata.memory.entities import conversation_facts, find_entities, states
from memstrata.memory.person_compare import clashes, compare, day
from memstrata.memory.profile import Corpus, Profile, build_profile
from memstrata.memory.text import words

from .base import Binding, ToolError, clipped, one_line, shown

if TYPE_CHECKING:
    from .session import ToolSession

MAX_EVENTS, MAX_TERMS, MAX_NAMES, MAX_SHARED, MAX_CLASHES = 12, 8, 8, 8, 6
TEXT_CHARS = 100
_CORPORA: weakref.WeakKeyDictionary[Any, dict[str, tuple[str, Corpus]]] = (
    weakref.WeakKeyDictionary())


def corpus(b: Binding) -> Corpus:
    """The tenant's turns as a ``Corpus``, cached until the tenant's data changes."""
    digest = b.store.state_pointer(b.user_id)["digest"]
    per_store = _CORPORA.setdefault(b.store, {})
    hit = per_store.get(b.user_id)
    if hit is None or hit[0] != digest:
        hit = (digest, Corpus(b.store.turns(b.user_id)))
        per_store[b.user_id] = hit
    return hit[1]


def _conversation(c: Corpus, tool: str, conversation_id: Any) -> str:
    known = c.conversations()
    if not isinstance(conversation_id, str) or conversation_id not in known:
        listed = ", ".join(known[:10]) or "none stored"
        raise ToolError(f"{tool}: unknown conversation {shown(conversation_id)}; "
                        f"conversations: {listed}")
    return conversation_id


def _person(c: Corpus, tool: str, conversation_id: str, name: Any) -> str:
    people = c.people(conversation_id)
    if isinstance(name, str):
        for person in people:
            if person.casefold() == name.strip().casefold():
                return person
    raise ToolError(f"{tool}: nobody named {shown(name)} speaks in {conversation_id}; "
                    f"people there: {', '.join(people)}")


def _profile(b: Binding, c: Corpus, conversation_id: str, name: str,
             exclude: set[str] | None = None) -> Profile:
    facts = conversation_facts(b.store, b.user_id, conversation_id, name)
    return build_profile(c, conversation_id, name, facts=facts, exclude=exclude)


def _entity(b: Binding, conversation_id: str, name: str) -> str | None:
    found = find_entities(b.store, b.user_id, conversation_id, name)
    return found[0].id if found else None


def _side(b: Binding, p: Profile) -> dict[str, Any]:
    return {"conversation_id": p.conversation_id, "entity_id": _entity(b, p.conversation_id,
                                                                       p.name),
            "partners": p.partners, "span": [day(p.first), day(p.last)]}


def _pair(b: Binding, tool: str, name: Any, conversation_a: Any, conversation_b: Any
          ) -> tuple[Profile, Profile]:
    c = corpus(b)
    conv_a = _conversation(c, tool, conversation_a)
    conv_b = _conversation(c, tool, conversation_b)
    if conv_a == conv_b:
        raise ToolError(f"{tool}: conversation_a and conversation_b are both {conv_a!r}; "
                        "name two different conversations")
    person_a, person_b = _person(c, tool, conv_a, name), _person(c, tool, conv_b, name)
    # Neither same-name person is part of the other's background for distinctive terms.
    same = {person_a, person_b}
    return (_profile(b, c, conv_a, person_a, same), _profile(b, c, conv_b, person_b, same))


def _bounded(result: dict[str, Any]) -> dict[str, Any]:
    """The answer with every stored string (names, terms, values) cut short: what a
    conversation holds can be any size, what a tool returns cannot."""
    return clipped(result, chars=TEXT_CHARS * 3, items=MAX_EVENTS * 2, depth=6)


def _spread(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """At most ``n`` rows, evenly spaced over the list (first and last kept)."""
    if len(rows) <= n:
        return rows
    step = (len(rows) - 1) / (n - 1)
    return [rows[round(i * step)] for i in range(n)]


def get_entity_timeline(b: Binding, name: str, conversation_id: str) -> dict[str, Any]:
    """What a person said about themselves in one conversation, oldest first: marriage,
    children, pets, relatives, jobs, homes (with turn ids and dates), and stored facts.
    With none of those, their most distinctive turns instead.

    Args:
        name: the person, as they are named in the conversation (e.g. 'Ben').
        conversation_id: the conversation (e.g. 'chat-1').
    """
    c = corpus(b)
    conv = _conversation(c, "get_entity_timeline", conversation_id)
    person = _person(c, "get_entity_timeline", conv, name)
    p = _profile(b, c, conv, person)
    said = {(o.evidence, o.text) for o in p.observations if o.relation == "marital"}
    events = [{"when": day(o.when), "turn": o.evidence, "relation": o.relation,
               "value": o.value, "text": one_line(o.text, TEXT_CHARS)}
              for o in sorted(p.observations, key=lambda o: (o.when is None, o.when))
              if o.relation == "marital" or (o.evidence, o.text) not in said]
    if not events:
        terms = {t for t, _ in p.terms}
        seen: set[str] = set()
        for t in p.turns:
            if t.session_id not in seen and terms & set(words(t.text)):
                seen.add(t.session_id)
                events.append({"when": day(t.event_time), "turn": t.turn_id,
                               "text": one_line(t.text, TEXT_CHARS)})
    return _bounded({
        "name": person, "conversation_id": conv, "entity_id": _entity(b, conv, person),
        "span": [day(p.first), day(p.last)], "partners": p.partners,
        "facts": len(p.facts), "total": len(events), "events": _spread(events, MAX_EVENTS)})


def get_conversation_context(b: Binding, conversation_id: str) -> dict[str, Any]:
    """Who talks in a conversation, when, and what sets each person apart: distinctive
    words, names they brought up, and what held of them (jobs, marriage...).

    Args:
        conversation_id: the conversation (e.g. 'chat-2').
    """
    c = corpus(b)
    conv = _conversation(c, "get_conversation_context", conversation_id)
    people = []
    for person in c.people(conv):
        p = _profile(b, c, conv, person)
        own = sorted((n for n, v in p.names.items() if v[2]), key=lambda n: -p.names[n][0])
        people.append({"name": person, "entity_id": _entity(b, conv, person),
                       "turns": len(p.turns), "terms": [t for t, _ in p.terms[:MAX_TERMS]],
                       "names": own[:MAX_NAMES], "states": states(p)[:6],
                       "facts": len(p.facts)})
    dates = c.dates.get(conv) or []
    return _bounded({
        "conversation_id": conv, "span": [day(min(dates, default=None)),
                                          day(max(dates, default=None))],
        "sessions": len(c.sessions[conv]), "turns": sum(x["turns"] for x in people),
        "participants": people})


def compare_entities_across_conversations(b: Binding, name: str, conversation_a: str,
                                          conversation_b: str) -> dict[str, Any]:
    """Compare the person called `name` in two conversations: what both share (named
    family, pets, employer, places, names both brought up), what differs, whether their
    times overlap, and an overlap score from 0 to 1. A shared name alone is no evidence.

    Args:
        name: the name both conversations use (e.g. 'Ben').
        conversation_a: one conversation (e.g. 'chat-1').
        conversation_b: another conversation (e.g. 'chat-2').
    """
    pa, pb = _pair(b, "compare_entities_across_conversations", name, conversation_a,
                   conversation_b)
    cmp = compare(pa, pb)
    strong = [f"{x.kind} {x.value}" for x in cmp.shared[:MAX_SHARED]]
    apart = [k for k, v in cmp.differing.items() if v.get("a") and v.get("b")]
    summary = (f"{cmp.shared_distinctive} shared distinctive detail(s)"
               + (f" ({', '.join(strong)})" if strong else "")
               + (f"; different {', '.join(apart)}" if apart else "")
               + f"; overlap score {cmp.overlap_score}")
    # The summary comes first: a small model reads the head of a long JSON object.
    return _bounded({
        "summary": summary, "name": pa.name, "a": _side(b, pa), "b": _side(b, pb),
        "time_overlap_days": cmp.time_overlap_days,
        "shared": [s.model_dump() for s in cmp.shared[:MAX_SHARED]],
        "shared_weak": [s.model_dump() for s in cmp.shared_weak[:MAX_SHARED]],
        "differing": cmp.differing, "shared_distinctive": cmp.shared_distinctive,
        "term_overlap": cmp.term_overlap, "overlap_score": cmp.overlap_score})


def detect_contradictions(b: Binding, name: str, conversation_a: str, conversation_b: str
                          ) -> dict[str, Any]:
    """Statements about `name` in two conversations that cannot both hold of one person:
    two jobs, spouses, marital states or homes over the same time, or two places on one
    day. Different values at separate times are listed as changes (maybe one life).

    Args:
        name: the name both conversations use (e.g. 'Ben').
        conversation_a: one conversation (e.g. 'chat-1').
        conversation_b: another conversation (e.g. 'chat-3').
    """
    pa, pb = _pair(b, "detect_contradictions", name, conversation_a, conversation_b)
    found, changes = clashes(pa, pb)
    summary = (f"{len(found)} contradiction(s): {found[0].why}" if found
               else "no contradiction")
    return _bounded({
        "summary": summary, "name": pa.name, "conversation_a": pa.conversation_id,
        "conversation_b": pb.conversation_id, "count": len(found),
        "contradictions": [x.model_dump() for x in found[:MAX_CLASHES]],
        "changes": [x.model_dump() for x in changes[:MAX_CLASHES // 2]]})


PERSONAL_TOOLS: tuple[Callable[..., dict[str, Any]], ...] = (
    compare_entities_across_conversations, detect_contradictions, get_entity_timeline,
    get_conversation_context,
)
"""In the order an agent is shown them: the two whose arguments are the task's own inputs
(name, conversation_a, conversation_b) first. SmolLM2-135M mostly calls whichever tool is
listed first: on a shared-name case it made no valid call in 3 pairs with the timeline first,
and valid comparisons in 1 of 3 pairs with the comparison first."""


def personal_tools(session: ToolSession) -> list[Callable[..., dict[str, Any]]]:
    """The four tools bound to the session's tenant, logged like the others."""
    return [session.bind(fn) for fn in PERSONAL_TOOLS]
