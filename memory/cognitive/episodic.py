"""Episodic memory: what happened when, consolidated in batches (seed 003, 1.3).

Episodes are numbered per tenant (``temporal_index``, 1 first). Once
``settings.consolidation_batch`` of them are pending, ``consolidate`` hands the oldest
batch's texts to a summariser (the only LLM call of the cognitive lifecycles), writes a
``consolidated`` item with a ``CONSOLIDATES`` edge to each original and flags the
originals ``compressed``; they are kept, never deleted. Retrieval prefers the summary
and falls back to the originals (``prefer_summaries``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ..models import ConsolidatedItem, Edge, EpisodicItem, Hit
from ..store import Cond, Sort
from .base import CONSOLIDATES, Lifecycle

Summariser = Callable[[list[str]], str]


class Episodic(Lifecycle):
    """A tenant's episodes: recorded in order, consolidated into summaries in batches."""

    def record(self, text: str, *, source_label: str = "", event_time: datetime | None = None,
               session_id: str | None = None) -> str:
        """Store an episode numbered 1 + the tenant's highest ``temporal_index``.

        An exact duplicate of a stored episode (same text) merges into it
        (``Store.add``): its id is returned and no number is used.

        Raises:
            ValueError: ``text`` is empty.
        """
        if not text.strip():
            raise ValueError("an episode needs text")
        with self.store.transaction():
            # Read the highest number under the write lock: two writers cannot share one.
            top = self.store.kind_max(self.user_id, "episodic", "temporal_index")
            return self.store.add(EpisodicItem(
                user_id=self.user_id, text=text, source=source_label,
                source_label=source_label, event_time=event_time, session_id=session_id,
                temporal_index=int(top or 0) + 1, recorded_at=self.clock()))

    def episodes(self, *, include_compressed: bool = True,
                 limit: int = 100) -> list[EpisodicItem]:
        """The tenant's first ``limit`` episodes in temporal order."""
        return self._episodes(include_compressed=include_compressed, limit=limit)

    def pending(self) -> list[EpisodicItem]:
        """Every episode no summary covers yet, in temporal order."""
        return self._episodes(include_compressed=False, limit=-1)

    def _episodes(self, *, include_compressed: bool, limit: int) -> list[EpisodicItem]:
        where = () if include_compressed else (Cond("compressed", "=", False, missing=False),)
        found = self.store.kind_items(self.user_id, "episodic", where=where,
                                      order=[Sort("temporal_index")], limit=limit)
        return [e for e in found if isinstance(e, EpisodicItem)]

    def consolidate(self, summarise: Summariser, *, force: bool = False) -> list[str]:
        """Summarise every full batch of pending episodes, oldest first.

        Each batch costs one ``summarise(texts)`` call (texts in temporal order) and is
        written in one transaction: the summary (``event_time``: the batch's earliest),
        a ``CONSOLIDATES`` edge to each original, and ``compressed=True`` on each. A
        summary identical to a stored one merges into it (``Store.add``), which then
        covers both batches.

        Args:
            summarise: episode texts -> one summary (an LLM program).
            force: also consolidate a last partial batch of at least two episodes.

        Returns:
            The consolidated items written, in batch order (each once).

        Raises:
            ValueError: ``summarise`` returned something other than a non-empty string;
                that batch (and any later one) is not written; earlier batches stay.
        """
        size = self.settings.consolidation_batch
        written: list[str] = []
        while True:
            batch = self.pending()[:size]
            if len(batch) < size and not (force and len(batch) >= 2):
                return written
            summary = summarise([e.text for e in batch])
            ids = [e.id for e in batch]
            if not isinstance(summary, str) or not summary.strip():
                raise ValueError(f"the summariser returned no summary for episodes {ids}:"
                                 f" {summary!r}")
            consolidated = self._write(summary, batch)
            if consolidated not in written:
                written.append(consolidated)

    def _write(self, summary: str, batch: list[EpisodicItem]) -> str:
        """One batch's summary, edges and flags, in one transaction; the summary's id."""
        ids = [e.id for e in batch]
        times = [e.event_time for e in batch if e.event_time is not None]
        with self.store.transaction():
            item = ConsolidatedItem(user_id=self.user_id, text=summary, sources=ids,
                                    event_time=min(times) if times else None,
                                    title=f"{len(ids)} episodes", source="consolidation",
                                    recorded_at=self.clock())
            cid = self.store.add(item)
            stored = self.store.get(self.user_id, cid)
            if isinstance(stored, ConsolidatedItem) and stored.sources != ids:
                # Merged into an identical earlier summary: it now covers both batches.
                sources = list(dict.fromkeys([*stored.sources, *ids]))
                earliest = [t for t in (stored.event_time, item.event_time) if t]
                self.store.update(self.user_id, cid, sources=sources,
                                  title=f"{len(sources)} episodes",
                                  event_time=min(earliest) if earliest else None)
            self.store.add_edges(Edge(user_id=self.user_id, src=cid, dst=i,
                                      relation=CONSOLIDATES, metadata={"method": "summary"})
                                 for i in ids)
            for episode_id in ids:
                self.store.update(self.user_id, episode_id, compressed=True)
        return cid

    def originals(self, consolidated_id: str) -> list[EpisodicItem]:
        """The episodes a consolidated item summarises, in temporal order."""
        edges = self.store.edges(self.user_id, src=consolidated_id, relation=CONSOLIDATES,
                                 limit=-1)
        found = self.store.get_many(self.user_id, [e.dst for e in edges])
        return sorted((e for e in found if isinstance(e, EpisodicItem)),
                      key=lambda e: e.temporal_index)

    def summary_of(self, episode_id: str) -> str | None:
        """The id of the consolidated item over ``episode_id``, or None."""
        edges = self.store.edges(self.user_id, dst=episode_id, relation=CONSOLIDATES)
        return edges[-1].src if edges else None

    def prefer_summaries(self, hits: list[Hit]) -> list[Hit]:
        """Prefer the summary, fall back to the originals.

        A hit on a compressed episode stays, at ``settings.compressed_weight`` times its
        score, and its summary joins the hits unless already there (kind
        ``consolidated``, at the episode's unweighted score: the best one when several of
        its episodes hit). Other hits pass unchanged. The result has each id once (at its
        best score), highest score first; on a tie a summary comes before its episodes.
        The flags and summaries are read in one query, the summaries' texts in another.
        """
        compressed = self._summaries(
            [h.id for h in hits if h.node == "item" and h.kind == "episodic"])
        present = {h.id for h in hits}
        wanted = [s for s in compressed.values() if s is not None and s not in present]
        summaries = {i.id: i for i in self.store.get_many(self.user_id,
                                                          list(dict.fromkeys(wanted)))}
        ordered: list[Hit] = []
        for hit in hits:
            if hit.kind != "episodic" or hit.id not in compressed:
                ordered.append(hit)
                continue
            item = summaries.get(compressed[hit.id] or "")
            if item is not None:  # before its episode: it wins a tie
                ordered.append(Hit(id=item.id, node="item", kind=item.kind, text=item.text,
                                   score=hit.score, speaker=item.speaker,
                                   conversation_id=item.conversation_id,
                                   event_time=item.event_time))
            ordered.append(hit.model_copy(
                update={"score": hit.score * self.settings.compressed_weight}))
        best: dict[str, Hit] = {}
        for hit in ordered:
            if hit.id not in best or hit.score > best[hit.id].score:
                best[hit.id] = hit
        return sorted(best.values(), key=lambda h: -h.score)

    def _summaries(self, episode_ids: list[str]) -> dict[str, str | None]:
        """Compressed episodes among ``episode_ids`` -> their summary's id, None when no
        summary links to it any more (one query)."""
        # The latest summary wins, as in summary_of.
        return self.store.kind_sources(self.user_id, "episodic", episode_ids, CONSOLIDATES,
                                       where=[Cond("compressed", "=", True)])
