"""FTS5's bm25, computed from the posting lists and a cache of row lengths.

Why: FTS5's ``bm25()`` reads every matched row's length from the index's ``%_docsize``
table, one B-tree lookup per row. On the scale benchmark's 100k-item tenant that lookup
was about two thirds of a query's scoring time (rare terms: ~2,200 matched rows, 2.1 ms
a query; walking the same posting lists alone, 0.7 ms). :class:`RowLengths` keeps every
row's length in a NumPy array, kept in step with the index, and :func:`bm25_scores` scores
the rows of the posting lists with FTS5's own formula. :class:`Postings` keeps decoded
lists of recent terms, and :func:`with_terms` adds common terms' scores to a rare-term
ranking (``Store.lexical_refs``) from them.

The formula (``fts5Bm25Function`` in SQLite's ``fts5_aux.c``): for each query term,
``idf = log((N - n + 0.5) / (n + 0.5))`` (at least 1e-6) with ``n`` the rows holding the
term in the searched columns; a row scores
``sum(idf * f * (k1 + 1) / (f + k1 * (1 - b + b * D / avgdl)))`` with ``f`` the term's
column-weighted count in the row and ``D`` the row's tokens over all columns. One
difference from FTS5's ``bm25()``, deliberate: ``N`` and ``avgdl`` are the *tenant's*
(:class:`TenantStats`, from the per-row owners :class:`RowLengths` keeps), where FTS5's
span every tenant of the file; ``n`` is the tenant's already (terms carry the tenant's
token). So a tenant's scores depend on its own rows only, as on PostgreSQL, and with one
tenant in a file they are FTS5's to the last bit. ``idf_shift`` (0 here; the retriever's
``SearchWeights`` sets its own) is added to every term's idf: how much matching one more
query word counts, whatever its rarity.

SQLite-specific, all of it: the posting-list reader of the SQLite backend's lexical
channel (``lexical.py``). Its queries read FTS5's own tables (the ``%_data`` averages
record, ``%_docsize`` row lengths and the ``fts5vocab`` instance table), decoding FTS5's
record format, and each indexed row's ``user_id`` from the table it indexes. It lives in
the store package because it is store access that only ``LexicalSearch`` reaches. A
PostgreSQL backend has no counterpart (its ranking runs in the database).
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import text as textmod
from ..locking import LockedConnection, StoreError, stored_value

Conn = sqlite3.Connection | LockedConnection
"""What the readers here take: a connection, the store's locked one or a plain one."""

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


def averages(conn: Conn, fts: str) -> tuple[int, int]:
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


@dataclass(frozen=True)
class TenantStats:
    """bm25's collection statistics for one tenant's rows of an index (``rows`` > 0)."""

    rows: int
    avgdl: float
    idf_shift: float = 0.0


