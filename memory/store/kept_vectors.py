"""``KeptVectors``: one tenant's vectors of one model held in memory, appended to in
place, that ``VectorStore`` (vectors.py) keeps per tenant and the store connection holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..locking import stored_value
from .rows import Ref

KEPT_TENANTS = 16
"""Tenants (and models) whose vectors a store keeps in memory, least recently used out."""


class KeptVectors:
    """One tenant's vectors of one model, in rowid order, with the rows' refs and speakers
    filled in when first asked for (``VectorStore.vector_refs``/``vector_speakers``).

    Once rows are added, ``matrix`` (and ``speakers``) is a view of the first rows of a
    larger buffer, so adding a few more copies nothing. A buffer's filled rows are never
    written again: a reader holding an earlier view keeps seeing the rows it had, and a
    longer view of the same buffer begins with them (``DenseMemo.speaker_rows`` relies on
    it).
    """

    def __init__(self, key: tuple[str, str], version: tuple[int, int]) -> None:
        self.key = key  # (tenant, model)
        self.version = version  # the store's data version the rows are up to date with
        self.ids: list[str] = []
        self.last = (0, "", b"")  # rowid, node id and bytes of the last row read
        self._buffer = np.zeros((0, 0), dtype=np.float32)
        self.matrix = self._buffer
        self.refs: list[Ref | None] | None = None
        self.speakers: np.ndarray | None = None
        self._speaker_buffer = np.empty(0, dtype=object)

    def append(self, rows: Sequence[tuple[int, str, int, bytes]]) -> None:
        """Add rows ``(rowid, node id, dim, vector)``, rowids ascending. A blob may hold
        several vectors of ``dim`` (a node's passages): each is a row of ``matrix``, its
        node id repeated in ``ids``."""
        if not rows:
            return
        dim = rows[0][2]
        with stored_value("a stored vector"):  # a blob cut short on disk
            if any(not r[3] or len(r[3]) % (4 * dim) for r in rows):
                raise ValueError(f"a vector blob is no whole number of {dim}-d vectors")
            block = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32
                                  ).reshape(-1, dim)
        n = len(self.ids)
        # A first read keeps no spare rows: most tenants are read once, never added to.
        self._buffer = _appended(self._buffer, n, block) if n else block
        self.matrix = self._buffer[:n + len(block)]
        added = ([r[1] for r in rows] if len(block) == len(rows) else
                 [r[1] for r in rows for _ in range(len(r[3]) // (4 * dim))])
        self.ids = [*self.ids, *added]  # a new list: readers hold the old one
        self.last = (rows[-1][0], rows[-1][1], rows[-1][3])

    def add_speakers(self, more: np.ndarray) -> np.ndarray:
        """Add the speakers of the next rows (an object array), in row order; returns
        ``speakers``."""
        n = 0 if self.speakers is None else len(self.speakers)
        self._speaker_buffer = _appended(self._speaker_buffer, n, more)
        self.speakers = self._speaker_buffer[:n + len(more)]
        return self.speakers

    @property
    def nbytes(self) -> int:
        """Bytes of vectors held, spare rows included."""
        return int(self._buffer.nbytes)

    def catch_up(self, conn: Any, user_id: str, model: str, version: tuple[int, int]) -> bool:
        """Read the rows this process added since; False (nothing changed) when any kept
        row was deleted or replaced since, which only a full read can tell apart.

        This connection's deletes (a replacement is one) are marked by a trigger
        (``connection.watch_vector_deletes``); rows are read from the last kept rowid on,
        and that row must come back as it was.
        """
        if conn.execute("SELECT 1 FROM temp.vectors_gone WHERE user_id = ? AND model = ?",
                        (user_id, model)).fetchone():
            return False
        # "+user_id" keeps the planner on the rowid range past the last kept row; with
        # none kept that range is every tenant's rows, so the tenant index then.
        tenant = "+user_id" if self.ids else "user_id"
        rows = conn.execute(
            "SELECT rowid, node_id, dim, vector FROM embeddings WHERE rowid >= ?"
            f" AND {tenant} = ? AND model = ? ORDER BY rowid",
            (self.last[0], user_id, model)).fetchall()
        if self.ids:
            if not rows or (rows[0][0], rows[0][1], rows[0][3]) != self.last:
                return False
            rows = rows[1:]
        self.append(rows)
        self.version = version
        return True


def _appended(buffer: np.ndarray, n: int, block: np.ndarray) -> np.ndarray:
    """``buffer`` with ``block`` written from row ``n`` on; when it has no room, a new one
    with a quarter more rows to spare, its first ``n`` rows copied. Rows before ``n`` are
    never written."""
    total = n + len(block)
    if total > len(buffer):
        grown = np.empty((total + max(total // 4, 64), *block.shape[1:]), block.dtype)
        grown[:n] = buffer[:n]
        buffer = grown
    buffer[n:total] = block
    return buffer


__all__ = ["KEPT_TENANTS", "KeptVectors"]
