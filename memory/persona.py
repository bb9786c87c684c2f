"""The persona layer: per person, what their current facts say, each with citations.

A persona row is one attribute of one participant (``attribute`` = the predicate,
``value`` = the object), built from the conversation's facts that are still valid
(superseded ones are skipped) — a quick lookup for "what do we know about Ana?" that
never needs a search. Built deterministically; re-building replaces the old rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from .entities import same_person_conversations
from .models import Edge, FactItem, PersonaItem
from .store import Filters
from .store.protocol import MemoryStore

MAX_PER_PERSON = 40


def build_persona(store: MemoryStore, user_id: str, conversation_id: str, people: Sequence[str],
                  facts: Sequence[FactItem], *, limit: int = MAX_PER_PERSON) -> int:
    """Write the persona rows of ``people`` from ``facts`` (stored ones); returns the count.

    The most confident facts win when a person has more than ``limit``; each row cites the
    fact's evidence turns and links to the fact with a ``derived_from`` edge.
    """
    stale = _ids(store, user_id, conversation_id)
    with store.transaction():
        for item_id in stale:
            store.delete(user_id, item_id)
        rows: list[tuple[PersonaItem, str]] = []
        for person in people:
            mine = sorted((f for f in facts if f.about == person and f.valid_to is None),
                          key=lambda f: (-f.confidence, f.event_time is None, f.event_time))
            for fact in mine[:limit]:
                rows.append((PersonaItem(
                    user_id=user_id, text=f"{person} - {fact.predicate}: {fact.object}",
                    person=person, attribute=fact.predicate, value=fact.object,
                    about=person, speaker=fact.speaker, conversation_id=conversation_id,
                    evidence=fact.evidence, event_time=fact.event_time,
                    confidence=fact.confidence, source="persona"), fact.id))
        ids = [store.add(row) for row, _ in rows]
        store.add_edges(Edge(user_id=user_id, src=pid, dst=fid, relation="derived_from")
                        for pid, (_, fid) in zip(ids, rows, strict=True))
    return len(rows)


def persona(store: MemoryStore, user_id: str, person: str, conversation_id: str
            ) -> list[PersonaItem]:
    """The persona of ``person`` as ``conversation_id`` knows them, plus the rows of every
    conversation the reconciler merged them with — never of a namesake merely sharing
    the name (two conversations' "Ben" stay two personas until a MERGE)."""
    ids = [i for conv in same_person_conversations(store, user_id, conversation_id, person)
           for i in _ids(store, user_id, conv)]
    rows = [i for i in store.get_many(user_id, ids)
            if isinstance(i, PersonaItem) and i.person == person]
    return sorted(rows, key=lambda r: -r.confidence)


def _ids(store: MemoryStore, user_id: str, conversation_id: str) -> list[str]:
    """A conversation's persona rows, by index (not a scan of the tenant's items)."""
    return sorted(store.allowed_ids(user_id, Filters(kinds=["persona"],
                                                     conversation_id=conversation_id)))
