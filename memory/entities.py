"""Entities: one per person per conversation, and the reconciler's decisions about them.

``ensure_entities`` gives every speaker of a conversation an ``EntityItem`` unless one
exists already (an extractor's, found by name or alias): two conversations' "Ben" are
two entities until someone decides otherwise. Roles and states are read from the turns
deterministically (``profile.py``), each state with its time span.

A decision is stored as edges, never by rewriting what each conversation said:

* MERGE: a person-level entity (``conversation_id`` None) whose aliases and evidence
  cover every merged entity (evidence as ``chat-1:s8:2``; states prefixed with their
  conversation, so the evolution in time stays readable), and a ``same_as`` edge from
  each conversation entity to it, with the reason in the edge's metadata. Merging into
  an existing person extends it.
* SEPARATE: a ``distinct_from`` edge between the two entities, with the reason.

After a MERGE, ``supersede_across`` lines up the merged person's stored facts of each
single-valued relation (job, home, spouse...) in time across the conversations: a fact
followed by one with another value is superseded by it (``valid_to`` set, a
``supersedes`` edge; never deleted). Facts already ended are left as they are.

An edge that exists already keeps its first metadata (the store upserts edges by src,
dst and relation); every decision is also in the event log (``programs/reconciler.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from itertools import pairwise
from operator import attrgetter
from typing import Any

from .models import Edge, EntityItem, FactItem
from .person_patterns import SINGLE_VALUED
from .profile import Corpus, Profile, build_profile, fact_relation, same_value
from .store import Filters
from .store.protocol import MemoryStore
from .supersede import supersede

SAME_AS, DISTINCT_FROM = "same_as", "distinct_from"
MAX_STATES, MAX_EVIDENCE = 10, 40


def entity_id(user_id: str, conversation_id: str | None, name: str) -> str:
    """The deterministic id of the entity this module makes for a name in a conversation."""
    key = f"{user_id}\x00{conversation_id or '*'}\x00{name.casefold()}"
    return "i_ent" + hashlib.sha1(key.encode()).hexdigest()[:22]


def find_entities(store: MemoryStore, user_id: str, conversation_id: str, name: str
                  ) -> list[EntityItem]:
    """Stored entities of a conversation with this name (or alias), case-insensitive."""
    ids = store.allowed_ids(user_id, Filters(kinds=["entity"], conversation_id=conversation_id))
    folded = name.casefold()
    return [e for e in store.get_many(user_id, sorted(ids)) if isinstance(e, EntityItem)
            and folded in {e.name.casefold(), *(a.casefold() for a in e.aliases)}]


def conversation_facts(store: MemoryStore, user_id: str, conversation_id: str, name: str
                       ) -> list[FactItem]:
    """Stored facts of a conversation about (or, with no subject person, by) ``name``."""
    ids = store.allowed_ids(user_id, Filters(kinds=["fact"], conversation_id=conversation_id))
    folded = name.casefold()
    return [f for f in store.get_many(user_id, sorted(ids)) if isinstance(f, FactItem)
            and (f.about or f.speaker or "").casefold() == folded]


def same_person_conversations(store: MemoryStore, user_id: str, conversation_id: str, name: str
                              ) -> list[str]:
    """The conversations whose ``name`` the reconciler merged with this one's (this one
    first): person memory across conversations follows ``same_as`` edges, never names."""
    convs = [conversation_id]
    for entity in find_entities(store, user_id, conversation_id, name):
        for up in store.edges(user_id, src=entity.id, relation=SAME_AS):
            for down in store.edges(user_id, dst=up.dst, relation=SAME_AS):
                other = store.get(user_id, down.src)
                found = None if other is None else other.conversation_id
                if found is not None and found not in convs:
                    convs.append(found)
    return convs


def states(profile: Profile) -> list[str]:
    """What held of the person, each with its span or date ("job: X (2023-07-22..)")."""
    out = [f"{s.relation}: {' / '.join(s.values)} ("
           f"{s.start.date() if s.start else '?'}..{s.end.date() if s.end else '?'})"
           for s in profile.segments]
    for relation in ("children", "pet", "relative"):
        values = sorted({o.value for o in profile.observations if o.relation == relation})
        if values:
            out.append(f"{relation}: {', '.join(v or 'unnamed' for v in values)}")
    return out[:MAX_STATES]


def entity_from_profile(user_id: str, profile: Profile) -> EntityItem:
    """A new conversation entity for a profile."""
    span = f"{profile.first.date() if profile.first else '?'}.." \
           f"{profile.last.date() if profile.last else '?'}"
    held = states(profile)
    evidence = list(dict.fromkeys(o.evidence for o in profile.observations))[:MAX_EVIDENCE]
    text = (f"{profile.name} in {profile.conversation_id} (with "
            f"{', '.join(profile.partners) or 'nobody'}), {span}"
            + (f": {'; '.join(held[:3])}" if held else ""))
    return EntityItem(
        id=entity_id(user_id, profile.conversation_id, profile.name), user_id=user_id,
        text=text, title=f"{profile.name} ({profile.conversation_id})", name=profile.name,
        roles=[f"conversation partner of {p}" for p in profile.partners], states=held,
        speaker=profile.name, about=profile.name, conversation_id=profile.conversation_id,
        evidence=evidence, event_time=profile.first, source="entities:turns")


def ensure_entities(store: MemoryStore, user_id: str, conversation_id: str | None = None,
                    corpus: Corpus | None = None) -> list[EntityItem]:
    """Every speaker's entity in one conversation (or all), made where none exists."""
    corpus = corpus or Corpus(store.turns(user_id))
    convs = [conversation_id] if conversation_id else corpus.conversations()
    out: list[EntityItem] = []
    new: list[EntityItem] = []
    for conv in convs:
        for name in corpus.people(conv):
            found = find_entities(store, user_id, conv, name)
            if found:
                out.append(found[0])
                continue
            facts = conversation_facts(store, user_id, conv, name)
            new.append(entity_from_profile(user_id, build_profile(corpus, conv, name,
                                                                  facts=facts)))
    if new:
        store.add_many(new)
    return out + new


