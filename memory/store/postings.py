"""FTS5's bm25, computed from the posting lists and a cache of row lengths.

Why: FTS5's ``bm25()`` reads every matched row's length from the index's ``%_docsize``
table, one B-tree lookup per row. On the scale benchmark's 100k-item tenant that lookup
was about two thirds of a query's scoring time (rare terms: ~2,200 matched rows, 2.1 ms
a query; walking the same posting lists alone, 0.7 ms). :class:`RowLengths` keeps every
row's length in a NumPy array, kept in step with the index, and :func:`bm25_scores` scores
the rows of the posting lists with FTS5's own formula: the same scores to the last bit.
:class:`Postings` keeps decoded lists of recent terms, and :func:`with_terms` adds common
terms' scores to a rare-term ranking (``Store.lexical_refs``) from them, where FTS5 took
~0.9 ms to score the rows holding both (at 100k items, on the half of the queries that
have a common term).

The formula (``fts5Bm25Function`` in SQLite's ``fts5_aux.c``): for each query term,
``idf = log((N - n + 0.5) / (n + 0.5))`` (at least 1e-6) with ``N`` the index's rows and
``n`` the rows holding the term in the searched columns; a row scores
``sum(idf * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl)))`` with ``f`` the term's
column-weighted count in the row, ``D`` the row's tokens over all columns and ``avgdl``
the index's mean. ``N`` and the column totals come from FTS5's averages record.

SQLite-specific, all of it: the posting-list reader of the SQLite backend's lexical
channel (``lexical.py``). Its three queries read FTS5's own tables (the ``%_data``
averages record, ``%_docsize`` row lengths and the ``fts5vocab`` instance table) and
decode FTS5's record format. It lives in the store package because it is store access
that only ``LexicalSearch`` reaches; ``memstrata.memory.postings`` re-exports it. A
PostgreSQL backend has no counterpart (its ranking runs in the database).
"""

from __future__ import annotations

import math
import sqlite3
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..locking import StoreError

K1 = 1.2  # FTS5's bm25 constants
B = 0.75
_AVERAGES_ROWID = 1  # FTS5_AVERAGES_ROWID: the %_data row holding N and the column totals


def _varints(blob: bytes) -> list[int]:
    """The SQLite varints packed in ``blob`` (FTS5's record format)."""
    out: list[int] = []
    value = pos = 0
    while pos < len(blob):
        byte = blob[pos]
        pos += 1
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            out.append(value)
            value = 0
    return out


def averages(conn: sqlite3.Connection, fts: str) -> tuple[int, int]:
    """``(rows, tokens)`` of an FTS5 index: its row count and its tokens over all columns."""
    row = conn.execute(f"SELECT block FROM {fts}_data WHERE id = ?", (_AVERAGES_ROWID,)
                       ).fetchone()
    if row is None or not row[0]:
        return 0, 0
    values = _varints(row[0])
    return values[0], sum(values[1:])


def _row_totals(rows: Sequence[tuple[int, bytes]], columns: int) -> tuple[np.ndarray, np.ndarray]:
    """Rowids and token totals of ``%_docsize`` rows (one varint per column each)."""
    ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    totals = np.zeros(len(rows), np.int64)
    # Most rows have every column under 128 tokens: one byte each, decoded at once.
    short = np.fromiter((len(r[1]) == columns for r in rows), bool, len(rows))
    if short.any():
        packed = b"".join(r[1] for r, s in zip(rows, short.tolist(), strict=True) if s)
        grid = np.frombuffer(packed, np.uint8).reshape(-1, columns)
        if (grid < 0x80).all():
            totals[short] = grid.sum(axis=1)
        else:  # a multi-byte varint after a short one: decode these rows one by one
            short[:] = False
    for i in np.flatnonzero(~short).tolist():
        totals[i] = sum(_varints(rows[i][1]))
    return ids, totals