class RowLengths:
    """Every row's token count (all columns) and owner in one FTS5 index, by rowid.

    ``table`` is the indexed table (its rowids are the index's), read for each row's
    ``user_id``; :meth:`tenant` gives one tenant's row count and token total from them.

    :meth:`sync` keeps it exact: a full read when another connection wrote; else the
    rows this connection re-wrote (``touched``: updated or deleted rowids) and the rows
    appended since (a first sync reads from rowid 0); then a count and token-total check
    against FTS5's averages record falls back to a full read if anything was missed.
    """

    def __init__(self, fts: str, columns: int, table: str) -> None:
        self.fts = fts
        self.columns = columns
        self.table = table
        self.lengths = np.full(0, -1, np.int64)  # -1: no such row
        self.owner = np.full(0, -1, np.int64)  # the row's tenant code (-1: unknown)
        self.rows = 0
        self.tokens = 0
        self.last = 0  # the highest rowid present
        self._codes: dict[str, int] = {}
        self._tenant_rows = np.zeros(0, np.int64)
        self._tenant_tokens = np.zeros(0, np.int64)
        self._tenant_changes = np.zeros(0, np.int64)

    def tenant(self, user_id: str) -> tuple[int, int]:
        """``(rows, tokens)`` of one tenant's rows in the index (synced, as ``rows``)."""
        code = self._codes.get(user_id)
        if code is None:
            return 0, 0
        return int(self._tenant_rows[code]), int(self._tenant_tokens[code])

    def generation(self, user_id: str) -> int:
        """A number that moves whenever the synced rows of one tenant change (a row of
        theirs added, rewritten or deleted, or the whole cache read again), and only
        then: what a per-tenant value read from the index (a term's document count) can
        be kept under while other tenants write."""
        code = self._codes.get(user_id)
        return -1 if code is None else int(self._tenant_changes[code])

    def stats(self, user_id: str, idf_shift: float = 0.0) -> TenantStats | None:
        """The tenant's :class:`TenantStats`, or None when it has no row in the index."""
        rows, tokens = self.tenant(user_id)
        return TenantStats(rows, tokens / rows, idf_shift) if rows else None

    @classmethod
    def of_tenant(cls, conn: Conn, fts: str, columns: int, table: str,
                  user_id: str) -> RowLengths:
        """A cache of one tenant's rows only, read now (for a read inside a write
        transaction, whose uncommitted rows the shared cache must not keep)."""
        cache = cls(fts, columns, table)
        cache._load(conn, f"{{id}} IN (SELECT rowid FROM {table} WHERE user_id = ?)",
                    [user_id])
        return cache

    def sync(self, conn: Conn, touched: set[int], foreign: bool) -> None:
        """Bring the cache up to date with the index (see the class docstring)."""
        rows, tokens = averages(conn, self.fts)
        if foreign:
            self._read_all(conn)
        else:
            if touched:
                ids = sorted(touched)
                for i in range(0, len(ids), 500):
                    chunk = ids[i : i + 500]
                    self._set(np.asarray(chunk, np.int64), np.full(len(chunk), -1, np.int64),
                              np.full(len(chunk), -1, np.int64))
                    self._load(conn, f"{{id}} IN ({','.join('?' * len(chunk))})", chunk)
            if self.last in touched and self.lengths[self.last] < 0:
                # The last row went: a new one may take its rowid (no AUTOINCREMENT).
                present = np.flatnonzero(self.lengths >= 0)
                self.last = int(present[-1]) if len(present) else 0
            self._load(conn, "{id} > ?", [self.last])
        if self.rows != rows or self.tokens != tokens:
            self._read_all(conn)

    def _read_all(self, conn: Conn) -> None:
        self.lengths = np.full(0, -1, np.int64)
        self.owner = np.full(0, -1, np.int64)
        self.rows = self.tokens = self.last = 0
        self._tenant_rows[:] = 0
        self._tenant_tokens[:] = 0
        self._tenant_changes += 1  # never reset: a tenant's number only grows
        self._load(conn, "1", [])

    def _load(self, conn: Conn, where: str, args: list[Any]) -> None:
        """Read the rows ``where`` selects (``{id}`` stands for the rowid column)."""
        rows = conn.execute(f"SELECT id, sz FROM {self.fts}_docsize WHERE "
                            + where.format(id="id"), args).fetchall()
        if not rows:
            return
        with stored_value(f"{self.fts}_docsize"):  # a size blob gone NULL or cut short
            ids, totals = _row_totals(rows, self.columns)
        owners = dict(conn.execute(f"SELECT rowid, user_id FROM {self.table} WHERE "
                                   + where.format(id="rowid"), args))
        self._set(ids, totals, np.fromiter((self._code(owners.get(i)) for i in ids.tolist()),
                                           np.int64, len(ids)))

    def _code(self, user_id: str | None) -> int:
        if user_id is None:
            return -1
        code = self._codes.get(user_id)
        if code is None:
            code = self._codes[user_id] = len(self._codes)
            if code >= len(self._tenant_rows):
                size = max(2 * len(self._tenant_rows), 16)
                self._tenant_rows = np.resize(self._tenant_rows, size)
                self._tenant_rows[code:] = 0
                self._tenant_tokens = np.resize(self._tenant_tokens, size)
                self._tenant_tokens[code:] = 0
                self._tenant_changes = np.resize(self._tenant_changes, size)
                self._tenant_changes[code:] = 0
        return code

    def _set(self, ids: np.ndarray, totals: np.ndarray, owners: np.ndarray) -> None:
        if not len(ids):
            return
        top = int(ids.max())
        if top >= len(self.lengths):
            size = max(top + 1, 2 * len(self.lengths))
            grown = np.full(size, -1, np.int64)
            grown[: len(self.lengths)] = self.lengths
            self.lengths = grown
            grown = np.full(size, -1, np.int64)
            grown[: len(self.owner)] = self.owner
            self.owner = grown
        old, old_owner = self.lengths[ids], self.owner[ids]
        had = old >= 0
        now = totals >= 0
        self.rows += int(now.sum() - had.sum())
        self.tokens += int(totals[now].sum() - old[had].sum())
        gone = had & (old_owner >= 0)
        np.subtract.at(self._tenant_rows, old_owner[gone], 1)
        np.subtract.at(self._tenant_tokens, old_owner[gone], old[gone])
        came = now & (owners >= 0)
        np.add.at(self._tenant_rows, owners[came], 1)
        np.add.at(self._tenant_tokens, owners[came], totals[came])
        np.add.at(self._tenant_changes, old_owner[gone], 1)
        np.add.at(self._tenant_changes, owners[came], 1)
        self.lengths[ids] = totals
        self.owner[ids] = np.where(now, owners, -1)
        if now.any():
            self.last = max(self.last, int(ids[now].max()))


