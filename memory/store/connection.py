"""The store's connection: opening, transactions, the in-process cache, read snapshots.

Holds ``StoreConnection``, the base of every store mixin: ``open`` (and migrating), the
embedder every write uses, ``blobs``/``runs``, ``state_pointer``, nested ``transaction``s,
``_cached`` (values memoised until the data version moves), ``data_version``, ``reading``
and ``_q`` (rows as dicts). Its constructor also holds the per-connection state of the
lexical and node lookups (row lengths, touched rowids, posting lists, rows seen inside a
``reading``), so one object owns all of it.

SQLite-specific (a PostgreSQL backend replaces all of these): ``open``'s PRAGMAs (busy
timeout, foreign keys, WAL, synchronous, page cache) and ``sqlite3.connect``;
``transaction``'s ``BEGIN IMMEDIATE`` (the write lock taken up front and retried while
busy: the code above relies on one writer at a time) with ``SAVEPOINT``/``ROLLBACK
TO``/``RELEASE`` nesting, and its handling of SQLite rolling back by itself on a full disk;
``data_version`` (``PRAGMA data_version``, how this connection learns that another process
committed: a server needs another signal, e.g. a change counter); ``reading``'s deferred
``BEGIN`` snapshot; ``state_pointer``'s ``max(rowid)``; ``LockedConnection`` (one lock
around one ``sqlite3`` connection shared by threads) and ``sqlite_utils.Database``
(``db``). Backend-neutral: the cache and its bounds."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Self

import sqlite_utils

from ..embed import Embedder
from ..locking import (
    BUSY_TIMEOUT_MS,
    LockedConnection,
    StoreError,
    fault_detail,
    file_faults,
    retry_busy,
)
from ..runs import Runs
from ..schema import LATEST_VERSION, altered_tables, migrate, refuse_foreign
from .blobs import Blobs
from .jobs import Jobs
from .kept_vectors import KeptVectors
from .keys import Keys
from .postings import INDEXES, Postings, RowLengths
from .rows import Facets, Ref
from .shared import MISS, DenseMemo, EmbedderSetting, VersionedCache


@contextmanager
def _schema_faults(path: str) -> Iterator[None]:
    """Around memstrata's own statements that read a file's schema, which run on any file
    it wrote: one that fails met a format or schema it did not write (a damaged header, an
    FTS5 table whose stored options were altered), a :class:`StoreError`. Migrations are
    left out: their SQL failing is memstrata's fault, and says so as it is."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_ERROR:
            raise
        raise StoreError(path, sqlite3.SQLITE_SCHEMA, fault_detail(exc)) from exc


WAL_CHECKPOINT_PAGES = 8_000
"""Pages (4 KB) the write-ahead log may hold before a commit copies it into the file.
SQLite's 1,000 made every ~12th add of 20 long messages pay a checkpoint that copied the
same index pages again each time; at 8,000 a checkpoint is rarer and copies a hot page
once (on a busy machine, where each copy and sync waits, ingest of long messages is up to
1.3x faster). The cost: a checkpoint's commit takes longer (~0.1 s at 32 MB), and the
``-wal`` file may reach 32 MB (``Memory.close`` and a forget still leave none)."""


def _prepare(conn: sqlite3.Connection, path: str, cache_mb: int) -> None:
    """Set a new connection up, bring its schema up to date and check the schema's tables
    (``Store.open``)."""
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    if path != ":memory:":
        with _schema_faults(path):  # the first statements that read the file
            retry_busy(lambda: refuse_foreign(conn, path))  # before WAL changes its header
            # A new file's first opener switches it to WAL; others opening it at that
            # moment see it locked for an instant.
            retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL"))
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
        conn.execute(f"PRAGMA cache_size = {-1024 * max(int(cache_mb), 1)}")
    retry_busy(lambda: migrate(conn))
    with _schema_faults(path):
        altered = altered_tables(conn)
    if altered:
        raise StoreError(path, sqlite3.SQLITE_SCHEMA, "; ".join(
            f"table {t}: {', '.join(cols)} missing or altered" for t, cols in altered.items())
            + "; `sqlite3 FILE .recover` may rescue its rows")
    watch_vector_deletes(conn)
    watch_row_changes(conn)


