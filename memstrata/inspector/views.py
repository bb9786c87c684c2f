"""What each inspector page shows, read from a ``Memory``: plain data for the templates.

Every function takes the tenant and reads that tenant's rows only (the store's methods
all filter by ``user_id``; an id of another tenant reads as missing). Every list is
bounded: a page of rows plus one more to know whether a next page exists, and every text
shown in a list cut to :data:`LIST_CHARS`, so a tenant of 100k turns (or of 256 KiB
messages) still gives a page of a few hundred kilobytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memstrata.api import Memory
from memstrata.errors import MemstrataError
from memstrata.memory.cognitive.base import (
    CONTRADICTS,
    DERIVES_FROM,
    PROCEDURE_DERIVES_FROM,
    SIMILAR_TO,
)
from memstrata.memory.models import Item, Turn
from memstrata.memory.store import node_type
from memstrata.memory.store.versions import Version
from memstrata.memory.voe_facts import PREDICTION_SOURCE
from memstrata.memory.voe_facts import SOURCE as VOE_SOURCE

PAGE = 50
"""Rows on one page of a list, unless the address asks for another size."""
MAX_PAGE = 200
"""The most rows one page shows, whatever the address asks."""
LIST_CHARS = 600
"""The most characters of one text shown in a list (the memory's own page shows it all)."""
MAX_LINKS = 20
"""The most facts shown beside one turn, and evidence turns beside one fact."""
MAX_FACTS = 100
"""The most current facts listed on a conversation's page."""
MAX_VERSIONS = 200
"""The most versions shown of one memory (its latest)."""
MAX_STEPS = 500
"""The most steps shown of one run."""
DERIVED = "derived_from"
"""The edge from a fact (or QA pair) to each turn it was extracted from."""
SUPERSEDES = "supersedes"
"""The edge from a newer fact to the one it ended."""
LINKS: dict[str, tuple[str, str]] = {
    DERIVES_FROM: ("read in", "facts read from it"),
    PROCEDURE_DERIVES_FROM: ("read in", "procedures read from it"),
    CONTRADICTS: ("contradicts", "contradicted by"),
    SIMILAR_TO: ("similar to", "similar to"),
}
"""The edges between items a memory's page shows: relation -> (what an outgoing edge
says, what an incoming one says)."""
KNOWLEDGE: tuple[tuple[str, str, str | None, str], ...] = (
    ("documents", "episodic", None, "Documents read and other episodes"),
    ("semantic", "semantic", None, "Semantic facts"),
    ("procedures", "procedural", None, "Procedures"),
    ("strategies", "strategy", None, "Strategies and guardrails"),
    ("expectations", "working", PREDICTION_SOURCE, "Expectations (what the user may say next)"),
    ("surprises", "fact", VOE_SOURCE, "Facts surprises taught"),
    ("intentions", "prospective", None, "Intentions"),
)
"""The sections of a tenant's knowledge page: (name, item kind, source or None for any,
heading). What ``read``, ``learn`` and ``expect`` write, in that order."""


class NotFound(MemstrataError, LookupError):
    """What a page asks for is not there for this tenant (the app answers it with a 404
    page)."""


@dataclass
class Paged:
    """One page of a list: its rows, and where the previous and next pages start
    (None: there is none)."""

    rows: list[Any]
    prev: int | None = None
    next: int | None = None


def page(rows: list[Any], offset: int, size: int) -> Paged:
    """``rows`` read with ``limit=size + 1`` at ``offset``, as one page."""
    return Paged(rows=rows[:size], prev=max(offset - size, 0) if offset else None,
                 next=offset + size if len(rows) > size else None)


@dataclass
class TurnView:
    """A turn with the facts extracted from it."""

    turn: Turn
    facts: list[Item] = field(default_factory=list)


@dataclass
class FactView:
    """An item with the turns it was extracted from, and what it supersedes or what
    superseded it."""

    item: Item
    evidence: list[Turn] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    supersedes: list[Item] = field(default_factory=list)
    superseded_by: list[Item] = field(default_factory=list)


def facts_of_turns(memory: Memory, user_id: str, turns: list[Turn]) -> list[TurnView]:
    """Each turn with the items extracted from it (``derived_from`` edges to it)."""
    store = memory.store
    out = []
    for turn in turns:
        ids = [e.src for e in store.edges(user_id, dst=turn.id, relation=DERIVED,
                                          limit=MAX_LINKS)]
        out.append(TurnView(turn, store.get_many(user_id, ids) if ids else []))
    return out


def with_evidence(memory: Memory, user_id: str, items: list[Item]) -> list[FactView]:
    """Each item with its evidence turns: those its ``derived_from`` edges name, then
    evidence ids that are store turn ids; source ids (``t3``) left unresolved are kept
    as text."""
    store = memory.store
    out = []
    for item in items:
        ids = [e.dst for e in store.edges(user_id, src=item.id, relation=DERIVED,
                                          limit=MAX_LINKS)]
        ids += [e for e in item.evidence[:MAX_LINKS] if node_type(e) == "turn"
                and e not in ids]
        turns = store.turns(user_id, ids=ids) if ids else []
        source_ids = {t.turn_id for t in turns} | {t.id for t in turns}
        view = FactView(item, evidence=turns,
                        unresolved=[e for e in item.evidence[:MAX_LINKS]
                                    if e not in source_ids])
        older = [e.dst for e in store.edges(user_id, src=item.id, relation=SUPERSEDES,
                                            limit=MAX_LINKS)]
        newer = [e.src for e in store.edges(user_id, dst=item.id, relation=SUPERSEDES,
                                            limit=MAX_LINKS)]
        view.supersedes = store.get_many(user_id, older) if older else []
        view.superseded_by = store.get_many(user_id, newer) if newer else []
        out.append(view)
    return out


@dataclass
class ConversationRow:
    """A conversation of a tenant, as its user page lists it."""

    id: str
    title: str
    speakers: list[str]
    sessions: list[str]
    last_turn: Turn | None


def user_page(memory: Memory, user_id: str, *, conv_offset: int, item_offset: int,
              size: int) -> dict[str, Any]:
    """A tenant's counts, a page of its conversations (with their sessions) and a page
    of its items, newest first.

    Raises:
        NotFound: nothing is stored for this tenant.
    """
    store = memory.store
    counts = store.counts(user_id)
    conv_ids = store.conversation_ids(user_id)
    runs = store.runs.list(user_id, limit=1)
    if not conv_ids and not counts.get("items") and not counts.get("turns") and not runs:
        raise NotFound(f"nothing is stored for user {user_id!r}")
    convs = []
    for cid in conv_ids[conv_offset:conv_offset + size]:
        header = store.conversation(user_id, cid)
        convs.append(ConversationRow(
            id=cid, title=header.title if header else "",
            speakers=header.speakers if header else [],
            sessions=store.session_ids(user_id, cid)[:MAX_LINKS],
            last_turn=store.last_turn(user_id, cid)))
    items = store.items(user_id, limit=size + 1, offset=item_offset)
    return {"counts": counts,
            "conversations": page(conv_ids[conv_offset:conv_offset + size + 1], conv_offset,
                                  size),
            "conversation_rows": convs,
            "items": page(items, item_offset, size)}


def conversation_page(memory: Memory, user_id: str, conversation_id: str, *,
                      after: int | None, size: int) -> dict[str, Any]:
    """A page of a conversation's turns (``size`` turns after the turn ``after``, by
    ``seq``), each with its facts, and the conversation's current facts with their
    evidence.

    Raises:
        NotFound: the tenant has no such conversation.
    """
    store = memory.store
    header = store.conversation(user_id, conversation_id)
    if header is None:
        raise NotFound(f"user {user_id!r} has no conversation {conversation_id!r}")
    turns = store.turns(user_id, conversation_id=conversation_id, after_seq=after,
                        limit=size + 1)
    shown = turns[:size]
    first = shown[0].seq if shown else None
    prev = None
    if first is not None and store.turns(user_id, conversation_id=conversation_id,
                                         after_seq=None, limit=1)[0].seq < first:
        # Seqs count up from the conversation's first turn; -1 is "from the start".
        prev = max(first - size - 1, -1)
    current = store.current_ids(user_id, conversation_id, ["fact"])
    facts = store.get_many(user_id, current[:MAX_FACTS])
    facts.sort(key=lambda f: (f.recorded_at is None, f.recorded_at, f.id))
    sessions = store.session_ids(user_id, conversation_id)
    return {"conversation": header,
            "sessions": sessions[:MAX_LINKS], "sessions_total": len(sessions),
            "turns": facts_of_turns(memory, user_id, shown),
            "prev": prev,
            "next": shown[-1].seq if len(turns) > size else None,
            "facts": with_evidence(memory, user_id, facts),
            "facts_total": len(current)}


def memory_page(memory: Memory, user_id: str, node_id: str) -> dict[str, Any]:
    """One turn or item of the tenant: the node, its versions, and its links (a turn's
    facts; an item's evidence turns, supersession and :func:`links_of`).

    Raises:
        NotFound: no such id for this tenant.
    """
    if memory.get(node_id, user_id=user_id) is None:
        raise NotFound(f"user {user_id!r} has no memory {node_id!r}")
    store = memory.store
    versions: list[Version] = memory.history(node_id, user_id=user_id)[-MAX_VERSIONS:]
    if node_type(node_id) == "turn":
        turn = store.turn(user_id, node_id)
        if turn is None:
            raise NotFound(f"user {user_id!r} has no memory {node_id!r}")
        return {"turn": facts_of_turns(memory, user_id, [turn])[0], "fact": None,
                "links": [], "versions": versions}
    item = store.get(user_id, node_id)
    if item is None:
        raise NotFound(f"user {user_id!r} has no memory {node_id!r}")
    return {"turn": None, "fact": with_evidence(memory, user_id, [item])[0],
            "links": links_of(memory, user_id, node_id), "versions": versions}


@dataclass
class Linked:
    """An item linked to the one shown: what the link says, and the item."""

    label: str
    item: Item


def links_of(memory: Memory, user_id: str, item_id: str) -> list[Linked]:
    """The items linked to ``item_id`` by the edges of :data:`LINKS` (at most
    :data:`MAX_LINKS` a relation and direction): the episode a fact was read in, the
    facts and procedures read from an episode, contradictions, similar facts."""
    store = memory.store
    out: list[Linked] = []
    for relation, (outgoing, incoming) in LINKS.items():
        for label, ids in (
                (outgoing, [e.dst for e in store.edges(user_id, src=item_id,
                                                       relation=relation, limit=MAX_LINKS)]),
                (incoming, [e.src for e in store.edges(user_id, dst=item_id,
                                                       relation=relation, limit=MAX_LINKS)])):
            out += [Linked(label, item) for item in store.get_many(user_id, ids)] if ids else []
    return out


@dataclass
class Section:
    """One section of the knowledge page: its name, heading and a page of items."""

    name: str
    heading: str
    items: Paged


def knowledge_page(memory: Memory, user_id: str, *, offsets: dict[str, int], size: int
                   ) -> list[Section]:
    """What the tenant read, learned and expects (:data:`KNOWLEDGE`'s sections), each a
    page of items, newest first; ``offsets`` by section name.

    Raises:
        NotFound: nothing is stored for this tenant.
    """
    store = memory.store
    if not store.counts(user_id).get("items") and not store.runs.list(user_id, limit=1):
        raise NotFound(f"nothing is stored for user {user_id!r}")
    out = []
    for name, kind, source, heading in KNOWLEDGE:
        offset = offsets.get(name, 0)
        if source is None:
            rows = store.items(user_id, kind=kind, limit=size + 1, offset=offset)
        else:
            ids = store.source_ids(user_id, kind, source)[offset:offset + size + 1]
            rows = store.get_many(user_id, ids) if ids else []
        out.append(Section(name, heading, page(rows, offset, size)))
    return out


def usage_of(run: Any) -> dict[str, Any]:
    """A run's LLM calls, tokens and model seconds: its ``usage`` (what the call meter
    counted), else what an extraction run's summary reports."""
    usage = run.usage or {}
    output = run.output if isinstance(run.output, dict) else {}
    calls = usage.get("calls", output.get("llm_calls"))
    return {"calls": calls,
            "input_tokens": usage.get("input_tokens", output.get("input_tokens")),
            "output_tokens": usage.get("output_tokens", output.get("output_tokens")),
            "seconds": usage.get("seconds"), "errors": usage.get("errors")}


def runs_page(memory: Memory, user_id: str, *, size: int) -> list[dict[str, Any]]:
    """The tenant's ``size`` newest runs, each with its usage."""
    return [{"run": run, "usage": usage_of(run)}
            for run in memory.store.runs.list(user_id, limit=size)]


def run_page(memory: Memory, user_id: str, run_id: str) -> dict[str, Any]:
    """One run of the tenant with its usage and (at most :data:`MAX_STEPS`) steps.

    Raises:
        NotFound: no such run for this tenant.
    """
    run = memory.store.runs.get(user_id, run_id)
    if run is None:
        raise NotFound(f"user {user_id!r} has no run {run_id!r}")
    # Unpacked: inside ``Runs`` the method ``list`` shadows the builtin in its annotations.
    steps: list[Any] = [*memory.store.runs.steps(user_id, run_id)]
    return {"run": run, "usage": usage_of(run), "steps": steps[:MAX_STEPS],
            "steps_total": len(steps)}
