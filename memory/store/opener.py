"""Opening a store by what the user typed: a file path (SQLite) or a URL (PostgreSQL).

``open_store`` is the one place that tells the two apart; ``Memory.open``, every command's
``--db`` and the benchmarks call it. The PostgreSQL backend is imported only when a URL is
given, so the core install (no ``postgres`` extra) never needs psycopg.

What is served: a ``postgresql://`` or ``postgres://`` URL, or a SQLite file path (``~``
expanded; its folder must exist: nothing is created but the file). Anything else that looks
like a URL (``scheme://...``: ``postgresql+psycopg://``, ``mysql://``, ``sqlite:///x.db``,
``https://``) is refused with a ``ValueError`` naming only its scheme, never its password:
taken as a path it became a local file named after the URL, password included.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .protocol import MemoryStore

URL_SCHEMES = ("postgresql://", "postgres://")
"""What a database URL starts with; anything else is a SQLite file path."""

DURABILITY = ("normal", "full")
"""``open_store``'s ``durability`` choices (see there)."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+)://")  # 2+ letters: not a drive "C:/"


def is_url(target: str | Path) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than a SQLite file."""
    return isinstance(target, str) and target.startswith(URL_SCHEMES)


def sqlite_path(target: str | Path) -> str:
    """The SQLite file ``target`` names (``~`` expanded), or ``":memory:"``.

    Raises:
        ValueError: ``target`` is empty, or a URL of a scheme memstrata does not serve (the
            message names the scheme only: the URL may hold a password).
    """
    raw = str(target)
    if raw == ":memory:":
        return raw
    if not raw.strip():
        raise ValueError("the store path is empty (give a file path or a postgresql:// URL)")
    if isinstance(target, str) and (found := _SCHEME.match(raw)):
        scheme = found[1].lower()
        hint = {"sqlite": "give the file's path itself (e.g. memstrata.db)"}.get(
            scheme, "for PostgreSQL write postgresql://user:password@host/db"
            if scheme.startswith("postgres") else "")
        raise ValueError(f"a {scheme}:// URL is not a store memstrata can open: it opens a "
                         "SQLite file (a path) or a postgresql:// URL"
                         + (f"; {hint}" if hint else ""))
    return str(Path(raw).expanduser())


def open_store(target: str | Path, *, embedder: Any = "auto",
               durability: Literal["normal", "full"] = "normal", **options: Any
               ) -> MemoryStore:
    """Open (creating and migrating if needed) the store at ``target``.

    A ``postgresql://`` or ``postgres://`` URL opens ``PgStore`` (needs the ``postgres``
    extra; ``options`` go to ``PgStore.open``: ``role``, ``max_size``, ...); anything else
    is a SQLite file path (``":memory:"`` included; ``~`` expanded; ``options`` go to
    ``Store.open``).

    ``embedder``: ``"auto"`` (the model that embedded most of the store's vectors when
    memstrata can load it by name, ``minilm`` or ``mpnet``; otherwise the shipped static
    model: see :func:`~memstrata.memory.reembed.stored_embedder`), ``"default"`` (the
    shipped static model, loaded on first use), a name
    :func:`~memstrata.memory.embed.embedder_by_name` knows (``"minilm"``, ``"mpnet"``, a
    model2vec folder), an ``Embedder``, or None (no vectors).

    ``durability``: ``"normal"`` (the default: SQLite's ``synchronous=NORMAL`` in WAL
    mode; a commit survives a crash of the process, and the file stays consistent after a
    power loss, which may take the last commits with it) or ``"full"``
    (``synchronous=FULL``: each commit is synced to the disk before it returns, so it
    survives a power loss too; writes are slower, see the README). PostgreSQL syncs every
    commit by default: both choices are the server's setting there.

    Raises:
        ValueError: a URL of a scheme memstrata does not serve (``mysql://``,
            ``postgresql+psycopg://``, ``sqlite:///...``: the message names the scheme,
            not the URL), an empty path, an unknown ``durability`` or embedder name
            (nothing is opened).
        MissingExtraError: a URL, and psycopg is not installed, or a named embedder whose
            extra is not installed (the message names the extra to install).
        StoreError: the file or the database cannot be opened (a SQLite file whose folder
            does not exist included: no folder is created); for a URL the message names
            the server without its password, and nothing was written.
    """
    if durability not in DURABILITY:
        raise ValueError(f"durability must be one of {', '.join(DURABILITY)}, not "
                         f"{durability!r}")
    auto = embedder == "auto"
    if auto:
        embedder = "default"
    elif isinstance(embedder, str) and embedder != "default":
        from ..embed import embedder_by_name

        embedder = embedder_by_name(embedder)  # a bad name fails before anything opens
    if is_url(target):
        from .pg import PgStore

        return _with_stored_embedder(PgStore.open(str(target), embedder=embedder, **options),
                                     auto)
    from ..locking import StoreError
    from . import Store

    path = sqlite_path(target)
    folder = Path(path).parent
    if path != ":memory:" and not folder.is_dir():
        raise StoreError(path, sqlite3.SQLITE_CANTOPEN, f"no folder {folder}")
    store = Store.open(path, embedder=embedder, **options)
    if durability == "full" and path != ":memory:":
        store.conn.execute("PRAGMA synchronous = FULL")
    return _with_stored_embedder(store, auto)


def _with_stored_embedder(store: MemoryStore, auto: bool) -> MemoryStore:
    """``store``, searching and writing with the model that embedded it when ``auto``."""
    if auto:
        from ..reembed import stored_embedder

        try:
            found = stored_embedder(store)
        except BaseException:
            store.close()
            raise
        if found is not None:
            store.embedder = found
    return store


def describe(target: str | Path) -> str:
    """``target`` as it may be printed: a URL without its password, a path as given (a URL
    of a scheme memstrata does not serve: its scheme only)."""
    if is_url(target):
        from .pg import redacted

        return redacted(str(target))
    if isinstance(target, str) and (found := _SCHEME.match(target)):
        return f"a {found[1]}:// URL"
    return str(target)


def store_missing(target: str | Path) -> bool:
    """Whether ``target`` is a SQLite path with no file yet (a URL is never "missing": the
    server is asked when it is opened; nor is one memstrata refuses: opening says why).
    """
    if is_url(target) or str(target) == ":memory:":
        return False
    try:
        path = sqlite_path(target)
    except ValueError:
        return False
    return not Path(path).exists()


def schema_versions(target: str | Path) -> tuple[list[int], list[int]]:
    """``(recorded, known)``: the migration versions recorded in the store at ``target``
    (empty for a new file or database) and those this memstrata knows. Writes nothing.

    Raises:
        StoreError: the file or the database cannot be read (for a URL: unreachable, or
            the login refused; the message names the server without its password); the
            file is another program's SQLite database.
    """
    if is_url(target):
        from .pg import schema as pgschema
        from .pg.connection import recorded_versions

        return recorded_versions(str(target)), [v for v, _, _ in pgschema.MIGRATIONS]
    from ..locking import file_faults
    from ..schema import MIGRATIONS, refuse_foreign

    known = [v for v, _, _ in MIGRATIONS]
    if store_missing(target) or str(target) == ":memory:":
        return [], known
    path = sqlite_path(target)
    with file_faults(path):
        # as_uri escapes what a URI would misread in a path ("?", "#", "%").
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            refuse_foreign(conn, path)
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'schema_migrations'"
                                 ).fetchone()
            rows = conn.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall() \
                if found else []
        finally:
            conn.close()
    return [r[0] for r in rows], known