def watch_row_changes(conn: sqlite3.Connection) -> None:
    """Mark, in the connection's own ``temp.rows_changed``, that this connection updated
    or deleted a turn or an item (``INSERT OR REPLACE`` deletes: see
    :func:`watch_vector_deletes`). A rolled-back change takes its mark with it.

    Why: the rows a search read stay right across this process's inserts, which change no
    existing row; ``StoreConnection.reading`` keeps them until a mark or another process's
    commit says otherwise, so the search after each add need not read them again."""
    conn.execute("PRAGMA recursive_triggers = ON")
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS rows_changed (changed INTEGER PRIMARY KEY)")
    for table in ("turns", "items"):
        for event in ("UPDATE", "DELETE"):
            conn.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS {table}_{event.lower()}_mark"
                         f" AFTER {event} ON main.{table} BEGIN INSERT OR IGNORE INTO"
                         " rows_changed (changed) VALUES (1); END")


def watch_vector_deletes(conn: sqlite3.Connection) -> None:
    """Mark, in the connection's own ``temp.vectors_gone``, each tenant and model whose
    vector this connection deletes or replaces (``INSERT OR REPLACE`` deletes the old row:
    with ``recursive_triggers`` its delete fires the trigger). A rolled-back delete takes
    its mark with it; another connection's deletes are other processes' commits, which
    the data version shows.

    Why: ``KeptVectors.catch_up`` (vectors.py) must tell an append-only stretch from one
    with a delete; counting the tenant's rows instead cost ~5 ms at 100k vectors, on the
    first search after every add."""
    conn.execute("PRAGMA recursive_triggers = ON")
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS vectors_gone (user_id TEXT NOT NULL,"
                 " model TEXT NOT NULL, PRIMARY KEY (user_id, model))")
    # A trigger's statements name tables unqualified: a temp one is found first.
    conn.execute("CREATE TEMP TRIGGER IF NOT EXISTS vectors_gone_mark AFTER DELETE ON"
                 " main.embeddings BEGIN INSERT OR IGNORE INTO vectors_gone"
                 " (user_id, model) VALUES (OLD.user_id, OLD.model); END")