def _entities(store: MemoryStore, user_id: str, ids: Sequence[str]) -> list[EntityItem]:
    found = [e for e in store.get_many(user_id, list(ids)) if isinstance(e, EntityItem)]
    if len(found) != len(set(ids)):
        raise KeyError(f"not all of {list(ids)} are entities of user {user_id!r}")
    return found


def record_merge(store: MemoryStore, user_id: str, ids: Sequence[str], reason: str,
                 metadata: dict[str, Any] | None = None) -> str:
    """Store a MERGE of conversation entities; returns the person entity's id."""
    ents = _entities(store, user_id, ids)
    meta = {"reason": reason[:1000], **(metadata or {})}
    existing = [e.dst for ent in ents for e in store.edges(user_id, src=ent.id, relation=SAME_AS)]
    person = store.get(user_id, existing[0]) if existing else None
    pooled = [*(person.evidence if isinstance(person, EntityItem) else [])]
    pooled += [f"{e.conversation_id}:{ev}" for e in ents for ev in e.evidence]
    held = [*(person.states if isinstance(person, EntityItem) else [])]
    held += [f"[{e.conversation_id}] {s}" for e in ents for s in e.states]
    names = sorted({e.name for e in ents})
    convs = sorted({ev.rsplit(":", 2)[0] for ev in pooled if ev.count(":") >= 2}
                   | {e.conversation_id or "" for e in ents})
    with store.transaction():
        if isinstance(person, EntityItem):
            store.update(user_id, person.id, evidence=list(dict.fromkeys(pooled)),
                         states=list(dict.fromkeys(held)),
                         aliases=sorted({*person.aliases, *names} - {person.name}),
                         text=f"{person.name}: one person across {', '.join(convs)}")
            person_id = person.id
        else:
            first = min((e.event_time for e in ents if e.event_time), default=None)
            person_id = store.add(EntityItem(
                id=entity_id(user_id, None, "+".join(sorted(e.id for e in ents))),
                user_id=user_id, name=names[0], aliases=names[1:],
                text=f"{names[0]}: one person across {', '.join(convs)}",
                title=f"{names[0]} (person)", roles=sorted({r for e in ents for r in e.roles}),
                states=list(dict.fromkeys(held)), evidence=list(dict.fromkeys(pooled)),
                about=names[0], event_time=first, source="reconciler"))
        store.add_edges(Edge(user_id=user_id, src=e.id, dst=person_id, relation=SAME_AS,
                             metadata=meta) for e in ents)
    return person_id


def record_separate(store: MemoryStore, user_id: str, a: str, b: str, reason: str,
                    metadata: dict[str, Any] | None = None) -> None:
    """Store a SEPARATE: a ``distinct_from`` edge from ``a`` to ``b`` with the reason."""
    _entities(store, user_id, [a, b])
    store.add_edges([Edge(user_id=user_id, src=a, dst=b, relation=DISTINCT_FROM,
                          metadata={"reason": reason[:1000], **(metadata or {})})])


def supersede_across(store: MemoryStore, user_id: str, facts: Sequence[FactItem], reason: str
                     ) -> list[tuple[str, str]]:
    """Supersede, per single-valued relation, each still-valid fact by the next one in
    time with another value; returns the (old, new) id pairs."""
    done: list[tuple[str, str]] = []
    groups: dict[str, list[FactItem]] = {}
    for f in facts:
        relation = fact_relation(f.predicate)
        if relation in SINGLE_VALUED and f.event_time is not None:
            groups.setdefault(relation, []).append(f)
    for group in groups.values():
        group.sort(key=attrgetter("event_time"))  # each has one (filtered above)
        for old, new in pairwise(group):
            if (old.valid_to is None and new.event_time != old.event_time
                    and not same_value(old.object, new.object)):
                supersede(store, user_id, old.id, new.id,
                          f"{reason}: '{new.object}' follows '{old.object}'")
                done.append((old.id, new.id))
    return done
