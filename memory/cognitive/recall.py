"""Recall across the long-term memory types, the way seed 003 describes it.

A keyword-and-vector search (the store's ``Retriever``) over semantic facts, procedures,
episodes and consolidated summaries; summaries preferred over the episodes they
compress (``Episodic.prefer_summaries``); then, with ``hops``, a walk along
``similar_to`` and ``contradicts`` edges brings in neighbouring facts; and a fact that
another contradicts always comes with it, so a reader sees both sides. Recalled
procedures count as used (their ``usage_count`` grows).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from ..models import EpisodicItem, Item, ProceduralItem
from ..retrieval import Retriever
from ..store import Filters
from .base import CONTRADICTS, DERIVES_FROM, PROCEDURE_DERIVES_FROM, SIMILAR_TO

if TYPE_CHECKING:
    from .mind import Mind

LONG_TERM: tuple[str, ...] = ("semantic", "procedural", "episodic", "consolidated")
MAX_NODES = 30  # the seed's cap on one recall, hops included
TASK_LABEL = "task"  # episodes of finished tasks: the reasoner's own past, not knowledge


class Conflict(BaseModel):
    """Another memory that disagrees with this one on a value."""

    other_id: str
    newer: bool = Field(description="whether this memory is the newer of the two")
    values: list[str] = Field(default_factory=list)


class Recalled(BaseModel):
    """One recalled memory: what it says, where and when it came from, how it was found."""

    id: str
    kind: str
    text: str
    score: float
    title: str = ""
    document: str = Field(default="", description="title of the episode it derives from")
    source: str = ""
    event_time: datetime | None = None
    via: str = "search"
    steps: list[str] = Field(default_factory=list)
    conflicts: list[Conflict] = Field(default_factory=list)


def recall(mind: Mind, query: str, *, k: int = 10, hops: int = 0,
           include_tasks: bool = False) -> list[Recalled]:
    """The best long-term memories of ``mind``'s tenant for ``query``.

    Args:
        k: memories found by the search itself; ``hops`` adds up to ``k`` neighbours
            (never more than 30 memories in all).
        hops: 0, 1 or 2 steps along ``similar_to`` / ``contradicts`` edges.
        include_tasks: also return episodes of the reasoner's own finished tasks.
    """
    if hops not in (0, 1, 2):
        raise ValueError("hops must be 0, 1 or 2")
    store, user = mind.store, mind.user_id
    if k <= 0 or not query.strip():
        return []
    hits = Retriever(store, store.embedder).search(
        user, query, k=k, nodes=("item",),
        filters=Filters(kinds=list(LONG_TERM), current=list(LONG_TERM)))
    hits = mind.episodic.prefer_summaries(hits)
    scores = {h.id: h.score for h in hits}
    via = dict.fromkeys(scores, "search")
    if hops:
        for node, (depth, weight, seed) in store.neighbors(
                user, list(scores), hops=hops, relations=[SIMILAR_TO, CONTRADICTS]).items():
            if node not in scores and len(scores) < min(MAX_NODES, 2 * k):
                scores[node] = scores[seed] * weight * 0.5 ** depth
                via[node] = "similar_to"
    items = {i.id: i for i in store.get_many(user, list(scores)) if i.kind in LONG_TERM}
    conflicts = _conflicts(mind, list(items))
    for item_id, found in list(conflicts.items()):
        for conflict in found:
            if conflict.other_id not in items and len(items) < MAX_NODES:
                other = store.get(user, conflict.other_id)
                if other is not None and other.valid_to is None:
                    items[other.id] = other
                    scores[other.id] = scores.get(item_id, 0.0)
                    via[other.id] = "contradicts"
                    conflicts.setdefault(other.id, []).append(Conflict(
                        other_id=item_id, newer=not conflict.newer, values=conflict.values))
    documents = _documents(mind, list(items))
    out = [_recalled(items[i], scores[i], via[i], conflicts.get(i, []), documents.get(i, ""))
           for i in items if include_tasks or not _is_task(items[i])]
    out.sort(key=lambda r: -r.score)
    _count_use(mind, [items[r.id] for r in out if r.kind == "procedural"])
    return out


def _conflicts(mind: Mind, ids: list[str]) -> dict[str, list[Conflict]]:
    """Each id's contradictions, either direction (``contradicts`` runs newer -> older)."""
    found: dict[str, list[Conflict]] = {}
    for item_id in ids:
        for newer, edges in ((True, mind.store.edges(mind.user_id, src=item_id,
                                                     relation=CONTRADICTS)),
                             (False, mind.store.edges(mind.user_id, dst=item_id,
                                                      relation=CONTRADICTS))):
            for edge in edges:
                found.setdefault(item_id, []).append(Conflict(
                    other_id=edge.dst if newer else edge.src, newer=newer,
                    values=[str(v) for v in edge.metadata.get("values", [])]))
    return found


def _documents(mind: Mind, ids: list[str]) -> dict[str, str]:
    """Each fact's or procedure's source document title (its episode's title)."""
    episode_of: dict[str, str] = {}
    for item_id in ids:
        for relation in (DERIVES_FROM, PROCEDURE_DERIVES_FROM):
            edges = mind.store.edges(mind.user_id, src=item_id, relation=relation, limit=1)
            if edges:
                episode_of[item_id] = edges[0].dst
    titles = {e.id: e.title for e in mind.store.get_many(mind.user_id,
                                                          list(set(episode_of.values())))}
    return {i: titles.get(e, "") for i, e in episode_of.items()}


def _is_task(item: Item) -> bool:
    return isinstance(item, EpisodicItem) and item.source_label == TASK_LABEL


def _recalled(item: Item, score: float, via: str, conflicts: list[Conflict],
              document: str) -> Recalled:
    unique = {c.other_id: c for c in conflicts}
    return Recalled(id=item.id, kind=item.kind, text=item.text, score=round(score, 6),
                    title=item.title, document=document, source=item.source,
                    event_time=item.event_time,
                    via=via, steps=item.steps if isinstance(item, ProceduralItem) else [],
                    conflicts=list(unique.values()))


def _count_use(mind: Mind, procedures: list[Item]) -> None:
    for proc in procedures:
        if isinstance(proc, ProceduralItem):
            mind.store.update(mind.user_id, proc.id, usage_count=proc.usage_count + 1)
