"""The lexical channel on PostgreSQL: bm25 over posting tables, computed in SQL.

Holds ``PgLexical``: the search side (``lexical``/``lexical_refs``, ``term_docs``,
``texts_since``) and the write side that keeps the index in step with
every write of the store, in the same transaction (``_index_turns``, ``_unindex_turn``,
``_unindex_conversation``, ``_index_item``, ``_reindex_item``, ``_unindex_item``; called
by ``conversations.py`` and ``items.py``; ``forget_user`` empties these tables with the
tenant's others).

**The index** (migration 4, ``schema.py``). The text indexed is the SQLite store's: a
turn's ``body`` is ``speaker: text`` with its caption and its ``context`` the text of the
turns just before and after it in its session; an item's ``body`` is its title, text and
tags; both normalised by ``memory.text.tokens`` in Python. ``lexical_postings`` holds, per
tenant, node type (``turn``/``item``), term and row, the term's count in body and in
context, and the row's length (its tokens over both columns, kept on every posting so that
scoring reads no other table); its primary key makes a term's postings for a tenant one
index range, and covers the counts (index-only scans). ``lexical_rows`` holds every indexed
row's length, ``lexical_totals`` each tenant's rows and tokens per node type. A row whose
context changes (a turn inserted or deleted beside it) has its postings rewritten.
Terms are folded as FTS5's ``unicode61`` tokenizer folds them (lower case, diacritics off
Latin letters: ``text.fts_term``), so the same query tokens match the same rows.

**Scores.** The SQLite store's bm25 (see ``postings.py``): k1 = 1.2, b = 0.75,
``idf = max(log((N - n + 0.5) / (n + 0.5)), 1e-6) + idf_shift`` with ``n`` the rows holding
the term in the searched columns, ``f`` the column-weighted count, ``D`` the row's length,
``avgdl`` the mean; ``N``, ``n`` and ``avgdl`` are the tenant's own (``lexical_totals``), on
both backends. Per-tenant statistics leak nothing of other tenants into a tenant's scores
and are all that row-level security lets a tenant's transaction read.

**Common terms** (``common_share``, ``common_min_docs``, ``common_budget``): the
SQLite store's split, on the tenant's own counts: a common term adds its bm25 to the rows
holding a rarer query term and scores no row by itself; rows are probed for it by row.
Document counts come from ``lexical_terms`` (migration 7: each term's rows in any column
and in the body, kept by the same writes), as FTS5's vocabulary table serves SQLite,
never by counting a posting list.

Writers of one tenant run one at a time: each write takes the tenant's advisory lock
(``connection.py``) before it reads a session's neighbouring turns and rewrites their rows,
and ``lexical_totals``' row is updated by every write. Rows written before migration 4 (the
backend was not reachable from ``Memory.open`` before it) are not indexed.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ... import text as textmod
from ...models import Item, Turn, with_caption
from ..filters import Filters
from ..postings import K1, B
from ..rows import _TABLE, Ref
from .connection import PgConnection
from .lexical_index import _WRITE, Doc, _postings
from .search import filters_sql


def _positional(query: str, named: Mapping[str, Any], extra: Sequence[Any]
                ) -> tuple[str, list[Any]]:
    """``query``'s ``%(name)s`` and ``%s`` placeholders all as ``%s``, with their values in
    order: ``named[name]``, and the next of ``extra`` for each ``%s`` (``filters_sql``'s)."""
    args: list[Any] = []
    rest = iter(extra)

    def one(match: re.Match[str]) -> str:
        args.append(named[match.group(1)] if match.group(1) else next(rest))
        return "%s"

    return re.sub(r"%\((\w+)\)s|%s", one, query), args


# The bm25 of every row holding a rare query term, over all the query's terms (the rare
# ones and the common ones), best first. {searched}: the columns a posting must hold the
# term in; {join}: the filters' join.
_SCORE = """
WITH q AS (
    SELECT term, rare, ord
    FROM unnest(%(terms)s::text[], %(rare)s::boolean[]) WITH ORDINALITY AS q(term, rare, ord)
), tot AS (
    SELECT rows::float8 AS n, tokens::float8 / rows::float8 AS avgdl FROM lexical_totals
    WHERE user_id = %(u)s AND node = %(node)s AND rows > 0
), idf AS (
    SELECT q.term, q.rare, q.ord, greatest(ln((tot.n - d.{docs}::float8 + 0.5::float8)
                                              / (d.{docs}::float8 + 0.5::float8)), 1e-6)
                                  + %(shift)s::float8 AS idf
    FROM q CROSS JOIN tot JOIN lexical_terms d ON d.user_id = %(u)s AND d.node = %(node)s
        AND d.term = q.term AND d.{docs} > 0
), hits AS (
    SELECT p.row_id, idf.idf, p.body_tf + %(cw)s * p.context_tf AS f, p.length
    FROM idf JOIN lexical_postings p ON p.user_id = %(u)s AND p.node = %(node)s
        AND p.term = idf.term AND {searched}
    WHERE idf.rare
), extra AS (
    SELECT p.row_id, idf.idf, p.body_tf + %(cw)s * p.context_tf AS f, p.length
    FROM (SELECT DISTINCT row_id FROM hits) c
    JOIN idf ON NOT idf.rare
    JOIN lexical_postings p ON p.user_id = %(u)s AND p.node = %(node)s
        AND p.term = idf.term AND p.row_id = c.row_id AND {searched}
), scored AS (
    SELECT h.row_id, sum(h.idf * ((h.f * %(k1p1)s) / (h.f + %(k1)s * (1 - %(b)s
                                                + %(b)s * h.length / tot.avgdl)))) AS score
    FROM (SELECT * FROM hits UNION ALL SELECT * FROM extra) h CROSS JOIN tot
    GROUP BY h.row_id
)
SELECT s.row_id, s.score FROM scored s{join}
ORDER BY s.score DESC, s.row_id LIMIT %(k)s
"""

# A term no row holds any more is deleted, not kept with 0 documents: its row would keep
# the deleted word readable in a live table (the reliability bench's deleted_bytes).
_DROP = """
WITH p AS (DELETE FROM lexical_postings WHERE user_id = %(u)s AND node = %(node)s
           AND row_id = ANY(%(rows)s::bigint[]) RETURNING term, body_tf),
g AS (SELECT term, count(*) AS n, count(*) FILTER (WHERE body_tf > 0) AS body
      FROM p GROUP BY term),
t AS (UPDATE lexical_terms SET docs = docs - g.n, body_docs = body_docs - g.body FROM g
      WHERE lexical_terms.user_id = %(u)s AND lexical_terms.node = %(node)s
        AND lexical_terms.term = g.term AND lexical_terms.docs > g.n),
z AS (DELETE FROM lexical_terms USING g WHERE lexical_terms.user_id = %(u)s
        AND lexical_terms.node = %(node)s AND lexical_terms.term = g.term
        AND lexical_terms.docs <= g.n)
DELETE FROM lexical_rows WHERE user_id = %(u)s AND node = %(node)s
    AND row_id = ANY(%(rows)s::bigint[]) RETURNING length
"""

_SAME = "user_id = %(u)s AND conversation_id = %(c)s AND session_id = %(s)s"
# A session's turns from two before ``lo`` to two after ``hi`` (see ``_index_turns``).
_WINDOW = (
    f"SELECT rowid, seq, speaker, text, metadata FROM turns WHERE {_SAME}"
    f" AND seq BETWEEN coalesce((SELECT min(seq) FROM (SELECT seq FROM turns WHERE {_SAME}"
    f" AND seq < %(lo)s ORDER BY seq DESC LIMIT 2) b), %(lo)s)"
    f" AND coalesce((SELECT max(seq) FROM (SELECT seq FROM turns WHERE {_SAME}"
    f" AND seq > %(hi)s ORDER BY seq LIMIT 2) a), %(hi)s) ORDER BY seq"
)

class PgLexical(PgConnection):
    """bm25 search over the posting tables, and their upkeep (see the module)."""

    if TYPE_CHECKING:
        def with_ids(self, user_id: str, ranked: Sequence[tuple[Ref, float]]
                     ) -> list[tuple[str, float]]: ...

    def _named(self, user_id: str | None, query: Any, args: Mapping[str, Any]
               ) -> list[tuple[Any, ...]]:
        """Rows of a query with named placeholders, in ``user_id``'s transaction (none
        for a statement that returns none)."""
        with self._tx():
            cur = self._use(user_id).execute(query, args)
            return cur.fetchall() if cur.description is not None else []

    # search
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
        """bm25 top-k over the tenant's turns or items as ``[(ref, score)]``, higher =
        better, ties to the lower rowid (the SQLite store's contract and scores: see the
        module). ``idf_shift`` is added to every term's idf.

        ``context_weight``: the weight of a turn's context column (0: body only).
        ``filters``: only rows passing them are ranked. With ``common_share`` > 0, in a
        tenant index of at least ``common_min_docs`` rows, query terms in more than that
        share of its rows (rarest first within ``common_budget`` rows) are common: they add
        their bm25 to rows holding a rarer query term but score no row by themselves (the
        rarest term always counts as rare).
        """
        query_tokens = textmod.match_tokens(query_tokens)
        common: list[str] = []
        if common_share > 0:
            query_tokens, common = self._split_common(user_id, query_tokens, node, common_share,
                                                      common_min_docs, common_budget)
        if not query_tokens or k <= 0:
            return []
        searched = "TRUE" if node == "turn" and context_weight else "p.body_tf > 0"
        join = ""
        where_args: list[Any] = []
        if filters is not None and filters.active():
            where, where_args = filters_sql(filters, node, "t")
            join = (f" JOIN {_TABLE[node]} t ON t.rowid = s.row_id AND t.user_id = %(u)s"
                    f" WHERE TRUE{where}")
        terms = [textmod.fts_term(t) for t in query_tokens] + [textmod.fts_term(t) for t in common]
        docs = "docs" if searched == "TRUE" else "body_docs"
        query, args = _positional(_SCORE.format(searched=searched, join=join, docs=docs), {
            "terms": terms, "rare": [True] * len(query_tokens) + [False] * len(common),
            "u": user_id, "node": node, "k": int(k), "k1": K1, "k1p1": K1 + 1.0, "b": B,
            "cw": float(context_weight) if node == "turn" else 0.0,
            "shift": float(idf_shift)}, where_args)
        rows = self._rows(user_id, query, args)
        return [((node, int(r)), float(v)) for r, v in rows]

    def texts_since(self, user_id: str, turn_rowid: int = 0, item_rowid: int = 0, *,
                    limit: int | None = None) -> tuple[list[str], int, int]:
        """The searchable text of the tenant's turns and items stored after the given rowids.

        Returns ``(texts, last turn rowid, last item rowid)``; pass the rowids back to read
        only what was written since. At most ``limit`` rows of each table are read. A
        turn's text is ``speaker: text`` with its caption, an item's its title, text and
        tags as a JSON list (as on SQLite).
        """
        texts: list[str] = []
        last = {"turns": turn_rowid, "items": item_rowid}
        columns = {"turns": "speaker, text, metadata", "items": "title, text, tags"}
        with self._tx():
            for table, since in last.items():
                query = (f"SELECT rowid, {columns[table]} FROM {table} WHERE user_id = %s"
                         " AND rowid > %s ORDER BY rowid LIMIT %s")
                for rowid, a, b, c in self._rows(user_id, query, (
                        user_id, since, None if limit is None else int(limit))):
                    texts.append(with_caption(f"{a}: {b}", c) if table == "turns"
                                 else f"{a or ''} {b} {json.dumps(c)}")
                    last[table] = max(last[table], rowid)
        return texts, last["turns"], last["items"]

    def _split_common(self, user_id: str, tokens: list[str], node: str, share: float,
                      min_docs: int, budget: int = 0) -> tuple[list[str], list[str]]:
        """``tokens`` as (rare, common) by the tenant's document counts (see
        ``lexical_refs``). A small index keeps every token rare."""
        found = self._rows(user_id, "SELECT rows FROM lexical_totals WHERE user_id = %s AND"
                           " node = %s", (user_id, node))
        total = int(found[0][0]) if found else 0
        if total < max(min_docs, 1) or len(tokens) < 2:
            return tokens, []
        df = self._term_docs(user_id, tokens, node)
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
        ``text.tokens``); with ``cap``, ``min(count, cap)`` (the counts are kept per term
        here, so a cap saves nothing)."""
        turns = self._term_docs(user_id, list(tokens), "turn")
        items = self._term_docs(user_id, list(tokens), "item")
        return {t: turns.get(t, 0) + items.get(t, 0) if cap is None
                else min(turns.get(t, 0) + items.get(t, 0), cap) for t in tokens}

    def _term_docs(self, user_id: str, tokens: list[str], node: str) -> dict[str, int]:
        """How many of the tenant's rows hold each token, in any column."""
        unique = list(dict.fromkeys(tokens))
        if not unique:
            return {}
        counts = dict(self._rows(
            user_id, "SELECT term, docs FROM lexical_terms WHERE user_id = %s AND node = %s"
            " AND term = ANY(%s)", (user_id, node, list({textmod.fts_term(t) for t in unique}))))
        return {t: int(counts.get(textmod.fts_term(t), 0)) for t in unique}

    # upkeep
    def _write(self, user_id: str, node: str, docs: Sequence[Doc], *,
               replace: Sequence[int] = ()) -> None:
        """Index ``docs`` of one tenant, first dropping the rows ``replace`` names (those
        of ``docs`` already indexed, or rows being deleted), and update its totals."""
        dropped = [r[0] for r in self._named(user_id, _DROP, {
            "u": user_id, "node": node, "rows": list(replace)})] if replace else []
        lengths = [len(b) + len(c) for _, b, c in docs]
        posts = [(rowid, p, n) for (rowid, b, c), n in zip(docs, lengths, strict=True)
                 for p in _postings(b, c)]
        self._named(user_id, _WRITE, {
            "u": user_id, "node": node, "rows": [d[0] for d in docs], "lengths": lengths,
            "p_rows": [r for r, _, _ in posts], "p_terms": [p[0] for _, p, _ in posts],
            "p_body": [p[1] for _, p, _ in posts], "p_context": [p[2] for _, p, _ in posts],
            "p_lengths": [n for _, _, n in posts], "d_rows": len(docs) - len(dropped),
            "d_tokens": sum(lengths) - sum(dropped)})

    def _index_turns(self, turns: Sequence[Turn]) -> None:
        """(Re)index stored turns, and the context of their stored neighbours.

        Call after the turns are written (inserted or their text changed). A turn's
        context holds the turns just before and after it in its session, so a written
        turn changes the context of the stored turn on either side of it: each touched
        session is read from two turns before the written ones to two turns after, as on
        SQLite, and every row whose text or context this touches is rewritten.
        """
        groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for t in turns:
            groups[(t.user_id, t.conversation_id, t.session_id)].append(t.seq)
        for user in sorted({u for u, _, _ in groups}):  # locks in one order: no deadlock
            self._lock_tenant(user)
        docs: dict[str, list[Doc]] = defaultdict(list)
        for (user, conv, session), seqs in groups.items():
            lo, hi = min(seqs), max(seqs)
            window = self._named(user, _WINDOW, {"u": user, "c": conv, "s": session,
                                                 "lo": lo, "hi": hi})
            texts = [with_caption(r[3], r[4]) for r in window]
            before = [n for n, r in enumerate(window) if r[1] < lo]
            after = [n for n, r in enumerate(window) if r[1] > hi]
            touched = [n for n, r in enumerate(window) if lo <= r[1] <= hi]
            touched += before[-1:] + after[:1]  # the stored turn on either side
            for n in touched:
                docs[user].append((window[n][0], textmod.tokens(texts[n]),
                                   textmod.tokens(textmod.context_of(texts, n))))
        for user, rows in docs.items():
            self._write(user, "turn", rows, replace=[r[0] for r in rows])

    def _unindex_turn(self, turn: Turn, rowid: int) -> None:
        """Drop a deleted turn (``rowid``) from the index and rebuild its neighbours'
        context without it. Call after its row is deleted."""
        self._lock_tenant(turn.user_id)
        self._write(turn.user_id, "turn", [], replace=[rowid])
        # Through the turn before the gap or, when the session's first turn went, the
        # turn after it (whose context would otherwise keep the deleted text searchable).
        beside = self._rows(
            turn.user_id, "(SELECT seq FROM turns WHERE user_id = %s AND conversation_id = %s"
            " AND session_id = %s AND seq < %s ORDER BY seq DESC LIMIT 1) UNION ALL"
            " (SELECT seq FROM turns WHERE user_id = %s AND conversation_id = %s AND"
            " session_id = %s AND seq > %s ORDER BY seq LIMIT 1)",
            (turn.user_id, turn.conversation_id, turn.session_id, turn.seq) * 2)
        if beside:
            self._index_turns([turn.model_copy(update={"seq": beside[0][0]})])

    def _unindex_conversation(self, user_id: str, conversation_id: str) -> None:
        """Drop a conversation's turns from the index. Call before they are deleted."""
        self._lock_tenant(user_id)
        rowids = [r[0] for r in self._rows(
            user_id, "SELECT rowid FROM turns WHERE user_id = %s AND conversation_id = %s",
            (user_id, conversation_id))]
        if rowids:
            self._write(user_id, "turn", [], replace=rowids)

    @staticmethod
    def _item_tokens(item: Item) -> list[str]:
        return textmod.tokens(" ".join([item.title, item.text, *item.tags]))

    def _index_items(self, user_id: str, rows: Sequence[tuple[int, Item]], *,
                     replace: Sequence[int] = ()) -> None:
        """Index items of one tenant (rowid, item: title, text and tags; each tag, case-
        folded, also in ``item_tags``), first dropping ``replace``'s rows. Call after the
        rows are written."""
        self._lock_tenant(user_id)
        self._write(user_id, "item", [(r, self._item_tokens(i), []) for r, i in rows],
                    replace=replace)
        if replace:
            self._exec(user_id, "DELETE FROM item_tags WHERE user_id = %s AND"
                       " item_rowid = ANY(%s)", (user_id, list(replace)))
        tagged = [(r, t) for r, i in rows for t in dict.fromkeys(t.casefold() for t in i.tags)]
        if tagged:
            self._exec(user_id, "INSERT INTO item_tags (user_id, tag, item_rowid) SELECT %s, t,"
                       " r FROM unnest(%s::text[], %s::bigint[]) AS x(t, r) ON CONFLICT DO"
                       " NOTHING", (user_id, [t for _, t in tagged], [r for r, _ in tagged]))

    def _index_item(self, item_id: str, item: Item) -> None:
        """Index a newly inserted item. Call after the insert."""
        found = self._rows(item.user_id, "SELECT rowid FROM items WHERE user_id = %s AND"
                           " id = %s", (item.user_id, item_id))
        self._index_items(item.user_id, [(found[0][0], item)])

    def _reindex_item(self, rowid: int, current: Item, new: Item) -> None:
        """Re-index an updated item (``rowid``) when its indexed text or tags changed."""
        if (current.title, current.text, current.tags) != (new.title, new.text, new.tags):
            self._index_items(new.user_id, [(rowid, new)], replace=[rowid])

    def _unindex_item(self, user_id: str, item_id: str) -> None:
        """Drop an item from the index and its tags. Call before it is deleted."""
        found = self._rows(user_id, "SELECT rowid FROM items WHERE user_id = %s AND id = %s",
                           (user_id, item_id))
        if found:
            self._index_items(user_id, [], replace=[found[0][0]])
