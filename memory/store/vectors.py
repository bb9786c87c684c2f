"""Embeddings: one float32 vector per node and model, read back as a tenant's matrix.

Holds ``VectorStore``: ``set_embeddings`` and ``_put_vectors`` (every write path that embeds
goes through it), ``vectors``/``vector_speakers``/``vector_refs`` (a tenant's matrix with
each row's speaker and ref, cached) and ``dense_refs`` (the dense channel of
``retrieval.py``: exact cosine over that matrix in NumPy, :func:`matrix_dense_refs`, which
the PostgreSQL store runs too where its database has no pgvector column).

A long node (text over ``passages.PASSAGE_CHARS``) also has its passages' vectors
(``passages.split_passages``), all in one row of the model :func:`passage_model` names
(``<model>#passages``; the blob holds them one after another): a long answer's vector is
an average over topics that no question asks all at once, so the dense channel scores a
long node by its whole vector raised toward its best passage (:func:`with_passages`).
They are written with the node's vector (``_put_passages``, the encoder being the
store's embedder when its name is the model's) and deleted with it (deletes go by node
id); ``passage_vectors.backfill_passages`` gives an older store's long nodes theirs.

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
from .passage_vectors import (
    PASSAGE_SHARE,
    PASSAGE_SUFFIX,
    node_text,
    passage_encoder,
    passage_model,
    passage_vectors,
)
from .rows import Ref
from .shared import DenseMemo, EmbeddingWrites


def long_passages(store: Any, users: Sequence[str], ids: Sequence[str], model: str
                  ) -> tuple[str, dict[str, np.ndarray], dict[str, str]] | None:
    """What a write of ``model`` vectors for ``ids`` (``users`` their tenants) adds as
    passage vectors: (the passage model's name, each long node's passage vectors, each
    such node's tenant); None where nothing encodes ``model``'s passages. Both backends'
    ``_put_vectors`` write it."""
    encoder = passage_encoder(store.embedder, model)
    if encoder is None or model.endswith(PASSAGE_SUFFIX):
        return None
    texts: dict[str, str] = {}
    tenant: dict[str, str] = {}
    for user in dict.fromkeys(users):
        mine = [i for u, i in zip(users, ids, strict=True) if u == user]
        for node_id, row in store.nodes(user, mine).items():
            texts[node_id] = node_text(row)
            tenant[node_id] = user
    return passage_model(model), passage_vectors(encoder, texts), tenant


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
        self._put_passages(users, ids, model)

    def _put_passages(self, users: Sequence[str], ids: Sequence[str], model: str) -> None:
        """Write the passage vectors of the long nodes among ``ids`` (see the module) and
        delete those of the others (a text edited short keeps none)."""
        found = long_passages(self, users, ids, model)
        if found is None:
            return
        name, vectors, tenant = found
        short = [i for i in ids if i not in vectors]
        for start in range(0, len(short), 500):
            chunk = short[start:start + 500]
            self.conn.execute(f"DELETE FROM embeddings WHERE model = ? AND node_id IN"
                              f" ({','.join('?' * len(chunk))})", [name, *chunk])
        self.conn.executemany(
            "INSERT OR REPLACE INTO embeddings (node_id, model, user_id, dim, vector)"
            " VALUES (?,?,?,?,?)",
            [(i, name, tenant[i], v.shape[1], v.tobytes()) for i, v in vectors.items()])

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
    out = _matrix_refs(store, store._dense_memo, user_id, model, query_vec, k, allowed,
                       nodes, speaker)
    return with_passages(store, user_id, model, query_vec, k, out, allowed=allowed,
                         nodes=nodes, speaker=speaker)


def with_passages(store: Any, user_id: str, model: str, query_vec: np.ndarray, k: int,
                  ranked: list[tuple[Ref, float]], *, allowed: set[Ref] | None,
                  nodes: Sequence[str], speaker: str | None) -> list[tuple[Ref, float]]:
    """``ranked`` (the ``k`` best nodes by their own vectors) merged with the ``k`` best
    by their best passage (NumPy over the tenant's passage matrix), best first.

    A long node found by a passage scores its whole vector's cosine ``w`` raised toward
    its best passage's ``p``: ``w + PASSAGE_SHARE * (p - w)`` where ``p > w``. (Taking
    ``p`` alone favours long nodes: the best of many passages beats a short turn by
    chance more often than not.)
    """
    memo = getattr(store, "_passage_memo", None)
    if memo is None:
        memo = store._passage_memo = DenseMemo()
    extra = _matrix_refs(store, memo, user_id, passage_model(model), query_vec, k, allowed,
                         nodes, speaker)
    if not extra:
        return ranked
    _, matrix = store.vectors(user_id, model)
    whole = store._dense_memo.cosines(matrix, query_vec)
    rows = _rows_of(store, user_id, model)
    best = dict(ranked)
    for ref, sim in extra:
        row = rows.get(ref)
        own = float(whole[row]) if row is not None else sim
        if sim > own and math.isfinite(own):
            best[ref] = max(best.get(ref, -math.inf), own + PASSAGE_SHARE * (sim - own))
    return sorted(best.items(), key=lambda pair: -pair[1])[:k]


def _rows_of(store: Any, user_id: str, model: str) -> dict[Ref, int]:
    """Each ref's row in the tenant's ``model`` matrix, kept with the refs list it maps."""
    refs = store.vector_refs(user_id, model)
    held = getattr(store, "_passage_rows", None)
    if held is None or held[0] is not refs:
        held = store._passage_rows = (refs, {r: i for i, r in enumerate(refs) if r is not None})
    return held[1]


def _matrix_refs(store: Any, memo: DenseMemo, user_id: str, model: str,
                 query_vec: np.ndarray, k: int, allowed: set[Ref] | None,
                 nodes: Sequence[str], speaker: str | None) -> list[tuple[Ref, float]]:
    """The ``k`` best distinct refs of one ``model`` matrix (see :func:`matrix_dense_refs`)."""
    _, matrix = store.vectors(user_id, model)
    if not len(matrix):
        return []
    ids = store.vector_refs(user_id, model)
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
    or the candidates run out; a ref of several rows (a node's passages) is kept once, at
    its best. A row whose cosine is not a number (a vector's bytes altered on disk: NaN)
    is left out.
    """
    if not len(sims):
        return []
    want = min(len(sims), k)
    while True:
        top = np.argpartition(-sims, want - 1)[:want]
        top = top[np.argsort(-sims[top])]
        out: list[tuple[Ref, float]] = []
        seen: set[Ref] = set()
        for i in top:
            ref = ids[i if rows is None else rows[i]]
            if ref is None or ref in seen or ref[0] not in nodes or (
                    allowed is not None and ref not in allowed):
                continue
            if math.isfinite(sim := float(sims[i])):
                out.append((ref, sim))
                seen.add(ref)
        if len(out) >= k or want == len(sims):
            return out[:k]
        want = min(len(sims), want * 4)
