"""Embeddings: one float32 vector per node and model, read back as a tenant's matrix.

Holds ``VectorStore``: ``set_embeddings`` and ``_put_vectors`` (every write path that embeds
goes through it), ``vectors``/``vector_speakers``/``vector_refs`` (a tenant's matrix with
each row's speaker and ref, cached) and ``dense_refs`` (the dense channel of
``retrieval.py``: exact cosine over that matrix in NumPy, :func:`matrix_dense_refs`, which
the PostgreSQL store runs too where its database has no pgvector column).

SQLite-specific: vectors are raw float32 blobs in ``embeddings``, written with ``INSERT OR
REPLACE`` (PostgreSQL: ``INSERT ... ON CONFLICT DO UPDATE``, and pgvector's ``vector``
column, ranked in the database, where the server has the extension)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .kept_vectors import KEPT_TENANTS, KeptVectors
from .nodes import NodeLookups
from .rows import Ref
from .shared import DenseMemo, EmbeddingWrites


class VectorStore(NodeLookups, EmbeddingWrites):
    """Writing and reading embeddings (see the module)."""

    def _put_vectors(self, users: Sequence[str], ids: Sequence[str], vectors: np.ndarray,
                     model: str) -> None:
        """Write one vector per node (replacing old ones); ``users`` is each node's tenant."""
        vectors = np.asarray(vectors, dtype=np.float32)
        self.conn.executemany(
            "INSERT OR REPLACE INTO embeddings (node_id, model, user_id, dim, vector)"
            " VALUES (?,?,?,?,?)",
            [(i, model, u, vectors.shape[1], v.tobytes())
             for u, i, v in zip(users, ids, vectors, strict=True)])

    def vectors(self, user_id: str, model: str) -> tuple[list[str], np.ndarray]:
        """All of a tenant's vectors for ``model`` as (node ids, float32 matrix).

        Kept in memory: read in full once, then while this process only adds vectors,
        brought up to date by reading the rows added since (:class:`KeptVectors`); another
        process's commit, a deleted or replaced vector, or a read inside a write
        transaction reads them in full again.
        """
        kept = self._kept(user_id, model)
        return kept.ids, kept.matrix

    def vector_speakers(self, user_id: str, model: str) -> np.ndarray:
        """The speaker of each node in :meth:`vectors`' order, as an object array."""
        with self._lock:
            kept = self._kept(user_id, model)
            done = 0 if kept.speakers is None else len(kept.speakers)
            if kept.speakers is None or done < len(kept.ids):
                return kept.add_speakers(self._speakers_of(user_id, kept.ids[done:]))
            return kept.speakers

    def vector_refs(self, user_id: str, model: str) -> list[Ref | None]:
        """The ref of each node in :meth:`vectors`' order (None: the node is gone)."""
        with self._lock:
            kept = self._kept(user_id, model)
            done = 0 if kept.refs is None else len(kept.refs)
            if kept.refs is None or done < len(kept.ids):
                found = self.refs(user_id, kept.ids[done:])
                kept.refs = [*(kept.refs or []), *(found.get(i) for i in kept.ids[done:])]
            return kept.refs

    def _kept(self, user_id: str, model: str) -> KeptVectors:
        with self._lock:
            version = self.data_version()
            key = (user_id, model)
            kept = self._kept_vectors.get(key)
            if kept is not None and kept.version == version:
                self._kept_vectors.move_to_end(key)
                return kept
            if self._depth:
                # Uncommitted rows may be rolled back: read them for this transaction only.
                self._kept_vectors.pop(key, None)
                if self._tx_vectors is None or self._tx_vectors.version != version or (
                        self._tx_vectors.key != key):
                    self._tx_vectors = self._read_vectors(user_id, model, version)
                return self._tx_vectors
            if kept is None or kept.version[1] != version[1] or not kept.catch_up(
                    self.conn, user_id, model, version):
                # Deletes marked before this read are in it.
                self.conn.execute("DELETE FROM temp.vectors_gone WHERE user_id = ?"
                                  " AND model = ?", key)
                kept = self._read_vectors(user_id, model, version)
            self._kept_vectors[key] = kept
            self._kept_vectors.move_to_end(key)
            while len(self._kept_vectors) > 1 and (
                    len(self._kept_vectors) > KEPT_TENANTS
                    or sum(k.nbytes for k in self._kept_vectors.values()) > self.CACHE_BYTES):
                self._kept_vectors.popitem(last=False)
            return kept

    def dense_refs(self, user_id: str, model: str, query_vec: np.ndarray, k: int, *,
                   allowed: set[Ref] | None = None, nodes: Sequence[str] = ("turn", "item"),
                   speaker: str | None = None) -> list[tuple[Ref, float]]:
        """(ref, cosine) of the tenant's ``k`` nodes whose ``model`` vectors are nearest to
        ``query_vec``, best first (see :func:`matrix_dense_refs`).

        Vectors are unit length, so the cosine is the dot product. ``nodes``: the node
        types kept; ``allowed``: the refs kept (None: all); ``speaker``: only that
        speaker's turns (items are left out). Nodes that are gone are skipped.
        """
        return matrix_dense_refs(self, user_id, model, query_vec, k, allowed=allowed,
                                 nodes=nodes, speaker=speaker)

    def _speakers_of(self, user_id: str, ids: list[str]) -> np.ndarray:
        found = {n: r.get("speaker") for n, r in self.nodes(user_id, ids, text=False).items()}
        return np.array([found.get(i) for i in ids], dtype=object)

    def _read_vectors(self, user_id: str, model: str, version: tuple[int, int]
                      ) -> KeptVectors:
        rows = self.conn.execute(
            "SELECT rowid, node_id, dim, vector FROM embeddings WHERE user_id = ? AND model = ?"
            " ORDER BY rowid", (user_id, model)).fetchall()
        kept = KeptVectors((user_id, model), version)
        kept.append(rows)
        return kept


