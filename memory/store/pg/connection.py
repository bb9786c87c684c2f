"""The PostgreSQL store's connections: opening by URL, the pool, transactions bound to a
thread, the tenant setting every transaction carries, and the tenant write lock.

Holds ``PgConnection`` (the base of every PostgreSQL store mixin) and ``PgStoreError``.

- **Pool.** A ``psycopg_pool.ConnectionPool`` of autocommit connections, each switched to
  the application role (``SET ROLE``) when the pool opens it. Every store call runs in one
  explicit transaction on one pooled connection; a :meth:`transaction` binds one
  connection to the calling thread until it ends, so every call inside it (from this
  thread) shares that transaction, and nested ``transaction`` blocks are savepoints, as
  on SQLite. Threads never share a connection; each takes its own from the pool.
- **Tenant.** Before its first statement for a tenant, a transaction runs
  ``set_config('app.tenant', user_id, true)`` (``SET LOCAL``: it ends with the
  transaction), which row-level security reads (``schema.py``). Every query still filters
  by ``user_id`` itself, as on SQLite: RLS is the second wall, not the first.
- **Write lock.** SQLite's code relies on one writer at a time (``BEGIN IMMEDIATE``) where
  it reads and then writes: the exact-duplicate check before an insert, a version's
  number, ``kind_max`` numbering a new item. Here such a write takes
  ``pg_advisory_xact_lock`` keyed on its tenant (:meth:`_lock_tenant`), held to the end of
  the transaction: one tenant's read-then-write transactions run one at a time, different
  tenants' in parallel. Turns take it too (re-indexing a turn reads its neighbours, and
  the tenant's lexical totals row is updated by every indexed write); plain upserts of
  conversations and edges take none.

Opening checks reachability and authentication on one direct connection first: an
unreachable server, a refused login or a bad URL is a ``PgStoreError`` naming the server
(never the password), raised before anything is written. Migrations and grants then run
on that connection in one transaction (``schema.py``).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, Self

from ...embed import Embedder
from ...extras import require
from ...locking import CLOSED, StoreError
from ..shared import EmbedderSetting
from . import schema as pgschema

psycopg = require("psycopg", "postgres", "the PostgreSQL store")
psycopg_pool = require("psycopg_pool", "postgres", "the PostgreSQL store")
from psycopg import sql  # noqa: E402  (after require: a missing extra names itself)
from psycopg.rows import dict_row  # noqa: E402


class PgStoreError(StoreError):
    """The PostgreSQL database could not be reached, logged into or set up.

    A ``StoreError`` (so the CLI and callers that catch the SQLite store's faults catch
    this one too); ``path`` is the URL without its password, ``code`` is 0, ``detail`` the
    server's or the driver's own words.
    """

    def __init__(self, where: str, detail: str) -> None:
        self.path, self.code, self.detail = where, 0, detail
        sqlite3.DatabaseError.__init__(self, f"PostgreSQL store {where}: {detail}")


def redacted(url: str) -> str:
    """``url`` as ``postgresql://user@host:port/dbname``: no password, no other option."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(an invalid connection URL)"
    user, host = info.get("user") or "", info.get("host") or "localhost"
    port, db = info.get("port") or "5432", info.get("dbname") or ""
    if host.startswith("/"):  # a Unix socket's folder: libpq's own URL form for it
        return f"postgresql://{user + '@' if user else ''}/{db}?host={host}"
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"


class _Bound(threading.local):
    """What the calling thread's open transaction holds (see the module)."""

    conn: Any = None  # the pooled connection, None outside a transaction
    tenant: str | None = None  # the app.tenant this transaction has set
    locked: frozenset[str] = frozenset()  # tenants whose write lock this transaction holds


