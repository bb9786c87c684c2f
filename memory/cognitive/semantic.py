"""Semantic memory: facts and concepts, linked by similarity, provenance and disagreement.

On write (``Semantic.learn``) a fact gets a ``SIMILAR_TO`` edge to every current fact of
the tenant whose token Jaccard exceeds ``settings.similarity_threshold`` (candidates
come from the lexical index, at most ``CANDIDATES``, then exact Jaccard), a
``DERIVES_FROM`` edge to its episode, and a ``CONTRADICTS`` edge (newer -> older) to
each similar fact about the same concept that disagrees on a value and was not read
from the same episode (one document's lines are one source's statements):

* both state numbers (``values.numbers``) and each states one the other does not
  ("1,200 users" vs "900 users"; "1,200 users, up from 900" does not contradict
  "1,200 users": one side merely adds a value);
* or neither states numbers and the wording differs by one short replaced span, each
  side having 1-3 tokens the other lacks and the rest of the words alike ("captain is
  Ola Berg" vs "captain is Siri Dahl"), unless the two spans name one value
  (``profile.same_value``, the personal-memory rule for one relation value spelled two
  ways: "Ola Berg" vs "Ola Bergh"). A replaced qualifier counts too ("from markdown"
  vs "quickly"): the rule is lexical, so the edge is a flag for the reader.

Nothing is superseded: both claims stay current and the reader (or another layer,
``supersede.py``) decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel

from ..models import Edge, SemanticItem
from ..profile import same_value
from ..store import Cond, Filters, Sort
from ..text import tokens
from .base import CONTRADICTS, DERIVES_FROM, SIMILAR_TO, Lifecycle, jaccard, token_set
from .values import quantities

CANDIDATES = 200
"""Most facts a new one is compared with (the lexical index's best matches)."""
MAX_REPLACED = 3
"""Most tokens a side of a replaced span may have for two wordings to disagree on it."""


class Contradiction(BaseModel):
    """Another fact that disagrees with one on a value, and which of the two is newer."""

    other_id: str
    newer_id: str
    values: list[str]
    reason: str


class Semantic(Lifecycle):
    """A tenant's facts: learned with similarity, provenance and contradiction edges."""

    def learn(self, concept: str, text: str, *, confidence: float = 1.0, source: str = "",
              episode_id: str | None = None, event_time: datetime | None = None,
              tags: Sequence[str] = ()) -> str:
        """Store a fact about ``concept`` and link it (see the module); returns its id.

        An exact duplicate of a stored fact merges into it (``Store.add``).

        Raises:
            KeyError: ``episode_id`` is not an episodic item of this tenant (nothing
                is written).
            ValueError: ``text`` is empty.
        """
        item = SemanticItem(user_id=self.user_id, concept=concept, title=concept, text=text,
                            confidence=confidence, source=source, event_time=event_time,
                            tags=list(tags), recorded_at=self.clock())
        with self.store.transaction():
            if episode_id is not None:
                episode = self.store.get(self.user_id, episode_id)
                if episode is None or episode.kind != "episodic":
                    raise KeyError(f"no episode {episode_id!r} for user {self.user_id!r}")
            threshold = self.settings.similarity_threshold
            # Only a candidate this similar can link or disagree: the others are not read
            # whole (a long document's facts are each other's candidates).
            near = [(i, score) for i, other in self._candidates(text)
                    if (score := jaccard(text, other)) >= threshold]
            full = {r.id: r for r in self.store.get_many(self.user_id, [i for i, _ in near])}
            new_id = self.store.add(item)
            edges = [Edge(user_id=self.user_id, src=new_id, dst=episode_id,
                          relation=DERIVES_FROM)] if episode_id else []
            for old_id, score in near:
                old = full.get(old_id)
                if old_id == new_id or not isinstance(old, SemanticItem):
                    continue
                if score > threshold:
                    edges.append(Edge(user_id=self.user_id, src=new_id, dst=old.id,
                                      relation=SIMILAR_TO, weight=score,
                                      metadata={"method": "jaccard"}))
                clash = disagreement(item, old)
                if clash is not None and not self._same_document(old.id, episode_id):
                    edges.append(_contradiction(self.user_id, item, new_id, old, *clash))
            self.store.add_edges(edges)
        return new_id

    def _same_document(self, fact_id: str, episode_id: str | None) -> bool:
        """Whether ``fact_id`` was read from episode ``episode_id`` too: the lines of one
        document (a card listing "Point (6)" and "Equipment (23)") are one source's
        statements, not reports that disagree."""
        return episode_id is not None and any(
            e.dst == episode_id for e in self.store.edges(self.user_id, src=fact_id,
                                                          relation=DERIVES_FROM))

    def _candidates(self, text: str) -> list[tuple[str, str]]:
        """(id, text) of the tenant's current facts sharing a token with ``text`` (best
        ``CANDIDATES``, best first)."""
        found = self.store.lexical(self.user_id, tokens(text), node="item", k=CANDIDATES,
                                   filters=Filters(kinds=["semantic"], current=["semantic"]))
        rows = self.store.nodes(self.user_id, [i for i, _ in found])
        return [(i, rows[i]["text"]) for i, _ in found if i in rows]

    def contradictions(self, item_id: str) -> list[Contradiction]:
        """The facts that disagree with ``item_id`` on a value, in either direction."""
        edges = (self.store.edges(self.user_id, src=item_id, relation=CONTRADICTS)
                 + self.store.edges(self.user_id, dst=item_id, relation=CONTRADICTS))
        return [Contradiction(other_id=e.dst if e.src == item_id else e.src,
                              newer_id=e.metadata.get("newer", e.src),
                              values=list(e.metadata.get("values", [])),
                              reason=e.metadata.get("reason", "")) for e in edges]

    def similar(self, item_id: str, *, hops: int = 1) -> list[SemanticItem]:
        """Current facts within ``hops`` (1 or 2) ``SIMILAR_TO`` edges, nearest and most
        similar first."""
        near = self.store.neighbors(self.user_id, [item_id], hops=hops, relations=[SIMILAR_TO])
        rows = self.store.get_many(self.user_id, list(near))
        return [r for r in rows if isinstance(r, SemanticItem) and r.valid_to is None]

    def facts(self, concept: str | None = None, limit: int = 100) -> list[SemanticItem]:
        """Current facts, newest record first; with ``concept``, only those about it
        (compared case-insensitively for ASCII letters, SQLite's NOCASE)."""
        where = [Cond("valid_to", "is null")]
        if concept is not None:
            where.append(Cond("concept", "=", concept, nocase=True))
        found = self.store.kind_items(self.user_id, "semantic", where=where,
                                      order=[Sort("recorded_at", desc=True)], limit=int(limit))
        return [r for r in found if isinstance(r, SemanticItem)]


def disagreement(a: SemanticItem, b: SemanticItem) -> tuple[str, str, str] | None:
    """How two facts disagree on a value: (a's value, b's value, reason), or None.

    Concepts must match (case-folded, or either empty); similarity is the caller's test.
    """
    if a.concept and b.concept and a.concept.casefold() != b.concept.casefold():
        return None
    qa, qb = quantities(a.text), quantities(b.text)
    if qa and qb:
        va, vb = {q.value for q in qa}, {q.value for q in qb}
        if va <= vb or vb <= va:
            return None
        only_a = ", ".join(q.span for q in qa if q.value not in vb)
        only_b = ", ".join(q.span for q in qb if q.value not in va)
        return only_a, only_b, "different numbers"
    if qa or qb:
        return None
    ta, tb = token_set(a.text), token_set(b.text)
    if not (0 < len(ta - tb) <= MAX_REPLACED and 0 < len(tb - ta) <= MAX_REPLACED):
        return None
    span_a, span_b = _replaced(a.text, b.text)
    if set(tokens(span_a)) != ta - tb or set(tokens(span_b)) != tb - ta:
        return None  # the wordings differ in more than one place: not one replaced value
    if same_value(span_a, span_b):
        return None
    return span_a, span_b, "different value in the same statement"


def _replaced(a: str, b: str) -> tuple[str, str]:
    """The words of ``a`` and ``b`` between their common first and last words."""
    wa, wb = a.split(), b.split()
    fold = [w.casefold().strip(".,;:!?") for w in wa], [w.casefold().strip(".,;:!?")
                                                          for w in wb]
    start = 0
    while start < min(len(wa), len(wb)) and fold[0][start] == fold[1][start]:
        start += 1
    end = 0
    while (end < min(len(wa), len(wb)) - start
           and fold[0][len(wa) - 1 - end] == fold[1][len(wb) - 1 - end]):
        end += 1
    return (" ".join(wa[start:len(wa) - end]).strip(".,;:!?"),
            " ".join(wb[start:len(wb) - end]).strip(".,;:!?"))


def _contradiction(user_id: str, new: SemanticItem, new_id: str, old: SemanticItem,
                   new_value: str, old_value: str, reason: str) -> Edge:
    """The ``CONTRADICTS`` edge from the newer fact to the older: the later event time;
    without two distinct event times, the one learned now (the later record)."""
    old_newer = (new.event_time is not None and old.event_time is not None
                 and old.event_time > new.event_time)
    src, dst, values = ((old.id, new_id, [old_value, new_value]) if old_newer
                        else (new_id, old.id, [new_value, old_value]))
    return Edge(user_id=user_id, src=src, dst=dst, relation=CONTRADICTS,
                metadata={"values": values, "newer": src, "reason": reason})
