"""What search reads on PostgreSQL, apart from the lexical channel: refs and facets, search
filters, the tag channel, a tenant's vectors and the dense channel, read snapshots, the data
version and the in-process cache.

Holds ``PgSearch`` (the SQLite ``NodeLookups``/``FilterQueries``/``VectorStore`` reads,
``reading``/``data_version``/``_cached`` of its ``StoreConnection`` and the tag queries
of its ``LexicalSearch``, same contracts) and :func:`filters_sql` (a ``Filters`` as a
PostgreSQL ``WHERE`` fragment).

Differences from SQLite:

- A ``Ref`` is ``(node type, rowid)`` with the ``rowid`` identity columns of ``turns`` and
  ``items``; lookups take one array (``= ANY(%s)``), not chunks.
- ``reading()`` is a ``REPEATABLE READ, READ ONLY`` transaction bound to the calling
  thread: every statement inside reads one snapshot, and the rows ``ids``/``facets`` read
  are memoised in it (per thread: threads search in parallel, each in its own snapshot).
  Reads only: a write inside it fails.
- ``data_version()``'s second number moves with the database's snapshot (see
  :meth:`PgSearch.data_version`), not ``PRAGMA data_version``.
- ``dense_refs`` ranks in SQL with pgvector where the database has ``embeddings.vec``
  (migration 6), and in NumPy over :meth:`PgSearch.vectors` (SQLite's code) where not.
- The tag channel reads the ``items.tags`` jsonb column (GIN-indexed, migration 3) where
  SQLite keeps a side table of case-folded tags: the vocabulary is folded here, and each
  folded tag is looked up by the spellings the tenant's items use.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from ...locking import stored_value
from ..filters import Filters
from ..passage_vectors import counted_models
from ..rows import _TABLE, TURN_PREFIX, Facets, Ref, _ts, node_type
from ..shared import MISS, DenseMemo, RefLookups, VersionedCache
from ..vectors import matrix_dense_refs
from .conversations import vector_text
from .tenants import _DISTINCT, PgTenants


def filters_sql(filters: Filters, node: str, alias: str) -> tuple[str, list[Any]]:
    """``filters`` as a PostgreSQL ``WHERE`` fragment (starting with AND, ``%s``
    placeholders) over table ``alias`` of ``node`` rows: ``Filters.sql``'s conditions."""
    parts: list[str] = []
    args: list[Any] = []
    if filters.kinds is not None:
        if node == "turn" and "turn" not in filters.kinds:
            parts.append("FALSE")
        elif node == "item":
            wanted = [k for k in filters.kinds if k != "turn"]
            parts.append(f"{alias}.kind = ANY(%s)" if wanted else "FALSE")
            args += [wanted] if wanted else []
    if filters.current is not None and node == "item":
        parts.append(f"NOT ({alias}.kind = ANY(%s) AND {alias}.valid_to IS NOT NULL)")
        args.append(list(filters.current))
    for column, value in (("speaker", filters.speaker),
                          ("conversation_id", filters.conversation_id)):
        if value is not None:
            parts.append(f"{alias}.{column} = %s")
            args.append(value)
    if filters.start is not None:
        parts.append(f"{alias}.event_time >= %s")
        args.append(_ts(filters.start))
    if filters.end is not None:
        parts.append(f"{alias}.event_time <= %s")
        args.append(_ts(filters.end))
    return "".join(f" AND {p}" for p in parts), args


class _Search(threading.local):
    """The calling thread's ``reading`` (see the module)."""

    read_only: bool = False  # the bound transaction is a reading() this mixin opened
    pinned: int | None = None  # the snapshot number of that transaction
    seen: dict[tuple[str, Ref], tuple[str, Facets]] | None = None  # rows read inside


