"""Embeddings: one float32 vector per node and model, read back as a tenant's matrix.

Holds ``VectorStore``: ``set_embeddings`` and ``_put_vectors`` (every write path that embeds
goes through it), and ``vectors``/``vector_speakers``/``vector_refs`` (a tenant's matrix with
each row's speaker and ref, cached; ``retrieval.py`` searches it with NumPy).

SQLite-specific: vectors are raw float32 blobs in ``embeddings``, written with ``INSERT OR
REPLACE`` (PostgreSQL: ``INSERT ... ON CONFLICT DO UPDATE``, and pgvector's ``vector``
column where the search moves into the database)."""

from __future__ import annotations

from collections.abc import Sequence

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