POSTINGS_BUDGET = 2_000_000
"""Most postings :class:`Postings` keeps decoded (16 bytes each: ~32 MB)."""
FOLLOW_MAX_ROWS = 2_000
"""Most rows of an index this process may add, rewrite or delete between two searches for
the kept lists to follow them; past it they are read anew."""


@dataclass(frozen=True)
class FtsIndex:
    """An FTS5 index as :class:`Postings` reads it: the table, its ``fts5vocab``
    instance table, and the columns a search can weigh (in name order, the order
    :func:`read_postings` sums them in; in the table they follow the unused ``tenant``)."""

    fts: str
    instances: str
    columns: tuple[str, ...]


INDEXES = {"turn": FtsIndex("turns_fts", "turns_instances", ("body", "context")),
           "item": FtsIndex("items_fts", "items_instances", ("body",))}
"""The two indexes of a store, by node type."""

_Key = tuple[str, str, tuple[tuple[str, float], ...]]


class Postings:
    """Decoded posting lists: for a term of an index and the searched columns' weights,
    the rows holding it (ascending) and its weighted count in each.

    Why: decoding a term's list from the ``fts5vocab`` instance table is most of what a
    rare-term search costs, and the same terms come back query after query, including
    right after the agent added a message. Lists are kept until another process commits;
    this process's own writes are applied to them (:meth:`before_change` and
    :meth:`inserting` note them, the next :meth:`get` follows): a changed row is read once
    and only touches the lists of the terms it held or holds. Least recently used lists
    go first past :data:`POSTINGS_BUDGET` postings.
    """

    def __init__(self, budget: int = POSTINGS_BUDGET) -> None:
        self.budget = budget
        self._lists: OrderedDict[_Key, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._size = 0
        # The kept lists of each (instance table, term), and how many each index keeps.
        self._by_term: dict[tuple[str, str], set[_Key]] = {}
        self._count: dict[str, int] = {}
        # Per index: the data version its lists hold and the index's row count then.
        self._at: dict[str, tuple[Any, int]] = {}
        # Per index: rows this process changed since, with their columns' text before the
        # first change (None: no such row); or the index in ``_overflow`` past the bound.
        self._before: dict[str, dict[int, tuple[str, ...] | None]] = {}
        self._overflow: set[str] = set()

    def before_change(self, conn: Conn, index: FtsIndex,
                      rowids: Sequence[int] | set[int]) -> None:
        """Note rows of ``index`` this process is about to rewrite or delete (call it
        before the statement): their text now is what the kept lists hold of them."""
        new = self._noting(index, rowids)
        if new:
            texts = _texts(conn, index, new)
            stash = self._before[index.instances]
            for rowid in new:
                stash[rowid] = texts.get(rowid)

    def inserting(self, index: FtsIndex, rowids: Sequence[int] | set[int]) -> None:
        """Note rows this process is about to insert into ``index`` (none of them there
        now; a rowid of a deleted row may come back)."""
        for rowid in self._noting(index, rowids):
            self._before[index.instances][rowid] = None

    def _noting(self, index: FtsIndex, rowids: Sequence[int] | set[int]) -> list[int]:
        """Which of ``rowids`` are not noted yet since the lists were last followed
        (none when no list of ``index`` is kept, or past :data:`FOLLOW_MAX_ROWS`)."""
        name = index.instances
        if name in self._overflow or not self._count.get(name):
            return []
        stash = self._before.setdefault(name, {})
        new = sorted(set(rowids).difference(stash))
        if len(stash) + len(new) > FOLLOW_MAX_ROWS:
            self._overflow.add(name)
            stash.clear()
            return []
        return new

    def docs(self, index: FtsIndex, version: Any, term: str) -> int | None:
        """The rows of ``index`` holding ``term`` (the ``fts5vocab`` row table's count),
        from a kept list read with every column of the index searched, when the kept
        lists are at ``version``; None when no such list is kept."""
        at = self._at.get(index.instances)
        if at is None or at[0] != version:
            return None
        for key in self._by_term.get((index.instances, term), ()):
            if {name for name, _ in key[2]} == set(index.columns):
                return len(self._lists[key][0])
        return None

    def get(self, conn: Conn, version: Any, index: FtsIndex,
            lengths: RowLengths, terms: Sequence[str], weights: Mapping[str, float]
            ) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(rows, counts)`` of each of ``terms`` in the columns ``weights`` names
        (counts weighted by them). ``version`` is the store's ``data_version()``: (this
        process's writes, other processes' commits); ``lengths``, the index's row
        lengths synced to it (their row count and each row's tokens check the changes
        followed)."""
        at = self._at.get(index.instances)
        if at is None or at[0] != version:
            self._follow(conn, version, index, lengths, at)
        return [self._get(conn, index, term, weights) for term in terms]

    def _get(self, conn: Conn, index: FtsIndex, term: str,
             weights: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        key = (index.instances, term, tuple(weights.items()))
        hit = self._lists.get(key)
        if hit is not None:
            self._lists.move_to_end(key)
            return hit
        found = read_postings(conn, index.instances, term, weights)
        self._lists[key] = found
        self._by_term.setdefault((index.instances, term), set()).add(key)
        self._count[index.instances] = self._count.get(index.instances, 0) + 1
        self._size += max(len(found[0]), 1)
        while self._size > self.budget and len(self._lists) > 1:
            self._pop(next(iter(self._lists)))
        return found

    def _follow(self, conn: Conn, version: Any, index: FtsIndex,
                lengths: RowLengths, at: tuple[Any, int] | None) -> None:
        """Bring the kept lists of ``index`` from ``at`` to ``version``, or drop them when
        another process committed, too many rows changed, the index's row count is not
        what the noted changes make it (a change not noted), or a changed row's token
        counts are not FTS5's own (its tokenizer, not ours, is the truth).

        Counts are summed as :func:`read_postings` sums them (columns in name order, one
        instance at a time), so a followed list equals a fresh read to the last bit.
        """
        name = index.instances
        before = self._before.pop(name, {})
        overflow = name in self._overflow
        self._overflow.discard(name)
        self._at[name] = (version, lengths.rows)
        if not self._count.get(name):
            return
        if at is None or overflow or at[0][1] != version[1]:
            self._drop(name)
            return
        now = {r: _terms(text) for r, text in _texts(conn, index, sorted(before)).items()}
        was = {r for r, text in before.items() if text is not None}
        if (lengths.rows != at[1] - len(was - now.keys()) + len(now.keys() - was)
                or not _sizes_agree(lengths, now)):
            self._drop(name)
            return
        # The new count of every changed row in each kept list of a term it held or holds
        # (None: the row leaves the list).
        changes: dict[_Key, dict[int, float | None]] = {}
        for rowid in sorted(before):
            old, new = _terms(before[rowid]), now.get(rowid, [])
            for term in set().union(*old, *new):
                for key in self._by_term.get((name, term), ()):
                    changes.setdefault(key, {})[rowid] = _weighted(
                        index.columns, new, term, dict(key[2]))
        for key, changed in changes.items():
            self._update(key, changed)

    def _update(self, key: _Key, changes: dict[int, float | None]) -> None:
        """Set each changed row's count in one kept list (None: the row leaves it)."""
        rows, counts = self._lists[key]
        ids = np.fromiter(changes, np.int64, len(changes))
        holds = np.fromiter((v is not None for v in changes.values()), bool, len(changes))
        values = np.fromiter((v or 0.0 for v in changes.values()), np.float64, len(changes))
        order = np.argsort(ids)
        ids, holds, values = ids[order], holds[order], values[order]
        at = np.searchsorted(rows, ids)
        present = at < len(rows)
        present[present] = rows[at[present]] == ids[present]
        counts = counts.copy()  # a new array: a search may hold the one it read
        kept = present & holds
        counts[at[kept]] = values[kept]
        gone = at[present & ~holds]
        if len(gone):
            rows, counts = np.delete(rows, gone), np.delete(counts, gone)
        new = ~present & holds
        if new.any():
            where = np.searchsorted(rows, ids[new])
            rows, counts = np.insert(rows, where, ids[new]), np.insert(counts, where,
                                                                       values[new])
        self._size += max(len(rows), 1) - max(len(self._lists[key][0]), 1)
        self._lists[key] = (rows, counts)

    def _pop(self, key: _Key) -> None:
        rows, _ = self._lists.pop(key)
        self._size -= max(len(rows), 1)
        terms = self._by_term[(key[0], key[1])]
        terms.discard(key)
        if not terms:
            del self._by_term[(key[0], key[1])]
        self._count[key[0]] -= 1

    def _drop(self, instances: str) -> None:
        for key in [k for k in self._lists if k[0] == instances]:
            self._pop(key)