class PgSearch(PgTenants, RefLookups):
    """Refs, facets, filters, tags, vectors, snapshots and the cache (see the module).

    On ``PgTenants``: its ``speakers`` is read through the cache here."""

    if TYPE_CHECKING:
        def _vec_column(self) -> bool: ...  # ``conversations.py``'s, in every store

    CACHE_ENTRIES = 512
    """Most values the in-process cache keeps (least recently used dropped first)."""
    CACHE_BYTES = 512 * 2**20
    """Most bytes of arrays (vectors) the cache keeps, across tenants."""
    IN_PROCESS_VECTORS = 20_000
    """Up to this many vectors of a model, a tenant's dense search runs in NumPy over its
    cached matrix (20 MB at 256 dimensions); above it, in the database with pgvector.

    Why: a cached matrix answers in ~1 ms, where each pgvector statement is a round trip
    that scans the tenant's rows again (measured on the LoCoMo dev split, ~600 vectors a
    tenant: the hybrid search's p50 went from 17 to 40 ms with every dense channel in
    SQL). A large tenant's matrix would cost every process its memory and a full read
    after each write; pgvector reads it where it lies."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._search = _Search()
        self._cache = VersionedCache(self.CACHE_ENTRIES, self.CACHE_BYTES)
        self._dense_memo = DenseMemo()  # the last dense pass (vectors.matrix_dense_refs)
        self._snapshot_lock = threading.Lock()
        self._snapshot: tuple[str | None, int] = (None, 0)  # last seen, and its number

    # -- snapshots, the data version, the cache -------------------------------------------

    def data_version(self) -> tuple[int, int]:
        """Changes whenever this process commits a write or any process commits.

        First: ``_writes``, how many write transactions this process committed
        (``connection.py``).
        Second: a number for the database snapshot this call sees, bumped whenever it
        differs from the last one this process saw (``pg_current_snapshot()``: the
        transactions in progress and the next id to assign). Why a snapshot: two reads
        with the same snapshot see the same committed rows, and any commit, by any
        process, changes every later snapshot and never changes back, so a value cached
        under one is never stale. It costs one indexless query and no write: a change
        counter bumped by every write would serialise writers on its row, and the WAL
        position moves before a commit is visible (a value read in between would be
        cached as if it held that commit). It also moves on writes that change nothing
        search reads (other tables, other databases of the server): a cache miss then,
        never a wrong value. Inside :meth:`reading`, its snapshot's number, read once.
        """
        pinned = self._search.pinned
        if pinned is not None:
            return (self._writes, pinned)
        return (self._writes, self._snapshot_number(self._current_snapshot()))

    def _current_snapshot(self) -> str:
        """The snapshot a statement sees now (on the thread's transaction, if any)."""
        query = "SELECT pg_current_snapshot()::text"
        if self._bound.conn is not None:
            return str(self._bound.conn.execute(query).fetchone()[0])
        with self.pooled() as conn:  # autocommit: one statement, one snapshot
            return str(conn.execute(query).fetchone()[0])

    def _snapshot_number(self, snapshot: str) -> int:
        """The number of ``snapshot``: a new one whenever it differs from the last seen.

        One snapshot text per number, so a cached value's number names the rows it was
        read from; threads seeing different snapshots merely renumber more often."""
        with self._snapshot_lock:
            last, number = self._snapshot
            if snapshot != last:
                self._snapshot = (snapshot, number + 1)
            return self._snapshot[1]

    @contextmanager
    def reading(self) -> Iterator[Self]:
        """Inside, every statement of this thread reads one snapshot of the database, the
        data version is read once, on entry, and each row :meth:`ids` or :meth:`facets`
        reads is read once.

        A ``REPEATABLE READ, READ ONLY`` transaction on one pooled connection, bound to the
        thread (reads only: a write inside fails). Inside a :meth:`transaction`, it reads
        that transaction (its own writes included) and only memoises rows. Nested, the
        outer one holds.
        """
        local, bound = self._search, self._bound
        if local.seen is not None:
            yield self
            return
        if bound.conn is not None:
            local.seen = {}
            try:
                yield self
            finally:
                local.seen = None
            return
        with self.pooled() as conn:
            bound.conn, bound.tenant, bound.locked = conn, None, frozenset()
            try:
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    # The first query takes the transaction's snapshot: this one.
                    snapshot = str(conn.execute(
                        "SELECT pg_current_snapshot()::text").fetchone()[0])
                    local.read_only, local.seen = True, {}
                    local.pinned = self._snapshot_number(snapshot)
                    yield self
            finally:
                bound.conn, bound.tenant, bound.locked = None, None, frozenset()
                local.read_only, local.pinned, local.seen = False, None, None

    def _cached(self, key: tuple[Any, ...], compute: Callable[[], Any], *,
                fits: Callable[[Any], bool] | None = None) -> Any:
        """``compute()``, memoised until :meth:`data_version` moves (with ``fits``: and
        while ``fits(value)`` holds).

        Bounded: at most ``CACHE_ENTRIES`` values and ``CACHE_BYTES`` of arrays, least
        recently used dropped first. Keys name their tenant second (``(what, user_id,
        ...)``). A miss is computed inside a :meth:`reading`, so the value and its version
        come from one snapshot. Inside a :meth:`transaction` nothing is cached or served
        from the cache: values there may hold its uncommitted writes, which a rollback to a
        savepoint undoes with nothing else moving.
        """
        if self._bound.conn is not None and not self._search.read_only:
            return compute()
        version = self.data_version()
        hit = self._cache.get(key, version)
        if hit is not MISS and (fits is None or fits(hit)):
            return hit
        if self._bound.conn is None:
            with self.reading():
                return self._cached(key, compute, fits=fits)
        value = compute()
        self._cache.put(key, version, value)
        return value

    def forget_cached(self, user_id: str) -> None:
        """Drop every cached value of one tenant (other tenants' stay)."""
        self._cache.forget(user_id)

    # -- refs, ids, facets, summary rows ----------------------------------------------------

    def refs(self, user_id: str, node_ids: Sequence[str]) -> dict[str, Ref]:
        """The refs of the tenant's turns and items among ``node_ids`` (others left out)."""
        out: dict[str, Ref] = {}
        for node, table in _TABLE.items():
            ids = [n for n in node_ids if node_type(n) == node]
            if ids:
                out.update((node_id, (node, rowid)) for node_id, rowid in self._rows(
                    user_id, f"SELECT id, rowid FROM {table} WHERE user_id = %s"
                    " AND id = ANY(%s)", (user_id, ids)))
        return out

    def _ref_rows(self, user_id: str, refs: Sequence[Ref]) -> dict[Ref, tuple[str, Facets]]:
        """(id, facets) of the tenant's rows among ``refs``; read once per :meth:`reading`."""
        seen = self._search.seen
        if seen is None:
            seen = {}
        out: dict[Ref, tuple[str, Facets]] = {}
        todo: dict[str, list[int]] = {"turn": [], "item": []}
        for ref in refs:
            hit = seen.get((user_id, ref))
            if hit is not None:
                out[ref] = hit
            elif ref[0] in todo:
                todo[ref[0]].append(int(ref[1]))
        for node, rowids in todo.items():
            if not rowids:
                continue
            session = "session_id" if node == "turn" else "NULL"
            for rowid, node_id, *fields in self._rows(
                    user_id, f"SELECT rowid, id, speaker, event_time, conversation_id,"
                    f" {session} FROM {_TABLE[node]} WHERE rowid = ANY(%s) AND user_id = %s",
                    (rowids, user_id)):
                out[(node, rowid)] = seen[(user_id, (node, rowid))] = (node_id,
                                                                       Facets(*fields))
        return out

    def nodes(self, user_id: str, node_ids: Sequence[str], *, text: bool = True
              ) -> dict[str, dict[str, Any]]:
        """Summary rows (kind, speaker, conversation, session, time; ``text`` and
        ``metadata`` too unless ``text=False``) for turn and item ids of a tenant.

        ``metadata`` is JSON text, as SQLite stores it (items: ``'{}'``)."""
        out: dict[str, dict[str, Any]] = {}
        turn_body = "text, metadata::text AS metadata" if text else (
            "NULL AS text, NULL AS metadata")
        item_body = "text, '{}' AS metadata" if text else "NULL AS text, NULL AS metadata"
        queries = (
            ("turn", f"SELECT id, 'turn' AS kind, speaker, conversation_id, session_id,"
                     f" turn_id, event_time, recorded_at, {turn_body} FROM turns"),
            ("item", f"SELECT id, kind, speaker, conversation_id, NULL AS session_id,"
                     f" NULL AS turn_id, event_time, recorded_at, {item_body} FROM items"),
        )
        for node, query in queries:
            ids = [n for n in node_ids if node_type(n) == node]
            if ids:
                for r in self._q(user_id, query + " WHERE user_id = %s AND id = ANY(%s)",
                                 (user_id, ids)):
                    out[r["id"]] = r
        return out

    def speakers(self, user_id: str) -> list[str]:
        """Every speaker and subject person the tenant's memory knows by name (cached)."""
        load = super().speakers
        return list(self._cached(("speakers", user_id), lambda: tuple(load(user_id))))

    # -- filters ----------------------------------------------------------------------------

    def allowed_ids(self, user_id: str, filters: Filters) -> set[str]:
        """Ids of the tenant's turns and items that pass ``filters``."""
        return set(self._allowed(user_id, filters, "id"))

    def allowed_refs(self, user_id: str, filters: Filters) -> set[Ref]:
        """:meth:`allowed_ids` as refs."""
        return set(self._allowed(user_id, filters, "rowid"))

    def _allowed(self, user_id: str, filters: Filters, column: str) -> Iterator[Any]:
        for node, table in _TABLE.items():
            where, args = filters_sql(filters, node, "t")
            for (value,) in self._rows(
                    user_id, f"SELECT t.{column} FROM {table} t WHERE t.user_id = %s{where}",
                    [user_id, *args]):
                yield value if column == "id" else (node, value)

    # -- the tag channel --------------------------------------------------------------------

    def tag_vocabulary(self, user_id: str) -> list[str]:
        """The tenant's distinct tags, case-folded (``str.casefold``, as SQLite stores
        them), sorted (cached)."""
        # A skip scan over the primary key, one seek per distinct tag (as on SQLite): the
        # cache is dropped by every write, and DISTINCT walked every (tag, item) pair of
        # the tenant (22 ms at 100k items with 2,000 tags; 14 ms so).
        return self._cached(("tags", user_id), lambda: [
            r[0] for r in self._rows(user_id, _DISTINCT.format(table="item_tags", column="tag"),
                                     {"user_id": user_id})])

    def tagged(self, user_id: str, tags: Sequence[str], limit: int) -> list[Ref]:
        """The tenant's items carrying any of ``tags`` (case-folded, as
        :meth:`tag_vocabulary` gives them): most tags matched, then newest.

        Only the newest ``limit`` items of each tag are considered (an older item matching
        several tags can therefore be missed), as on SQLite: each tag's rows come straight
        off ``item_tags``' primary key. ``limit`` < 1: none.
        """
        if limit < 1 or not tags:
            return []
        counts: dict[int, int] = defaultdict(int)
        for (rowid,) in self._rows(
                user_id, "SELECT r.item_rowid FROM unnest(%s::text[]) AS x(tag),"
                " LATERAL (SELECT item_rowid FROM item_tags WHERE user_id = %s AND"
                " tag = x.tag ORDER BY item_rowid DESC LIMIT %s) r",
                (list(dict.fromkeys(tags)), user_id, limit)):
            counts[rowid] += 1
        best = sorted(counts, key=lambda r: (counts[r], r), reverse=True)[:limit]
        return [("item", r) for r in best]

    # -- vectors ----------------------------------------------------------------------------

    def vector_models(self, user_id: str | None) -> dict[str, int]:
        """How many of a tenant's nodes (None: of every tenant, a count only, through
        ``memstrata_vector_models()``) have a vector of each model (passage rows not
        counted), most first."""
        if user_id is None:
            return counted_models(self._rows(
                None, "SELECT model, n FROM memstrata_vector_models()"))
        return counted_models(self._rows(
            user_id, "SELECT model, count(*) FROM embeddings WHERE user_id = %s GROUP BY"
            " model", (user_id,)))

    def vectors(self, user_id: str, model: str) -> tuple[list[str], np.ndarray]:
        """All of a tenant's vectors for ``model`` as (node ids, float32 matrix), in no set
        order.

        Cached in memory until :meth:`data_version` moves (this process's transactions,
        any process's commits), so repeated searches do not re-read them.
        """
        return self._cached(
            ("vectors", user_id, model), lambda: self._load_vectors(user_id, model))

    def vector_speakers(self, user_id: str, model: str) -> np.ndarray:
        """The speaker of each node in :meth:`vectors`' order, as an object array (cached)."""
        ids, _ = self.vectors(user_id, model)

        def load() -> tuple[list[str], np.ndarray]:
            found = {n: r.get("speaker") for n, r in self.nodes(user_id, ids,
                                                                 text=False).items()}
            return ids, np.array([found.get(i) for i in ids], dtype=object)

        return self._of_vectors(("vector_speakers", user_id, model), ids, load)

    def vector_refs(self, user_id: str, model: str) -> list[Ref | None]:
        """The ref of each node in :meth:`vectors`' order (None: the node is gone; cached)."""
        ids, _ = self.vectors(user_id, model)

        def load() -> tuple[list[str], list[Ref | None]]:
            found = self.refs(user_id, ids)
            return ids, [found.get(i) for i in ids]

        return self._of_vectors(("vector_refs", user_id, model), ids, load)

    def _of_vectors(self, key: tuple[Any, ...], ids: list[str], load: Callable[[], Any]
                    ) -> Any:
        """A cached value read for the node ids of one :meth:`vectors` value, ``ids``:
        kept with them, and served only with that same value (two reads of the vectors
        may order them differently)."""
        return self._cached(key, load, fits=lambda held: held[0] is ids)[1]

    def dense_refs(self, user_id: str, model: str, query_vec: np.ndarray, k: int, *,
                   allowed: set[Ref] | None = None, nodes: Sequence[str] = ("turn", "item"),
                   speaker: str | None = None) -> list[tuple[Ref, float]]:
        """(ref, cosine) of the tenant's ``k`` nodes whose ``model`` vectors are nearest to
        ``query_vec``, best first; ``allowed``, ``nodes`` and ``speaker`` as on SQLite.

        With pgvector (``embeddings.vec``): ranked in SQL, exactly (no ANN index), over the
        tenant's rows of ``model`` (``ORDER BY vec <#> query``, the negated dot product, ties
        by node id), restricted by node type (the id's prefix) and speaker (a join on
        ``turns``) there, then by ``allowed`` here, the limit widened until ``k`` survive.
        pgvector sums in float32 as NumPy does, in another order: scores may differ from
        SQLite's in the last bits. Rows whose vector pgvector cannot hold (not finite) are
        left out; so are long nodes' passage vectors (``vectors.with_passages``: NumPy over
        a matrix several times the tenant's, which the SQL ranking exists to avoid). Without
        the column, or for a tenant with at most ``IN_PROCESS_VECTORS`` vectors of
        ``model``: NumPy over :meth:`vectors`, as on SQLite, passages included.
        """
        stored = self._vector_rows(user_id, model)
        if not stored:
            return []
        query = vector_text(query_vec) if self._vec_column() else None
        if query is None or stored <= self.IN_PROCESS_VECTORS:
            # No pgvector column (or a query it cannot hold), or a matrix small enough to
            # keep: NumPy over the cached matrix, as on SQLite.
            return matrix_dense_refs(self, user_id, model, query_vec, k, allowed=allowed,
                                     nodes=nodes, speaker=speaker)
        kept = tuple(n for n in ("turn", "item") if n in nodes
                     and (speaker is None or n == "turn"))
        if k < 1 or not kept:
            return []
        statement, args = self._dense_sql(user_id, model, query, kept, speaker)
        want = k
        while True:
            rows = self._rows(user_id, statement + " LIMIT %s", [*args, want])
            refs = self.refs(user_id, [r[0] for r in rows])
            out = [(ref, -float(distance)) for node_id, distance in rows
                   if (ref := refs.get(node_id)) is not None and ref[0] in kept
                   and (allowed is None or ref in allowed)]
            if len(out) >= k or len(rows) < want:
                return out[:k]
            want *= 4

    def _vector_rows(self, user_id: str, model: str) -> int:
        """How many ``model`` vectors the tenant has (cached until the data moves)."""
        return self._cached(("vector_rows", user_id, model), lambda: int(self._rows(
            user_id, "SELECT count(*) FROM embeddings WHERE user_id = %s AND model = %s",
            (user_id, model))[0][0]))

    @staticmethod
    def _dense_sql(user_id: str, model: str, query: str, nodes: tuple[str, ...],
                   speaker: str | None) -> tuple[str, list[Any]]:
        """The ranking statement of :meth:`dense_refs` (without its ``LIMIT``) and its
        arguments: node ids with ``vec <#> query``, nearest first."""
        statement = ("SELECT e.node_id, e.vec <#> %s::vector AS distance FROM embeddings e")
        args: list[Any] = [query]
        if speaker is not None:
            statement += (" JOIN turns t ON t.user_id = %s AND t.id = e.node_id"
                          " AND t.speaker = %s")
            args += [user_id, speaker]
        statement += " WHERE e.user_id = %s AND e.model = %s AND e.vec IS NOT NULL"
        args += [user_id, model]
        if nodes == ("turn",):
            statement += " AND starts_with(e.node_id, %s)"
            args.append(TURN_PREFIX)
        elif nodes == ("item",):
            statement += " AND NOT starts_with(e.node_id, %s)"
            args.append(TURN_PREFIX)
        return statement + " ORDER BY distance, e.node_id", args

    def _load_vectors(self, user_id: str, model: str) -> tuple[list[str], np.ndarray]:
        rows = self._rows(user_id, "SELECT node_id, dim, vector FROM embeddings WHERE"
                          " user_id = %s AND model = %s", (user_id, model))
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        dim = rows[0][1]
        with stored_value("a stored vector"):  # a value cut short
            if any(not r[2] or len(r[2]) % (4 * dim) for r in rows):
                raise ValueError(f"a vector value is no whole number of {dim}-d vectors")
            matrix = np.frombuffer(b"".join(bytes(r[2]) for r in rows), dtype=np.float32)
            # A passage row holds several vectors (vectors.py): its id once per vector.
            ids = [r[0] for r in rows for _ in range(len(r[2]) // (4 * dim))]
            return ids, matrix.reshape(-1, dim)
