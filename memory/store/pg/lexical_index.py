"""How the PostgreSQL lexical index turns rows into postings: a row's postings, the
statement that writes a batch of them with the tenant's totals, and the full rebuild of
the turn postings a schema migration runs (``PgLexical``, lexical.py, writes through the
same pieces)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from ... import text as textmod
from ...models import with_caption


def _postings(body: Sequence[str], context: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(term, count in body, count in context)`` of one row's tokens."""
    b = Counter(textmod.fts_term(t) for t in body)
    c = Counter(textmod.fts_term(t) for t in context)
    return [(term, b[term], c[term]) for term in dict.fromkeys([*b, *c])]


# Adds rows (rowid, length) and their postings, and the change to the tenant's totals.
_WRITE = """
WITH d AS (
    INSERT INTO lexical_rows (user_id, node, row_id, length)
    SELECT %(u)s, %(node)s, r, l FROM unnest(%(rows)s::bigint[], %(lengths)s::int[]) AS x(r, l)
), p AS (
    INSERT INTO lexical_postings (user_id, node, term, row_id, body_tf, context_tf, length)
    SELECT %(u)s, %(node)s, t, r, b, c, l FROM unnest(%(p_rows)s::bigint[], %(p_terms)s::text[],
        %(p_body)s::int[], %(p_context)s::int[], %(p_lengths)s::int[]) AS x(r, t, b, c, l)
), t AS (
    INSERT INTO lexical_terms (user_id, node, term, docs, body_docs)
    SELECT %(u)s, %(node)s, t, count(*), count(*) FILTER (WHERE b > 0)
    FROM unnest(%(p_terms)s::text[], %(p_body)s::int[]) AS x(t, b) GROUP BY t
    ON CONFLICT (user_id, node, term) DO UPDATE SET docs = lexical_terms.docs + excluded.docs,
        body_docs = lexical_terms.body_docs + excluded.body_docs
)
INSERT INTO lexical_totals (user_id, node, rows, tokens)
VALUES (%(u)s, %(node)s, %(d_rows)s, %(d_tokens)s)
ON CONFLICT (user_id, node) DO UPDATE SET rows = lexical_totals.rows + excluded.rows,
    tokens = lexical_totals.tokens + excluded.tokens
"""

Doc = tuple[int, list[str], list[str]]
"""A row to index: ``(rowid, body tokens, context tokens)``."""


def reindex_all_turns(conn: Any) -> None:
    """Rebuild every tenant's turn postings from the turns' text (the schema migration
    that made the speaker a field, not a word: earlier versions indexed
    ``speaker: text``). Runs on the owner's connection inside the migration's
    transaction; a turn's context is as ``PgLexical._index_turns`` writes it."""
    for table in ("lexical_postings", "lexical_rows", "lexical_terms", "lexical_totals"):
        conn.execute(f"DELETE FROM {table} WHERE node = 'turn'")
    rows = conn.execute(
        "SELECT rowid, user_id, conversation_id, session_id, text, metadata FROM turns"
        " ORDER BY user_id, conversation_id, session_id, seq").fetchall()
    docs: dict[str, list[Doc]] = defaultdict(list)
    for key, group in groupby(rows, key=lambda r: r[1:4]):
        session = list(group)
        texts = [with_caption(r[4], r[5]) for r in session]
        docs[key[0]] += [(row[0], textmod.tokens(texts[n]),
                          textmod.tokens(textmod.context_of(texts, n)))
                         for n, row in enumerate(session)]
    for user, batch in docs.items():
        lengths = [len(b) + len(c) for _, b, c in batch]
        posts = [(rowid, p, n) for (rowid, b, c), n in zip(batch, lengths, strict=True)
                 for p in _postings(b, c)]
        conn.execute(_WRITE, {
            "u": user, "node": "turn", "rows": [d[0] for d in batch], "lengths": lengths,
            "p_rows": [r for r, _, _ in posts], "p_terms": [p[0] for _, p, _ in posts],
            "p_body": [p[1] for _, p, _ in posts], "p_context": [p[2] for _, p, _ in posts],
            "p_lengths": [n for _, _, n in posts], "d_rows": len(batch),
            "d_tokens": sum(lengths)})


__all__ = ["Doc", "reindex_all_turns"]