class StoreConnection(EmbedderSetting):
    """The connection, transactions and cache every store mixin builds on (see the module)."""

    CACHE_ENTRIES = 512
    """Most values the in-process cache keeps (least recently used dropped first)."""
    CACHE_BYTES = 512 * 2**20
    """Most bytes of arrays (vectors) the cache keeps, across tenants."""
    TERM_COUNTS = 50_000
    """Most document counts of index terms kept (``LexicalSearch.term_docs``; least
    recently used dropped first): a pasted traceback asks for dozens, which would push
    every other value out of the general cache."""
    KEPT_ROWS = 20_000
    """Most rows (id and facets) that :meth:`reading` keeps from one search to the next
    (0: each search reads its rows afresh)."""

    def __init__(self, conn: sqlite3.Connection, path: str, *,
                 embedder: Embedder | Literal["default"] | None = None) -> None:
        self.path = path
        self._lock = threading.RLock()
        self.conn = LockedConnection(conn, self._lock, path)
        self.db = sqlite_utils.Database(conn)
        self.embedder = embedder
        self._depth = 0
        self._writes = 0  # bumped on every write: invalidates in-process caches
        self._pinned: int | None = None  # PRAGMA data_version held by ``reading``
        # Inside ``reading``: rows a search already read, (tenant, ref) -> (id, facets).
        self._seen: dict[tuple[str, Ref], tuple[str, Facets]] | None = None
        # The rows of the last ``reading``, with the data version they were read at.
        self._kept_rows: tuple[tuple[int, int], dict[tuple[str, Ref], tuple[str, Facets]]] = (
            (-1, -1), {})
        self._cache = VersionedCache(self.CACHE_ENTRIES, self.CACHE_BYTES)
        self._term_counts = VersionedCache(self.TERM_COUNTS, self.CACHE_BYTES)
        # Row lengths for bm25 from the posting lists (postings.py); ``_touched`` holds the
        # rowids this connection re-wrote or deleted since the last sync.
        self._lengths = {"turn": RowLengths("turns_fts", 3, "turns"),
                         "item": RowLengths("items_fts", 2, "items")}
        self._lengths_at: dict[str, tuple[int, int]] = {}
        self._touched: dict[str, set[int]] = {"turn": set(), "item": set()}
        # The FTS indexes ("turn", "item") the open write transaction has written to.
        self._tx_indexes: set[str] = set()
        self._postings = Postings()
        # Each tenant's tag vocabulary and the other processes' data version it was read
        # at; kept across this process's writes (LexicalSearch.tag_vocabulary).
        self._tag_sets: OrderedDict[str, tuple[int, list[str]]] = OrderedDict()
        # Tenants' vectors, kept across this process's additions (vectors.py), and the
        # last ones read inside a write transaction.
        self._kept_vectors: OrderedDict[tuple[str, str], KeptVectors] = OrderedDict()
        self._tx_vectors: KeptVectors | None = None
        self._dense_memo = DenseMemo()  # the last dense pass (vectors.matrix_dense_refs)

    @classmethod
    def open(cls, path: str | Path = "memstrata.db", *, cache_mb: int = 64,
             embedder: Embedder | Literal["default"] | None = "default") -> Self:
        """Open (creating if needed) a store and bring its schema up to date.

        ``cache_mb`` bounds SQLite's page cache for this connection. SQLite's default
        (2 MB) is far below a large tenant's index: every search re-read the same B-tree
        and FTS5 pages from the OS. Measured at 100k items: the join of bm25's 200 winners
        to their rows went from 0.7 to 0.3 ms a query with 64 MB.

        ``embedder`` embeds every write (``"default"``: the shipped static model, loaded
        on the first write; ``None``: no vectors are stored).

        Raises:
            StoreError: the file cannot be opened, read or brought up to date (a corrupt
                or foreign file, a read-only folder, a full disk); nothing is left open.
        """
        path = str(path)
        if path != ":memory:":
            if Path(path).is_dir():
                # SQLite's own words ("unable to open database file") hide the mistake.
                raise StoreError(path, sqlite3.SQLITE_CANTOPEN, "", fault=(
                    f"a folder, not a store file: give a file's path, such as "
                    f"{Path(path) / 'memstrata.db'}"))
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        with file_faults(path):
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            try:
                _prepare(conn, path, cache_mb)
            except StoreError as exc:
                conn.close()
                raise (exc if exc.path else StoreError(path, exc.code, exc.detail,
                                                       fault=exc.fault)) from None
            except BaseException:
                conn.close()
                raise
        return cls(conn, path, embedder=embedder)

    @property
    def blobs(self) -> Blobs:
        """Large texts kept whole, read back in bounded pieces (see ``blobs.py``)."""
        return Blobs(self)

    @property
    def runs(self) -> Runs:
        """Run records and the event log (see ``runs.py``)."""
        return Runs(self)

    @property
    def jobs(self) -> Jobs:
        """The durable queue of background jobs (see ``jobs.py``)."""
        return Jobs(self)

    @property
    def keys(self) -> Keys:
        """API keys, stored hashed (see ``keys.py``)."""
        return Keys(self)

    def state_pointer(self, user_id: str) -> dict[str, Any]:
        """Where this tenant's data stood: enough to tell later whether a run's inputs
        changed. Per table, the row count, the highest rowid and the latest write time:
        an append raises the rowid, a deletion lowers the count, an edit (``update`` stamps
        ``updated_at``) or a replaced blob moves the time. Index lookups only, so it costs
        the same at 1M rows as at 100."""
        stamps = {"turns": "recorded_at", "items": "updated_at", "blobs": "recorded_at",
                  "edges": "recorded_at"}
        state = {t: self.conn.execute(
            f"SELECT count(*), max(rowid), max({stamp}) FROM {t} WHERE user_id = ?",
            (user_id,)).fetchone() for t, stamp in stamps.items()}
        return {
            "path": str(Path(self.path).resolve()) if self.path != ":memory:" else ":memory:",
            "user_id": user_id,
            "schema_version": LATEST_VERSION,
            "rows": {t: c[0] for t, c in state.items()},
            "max_rowid": {t: c[1] or 0 for t, c in state.items()},
            "digest": hashlib.sha256(json.dumps(state).encode()).hexdigest()[:16],
        }

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the database file and truncate it, so the file
        alone holds every commit (a copy of it then needs no ``-wal`` file beside it).

        SQLite-specific (``PRAGMA wal_checkpoint(TRUNCATE)``); a server backend has
        nothing to do here.
        """
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def vacuum(self) -> None:
        """Rebuild the file without its free pages, giving the space back to the disk.

        Must run outside a transaction. SQLite-specific (``VACUUM``; PostgreSQL's
        autovacuum does this by itself).
        """
        self.conn.execute("VACUUM")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[Self]:
        """All writes inside commit together; an exception rolls all of them back."""
        with self._lock:
            name = f"sp{self._depth}"
            if self._depth == 0:
                # The write lock up front: a deferred BEGIN that later upgrades can fail
                # at once with BUSY when another process wrote in between.
                retry_busy(lambda: self.conn.execute("BEGIN IMMEDIATE"))
            else:
                self.conn.execute(f"SAVEPOINT {name}")
            self._depth += 1
            try:
                yield self
            except BaseException as exc:
                self._depth -= 1
                self._tag_sets.clear()  # it may hold tags of the rows rolled back
                # A full disk or an I/O error makes SQLite roll the whole transaction
                # back by itself: a ROLLBACK then fails and would hide the real error.
                if self.conn.in_transaction:
                    if self._depth == 0:
                        self.conn.execute("ROLLBACK")
                    else:
                        self.conn.execute(f"ROLLBACK TO {name}")
                        self.conn.execute(f"RELEASE {name}")
                self._writes += 1
                self._tx_vectors = None
                if self._depth == 0:
                    self._tx_indexes.clear()
                with file_faults(self.path):  # writes through sqlite_utils end here raw
                    raise exc
            self._depth -= 1
            try:
                self.conn.execute("COMMIT" if self._depth == 0 else f"RELEASE {name}")
            except BaseException:
                self._tag_sets.clear()
                # A failed COMMIT (full disk) may leave the transaction open: end it, so
                # the next one can begin.
                if self._depth == 0 and self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            finally:
                self._writes += 1
                if self._depth == 0:
                    self._tx_vectors = None
                    self._tx_indexes.clear()

    def _cached(self, key: tuple[Any, ...], compute: Any) -> Any:
        """``compute()``, memoised until this process writes or another one commits.

        Bounded: at most ``CACHE_ENTRIES`` values and ``CACHE_BYTES`` of arrays, least
        recently used dropped first. Keys name their tenant second (``(what, user_id,
        ...)``), so :meth:`forget_cached` can drop one tenant's values.
        """
        with self._lock:
            version = self.data_version()
            hit = self._cache.get(key, version)
            if hit is not MISS:
                return hit
            value = compute()
            self._cache.put(key, version, value)
            return value

    def forget_cached(self, user_id: str) -> None:
        """Drop every cached value of one tenant (other tenants' stay)."""
        self._cache.forget(user_id)
        self._term_counts.forget(user_id)
        self._kept_rows = ((-1, -1), {})
        self._tag_sets.pop(user_id, None)
        for key in [k for k in self._kept_vectors if k[0] == user_id]:
            del self._kept_vectors[key]
        self._tx_vectors = None

    def changing(self, node: str, rowids: Iterable[int]) -> None:
        """Note FTS rows this connection is about to rewrite or delete; call it before
        the statement. The row lengths re-sync them, and the kept posting lists follow
        them from the text they hold now (``Postings.before_change``)."""
        rows = set(rowids)
        self._postings.before_change(self.conn, INDEXES[node], rows)
        self._touched[node].update(rows)
        self._tx_indexes.add(node)

    def inserting(self, node: str, rowids: Iterable[int]) -> None:
        """Note FTS rows this connection is about to insert (the kept posting lists
        follow them; ``Postings.inserting``)."""
        self._postings.inserting(INDEXES[node], set(rowids))
        self._tx_indexes.add(node)

    def index_unsettled(self, node: str) -> bool:
        """Whether ``node``'s FTS index ("turn" or "item") holds rows that may yet be
        rolled back: the open write transaction has written to it (:meth:`inserting`,
        :meth:`changing`). Until then a transaction sees the index as committed, and the
        kept row lengths and posting lists serve it."""
        return bool(self._depth) and node in self._tx_indexes

    def _q(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, args)
        cols = [c[0] for c in cur.description or ()]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def data_version(self) -> tuple[int, int]:
        """Changes whenever this process writes or another process commits (cache key)."""
        if self._pinned is not None:
            return (self._writes, self._pinned)
        return (self._writes, self.conn.execute("PRAGMA data_version").fetchone()[0])

    def _kept_seen(self) -> dict[tuple[str, Ref], tuple[str, Facets]]:
        """The rows the last search read, if still right now (inside a new snapshot).

        A search's candidates recur from query to query (at LoCoMo scale, reading their
        facets again was a fifth of a search). They stay right while no other process
        commits and this one only inserts (``watch_row_changes`` marks an update or a
        delete). Otherwise a fresh memo, and the marks are cleared for it."""
        (writes, pinned), kept = self._kept_rows
        if pinned == self._pinned and (writes == self._writes or not self.conn.execute(
                "SELECT 1 FROM temp.rows_changed").fetchone()):
            return kept
        self.conn.execute("DELETE FROM temp.rows_changed")
        return {}

    @contextmanager
    def reading(self) -> Iterator[Self]:
        """Inside, other processes' commits are checked for once, on entry, and each
        row :meth:`ids` or :meth:`facets` reads is read once; outside a transaction, the
        rows read are kept for the next ``reading`` until this process updates or deletes
        a row or another one commits (at most :attr:`KEPT_ROWS`; see :meth:`_kept_seen`).
        Rows read inside a transaction are not kept: it may roll back.

        A search reads dozens of cached values (document frequencies, row counts, row
        lengths), each behind a ``PRAGMA data_version``: ~0.15 ms a query at 100k items.
        This process's own writes still invalidate the caches at once.

        Every statement inside reads one snapshot of the file (one read transaction, unless
        a transaction is already open): a search's statements otherwise each saw the latest
        commit, so another process's turns appended mid-search were named by the postings
        but missing from the row lengths synced a moment before (seen by the concurrency
        bench as a search failing with "the search index names row N").
        """
        with self._lock:  # the pinned version and the rows seen belong to one search
            outer, seen = self._pinned, self._seen
            snapshot = outer is None and not self.conn.in_transaction
            if outer is None:
                if snapshot:
                    self.conn.execute("BEGIN")
                    # The first read starts the snapshot; data_version is then that of it.
                    self.conn.execute("SELECT 1 FROM schema_migrations LIMIT 1")
                self._pinned = self.conn.execute("PRAGMA data_version").fetchone()[0]
                self._seen = self._kept_seen() if snapshot else {}
            # The version on entry: a change written during the search is then seen by the
            # next one's check (``_kept_seen``), like any other.
            version = self.data_version()
            try:
                yield self
            finally:
                if snapshot:
                    rows = self._seen or {}
                    small = len(rows) <= self.KEPT_ROWS
                    self._kept_rows = (version, rows) if small else ((-1, -1), {})
                self._pinned, self._seen = outer, seen
                if snapshot and self.conn.in_transaction:
                    self.conn.execute("COMMIT")  # reads only: ends the snapshot
