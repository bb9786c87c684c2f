"""Session memory -> conversation memory: dedup, supersession, and the fact graph.

Grounded facts of a conversation are reconciled bottom-up, per person (``about``): one
person's facts never merge into another's, even when the words match.

1. **Session**: within a session, exact duplicates merge (same person, same folded
   text), then fuzzy ones (rapidfuzz ``token_set_ratio`` >= ``fuzzy``): evidence and tags
   are pooled, the higher confidence kept. No LLM is asked — exact before fuzzy, fuzzy
   before any model, as the design asks.
2. **Conversation**: the same again across sessions, so a fact restated in session 9
   keeps its first time and gains session 9's evidence. Then contradictions: a later
   fact with the same person and a *single-valued* predicate (where one lives, works,
   whom one is married to...) but another object supersedes the earlier one — the old
   fact gets ``valid_to`` and a ``supersedes`` edge, and is never deleted.
3. **Graph**: ``derived_from`` (fact -> each evidence turn), ``follows`` (a person's facts
   in time order), ``related`` (a person's facts with the same predicate), ``supersedes``.
   Retrieval's one-hop expansion walks them: a fact hit pulls in its turns and back.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise
from operator import attrgetter

from pydantic import BaseModel
from rapidfuzz import fuzz

from . import text as textmod
from .models import Edge, FactItem, Item, QAPairItem
from .person_patterns import SINGLE_VALUED
from .profile import fact_relation, same_value
from .store.protocol import MemoryStore
from .supersede import supersede


class HierarchyStats(BaseModel):
    """What reconciliation did to one conversation's facts."""

    facts_in: int = 0
    exact_merged: int = 0
    fuzzy_merged: int = 0
    superseded: int = 0
    stored: int = 0
    edges: int = 0


def _fold(text: str) -> str:
    return " ".join(textmod.words(text))


def _merge(keep: FactItem, other: FactItem) -> None:
    keep.evidence = list(dict.fromkeys([*keep.evidence, *other.evidence]))
    keep.tags = list(dict.fromkeys([*keep.tags, *other.tags]))[:5]
    keep.confidence = max(keep.confidence, other.confidence)


def dedup(facts: Sequence[FactItem], fuzzy: float, stats: HierarchyStats,
          into: dict[int, FactItem] | None = None) -> list[FactItem]:
    """Merge duplicates per person: exact folded text first, then fuzzy; order kept.

    ``into`` (if given) maps ``id()`` of each merged-away fact to the fact it joined."""
    kept: list[FactItem] = []
    exact: dict[tuple[str, str], FactItem] = {}
    by_person: dict[str, list[FactItem]] = defaultdict(list)
    for fact in facts:
        person = fact.about or ""
        key = (person, _fold(fact.text))
        if key in exact:
            _merge(exact[key], fact)
            stats.exact_merged += 1
            if into is not None:
                into[id(fact)] = exact[key]
            continue
        twin = next((k for k in by_person[person]
                     if fuzz.token_set_ratio(_fold(k.text), key[1]) >= fuzzy), None)
        if twin is not None:
            _merge(twin, fact)
            stats.fuzzy_merged += 1
            if into is not None:
                into[id(fact)] = twin
            continue
        exact[key] = fact
        by_person[person].append(fact)
        kept.append(fact)
    return kept


def single_valued(predicate: str) -> bool:
    """True when ``predicate`` names a state held with one value at a time (a job, a
    home, a spouse: ``profile.fact_relation``, the reconciler's reading too)."""
    return fact_relation(predicate) in SINGLE_VALUED


def contradictions(facts: Sequence[FactItem]) -> list[tuple[FactItem, FactItem]]:
    """(newer, older) pairs: same person, same single-valued relation, another value."""
    pairs: list[tuple[FactItem, FactItem]] = []
    groups: dict[tuple[str, str], list[FactItem]] = defaultdict(list)
    for fact in facts:
        if fact.event_time is not None and single_valued(fact.predicate):
            groups[(fact.about or "", fact_relation(fact.predicate))].append(fact)
    for group in groups.values():
        group.sort(key=attrgetter("event_time"))  # each has one (filtered above)
        for older, newer in pairwise(group):
            if newer.event_time != older.event_time and not same_value(older.object,
                                                                       newer.object):
                pairs.append((newer, older))
    return pairs


