"""FTS5's bm25, computed from the posting lists and a cache of row lengths.

Why: FTS5's ``bm25()`` reads every matched row's length from the index's ``%_docsize``
table, one B-tree lookup per row. On the scale benchmark's 100k-item tenant that lookup
was about two thirds of a query's scoring time (rare terms: ~2,200 matched rows, 2.1 ms
a query; walking the same posting lists alone, 0.7 ms). :class:`RowLengths` keeps every
row's length in a NumPy array, kept in step with the index, and :func:`bm25_top` scores
the rows of the posting lists with FTS5's own formula: the same scores to ~1e-6, 1.1 ms.

The formula (``fts5Bm25Function`` in SQLite's ``fts5_aux.c``): for each query term,
``idf = log((N - n + 0.5) / (n + 0.5))`` (at least 1e-6) with ``N`` the index's rows and
``n`` the rows holding the term in the searched columns; a row scores
``sum(idf * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl)))`` with ``f`` the term's
column-weighted count in the row, ``D`` the row's tokens over all columns and ``avgdl``
the index's mean. ``N`` and the column totals come from FTS5's averages record.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Mapping, Sequence

import numpy as np

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


def bm25_top(
    conn: sqlite3.Connection,
    lengths: RowLengths,
    instances: str,
    terms: Sequence[str],
    weights: Mapping[str, float],
    k: int,
) -> list[tuple[int, float]]:
    """The ``k`` best rowids for the OR of ``terms`` as ``[(rowid, score)]``, best first.

    ``instances`` is the index's ``fts5vocab`` instance table; ``weights`` maps the
    searched columns to their bm25 weights (other columns are not searched). ``lengths``
    must be synced. Ties go to the lower rowid.
    """
    if lengths.rows == 0 or k <= 0:
        return []
    avgdl = lengths.tokens / lengths.rows
    docs: list[np.ndarray] = []
    parts: list[np.ndarray] = []
    for term in dict.fromkeys(terms):
        # One joined string per column: building a Python tuple per posting cost ~2x more.
        found = [(np.array(joined.split(","), np.int64), weights[col]) for col, joined in
                 conn.execute(f"SELECT col, group_concat(doc) FROM {instances} WHERE term = ?"
                              " GROUP BY col", (term,)) if col in weights]
        if not found:
            continue
        doc = np.concatenate([d for d, _ in found])
        weight = np.concatenate([np.full(len(d), w, np.float64) for d, w in found])
        rows, inverse = np.unique(doc, return_inverse=True)
        freq = np.bincount(inverse, weights=weight)
        idf = max(math.log((lengths.rows - len(rows) + 0.5) / (len(rows) + 0.5)), 1e-6)
        norm = K1 * (1 - B + B * lengths.lengths[rows] / avgdl)
        docs.append(rows)
        parts.append(idf * ((freq * (K1 + 1.0)) / (freq + norm)))  # FTS5's order of operations
    if not docs:
        return []
    rows, inverse = np.unique(np.concatenate(docs), return_inverse=True)
    scores = np.bincount(inverse, weights=np.concatenate(parts))
    best = np.argsort(-scores, kind="stable")[:k]
    return list(zip(rows[best].tolist(), scores[best].tolist(), strict=True))