class RowLengths:
    """Every row's token count (all columns) in one FTS5 index, indexed by rowid.

    :meth:`sync` keeps it exact: a full read when another connection wrote; else the
    rows this connection re-wrote (``touched``: updated or deleted rowids) and the rows
    appended since (a first sync reads from rowid 0); then a count and token-total check
    against FTS5's averages record falls back to a full read if anything was missed.
    """

    def __init__(self, fts: str, columns: int) -> None:
        self.fts = fts
        self.columns = columns
        self.lengths = np.full(0, -1, np.int64)  # -1: no such row
        self.rows = 0
        self.tokens = 0
        self.last = 0  # the highest rowid present

    @property
    def avgdl(self) -> float:
        """Mean tokens per row (FTS5's ``avgdl``); call only with rows present."""
        return self.tokens / self.rows

    def sync(self, conn: sqlite3.Connection, touched: set[int], foreign: bool) -> None:
        """Bring the cache up to date with the index (see the class docstring)."""
        rows, tokens = averages(conn, self.fts)
        if foreign:
            self._read_all(conn)
        else:
            if touched:
                ids = sorted(touched)
                for i in range(0, len(ids), 500):
                    chunk = ids[i : i + 500]
                    self._set(np.asarray(chunk, np.int64), np.full(len(chunk), -1, np.int64))
                    self._load(conn, f"id IN ({','.join('?' * len(chunk))})", chunk)
            if self.last in touched and self.lengths[self.last] < 0:
                # The last row went: a new one may take its rowid (no AUTOINCREMENT).
                present = np.flatnonzero(self.lengths >= 0)
                self.last = int(present[-1]) if len(present) else 0
            self._load(conn, "id > ?", [self.last])
        if self.rows != rows or self.tokens != tokens:
            self._read_all(conn)

    def _read_all(self, conn: sqlite3.Connection) -> None:
        self.lengths = np.full(0, -1, np.int64)
        self.rows = self.tokens = self.last = 0
        self._load(conn, "1", [])

    def _load(self, conn: sqlite3.Connection, where: str, args: list[int]) -> None:
        rows = conn.execute(f"SELECT id, sz FROM {self.fts}_docsize WHERE {where}", args
                            ).fetchall()
        if rows:
            self._set(*_row_totals(rows, self.columns))

    def _set(self, ids: np.ndarray, totals: np.ndarray) -> None:
        if not len(ids):
            return
        top = int(ids.max())
        if top >= len(self.lengths):
            grown = np.full(max(top + 1, 2 * len(self.lengths)), -1, np.int64)
            grown[: len(self.lengths)] = self.lengths
            self.lengths = grown
        old = self.lengths[ids]
        had = old >= 0
        self.rows += int((totals >= 0).sum() - had.sum())
        self.tokens += int(totals[totals >= 0].sum() - old[had].sum())
        self.lengths[ids] = totals
        if (totals >= 0).any():
            self.last = max(self.last, int(ids[totals >= 0].max()))


POSTINGS_BUDGET = 2_000_000
"""Most postings :class:`Postings` keeps decoded (16 bytes each: ~32 MB)."""