class PgConnection(EmbedderSetting):
    """Connections, transactions, the tenant setting and the write lock (see the module)."""

    DEFAULT_ROLE = "memstrata_app"

    if TYPE_CHECKING:
        # The search part's cache (``search.py``), which every store combines with this.
        def _cached(self, key: tuple[Any, ...], compute: Callable[[], Any], *,
                    fits: Callable[[Any], bool] | None = None) -> Any: ...

    def __init__(self, pool: Any, where: str, *,
                 embedder: Embedder | Literal["default"] | None = None) -> None:
        self._pool = pool
        self.path = where
        self.embedder = embedder
        self._bound = _Bound()
        self._writes = 0

    @classmethod
    def open(cls, url: str, *, role: str | None = DEFAULT_ROLE, min_size: int = 1,
             max_size: int = 8, connect_timeout: int = 10,
             embedder: Embedder | Literal["default"] | None = "default") -> Self:
        """Open a store in the PostgreSQL database at ``url``, bringing its schema up to date.

        ``role``: the role the store's queries run as, bound by row-level security (created
        if missing, NOLOGIN; the URL's role must be allowed to create it or be a member of
        it). ``None``: run as the URL's role itself, which must then be neither a superuser,
        nor BYPASSRLS, nor the tables' owner. ``min_size``/``max_size`` bound the pool;
        ``embedder`` as for the SQLite store.

        Raises:
            PgStoreError: the server cannot be reached, refuses the login, the URL is not
                one, the search_path names no schema that exists, the schema cannot be
                created or holds another program's tables under memstrata's names, or
                row-level security would not bind the role; nothing is written and nothing
                is left open.
            RuntimeError: the database was written by a newer memstrata.
        """
        where = redacted(url)
        direct = _connect(url, connect_timeout)
        try:
            if why := no_schema(direct):
                raise PgStoreError(where, why)
            if why := pgschema.foreign(direct):  # checked before anything is written
                raise PgStoreError(where, foreign_fault(direct, why))
            with direct.transaction():  # all or nothing: a refusal below rolls it back
                pgschema.migrate(direct)
                if role is not None:
                    pgschema.grant(direct, role)
                _check_bound(direct, role, where)
        except psycopg.Error as exc:
            raise PgStoreError(where, f"the schema cannot be set up: {_words(exc)}") from None
        finally:
            direct.close()

        def configure(conn: Any) -> None:
            if role is not None:
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))

        pool = psycopg_pool.ConnectionPool(
            url, min_size=min_size, max_size=max_size, configure=configure, open=True,
            kwargs={"autocommit": True, "connect_timeout": connect_timeout},
            name=f"memstrata {where}")
        return cls(pool, where, embedder=embedder)

    def close(self) -> None:
        """Close the pool (its connections)."""
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def checkpoint(self) -> None:
        """Nothing to do: the server keeps its own write-ahead log."""

    def vacuum(self) -> None:
        """Nothing to do: PostgreSQL's autovacuum gives space back by itself."""

    @contextmanager
    def pooled(self) -> Iterator[Any]:
        """A connection of the pool, for one block; a closed store says so."""
        if self._pool.closed:
            raise PgStoreError(self.path, CLOSED)
        with self._pool.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[Self]:
        """All writes inside commit together; an exception rolls all of them back.

        Binds one pooled connection to this thread until the outermost block ends; nested
        blocks are savepoints. Other threads' calls run in their own transactions.
        """
        bound = self._bound
        if bound.conn is None:
            with self.pooled() as conn:
                bound.conn, bound.tenant, bound.locked = conn, None, frozenset()
                wrote = False
                try:
                    with conn.transaction():
                        yield self
                        # A transaction id is assigned at the first write only: a read
                        # leaves the data version (and so every cached value) alone.
                        wrote = conn.execute("SELECT pg_current_xact_id_if_assigned()"
                                             " IS NOT NULL").fetchone()[0]
                finally:
                    bound.conn, bound.tenant, bound.locked = None, None, frozenset()
                    if wrote:
                        self._writes += 1
            return
        locked = bound.locked
        try:
            with bound.conn.transaction():  # a savepoint
                yield self
        except BaseException:
            # Rolled back to the savepoint: the tenant set and the locks taken inside it
            # are undone with it, so set and take them again when next needed.
            bound.tenant, bound.locked = None, locked
            raise

    @contextmanager
    def _tx(self) -> Iterator[None]:
        """The calling thread's open transaction, or a new one (for reads: no savepoint)."""
        if self._bound.conn is not None:
            yield
            return
        with self.transaction():
            yield

    def _use(self, user_id: str | None) -> Any:
        """The bound connection, its transaction set to ``user_id`` (call inside ``_tx``)."""
        bound = self._bound
        if user_id is not None and bound.tenant != user_id:
            bound.conn.execute("SELECT set_config('app.tenant', %s, true)", (user_id,))
            bound.tenant = user_id
        return bound.conn

    def _lock_tenant(self, user_id: str) -> None:
        """Take ``user_id``'s write lock until this transaction ends (inside ``transaction``).

        Keyed on a 64-bit hash of the tenant: two tenants whose hashes collide merely wait
        for each other."""
        bound = self._bound
        if user_id not in bound.locked:
            self._use(user_id).execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                                       ("memstrata:" + user_id,))
            bound.locked = bound.locked | {user_id}

    def _q(self, user_id: str | None, query: Any, args: Sequence[Any] = ()
           ) -> list[dict[str, Any]]:
        """Rows as dicts, in ``user_id``'s transaction."""
        with self._tx(), self._use(user_id).cursor(row_factory=dict_row) as cur:
            cur.execute(query, args)
            return cur.fetchall()

    def _rows(self, user_id: str | None, query: Any,
              args: Sequence[Any] | Mapping[str, Any] = ()) -> list[tuple[Any, ...]]:
        """Rows as tuples, in ``user_id``'s transaction."""
        with self._tx():
            return self._use(user_id).execute(query, args).fetchall()

    def _exec(self, user_id: str | None, query: Any, args: Sequence[Any] = ()) -> int:
        """Run one statement in ``user_id``'s transaction; the rows it changed."""
        with self._tx():
            return int(self._use(user_id).execute(query, args).rowcount)

    def _many(self, user_id: str | None, query: Any, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each of ``rows`` in ``user_id``'s transaction."""
        if rows:
            with self._tx(), self._use(user_id).cursor() as cur:
                cur.executemany(query, rows)

    def counts(self, user_id: str | None = None) -> dict[str, int]:
        """Row counts per table (for one tenant, or all: through ``memstrata_counts()``,
        which returns counts only, row-level security keeping every row from the app role)."""
        tables = ("conversations", "sessions", "turns", "items", "edges", "embeddings")
        if user_id is None:
            found = dict(self._rows(None, "SELECT name, n FROM memstrata_counts()"))
            return {t: int(found.get(t, 0)) for t in tables}
        return {t: int(self._rows(user_id, sql.SQL(
            "SELECT count(*) FROM {} WHERE user_id = %s").format(sql.Identifier(t)),
            (user_id,))[0][0]) for t in tables}

    def owner(self, node_id: str) -> str | None:
        """The tenant a turn or item id belongs to (ids are unique across tenants), or None
        (through ``memstrata_owner``: the one lookup that spans tenants, returning no row)."""
        return self._rows(None, "SELECT memstrata_owner(%s)", (node_id,))[0][0]

    def state_pointer(self, user_id: str) -> dict[str, Any]:
        """Where this tenant's data stood (as the SQLite store's: rows, highest rowid and
        latest write time per table, digested)."""
        stamps = {"turns": ("rowid", "recorded_at"), "items": ("rowid", "updated_at"),
                  "blobs": ("rowid", "recorded_at"), "edges": ("id", "recorded_at")}
        with self._tx():
            state = {t: list(self._rows(user_id, sql.SQL(
                "SELECT count(*), max({}), max({}) FROM {} WHERE user_id = %s").format(
                    sql.Identifier(key), sql.Identifier(stamp), sql.Identifier(t)),
                (user_id,))[0]) for t, (key, stamp) in stamps.items()}
        return {
            "path": self.path,
            "user_id": user_id,
            "schema_version": pgschema.LATEST_VERSION,
            "rows": {t: c[0] for t, c in state.items()},
            "max_rowid": {t: c[1] or 0 for t, c in state.items()},
            "digest": hashlib.sha256(json.dumps(state).encode()).hexdigest()[:16],
        }


def _connect(url: str, connect_timeout: int = 10) -> Any:
    """One direct autocommit connection to ``url`` as the URL's role.

    Raises:
        PgStoreError: not a URL, the server cannot be reached, or the login is refused
            (the message names the server without its password).
    """
    where = redacted(url)
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=connect_timeout)
    except psycopg.ProgrammingError as exc:  # not a URL or conninfo string
        raise PgStoreError(where, f"not a valid connection URL ({_words(exc)})") from None
    except psycopg.OperationalError as exc:
        text = _words(exc)
        what = ("the login was refused (check the user and password)"
                if "authentication" in text or ("role" in text and "does not exist" in text)
                else "the server cannot be reached")
        raise PgStoreError(where, f"{what}: {text}") from None


