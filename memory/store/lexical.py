"""Lexical search: bm25 over the full-text index of turns or items, and the tag channel.

Holds ``LexicalSearch``: ``lexical``/``lexical_refs`` (bm25 top k with common-term splitting
and re-runs with feedback terms), ``match_cost``, ``index_rows``, ``texts_since`` (the text
written after given rowids) and ``tag_vocabulary``/``tagged``.

SQLite-specific, nearly all of it: FTS5 ``MATCH`` expressions (``text.fts_match``) and
``bm25()`` with column weights (``_bm25``); the tenant token prefixed to every indexed term;
document counts read from the ``*_vocab`` fts5vocab tables (``_term_docs``); the
posting-list scorer (``postings.py``), which reads FTS5's own ``*_instances``,
``*_docsize`` and ``*_data`` tables to compute the same bm25 in Python, with row lengths
re-synced on ``PRAGMA data_version``. A PostgreSQL backend replaces this module
(``tsvector`` with ``ts_rank_cd``, or bm25 written in SQL). Portable: the tag queries and
``texts_since`` apart from its rowids."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from .. import text as textmod
from ..models import with_caption
from .filters import Filters
from .nodes import NodeLookups
from .postings import RowLengths, Scored, bm25_scores, with_terms
from .rows import _TABLE, Ref, tenant_token


class LexicalSearch(NodeLookups):
    """bm25 search over the full-text index, and the tag channel (see the module)."""

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
        also: Sequence[str] = (),
    ) -> list[tuple[Ref, float]]:
        """bm25 top-k over turns or items as ``[(ref, score)]`` with higher = better.

        ``context_weight`` is the bm25 weight of a turn's preceding-turn column. With
        ``common_share`` > 0, in an index of at least ``common_min_docs`` rows, query terms
        found in more than that share of its rows are *common*: they still add their bm25
        to every row that holds a rarer query term, but a row holding only common terms is
        not scored (the rarest term always counts as rare).

        Why: FTS5 pays for bm25() per matched row (a lookup of the row's length and its
        term positions), about 20x what merely walking the posting lists costs, and a
        Zipf-common term matches most rows while its low idf rarely lifts a row that has
        no rarer term into the top k. Measured on the scale benchmark's 100k corpus (100
        queries, lexical CPU time, top-10 overlap with scoring every term): skipping terms
        above 10% outright, as before, 0.98 overlap; the split at 2%, 0.99 overlap at 0.75x
        the cost (at 1%: 0.93 at 0.4x). ``common_budget`` bounds the rows scored on a huge
        index: at 1M items a budget of 20,000 rows kept the search's top-10 overlap with
        full scoring at 0.98 (as skipping terms above 10% did) at 0.45x its CPU time p95.

        ``also`` terms count as common whatever their frequency: a re-run of the same
        query with them (pseudo-relevance feedback on a big index) then reuses the first
        run's rare-term ranking and only scores the rows holding a query term and one of
        them.
        """
        tenant = tenant_token(user_id)
        common: list[str] = []
        if common_share > 0:
            query_tokens, common = self._split_common(query_tokens, node, common_share,
                                                      common_min_docs, tenant, common_budget)
        common += [t for t in dict.fromkeys(also) if t not in query_tokens and t not in common]
        columns = "body context" if node == "turn" and context_weight else "body"
        match = textmod.fts_match(query_tokens, tenant_token=tenant, columns=columns)
        if match is None or k <= 0:
            return []
        filters = filters or Filters()
        # One slot: the rare-term ranking of the last query, for a re-run with ``also``.
        key = (user_id, match, node, k, context_weight, filters.sql(node, "t"),
               self.data_version())
        if self._rare_memo is not None and self._rare_memo[0] == key:
            rows, scored = self._rare_memo[1]
        else:
            rows, scored = self._ranked(user_id, query_tokens, match, node, k, filters,
                                        context_weight)
            self._rare_memo = (key, (rows, scored))
        also_match = textmod.fts_match(common, tenant_token=tenant, columns=columns)
        if also_match is None:
            return list(rows)
        # The rows with a rare and a common term, scored on all terms; bm25 scores add up
        # over terms with idf from the whole index, so they replace those rows' rare-only
        # scores. A rare-only row outside the first top k is beaten by k rows that score
        # higher with all their terms: the merged top k is exact over the rare rows.
        if scored is not None:
            best = self._with_terms(user_id, scored, common, node, k, context_weight)
            if best is not None:
                return best
        full = dict(self._bm25(user_id, f"({match}) AND ({also_match})", node, k, filters,
                               context_weight))
        merged = dict(rows) | full
        # Ties go to the lower rowid, as in ``Scored.top``: both paths rank alike.
        return sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))[:k]

    def match_cost(self, user_id: str, query_tokens: list[str], *, node: str,
                   common_share: float = 0.0, common_min_docs: int = 0,
                   common_budget: int = 0) -> int:
        """Rows ``lexical`` would score for these tokens (an upper bound: the sum of their
        document counts, after the same common-term skipping)."""
        tenant = tenant_token(user_id)
        if common_share > 0:
            query_tokens = self._split_common(query_tokens, node, common_share,
                                              common_min_docs, tenant, common_budget)[0]
        return sum(self._term_docs(query_tokens, node, tenant).values())

    def index_rows(self, node: str) -> int:
        """Rows in the full-text index of turns or items, all tenants (cached)."""
        return self._cached(("fts_rows", node), lambda: self.conn.execute(
            f"SELECT count(*) FROM {'turns_fts' if node == 'turn' else 'items_fts'}"
        ).fetchone()[0])

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
                texts.append(with_caption(body, json.loads(metadata)) if metadata else body)
                last[table] = max(last[table], rowid)
        return texts, last["turns"], last["items"]

    def tag_vocabulary(self, user_id: str) -> list[str]:
        """The tenant's distinct tags, case-folded (cached)."""
        return self._cached(("tags", user_id), lambda: [
            r[0] for r in self.conn.execute(
                "SELECT DISTINCT tag FROM item_tags WHERE user_id = ?", (user_id,))
        ])

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

    def _ranked(self, user_id: str, tokens: list[str], match: str, node: str, k: int,
                filters: Filters, context_weight: float
                ) -> tuple[list[tuple[Ref, float]], Scored | None]:
        """bm25 top k for the OR of ``tokens`` (``match``), and every matched row's score
        when they came from the posting lists and the cached row lengths (postings.py,
        the same scores); else FTS5 ranked and the second value is None.

        FTS5 ranks when filters apply (it ranks the join), inside an open transaction (the
        cache holds committed rows only) and for a token FTS5 would tokenize differently
        than it is spelled (upper case, non-ASCII: the tokenizer folds them).
        """
        if filters.active() or self._depth or not all(
                t.isascii() and t.isalnum() and t == t.lower() for t in tokens):
            return self._bm25(user_id, match, node, k, filters, context_weight), None
        scored = bm25_scores(self._row_lengths(node), self._lists(user_id, node, tokens,
                                                                  context_weight))
        if scored is None:
            return [], None
        return [((node, r), v) for r, v in scored.top(k)], scored

    def _with_terms(self, user_id: str, scored: Scored, terms: list[str], node: str, k: int,
                    context_weight: float) -> list[tuple[Ref, float]] | None:
        """``scored``'s top k with ``terms`` scored too (postings.with_terms), or None
        for FTS5 to score them: the first time a term's list would have to be read."""
        if not all(t.isascii() and t.isalnum() and t == t.lower() for t in terms):
            return None
        lists = self._lists(user_id, node, terms, context_weight, first_miss=False)
        if any(found is None for found in lists):
            return None
        top = with_terms(self._row_lengths(node), scored, lists).top(k)
        return [((node, r), v) for r, v in top]

    def _lists(self, user_id: str, node: str, tokens: list[str], context_weight: float, *,
               first_miss: bool = True) -> list[Any]:
        """The tenant's posting lists of ``tokens`` (``Postings.get``), in query order."""
        tenant = tenant_token(user_id)
        version = self.data_version()
        weights = self._weights(node, context_weight)
        return [self._postings.get(self.conn, version, f"{_TABLE[node]}_instances",
                                   textmod.tenant_term(tenant, t), weights,
                                   first_miss=first_miss) for t in dict.fromkeys(tokens)]

    @staticmethod
    def _weights(node: str, context_weight: float) -> dict[str, float]:
        """The searched FTS5 columns and their bm25 weights."""
        if node == "turn" and context_weight:
            return {"body": 1.0, "context": float(context_weight)}
        return {"body": 1.0}

    def _row_lengths(self, node: str) -> RowLengths:
        """The index's row lengths, synced when this or another process has written."""
        version = self.data_version()
        seen = self._lengths_at.get(node)
        cache = self._lengths[node]
        if seen != version:
            cache.sync(self.conn, self._touched[node], foreign=seen is not None
                       and seen[1] != version[1])
            self._touched[node].clear()
            self._lengths_at[node] = version
        return cache

    def _bm25(self, user_id: str, match: str, node: str, k: int, filters: Filters,
              context_weight: float) -> list[tuple[Ref, float]]:
        """Rows of the tenant matching the FTS5 expression ``match``, best k by bm25."""
        table, fts = ("turns", "turns_fts") if node == "turn" else ("items", "items_fts")
        rank = f"bm25(turns_fts, 0.0, 1.0, {float(context_weight)})" if node == "turn" else (
            "bm25(items_fts, 0.0, 1.0)")
        if filters.active():
            # Filters can reject any of the best matches: rank all matches that pass them.
            where, args = filters.sql(node, "t")
            sql = (
                f"SELECT t.rowid, {rank} AS s FROM {fts} JOIN {table} t ON t.rowid = {fts}.rowid"
                f" WHERE {fts} MATCH ? AND t.user_id = ?{where} ORDER BY s, t.rowid LIMIT ?"
            )
            rows = self.conn.execute(sql, [match, user_id, *args, k])
        else:
            # Rank inside FTS5 and join only the k winners: measured ~40% faster at 1M rows
            # than ranking the join. The MATCH's terms are the tenant's own; the join checks
            # the tenant again.
            sql = (
                f"SELECT t.rowid, m.s FROM (SELECT rowid, {rank} AS s FROM {fts}"
                f" WHERE {fts} MATCH ? ORDER BY s, rowid LIMIT ?) m JOIN {table} t"
                " ON t.rowid = m.rowid WHERE t.user_id = ? ORDER BY m.s, m.rowid"
            )
            rows = self.conn.execute(sql, [match, k, user_id])
        return [((node, r), -v) for r, v in rows]

    def _split_common(self, tokens: list[str], node: str, share: float, min_docs: int,
                      tenant: str, budget: int = 0) -> tuple[list[str], list[str]]:
        """``tokens`` as (rare, common): common ones are in more than ``share`` of the rows
        of a big index (see ``lexical``). A small index keeps every token rare."""
        total = self.index_rows(node)
        if total < max(min_docs, 1) or len(tokens) < 2:
            return tokens, []
        df = self._term_docs(tokens, node, tenant)
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

    def _term_docs(self, tokens: list[str], node: str, tenant: str) -> dict[str, int]:
        """How many of the tenant's rows hold each token (FTS5's own counts, cached)."""
        vocab = "turns_vocab" if node == "turn" else "items_vocab"
        df = {}
        for token in set(tokens):
            term = textmod.tenant_term(tenant, token)  # the tenant's own document count
            df[token] = self._cached(("df", vocab, term), lambda t=term: (self.conn.execute(
                f"SELECT doc FROM {vocab} WHERE term = ?", (t,)).fetchone() or (0,))[0])
        return df
