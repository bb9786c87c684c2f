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
long node by its whole vector raised toward its best passage (:func:`with_passages`; for
the long nodes among the nearest by their whole vectors, ``PASSAGE_NODES``).
They are written with the node's vector (``_put_passages``, the encoder being the
store's embedder when its name is the model's) and deleted with it (deletes go by node
id); ``passage_vectors.backfill_passages`` gives an older store's long nodes theirs.

SQLite-specific: vectors are raw float32 blobs in ``embeddings``, written with ``INSERT OR
REPLACE`` (PostgreSQL: ``INSERT ... ON CONFLICT DO UPDATE``, and pgvector's ``vector``
column, ranked in the database, where the server has the extension)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from .. import ahead
from ..blas import one_blas_thread
from .kept_vectors import KEPT_TENANTS, KeptVectors
from .nodes import NodeLookups
from .passage_vectors import (
    PASSAGE_SHARE,
    PASSAGE_SUFFIX,
    counted_models,
    node_text,
    passage_encoder,
    passage_model,
    passage_vectors,
)
from .rows import _TABLE, Ref
from .shared import DenseMemo, EmbeddingWrites

PASSAGE_NODES = 2_000
"""Nodes nearest by their own vectors whose passages a dense search scores (see
:func:`with_passages`)."""
AHEAD_ROWS = 5_000
"""Vectors a tenant has at least for a search to start its dense pass ahead, on the ahead
thread (:func:`dense_ahead`)."""


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

    def vector_models(self, user_id: str | None) -> dict[str, int]:
        """How many of a tenant's nodes (None: of every tenant, a count only) have a
        vector of each model (passage rows not counted), most first."""
        if user_id is not None:
            rows = self.conn.execute(
                "SELECT model, count(*) FROM embeddings WHERE user_id = ? GROUP BY model",
                (user_id,)).fetchall()
            return counted_models(rows)
        # Grouped in the tenant index's own order first: no sort of every row (12 ms at
        # 62,000 vectors, against 35 ms grouping by model alone).
        return counted_models(self.conn.execute(
            "SELECT model, sum(n) FROM (SELECT model, count(*) AS n FROM embeddings"
            " INDEXED BY embeddings_tenant GROUP BY user_id, model) GROUP BY model"))

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
                if (len(kept.ids) - done) * 8 < len(kept.ids):
                    return kept.add_speakers(self._speakers_of(user_id, kept.ids[done:]))
                # Most of the tenant: one pass over its (user_id, speaker) indexes beats
                # a lookup by id per node (0.5 s for 40,000 long turns).
                refs = self.vector_refs(user_id, model)[done:]
                said = self._speakers_by_ref(user_id)
                return kept.add_speakers(np.array([None if r is None else said.get(r)
                                                   for r in refs], dtype=object))
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

    def dense_ahead(self, user_id: str, model: str, query_vec: np.ndarray, k: int,
                    speakers: Sequence[str] = ()) -> Future[None] | None:
        """Start a big tenant's dense pass, unfiltered and within each of ``speakers``'
        turns, on the ahead thread (see :func:`dense_ahead`); None when none was
        started."""
        return dense_ahead(self, user_id, model, query_vec, k, speakers)

    def _speakers_by_ref(self, user_id: str) -> dict[Ref, str | None]:
        """The speaker of every turn and item of the tenant, by ref (covering index
        scans)."""
        out: dict[Ref, str | None] = {}
        for node, table in _TABLE.items():
            out.update(((node, rowid), speaker) for rowid, speaker in self.conn.execute(
                f"SELECT rowid, speaker FROM {table} WHERE user_id = ?", (user_id,)))
        return out

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
    by their best passage, best first.

    Passages are scored for the long nodes among the :data:`PASSAGE_NODES` (at least
    ``k``) nodes nearest by their own vectors that pass the filters: all of a tenant's
    long nodes until it has more nodes than that. Why: the passage matrix is several times
    the tenant's (about seven passages a long answer), and one pass over all of it was
    the largest cost of a search over a big tenant of long messages, while a node far
    down the ranking by its whole vector rarely reaches the top ``k`` through one passage.
    The cost: such a node is not raised at all, however well one passage matches.

    A long node found by a passage scores its whole vector's cosine ``w`` raised toward
    its best passage's ``p``: ``w + PASSAGE_SHARE * (p - w)`` where ``p > w``. (Taking
    ``p`` alone favours long nodes: the best of many passages beats a short turn by
    chance more often than not.)
    """
    name = passage_model(model)
    pids, passages = store.vectors(user_id, name)
    if not len(passages):
        return ranked
    ids, matrix = store.vectors(user_id, model)
    if not len(matrix):
        return ranked
    whole = store._dense_memo.cosines(matrix, query_vec)
    refs = store.vector_refs(user_id, model)
    eligible: np.ndarray | None = None
    if speaker is not None:
        nodes = tuple(n for n in nodes if n == "turn")  # items have no speaker
        eligible = store._dense_memo.speaker_rows(store.vector_speakers(user_id, model),
                                                  speaker)
    # The nearest nodes by their own vectors that pass the filters (``nodes`` is checked
    # on the few found below, ``allowed`` here, where it can leave most rows out).
    want = max(PASSAGE_NODES, k)
    sims = whole if eligible is None else whole[eligible]
    if allowed is not None:
        near = np.asarray(top_rows(refs, sims, want, allowed, nodes, eligible), np.int64)
    else:
        near = _nearest(sims, want)
        if eligible is not None:
            near = eligible[near]
    index = PassageIndex.of(store, (user_id, model), ids, pids)
    near = _with_passages(near, index)
    if not len(near):
        return ranked
    scored = _score_passages(store, matrix, passages, index, near, query_vec)
    best_passage = scored[near]
    best_of = dict(zip(near.tolist(), best_passage.tolist(), strict=True))
    best = dict(ranked)
    for row in top_rows(refs, best_passage, k, None, nodes, near):
        own, sim = float(whole[row]), best_of[row]
        if sim > own and math.isfinite(own):
            ref = refs[row]
            best[ref] = max(best.get(ref, -math.inf), own + PASSAGE_SHARE * (sim - own))
    return sorted(best.items(), key=lambda pair: -pair[1])[:k]


def _nearest(sims: np.ndarray, want: int) -> np.ndarray:
    """The rows of the ``want`` highest of ``sims`` (all of them when fewer), unordered."""
    return (np.argpartition(-sims, want - 1)[:want] if len(sims) > want
            else np.arange(len(sims)))


def _with_passages(near: np.ndarray, index: PassageIndex) -> np.ndarray:
    """The rows of ``near`` that have passages, ascending (passages are then copied out
    in the matrix's order: fewer pages touched)."""
    near = np.sort(near)
    return near[index.count[near] > 0]


def _score_passages(store: Any, matrix: np.ndarray, passages: np.ndarray,
                    index: PassageIndex, near: np.ndarray, query_vec: np.ndarray
                    ) -> np.ndarray:
    """The memo's best-passage cosines (``DenseMemo.best_passages``) with the rows
    ``near`` filled in; rows this query scored already are not scored again."""
    scored = store._dense_memo.best_passages(matrix, passages, query_vec)
    todo = near[np.isnan(scored[near])]
    if len(todo):
        counts = index.count[todo]
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rows = np.repeat(index.start[todo] - offsets, counts) + np.arange(int(counts.sum()))
        if 2 * len(rows) >= len(passages):
            # Most passages are wanted (a small tenant: all of them): one pass, kept for
            # the next channel of this query, beats copying them out.
            memo = getattr(store, "_passage_memo", None)
            if memo is None:
                memo = store._passage_memo = DenseMemo()
            found = memo.cosines(passages, query_vec)[rows]
        else:
            with one_blas_thread():
                found = passages[rows] @ query_vec
        # Each node's best passage (a NaN one, from a vector's bytes altered on disk, is
        # left out; a node of NaN passages only stays NaN, scored again next time).
        scored[todo] = np.fmax.reduceat(found, offsets)
    return scored


def dense_ahead(store: Any, user_id: str, model: str, query_vec: np.ndarray, k: int,
                speakers: Sequence[str] = ()) -> Future[None] | None:
    """Start the unfiltered dense pass of a search over a tenant of at least
    :data:`AHEAD_ROWS` vectors on the ahead thread (:mod:`memstrata.memory.ahead`), and
    return it (None: nothing was started, a smaller tenant or no vectors).

    The thread fills ``store._dense_memo`` as :func:`matrix_dense_refs` (``k`` the
    channel's) would, for the whole tenant and then within each of ``speakers``' turns:
    the cosines over the tenant's matrix and the best passages of its nearest long nodes.
    It runs no SQL and takes no lock of the store: the matrices, the speakers and the
    passage index are read here, in the caller's thread. The search waits for it before
    its dense channels, which then find their work done. Why: NumPy's products and
    SQLite's reads both release the GIL, so the pass overlaps the lexical channels' index
    reads on a second core; a small tenant's pass costs less than a thread's hand-off.
    """
    ids, matrix = store.vectors(user_id, model)
    if len(matrix) < AHEAD_ROWS:
        return None
    pids, passages = store.vectors(user_id, passage_model(model))
    index = PassageIndex.of(store, (user_id, model), ids, pids) if len(passages) else None
    said = store.vector_speakers(user_id, model) if speakers and index is not None else None
    memo = store._dense_memo
    want = max(PASSAGE_NODES, k)

    def run() -> None:
        whole = memo.cosines(matrix, query_vec)
        if index is None:
            return
        nearest = [_nearest(whole, want)]
        for speaker in speakers if said is not None else ():
            rows = memo.speaker_rows(said, speaker)  # as with_passages takes them
            if len(rows):
                nearest.append(rows[_nearest(whole[rows], want)])
        for near in nearest:
            near = _with_passages(near, index)
            if len(near):
                _score_passages(store, matrix, passages, index, near, query_vec)

    try:
        return ahead.submit(run)
    except RuntimeError:  # the interpreter is shutting down: the search runs it inline
        return None


class PassageIndex:
    """Where each node's passages are in a tenant's passage matrix: ``start`` and
    ``count`` by the node's row in the tenant's own matrix (``count`` 0: no passages).

    Kept on the store per tenant and model (:data:`KEPT_TENANTS` of them) for one pair of
    row-id lists (``vectors``' ids of the two matrices). A pair of longer lists that begin
    with the kept ones' own entries (the same objects: ``KeptVectors`` adds rows to a copy
    of its list) extends the kept index by the new rows only, so a search right after a
    message was added does not map every row again."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.pids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.spans: dict[str, tuple[int, int]] = {}
        self.start = np.zeros(0, np.int64)
        self.count = np.zeros(0, np.int64)

    @classmethod
    def of(cls, store: Any, key: tuple[str, str], ids: list[str], pids: list[str]
           ) -> PassageIndex:
        """The index for these lists of one tenant and model (``key``), kept on ``store``
        (see the class)."""
        kept: OrderedDict[tuple[str, str], PassageIndex] | None = getattr(
            store, "_passage_indexes", None)
        if kept is None:
            kept = store._passage_indexes = OrderedDict()
        held = kept.get(key)
        if held is not None and held.ids is ids and held.pids is pids:
            kept.move_to_end(key)
            return held
        index = cls()
        if held is not None and _extends(held.ids, ids) and _extends(held.pids, pids):
            index.row_of, index.spans = dict(held.row_of), dict(held.spans)
            index.start, index.count = held.start, held.count
            index._add(ids, pids, len(held.ids), len(held.pids))
        else:
            index._add(ids, pids, 0, 0)
        kept[key] = index
        kept.move_to_end(key)
        while len(kept) > KEPT_TENANTS:
            kept.popitem(last=False)
        return index

    def _add(self, ids: list[str], pids: list[str], done: int, pdone: int) -> None:
        """Map the rows from ``done`` (``pdone`` in the passages) on; the arrays are new
        ones, never written in place (a search may hold the old)."""
        self.ids, self.pids = ids, pids
        start = np.concatenate([self.start, np.full(len(ids) - done, -1, np.int64)])
        count = np.concatenate([self.count, np.zeros(len(ids) - done, np.int64)])
        for row in range(done, len(ids)):
            self.row_of[ids[row]] = row
        first = pdone  # a node's passages are consecutive rows, never split by an append
        for i in range(pdone + 1, len(pids) + 1):
            if i == len(pids) or pids[i] != pids[first]:
                self.spans[pids[first]] = (first, i)
                at = self.row_of.get(pids[first])
                if at is not None:
                    start[at], count[at] = first, i - first
                first = i
        for row in range(done, len(ids)):
            span = self.spans.get(ids[row])
            if span is not None:
                start[row], count[row] = span[0], span[1] - span[0]
        self.start, self.count = start, count


def _extends(old: list[str], new: list[str]) -> bool:
    """Whether ``new`` is ``old`` with rows added: as long at least, and its first and
    last kept entries the very objects of ``old`` (a list read anew holds new ones)."""
    return 0 < len(old) <= len(new) and new[0] is old[0] and new[len(old) - 1] is old[-1]


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


def top_rows(
    ids: Sequence[Ref | None], sims: np.ndarray, k: int, allowed: set[Ref] | None,
    nodes: Sequence[str], rows: np.ndarray | None = None,
) -> list[int]:
    """The rows of the ``k`` best candidates, best first, as :func:`top_cosine` ranks and
    filters them (each row's index into ``ids``: ``rows[i]`` for ``sims[i]``)."""
    return [row for row, _, _ in _ranked(ids, sims, k, allowed, nodes, rows)]


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
    return [(ref, sim) for _, ref, sim in _ranked(ids, sims, k, allowed, nodes, rows)]


def _ranked(
    ids: Sequence[Ref | None], sims: np.ndarray, k: int, allowed: set[Ref] | None,
    nodes: Sequence[str], rows: np.ndarray | None = None,
) -> list[tuple[int, Ref, float]]:
    """(row, ref, cosine) of the ``k`` best candidates (see :func:`top_cosine`)."""
    if not len(sims) or k < 1:
        return []
    want = min(len(sims), k)
    while True:
        top = np.argpartition(-sims, want - 1)[:want]
        top = top[np.argsort(-sims[top])]
        out: list[tuple[int, Ref, float]] = []
        seen: set[Ref] = set()
        for i in top.tolist():
            row = i if rows is None else int(rows[i])
            ref = ids[row]
            if ref is None or ref in seen or ref[0] not in nodes or (
                    allowed is not None and ref not in allowed):
                continue
            if math.isfinite(sim := float(sims[i])):
                out.append((row, ref, sim))
                seen.add(ref)
        if len(out) >= k or want == len(sims):
            return out[:k]
        want = min(len(sims), want * 4)