def _graph_edges(user_id: str, facts: Sequence[FactItem], items: Iterable[Item],
                 turn_ids: dict[str, str]) -> list[Edge]:
    edges = [Edge(user_id=user_id, src=item.id, dst=turn_ids[e], relation="derived_from")
             for item in items for e in item.evidence if e in turn_ids]
    by_person: dict[str, list[FactItem]] = defaultdict(list)
    for fact in facts:
        by_person[fact.about or ""].append(fact)
    for group in by_person.values():
        group.sort(key=lambda f: (f.event_time is None, f.event_time))
        edges += [Edge(user_id=user_id, src=a.id, dst=b.id, relation="follows", weight=0.5)
                  for a, b in itertools.pairwise(group)]
        same: dict[str, list[FactItem]] = defaultdict(list)
        for fact in group:
            same[" ".join(sorted(textmod.tokens(fact.predicate)))].append(fact)
        edges += [Edge(user_id=user_id, src=a.id, dst=b.id, relation="related", weight=0.5)
                  for chain in same.values() for a, b in itertools.pairwise(chain)]
    return edges


class FactEvent(BaseModel):
    """What happened to one proposed fact: ``ADD`` (stored), ``NONE`` (it was already
    known: merged into ``id``), or ``UPDATE`` (stored as ``id``, ending ``previous_id``,
    an earlier value of the same single-valued relation, whose text was ``previous``)."""

    id: str
    memory: str
    event: str
    previous: str | None = None
    previous_id: str | None = None


def reconcile_conversation(store: MemoryStore, user_id: str, facts: Sequence[FactItem],
                           qa: Sequence[QAPairItem], turn_ids: dict[str, str], *,
                           fuzzy: float = 90.0, existing: Sequence[FactItem] = (),
                           events: list[FactEvent] | None = None) -> HierarchyStats:
    """Reconcile one conversation's grounded facts session by session, then store them.

    Args:
        store: where facts, QA pairs and edges are written (one transaction).
        user_id: the tenant.
        facts, qa: the grounded items of every chunk of the conversation.
        turn_ids: source turn id -> store turn id, for ``derived_from`` edges.
        fuzzy: the ``token_set_ratio`` at which two facts of one person are one fact.
        existing: facts already stored for this conversation and still valid (an
            incremental ingest): new facts merge into them and may supersede them.
        events: if given, receives one :class:`FactEvent` per proposed fact.
    """
    stats = HierarchyStats(facts_in=len(facts))
    into: dict[int, FactItem] = {}
    sessions: dict[str | None, list[FactItem]] = defaultdict(list)
    for fact in facts:
        sessions[fact.session_id].append(fact)
    per_session = [f for group in sessions.values() for f in dedup(group, fuzzy, stats, into)]
    known = {id(f) for f in existing}
    merged = dedup([*existing, *per_session], fuzzy, stats, into)
    with store.transaction():
        for fact in merged:
            fact.id = store.add(fact)  # a known fact re-added merges its new evidence
        for pair in qa:
            pair.id = store.add(pair)
        ended_by: dict[int, FactItem] = {}
        for newer, older in contradictions(merged):
            if id(newer) in known or older.valid_to is not None:
                continue  # settled by an earlier ingest
            ended = supersede(store, user_id, older.id, newer.id,
                              f"{newer.about} {newer.predicate}: '{newer.object}' replaces "
                              f"'{older.object}'")
            older.valid_to = ended.valid_to  # the persona reads the in-memory facts
            ended_by[id(newer)] = older
            stats.superseded += 1
        fresh = [f for f in merged if id(f) not in known]
        edges = _graph_edges(user_id, merged if not known else fresh, [*fresh, *qa], turn_ids)
        stats.edges = store.add_edges(edges) + stats.superseded
    stats.stored = len(fresh)
    if events is not None:
        for fact in facts:
            keeper = fact
            while id(keeper) in into:
                keeper = into[id(keeper)]
            if keeper is not fact or id(keeper) in known:
                events.append(FactEvent(id=keeper.id, memory=keeper.text, event="NONE"))
            elif id(fact) in ended_by:
                old = ended_by[id(fact)]
                events.append(FactEvent(id=fact.id, memory=fact.text, event="UPDATE",
                                        previous=old.text, previous_id=old.id))
            else:
                events.append(FactEvent(id=fact.id, memory=fact.text, event="ADD"))
    return stats