def _texts(conn: Conn, index: FtsIndex, rowids: Sequence[int]
           ) -> dict[int, tuple[str, ...]]:
    """The searchable columns' text of those of ``rowids`` that ``index`` holds."""
    columns = ", ".join(index.columns)
    out: dict[int, tuple[str, ...]] = {}
    for i in range(0, len(rowids), 500):
        chunk = list(rowids[i : i + 500])
        out.update((r[0], tuple(r[1:])) for r in conn.execute(
            f"SELECT rowid, {columns} FROM {index.fts} WHERE rowid IN"
            f" ({','.join('?' * len(chunk))})", chunk))
    return out


def _terms(texts: tuple[str | None, ...] | None) -> list[Counter[str]]:
    """Each column's index terms and their counts, as FTS5's ``unicode61`` stores them
    (the text is already normalised tokens joined by spaces: ``text.index_text``)."""
    if texts is None:
        return []
    return [Counter(textmod.fts_term(t) for t in text.split()) if text else Counter()
            for text in texts]


def _weighted(columns: tuple[str, ...], counters: list[Counter[str]], term: str,
              weights: Mapping[str, float]) -> float | None:
    """A row's count of ``term``, weighted and summed as :func:`read_postings` does; None
    when no searched column holds it (the row is not in the term's list)."""
    total, found = 0.0, False
    for name, counter in zip(columns, counters, strict=False):
        weight = weights.get(name)
        if weight is not None:
            for _ in range(counter.get(term, 0)):
                total += weight
                found = True
    return total if found else None