def matrix_dense_refs(store: Any, user_id: str, model: str, query_vec: np.ndarray, k: int, *,
                      allowed: set[Ref] | None = None, nodes: Sequence[str] = ("turn", "item"),
                      speaker: str | None = None) -> list[tuple[Ref, float]]:
    """``dense_refs`` over ``store``'s cached matrix (``vectors``, ``vector_refs`` and, with
    ``speaker``, ``vector_speakers``): exact cosine in NumPy, as :func:`top_cosine` ranks.

    ``store._dense_memo`` (a :class:`DenseMemo`) keeps the last query's cosines over the
    whole matrix and each speaker's rows, so a search's speaker channels reuse its dense
    channel's one pass instead of copying that speaker's rows out and scanning them again.
    """
    if k < 1:
        return []
    _, matrix = store.vectors(user_id, model)
    if not len(matrix):
        return []
    ids = store.vector_refs(user_id, model)
    memo: DenseMemo = store._dense_memo
    if speaker is None:
        return top_cosine(ids, memo.cosines(matrix, query_vec), k, allowed, nodes)
    nodes = tuple(n for n in nodes if n == "turn")  # items have no speaker
    rows = memo.speaker_rows(store.vector_speakers(user_id, model), speaker)
    if not nodes or not len(rows):
        return []
    sims = memo.held(matrix, query_vec)
    if sims is not None:
        sims = sims[rows]
    elif len(rows) * 4 < len(matrix):  # a few rows: scanning them beats a full pass
        sims = matrix[rows] @ query_vec
    else:
        sims = memo.cosines(matrix, query_vec)[rows]
    return top_cosine(ids, sims, k, allowed, nodes, rows)


def top_cosine(
    ids: Sequence[Ref | None], sims: np.ndarray, k: int, allowed: set[Ref] | None,
    nodes: Sequence[str], rows: np.ndarray | None = None,
) -> list[tuple[Ref, float]]:
    """(ref, cosine) of the ``k`` best candidates, best first: ``sims[i]`` is the cosine of
    row ``rows[i]`` (all rows in order when ``rows`` is None), ``ids`` each row's ref
    (None: the node is gone).

    ``allowed`` and ``nodes`` filter the ranked list, which is widened until ``k`` survive
    or the candidates run out. A row whose cosine is not a number (a vector's bytes
    altered on disk: NaN) is left out.
    """
    if not len(sims):
        return []
    want = min(len(sims), k)
    while True:
        top = np.argpartition(-sims, want - 1)[:want]
        top = top[np.argsort(-sims[top])]
        out = [(ref, sim) for i in top
               if (ref := ids[i if rows is None else rows[i]]) is not None
               and ref[0] in nodes and (allowed is None or ref in allowed)
               and math.isfinite(sim := float(sims[i]))]
        if len(out) >= k or want == len(sims):
            return out[:k]
        want = min(len(sims), want * 4)
