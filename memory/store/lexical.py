"""Lexical search: bm25 over the full-text index of turns or items, and the tag channel.

Holds ``LexicalSearch``: ``lexical``/``lexical_refs`` (bm25 top k with common-term
splitting), ``term_docs``, ``texts_since`` (the text written after given rowids) and
``tag_vocabulary``/``tagged``.

SQLite-specific, nearly all of it: the tenant token prefixed to every indexed term;
document counts read from the ``*_vocab`` fts5vocab tables (``_term_docs``); the
posting-list scorer (``postings.py``), which reads FTS5's own ``*_instances``,
``*_docsize`` and ``*_data`` tables to compute bm25 in Python over the tenant's own
statistics, with row lengths re-synced on ``PRAGMA data_version``. FTS5's ``bm25()`` is
not used: its ``N`` and ``avgdl`` span every tenant of the file. A PostgreSQL backend
replaces this module (bm25 written in SQL, ``pg/lexical.py``). Portable: the tag queries
and ``texts_since`` apart from its rowids."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import text as textmod
from ..locking import stored_json
from ..models import with_caption
from .filters import Filters
from .nodes import _DISTINCT, NodeLookups
from .postings import (
    INDEXES,
    RowLengths,
    Scored,
    bm25_scores,
    read_postings,
    with_terms,
)
from .rows import _TABLE, Ref, tenant_token
from .shared import MISS


class LexicalSearch(NodeLookups):
    """bm25 search over the full-text index, and the tag channel (see the module)."""

    FILTER_CHUNK = 500  # rowids in the first filter check, best scores first (``_passing``)

    def lexical(self, user_id: str, query_tokens: list[str], *, node: str, k: int,
                **options: Any) -> list[tuple[str, float]]:
        """:meth:`lexical_refs` as ``[(id, score)]``."""
        return self.with_ids(user_id, self.lexical_refs(user_id, query_tokens, node=node, k=k,
                                                        **options))

    def lexical_refs(
        self,
        user_id: str,
        query_tokens: list[str],
        *,
        node: str,
        k: int,
        filters: Filters | None = None,
        context_weight: float = 0.0,
        common_share: float = 0.0,
        common_min_docs: int = 0,
        common_budget: int = 0,
        idf_shift: float = 0.0,
    ) -> list[tuple[Ref, float]]:
        """bm25 top-k over turns or items as ``[(ref, score)]`` with higher = better, ties
        to the lower rowid; ``N``, ``n`` and ``avgdl`` are the tenant's own (postings.py),
        and ``idf_shift`` is added to every term's idf.

        ``context_weight`` is the bm25 weight of a turn's preceding-turn column. With
        ``common_share`` > 0, in a tenant index of at least ``common_min_docs`` rows, query
        terms found in more than that share of its rows are *common*: they still add their
        bm25 to every row that holds a rarer query term, but a row holding only common
        terms is not scored (the rarest term always counts as rare).

        Why: scoring costs per matched row, and a Zipf-common term matches most rows while
        its low idf rarely lifts a row that has no rarer term into the top k. Measured on
        the scale benchmark's 100k corpus (100 queries, lexical CPU time, top-10 overlap
        with scoring every term): skipping terms above 10% outright, as before, 0.98
        overlap; the split at 2%, 0.99 overlap at 0.75x the cost (at 1%: 0.93 at 0.4x).
        ``common_budget`` bounds the rows scored on a huge index: at 1M items a budget of
        20,000 rows kept the search's top-10 overlap with full scoring at 0.98 (as skipping
        terms above 10% did) at 0.45x its CPU time p95.

        ``filters``: only rows passing them are returned (the scores are the tenant's,
        filtered or not).
        """
        # Rows a write transaction added may be rolled back: none may enter the caches
        # (_lengths_of). A transaction that has not written to this index reads them,
        # as a fact being learned looks for its neighbours before it is written.
        fresh = self.index_unsettled(node)
        lengths = self._lengths_of(user_id, node, fresh)
        stats = lengths.stats(user_id, idf_shift)
        if stats is None or k <= 0:
            return []
        common: list[str] = []
        if common_share > 0:
            if (not fresh and stats.rows >= max(common_min_docs, 1) and len(query_tokens) > 1
                    and set(self._weights(node, context_weight)) == set(INDEXES[node].columns)):
                # The split reads every token's count, and every token's list is read
                # after it (as rare or as common): read the lists first, and their lengths
                # are the counts (``_term_docs``), with no walk of the vocabulary table.
                self._lists(user_id, node, textmod.match_tokens(query_tokens), context_weight)
            query_tokens, common = self._split_common(query_tokens, node, common_share,
                                                      common_min_docs, user_id, stats.rows,
                                                      common_budget)
        query_tokens = textmod.match_tokens(query_tokens)
        if not query_tokens:
            return []
        scored = bm25_scores(lengths, stats, self._lists(user_id, node, query_tokens,
                                                         context_weight, fresh))
        if scored is None:
            return []
        if common:
            # The rows with a rare and a common term, scored on all terms; a rare-only row
            # keeps its score (bm25 adds up over terms).
            scored = with_terms(lengths, stats, scored,
                                self._lists(user_id, node, common, context_weight, fresh))
        if filters is not None and filters.active():
            return self._passing(user_id, node, scored, k, filters)
        return [((node, r), v) for r, v in scored.top(k)]

    def texts_since(self, user_id: str, turn_rowid: int = 0, item_rowid: int = 0, *,
                    limit: int | None = None) -> tuple[list[str], int, int]:
        """The searchable text of the tenant's turns and items stored after the given rowids.

        Returns ``(texts, last turn rowid, last item rowid)``; pass the rowids back to read
        only what was written since. At most ``limit`` rows of each table are read.
        """
        texts: list[str] = []
        last = {"turns": turn_rowid, "items": item_rowid}
        columns = {"turns": "speaker || ': ' || text, metadata", "items":
                   "coalesce(title, '') || ' ' || text || ' ' || tags, NULL"}
        for table, since in last.items():
            # A first read walks the tenant's index; a later one the rowids written since
            # ("+user_id" keeps the planner off the tenant index, which would visit every row).
            where = "user_id = ?" if since == 0 else "rowid > ? AND +user_id = ?"
            args: list[Any] = [user_id] if since == 0 else [since, user_id]
            sql = f"SELECT rowid, {columns[table]} FROM {table} WHERE {where} ORDER BY rowid"
            if limit is not None:
                sql += f" LIMIT {int(limit)}"
            for rowid, body, metadata in self.conn.execute(sql, args):
                texts.append(with_caption(body, stored_json(metadata, f"{table} row {rowid}", dict))
                             if metadata else body)
                last[table] = max(last[table], rowid)
        return texts, last["turns"], last["items"]

    def tag_vocabulary(self, user_id: str) -> list[str]:
        """The tenant's distinct tags, case-folded, ascending.

        Read in full, then kept while this process only adds items: their tags join it
        (``_index_item``). A delete or rewrite of an item, another process's commit or a
        rolled-back write makes the next call read it again.
        """
        # Why kept: a full read after every write cost ~15 ms at 100k items.
        with self._lock:
            foreign = self.data_version()[1]
            kept = self._tag_sets.get(user_id)
            if kept is not None and kept[0] == foreign:
                self._tag_sets.move_to_end(user_id)
                return kept[1]
            # A skip scan over the primary key, one seek per distinct tag: DISTINCT
            # walked every (tag, item) pair of the tenant.
            tags = [r[0] for r in self.conn.execute(
                _DISTINCT.format(table="item_tags", column="tag"), (user_id,))]
            self._tag_sets[user_id] = (foreign, tags)
            while len(self._tag_sets) > self.CACHE_ENTRIES:
                self._tag_sets.popitem(last=False)
            return tags

    def tagged(self, user_id: str, tags: Sequence[str], limit: int) -> list[Ref]:
        """The tenant's items carrying any of ``tags``: most tags matched, then newest.

        Only the newest ``limit`` items of each tag are considered: they come straight off
        the primary key, where grouping every item of a common tag took ~240 ms (p95) at
        1M items. An older item matching several tags can therefore be missed.
        """
        counts: dict[int, int] = defaultdict(int)
        for tag in tags:
            for (rowid,) in self.conn.execute(
                "SELECT item_rowid FROM item_tags WHERE user_id = ? AND tag = ?"
                " ORDER BY item_rowid DESC LIMIT ?", (user_id, tag, limit),
            ):
                counts[rowid] += 1
        best = sorted(counts, key=lambda r: (counts[r], r), reverse=True)[:limit]
        return [("item", r) for r in best]

    def _passing(self, user_id: str, node: str, scored: Scored, k: int, filters: Filters
                 ) -> list[tuple[Ref, float]]:
        """The best ``k`` of ``scored`` that pass ``filters``, read best first in chunks
        (the filters are checked on the table, a chunk of rowids at a time; each chunk
        twice the last, so a filter few rows pass costs a few statements, not hundreds)."""
        where, args = filters.sql(node, "t")
        order = np.argsort(-scored.scores, kind="stable")  # ties: the lower rowid first
        out: list[tuple[Ref, float]] = []
        start, size = 0, self.FILTER_CHUNK
        while start < len(order):
            chunk = order[start : start + size]
            start, size = start + size, min(2 * size, 30_000)  # under SQLite's 32,766 ?s
            rows = scored.rows[chunk].tolist()
            ok = {r for (r,) in self.conn.execute(
                f"SELECT t.rowid FROM {_TABLE[node]} t WHERE t.rowid IN"
                f" ({','.join('?' * len(rows))}) AND t.user_id = ?{where}",
                [*rows, user_id, *args])}
            out += [((node, r), v) for r, v in zip(rows, scored.scores[chunk].tolist(),
                                                   strict=True) if r in ok]
            if len(out) >= k:
                break
        return out[:k]

    def _lists(self, user_id: str, node: str, tokens: list[str], context_weight: float,
               fresh: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
        """The tenant's posting lists of ``tokens`` (``Postings.get``; read anew, not
        kept, when ``fresh``), in query order."""
        tenant = tenant_token(user_id)
        version = self.data_version()
        weights = self._weights(node, context_weight)
        index = INDEXES[node]
        terms = [textmod.tenant_term(tenant, textmod.fts_term(t)) for t in dict.fromkeys(tokens)]
        if fresh:
            return [read_postings(self.conn, index.instances, term, weights) for term in terms]
        # _lengths_of synced them to this version (lexical_refs reads them first).
        lengths = self._lengths_of(user_id, node)
        return self._postings.get(self.conn, version, index, lengths, terms, weights)

    @staticmethod
    def _weights(node: str, context_weight: float) -> dict[str, float]:
        """The searched FTS5 columns and their bm25 weights."""
        if node == "turn" and context_weight:
            return {"body": 1.0, "context": float(context_weight)}
        return {"body": 1.0}

    def _lengths_of(self, user_id: str, node: str, fresh: bool = False) -> RowLengths:
        """The index's row lengths, synced when this or another process has written; with
        ``fresh``, the tenant's rows read now (a write transaction's uncommitted rows
        must not stay in the shared cache past a rollback)."""
        if fresh:
            fts, columns = ("turns_fts", 3) if node == "turn" else ("items_fts", 2)
            return RowLengths.of_tenant(self.conn, fts, columns, _TABLE[node], user_id)
        version = self.data_version()
        seen = self._lengths_at.get(node)
        cache = self._lengths[node]
        if seen != version:
            cache.sync(self.conn, self._touched[node], foreign=seen is not None
                       and seen[1] != version[1])
            self._touched[node].clear()
            self._lengths_at[node] = version
        return cache

    def _split_common(self, tokens: list[str], node: str, share: float, min_docs: int,
                      user_id: str, total: int, budget: int = 0
                      ) -> tuple[list[str], list[str]]:
        """``tokens`` as (rare, common): common ones are in more than ``share`` of the
        tenant's ``total`` rows of a big index (see ``lexical``). A small index keeps every
        token rare."""
        if total < max(min_docs, 1) or len(tokens) < 2:
            return tokens, []
        df = self._term_docs(tokens, node, user_id)
        kept: set[str] = set()
        rows = 0
        for n, term in enumerate(sorted(set(tokens), key=lambda t: (df[t], t))):
            # The rarest term always counts; then rarer first, while within the budget.
            if n and (df[term] > share * total or (budget and rows + df[term] > budget)):
                break
            kept.add(term)
            rows += df[term]
        rare = [t for t in dict.fromkeys(tokens) if t in kept]
        return rare, [t for t in dict.fromkeys(tokens) if t not in kept]

    def term_docs(self, user_id: str, tokens: Sequence[str], *, cap: int | None = None
                  ) -> dict[str, int]:
        """How many of the tenant's turns and items hold each of ``tokens`` (index tokens,
        ``text.tokens``); with ``cap``, ``min(count, cap)``: a count that stops at ``cap``
        rows, which for a common term reads a sliver of its posting list."""
        turns = self._term_docs(list(tokens), "turn", user_id, cap)
        items = self._term_docs(list(tokens), "item", user_id, cap)
        return {t: turns.get(t, 0) + items.get(t, 0) if cap is None
                else min(turns.get(t, 0) + items.get(t, 0), cap) for t in tokens}

    def _term_docs(self, tokens: list[str], node: str, user_id: str,
                   cap: int | None = None) -> dict[str, int]:
        """How many of the tenant's rows hold each token (FTS5's own counts, cached), or
        ``min(count, cap)``.

        Outside a write transaction the counts are kept while the tenant's own rows in
        the index stay as they are (``RowLengths.generation``), so another tenant's
        writes leave them: each count is a read of the term's whole posting list, and
        re-reading a big tenant's after every write elsewhere cost a search ~40 ms."""
        vocab = "turns_vocab" if node == "turn" else "items_vocab"
        instances = INDEXES[node].instances
        tenant = tenant_token(user_id)
        df = {}
        with self._lock:  # the version and the counts read under it are of one moment
            kept = None
            if not self._depth:  # uncommitted rows must not outlive a rollback in the cache
                kept = (self._lengths_of(user_id, node).generation(user_id),
                        self.data_version()[1])
            for token in set(tokens):
                # the tenant's own document count
                term = textmod.tenant_term(tenant, textmod.fts_term(token))

                def count(t: str = term) -> int:
                    # A list this search read already holds the count (lexical_refs reads
                    # a split query's lists first): the vocabulary table walks the list.
                    kept_docs = None if self._depth else self._postings.docs(
                        INDEXES[node], self.data_version(), t)
                    if kept_docs is not None:
                        return kept_docs
                    return int((self.conn.execute(f"SELECT doc FROM {vocab} WHERE term = ?",
                                                  (t,)).fetchone() or (0,))[0])

                def capped(t: str = term, most: int = cap or 0) -> int:
                    # The instances come in row order: DISTINCT stops at ``most`` rows.
                    return int(self.conn.execute(
                        f"SELECT count(*) FROM (SELECT DISTINCT doc FROM {instances}"
                        " WHERE term = ? LIMIT ?)", (t, most)).fetchone()[0])

                if kept is None:
                    df[token] = (self._cached(("df", vocab, term), count) if cap is None
                                 else min(self._cached(("df", vocab, term), count), cap))
                    continue
                # A cache of its own, its versions the tenant's (not data versions); a
                # full count serves a capped one.
                counts = self._term_counts
                value = counts.get(("df", user_id, vocab, term, None), kept)
                if value is MISS and cap is not None:
                    value = counts.get(("df", user_id, vocab, term, cap), kept)
                    if value is MISS:
                        value = capped()
                        counts.put(("df", user_id, vocab, term, cap), kept, value)
                elif value is MISS:
                    value = count()
                    counts.put(("df", user_id, vocab, term, None), kept, value)
                df[token] = value if cap is None else min(value, cap)
        return df
