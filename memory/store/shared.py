"""What both backends do the same way above their SQL: the embedder setting, embedding a
batch of vectors, and adding items in one transaction.

Each backend supplies the engine-specific steps these call (``transaction``,
``_put_vectors``, ``_add_one``) and, where its engine needs it, ``_lock_writers``: the
SQLite store has one writer at a time and needs nothing more; the PostgreSQL store takes
the tenants' advisory locks there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..embed import Embedder, default_embedder
from ..models import Item, utcnow


class EmbedderSetting:
    """The ``embedder`` every write is embedded with, the shipped model loaded lazily."""

    _embedder_spec: Embedder | Literal["default"] | None

    @property
    def embedder(self) -> Embedder | None:
        """What every write is embedded with (None: no vectors are written)."""
        if self._embedder_spec == "default":
            self._embedder_spec = default_embedder()
        return self._embedder_spec  # type: ignore[return-value]

    @embedder.setter
    def embedder(self, value: Embedder | Literal["default"] | None) -> None:
        self._embedder_spec = value


class EmbeddingWrites:
    """``set_embeddings``: checked vectors written through the backend's ``_put_vectors``."""

    if TYPE_CHECKING:
        def transaction(self) -> AbstractContextManager[Any]: ...

        def _put_vectors(self, users: Sequence[str], ids: Sequence[str],
                         vectors: np.ndarray, model: str) -> None: ...

    def set_embeddings(
        self, user_id: str, node_ids: Sequence[str], vectors: np.ndarray, model: str
    ) -> None:
        """Store one float32 vector per node (rows of ``vectors``), replacing old ones."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(node_ids):
            raise ValueError("vectors must be a 2-D array with one row per node id")
        with self.transaction():
            self._put_vectors([user_id] * len(node_ids), node_ids, vectors, model)


class ItemWrites(EmbeddingWrites):
    """``add``/``add_many``: items stored (or merged) in one transaction, new ones embedded."""

    if TYPE_CHECKING:
        @property
        def embedder(self) -> Embedder | None: ...

        def _add_one(self, item: Item, now: datetime) -> tuple[str, bool]: ...

    def _lock_writers(self, user_ids: Sequence[str]) -> None:
        """Hold what a read-then-insert of these tenants needs until the transaction ends
        (nothing on an engine with one writer at a time)."""

    def add(self, item: Item) -> str:
        """Store an item; an exact duplicate is merged into the existing row (its id returned).

        Exact duplicates (same tenant, kind, speaker, subject and folded text) merge their
        tags and evidence and keep the higher confidence: no fuzzy logic happens here.
        """
        return self.add_many([item])[0]

    def add_many(self, items: Iterable[Item]) -> list[str]:
        """Store several items in one transaction; returns their ids in order."""
        items = list(items)
        now = utcnow()
        ids: list[str] = []
        fresh: list[tuple[Item, str]] = []
        with self.transaction():
            self._lock_writers(sorted({i.user_id for i in items}))
            for item in items:
                item_id, inserted = self._add_one(item, now)
                ids.append(item_id)
                if inserted:
                    fresh.append((item, item_id))
            embedder = self.embedder
            if fresh and embedder is not None:
                self._put_vectors([i.user_id for i, _ in fresh], [n for _, n in fresh],
                                  embedder.encode([i.text for i, _ in fresh]), embedder.name)
        return ids
