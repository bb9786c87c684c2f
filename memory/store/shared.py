"""What both backends do the same way above their SQL: the embedder setting, embedding a
batch of vectors, adding items in one transaction, the in-process cache of values read
under a data version, the last dense pass, and ids/facets over the backend's ref lookup.

Each backend supplies the engine-specific steps these call (``transaction``,
``_put_vectors``, ``_add_one``) and, where its engine needs it, ``_lock_writers``: the
SQLite store has one writer at a time and needs nothing more; the PostgreSQL store takes
the tenants' advisory locks there.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..blas import one_blas_thread
from ..embed import Embedder, default_embedder
from ..models import Item, utcnow
from .rows import Facets, Ref, _nbytes

MISS = object()
"""What :meth:`VersionedCache.get` returns for a key it holds under no such version."""


class VersionedCache:
    """Values read from the store, each kept with the data version it was read under.

    A value is served only while the version asked for is the one it was stored under (the
    backend's ``data_version``: it moves when any process commits). Bounded: at most
    ``entries`` values and ``max_bytes`` of arrays, least recently used dropped first.
    Keys name their tenant second (``(what, user_id, ...)``), so :meth:`forget` drops one
    tenant's values. Thread-safe.
    """

    def __init__(self, entries: int, max_bytes: int) -> None:
        self.entries, self.max_bytes = entries, max_bytes
        self._values: OrderedDict[tuple[Any, ...], tuple[tuple[int, int], Any, int]] = (
            OrderedDict())
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...], version: tuple[int, int]) -> Any:
        """The value under ``key`` stored at ``version``, or :data:`MISS`."""
        with self._lock:
            hit = self._values.get(key)
            if hit is None or hit[0] != version:
                return MISS
            self._values.move_to_end(key)
            return hit[1]

    def put(self, key: tuple[Any, ...], version: tuple[int, int], value: Any) -> None:
        """Keep ``value`` under ``key`` for ``version``, dropping the oldest past the bounds."""
        size = _nbytes(value)
        with self._lock:
            self._drop(key)
            self._values[key] = (version, value, size)
            self._bytes += size
            while self._values and (len(self._values) > self.entries
                                    or self._bytes > self.max_bytes):
                self._drop(next(iter(self._values)))

    def forget(self, user_id: str) -> None:
        """Drop every value of one tenant (other tenants' stay)."""
        with self._lock:
            for key in [k for k in self._values if len(k) > 1 and k[1] == user_id]:
                self._drop(key)

    def _drop(self, key: tuple[Any, ...]) -> None:
        old = self._values.pop(key, None)
        if old is not None:
            self._bytes -= old[2]


class DenseMemo:
    """The last dense pass of one store: the cosines of one query vector over one matrix,
    and the rows of each speaker in one speaker array.

    Matrices and speaker arrays are matched by identity: ``KeptVectors`` (and the
    PostgreSQL cache) hand out a new array whenever rows change, never alter one in
    place, so a held result is stale exactly when the array it was computed on is not
    the current one. Each value is swapped in whole, so threads sharing a store can at
    worst recompute.
    """

    def __init__(self) -> None:
        self._pass: tuple[np.ndarray, bytes, np.ndarray] | None = None
        self._speakers: tuple[np.ndarray, dict[str, np.ndarray]] | None = None
        self._best: tuple[np.ndarray, np.ndarray, bytes, np.ndarray] | None = None

    def best_passages(self, matrix: np.ndarray, passages: np.ndarray,
                      query_vec: np.ndarray) -> np.ndarray:
        """Each ``matrix`` row's best passage cosine for ``query_vec`` over the passage
        matrix ``passages``, as far as a search has scored them: NaN where not yet.

        The one array of the last (matrices, query) triple, filled in place by its scorer
        (``vectors.with_passages``): a search's speaker channel then scores only the
        nodes its dense channel did not. Both matrices are matched by identity (a row
        added or deleted in either gives new arrays, so rows never map stale). Two
        threads with one query write the same values; another query swaps in a new
        array."""
        held = self._best
        if (held is None or held[0] is not matrix or held[1] is not passages
                or held[2] != query_vec.tobytes()):
            held = (matrix, passages, query_vec.tobytes(),
                    np.full(len(matrix), np.nan, np.float32))
            self._best = held
        return held[3]

    def held(self, matrix: np.ndarray, query_vec: np.ndarray) -> np.ndarray | None:
        """The cosines of ``query_vec`` over ``matrix`` if this memo holds them."""
        held = self._pass
        if held is not None and held[0] is matrix and held[1] == query_vec.tobytes():
            return held[2]
        return None

    def cosines(self, matrix: np.ndarray, query_vec: np.ndarray) -> np.ndarray:
        """``matrix @ query_vec`` (unit vectors: the cosines), computed once per pair."""
        sims = self.held(matrix, query_vec)
        if sims is None:
            with one_blas_thread():  # on busy cores, a split product waits for one
                sims = matrix @ query_vec
            self._pass = (matrix, query_vec.tobytes(), sims)
        return sims

    def speaker_rows(self, speakers: np.ndarray, speaker: str) -> np.ndarray:
        """The indices of ``speakers`` equal to ``speaker``, ascending.

        A longer view of the buffer the held array views (``KeptVectors`` after an add)
        begins with the held rows, so only its new rows are compared."""
        held = self._speakers
        if held is None or held[0] is not speakers:
            known: dict[str, np.ndarray] = {}
            if held is not None and speakers.base is not None and (
                    speakers.base is held[0].base and len(speakers) >= len(held[0])):
                start = len(held[0])
                new = speakers[start:]
                known = {name: np.concatenate([found, np.flatnonzero(new == name) + start])
                         for name, found in held[1].items()}
            held = (speakers, known)
            self._speakers = held
        rows = held[1].get(speaker)
        if rows is None:
            rows = held[1][speaker] = np.flatnonzero(speakers == speaker)
        return rows


class RefLookups:
    """``ids``, ``with_ids`` and ``facets`` over the backend's ``_ref_rows``: (id, facets)
    of the tenant's rows among some refs, each row read once per ``reading``."""

    if TYPE_CHECKING:
        def _ref_rows(self, user_id: str, refs: Sequence[Ref]
                      ) -> dict[Ref, tuple[str, Facets]]: ...

    def ids(self, user_id: str, refs: Sequence[Ref]) -> dict[Ref, str]:
        """The ids of the tenant's rows among ``refs`` (others are left out)."""
        return {r: found[0] for r, found in self._ref_rows(user_id, refs).items()}

    def with_ids(self, user_id: str, ranked: Sequence[tuple[Ref, float]]
                 ) -> list[tuple[str, float]]:
        """``[(ref, score)]`` as ``[(id, score)]``, keeping the tenant's rows only."""
        ids = self.ids(user_id, [r for r, _ in ranked])
        return [(ids[r], v) for r, v in ranked if r in ids]

    def facets(self, user_id: str, refs: Sequence[Ref]) -> dict[Ref, Facets]:
        """Speaker, event time, conversation and session of the tenant's ``refs``: what
        the search priors read of every candidate (hundreds a query)."""
        return {r: found[1] for r, found in self._ref_rows(user_id, refs).items()}


class EmbedderSetting:
    """The ``embedder`` every write is embedded with, the shipped model loaded lazily."""

    _embedder_spec: Embedder | Literal["default"] | None

    @property
    def embedder(self) -> Embedder | None:
        """What every write is embedded with (None: no vectors are written)."""
        if self._embedder_spec == "default":
            self._embedder_spec = default_embedder()
        return self._embedder_spec

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
