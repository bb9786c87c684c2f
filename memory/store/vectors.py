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

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..locking import stored_value
from .nodes import NodeLookups
from .rows import Ref
from .shared import EmbeddingWrites


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

        Cached in memory until this process writes again or another process commits
        (``PRAGMA data_version``), so repeated searches do not re-read SQLite.
        """
        return self._cached(("vectors", user_id, model), lambda: self._load_vectors(user_id, model))

    def vector_speakers(self, user_id: str, model: str) -> np.ndarray:
        """The speaker of each node in :meth:`vectors`' order, as an object array (cached)."""
        ids, _ = self.vectors(user_id, model)
        return self._cached(("vector_speakers", user_id, model), lambda: self._speakers_of(
            user_id, ids))

    def vector_refs(self, user_id: str, model: str) -> list[Ref | None]:
        """The ref of each node in :meth:`vectors`' order (None: the node is gone; cached)."""
        ids, _ = self.vectors(user_id, model)

        def load() -> list[Ref | None]:
            found = self.refs(user_id, ids)
            return [found.get(i) for i in ids]

        return self._cached(("vector_refs", user_id, model), load)

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

    def _load_vectors(self, user_id: str, model: str) -> tuple[list[str], np.ndarray]:
        rows = self.conn.execute(
            "SELECT node_id, dim, vector FROM embeddings WHERE user_id = ? AND model = ?",
            (user_id, model),
        ).fetchall()
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        with stored_value("a stored vector"):  # a blob cut short on disk
            matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
            return [r[0] for r in rows], matrix.reshape(len(rows), rows[0][1])


def matrix_dense_refs(store: Any, user_id: str, model: str, query_vec: np.ndarray, k: int, *,
                      allowed: set[Ref] | None = None, nodes: Sequence[str] = ("turn", "item"),
                      speaker: str | None = None) -> list[tuple[Ref, float]]:
    """``dense_refs`` over ``store``'s cached matrix (``vectors``, ``vector_refs`` and, with
    ``speaker``, ``vector_speakers``): exact cosine in NumPy, as :func:`top_cosine` ranks."""
    if k < 1:
        return []
    _, matrix = store.vectors(user_id, model)
    if not len(matrix):
        return []
    ids = store.vector_refs(user_id, model)
    rows = None
    if speaker is not None:
        nodes = tuple(n for n in nodes if n == "turn")
        rows = np.flatnonzero(store.vector_speakers(user_id, model) == speaker)
    return top_cosine(ids, matrix, query_vec, k, allowed, nodes, rows)


def top_cosine(
    ids: Sequence[Ref | None], matrix: np.ndarray, query_vec: np.ndarray, k: int,
    allowed: set[Ref] | None, nodes: Sequence[str], rows: np.ndarray | None = None,
) -> list[tuple[Ref, float]]:
    """(ref, cosine) of the ``k`` best rows of ``matrix`` (unit vectors) for ``query_vec``;
    ``ids`` holds each row's ref (None: the node is gone).

    ``rows`` restricts the candidates to those row indices; ``allowed`` and ``nodes``
    filter the ranked list, which is widened until ``k`` survive or the rows run out.
    """
    rows = np.arange(len(ids)) if rows is None else rows
    if not len(rows):
        return []
    sims = matrix[rows] @ query_vec if len(rows) < len(ids) else matrix @ query_vec

    want = min(len(rows), k)
    while True:
        top = np.argpartition(-sims, want - 1)[:want]
        top = top[np.argsort(-sims[top])]
        out = [(ref, float(sims[i])) for i in top if (ref := ids[rows[i]]) is not None
               and ref[0] in nodes and (allowed is None or ref in allowed)]
        if len(out) >= k or want == len(rows):
            return out[:k]
        want = min(len(rows), want * 4)