class Postings:
    """Decoded posting lists: for a term of an index and the searched columns' weights,
    the rows holding it (ascending) and its weighted count in each.

    Why: decoding a term's list from the ``fts5vocab`` instance table is most of what a
    rare-term search costs, and the same terms come back query after query. Lists are
    kept until this process writes or another one commits (``version``), least recently
    used first out past :data:`POSTINGS_BUDGET` postings.
    """

    def __init__(self, budget: int = POSTINGS_BUDGET) -> None:
        self.budget = budget
        self._lists: OrderedDict[tuple[str, str, tuple[tuple[str, float], ...]],
                                 tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._size = 0
        self._version: object = None
        self._asked: set[tuple[str, str, tuple[tuple[str, float], ...]]] = set()

    def get(self, conn: sqlite3.Connection, version: object, instances: str, term: str,
            weights: Mapping[str, float], *, first_miss: bool = True
            ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(rows, counts)`` of ``term`` in the columns ``weights`` names (counts
        weighted by them), from ``instances``, the index's instance vocabulary.

        With ``first_miss=False`` a list not yet kept is only read the second time it
        is asked for (None the first time): for callers with a cheaper way to answer
        once, which would pay for reading a long list that is never asked for again.
        """
        if version != self._version:
            self._lists.clear()
            self._asked.clear()
            self._size = 0
            self._version = version
        key = (instances, term, tuple(weights.items()))
        hit = self._lists.get(key)
        if hit is not None:
            self._lists.move_to_end(key)
            return hit
        if not first_miss and key not in self._asked:
            if len(self._asked) >= self.budget // 100:  # bounded too: a long read-only run
                self._asked.clear()
            self._asked.add(key)
            return None
        self._asked.discard(key)
        found = self._read(conn, instances, term, weights)
        self._lists[key] = found
        self._size += max(len(found[0]), 1)
        while self._size > self.budget and len(self._lists) > 1:
            _, (rows, _counts) = self._lists.popitem(last=False)
            self._size -= max(len(rows), 1)
        return found

    @staticmethod
    def _read(conn: sqlite3.Connection, instances: str, term: str,
              weights: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        # One joined string per column: building a Python tuple per posting cost ~2x more.
        found = [(np.array(joined.split(","), np.int64), weights[col]) for col, joined in
                 conn.execute(f"SELECT col, group_concat(doc) FROM {instances} WHERE term = ?"
                              " GROUP BY col", (term,)) if col in weights]
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        doc = np.concatenate([d for d, _ in found])
        weight = np.concatenate([np.full(len(d), w, np.float64) for d, w in found])
        rows, inverse = np.unique(doc, return_inverse=True)
        # Columns come in order and instances within them: bincount adds each row's
        # weights one instance at a time, as FTS5 does.
        return rows, np.bincount(inverse, weights=weight)


@dataclass(frozen=True)
class Scored:
    """Every row holding a query term and its bm25 score (``rows`` ascending)."""

    rows: np.ndarray
    scores: np.ndarray

    def top(self, k: int) -> list[tuple[int, float]]:
        """The ``k`` best as ``[(rowid, score)]``, best first; ties go to the lower rowid."""
        best = np.argsort(-self.scores, kind="stable")[:k]
        return list(zip(self.rows[best].tolist(), self.scores[best].tolist(), strict=True))


def _idf(rows: int, docs: int) -> float:
    return max(math.log((rows - docs + 0.5) / (docs + 0.5)), 1e-6)


def _part(lengths: RowLengths, rows: np.ndarray, freq: np.ndarray, docs: int) -> np.ndarray:
    """One term's bm25 in ``rows`` (``freq`` its weighted counts there, ``docs`` the rows
    holding it), in FTS5's order of operations."""
    norm = K1 * (1 - B + B * lengths.lengths[rows] / lengths.avgdl)
    return _idf(lengths.rows, docs) * ((freq * (K1 + 1.0)) / (freq + norm))


def bm25_scores(lengths: RowLengths, lists: Sequence[tuple[np.ndarray, np.ndarray]]
                ) -> Scored | None:
    """bm25 of every row holding any of the query terms whose :class:`Postings` lists
    are ``lists`` (in query order; their OR), or None when no row does. ``lengths``
    must be synced."""
    if lengths.rows == 0:
        return None
    kept = [(rows, freq) for rows, freq in lists if len(rows)]
    if not kept:
        return None
    rows, inverse = np.unique(np.concatenate([r for r, _ in kept]), return_inverse=True)
    if rows[-1] >= len(lengths.lengths) or rows[0] < 0:
        # Only a damaged index names a row its table never had.
        raise StoreError("", sqlite3.SQLITE_CORRUPT, f"the search index names row {rows[-1]} "
                         f"of {len(lengths.lengths) - 1}")
    parts = np.concatenate([_part(lengths, r, f, len(r)) for r, f in kept])
    # bincount adds each row's terms in query order, as FTS5 sums its phrases.
    return Scored(rows, np.bincount(inverse, weights=parts))


def with_terms(lengths: RowLengths, scored: Scored,
               lists: Sequence[tuple[np.ndarray, np.ndarray]]) -> Scored:
    """``scored`` with more terms' bm25 added to its rows (``lists`` as for
    :func:`bm25_scores`): FTS5's bm25 of ``(scored's terms) AND (these terms)`` where a
    row holds one of these, its score on ``scored``'s terms where it holds none."""
    total = scored.scores
    for rows, freq in lists:
        if not len(rows):
            continue
        at = np.minimum(np.searchsorted(rows, scored.rows), len(rows) - 1)
        f = np.where(rows[at] == scored.rows, freq[at], 0.0)
        total = total + _part(lengths, scored.rows, f, len(rows))  # a row without it: + 0.0
    return Scored(scored.rows, total)