def recorded_versions(url: str) -> list[int]:
    """The migration versions recorded in the database at ``url`` (empty: none yet).
    Reads as the URL's role; writes nothing.

    Raises:
        PgStoreError: see :func:`_connect`; or the URL's search_path names no schema that
            exists, or the schema holds another program's tables under memstrata's names.
    """
    with _connect(url) as conn:
        if why := no_schema(conn):
            raise PgStoreError(redacted(url), why)
        if why := pgschema.foreign(conn):
            raise PgStoreError(redacted(url), foreign_fault(conn, why))
        if conn.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None:
            return []
        return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]


def no_schema(conn: Any) -> str | None:
    """Why the connection has no schema to create tables in (its search_path names none
    that exists: a ``CREATE SCHEMA`` skipped, a misspelt name), or None."""
    if conn.execute("SELECT current_schema()").fetchone()[0] is not None:
        return None
    path = conn.execute("SHOW search_path").fetchone()[0]
    return (f"no schema to create the tables in: the search_path ({path}) names none that "
            "exists in this database (CREATE SCHEMA it first, or fix the name in the URL's "
            "options)")


def foreign_fault(conn: Any, why: str) -> str:
    """The refusal of a schema that holds another program's tables under memstrata's
    names (``schema.foreign``'s ``why``), with the way out: a schema of memstrata's own."""
    try:
        schema = conn.execute("SELECT current_schema()").fetchone()
    except psycopg.Error:
        schema = None
    name = schema[0] if schema and schema[0] else "the current schema"
    return (f"another program's tables are in schema {name}: {why}; give memstrata a schema "
            "of its own (CREATE SCHEMA memstrata, then add options=-csearch_path%3Dmemstrata "
            "to the URL)")


def _words(exc: BaseException) -> str:
    """An error's message on one line, bounded."""
    return " ".join(str(exc).split())[:300]


def _check_bound(conn: Any, role: str | None, where: str) -> None:
    """Refuse a role that row-level security would not bind (see ``open``)."""
    if role is not None:
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    try:
        row = conn.execute(
            "SELECT r.rolsuper OR r.rolbypassrls, t.tableowner = current_user FROM pg_roles r,"
            " pg_tables t WHERE r.rolname = current_user AND t.schemaname = current_schema()"
            " AND t.tablename = 'items'").fetchone()
    finally:
        if role is not None:
            conn.execute("RESET ROLE")
    if row is None or row[0] or row[1]:
        raise PgStoreError(where, "row-level security would not bind the store's role (a"
                                  " superuser, a BYPASSRLS role or the tables' owner):"
                                  " open it with a role of its own")