def _sizes_agree(lengths: RowLengths, terms: Mapping[int, list[Counter[str]]]) -> bool:
    """Whether each row's tokens, split by :func:`_terms`, are as many as FTS5 counted
    (``lengths``, synced: every column's, the unused ``tenant`` holds none)."""
    return all(r < len(lengths.lengths) and int(lengths.lengths[r]) == sum(
        sum(c.values()) for c in counters) for r, counters in terms.items())


def read_postings(conn: Conn, instances: str, term: str,
                  weights: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, counts)`` of ``term`` read from the instance table (see ``Postings.get``).

    A row's count adds its instances' column weights one at a time, the columns in name
    order (all of a row's ``body`` instances, then its ``context`` ones), as FTS5 does."""
    names = sorted(weights)
    m = len(names) + 1  # an instance reads back as doc * m + its column's place in names
    whens = " ".join(f"WHEN ? THEN {n}" for n in range(len(names)))
    # One joined string of integers in the table's own order (doc, column, offset): a
    # GROUP BY col made SQLite sort every instance first, and a second joined string or
    # a Python tuple per instance cost more again (a common term of 40k long messages:
    # 4.3 ms a list, 7-11 ms so).
    (joined,) = conn.execute(
        f"SELECT group_concat(doc * {m} + CASE col {whens} ELSE {m - 1} END)"
        f" FROM {instances} WHERE term = ?", [*names, term]).fetchone()
    if joined and ("." in joined or "e" in joined):
        return _read_grouped(conn, instances, term, weights)  # doc * m left int64
    packed = np.fromstring(joined, np.int64, sep=",") if joined else np.zeros(0, np.int64)
    doc, code = np.divmod(packed, m)
    searched = code < m - 1
    if not searched.all():
        doc, code = doc[searched], code[searched]
    if not len(doc):
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    weight = np.asarray([weights[n] for n in names], np.float64)
    step, turn = np.diff(doc), np.diff(code)
    if (step >= 0).all() and (len(names) == 1 or ((step != 0) | (turn >= 0)).all()):
        # FTS5's order: rows ascending, and each row's columns in name order already.
        first = np.concatenate([[True], step != 0])
        return doc[first], np.bincount(np.cumsum(first) - 1, weights=weight[code])
    # Each column's instances together, in name order (a stable sort keeps each column's
    # in their order), so bincount adds a row's weights as above.
    order = np.argsort(code, kind="stable")
    rows, inverse = np.unique(doc[order], return_inverse=True)
    return rows, np.bincount(inverse, weights=weight[code[order]])


def _read_grouped(conn: Conn, instances: str, term: str,
                  weights: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`read_postings` for rowids too large to pack with their column (past 2**61)."""
    found = [(np.array(joined.split(","), np.int64), weights[col]) for col, joined in
             conn.execute(f"SELECT col, group_concat(doc) FROM {instances} WHERE term = ?"
                          " GROUP BY col", (term,)) if col in weights]
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    doc = np.concatenate([d for d, _ in found])
    weight = np.concatenate([np.full(len(d), w, np.float64) for d, w in found])
    rows, inverse = np.unique(doc, return_inverse=True)
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


def idf(stats: TenantStats, docs: int) -> float:
    """A term's idf: FTS5's, over the tenant's rows, plus ``idf_shift``."""
    if docs > stats.rows:
        # Only a damaged index or row count puts a term in more rows than there are.
        raise StoreError("", sqlite3.SQLITE_CORRUPT, f"the search index has a term in {docs} "
                         f"rows of {stats.rows}")
    return max(math.log((stats.rows - docs + 0.5) / (docs + 0.5)), 1e-6) + stats.idf_shift


def _part(lengths: RowLengths, stats: TenantStats, rows: np.ndarray, freq: np.ndarray,
          docs: int) -> np.ndarray:
    """One term's bm25 in ``rows`` (``freq`` its weighted counts there, ``docs`` the rows
    holding it), in FTS5's order of operations."""
    norm = K1 * (1 - B + B * lengths.lengths[rows] / stats.avgdl)
    return idf(stats, docs) * ((freq * (K1 + 1.0)) / (freq + norm))


def bm25_scores(lengths: RowLengths, stats: TenantStats,
                lists: Sequence[tuple[np.ndarray, np.ndarray]]) -> Scored | None:
    """bm25 of every row holding any of the query terms whose :class:`Postings` lists
    are ``lists`` (in query order; their OR), or None when no row does. ``lengths``
    must be synced and hold the rows; ``stats`` are the tenant's."""
    kept = [(rows, freq) for rows, freq in lists if len(rows)]
    if not kept:
        return None
    rows, inverse = np.unique(np.concatenate([r for r, _ in kept]), return_inverse=True)
    if rows[-1] >= len(lengths.lengths) or rows[0] < 0:
        # Only a damaged index names a row its table never had.
        raise StoreError("", sqlite3.SQLITE_CORRUPT, f"the search index names row {rows[-1]} "
                         f"of {len(lengths.lengths) - 1}")
    parts = np.concatenate([_part(lengths, stats, r, f, len(r)) for r, f in kept])
    # bincount adds each row's terms in query order, as FTS5 sums its phrases.
    return Scored(rows, np.bincount(inverse, weights=parts))


def with_terms(lengths: RowLengths, stats: TenantStats, scored: Scored,
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
        total = total + _part(lengths, stats, scored.rows, f, len(rows))  # a row without it: + 0.0
    return Scored(scored.rows, total)
