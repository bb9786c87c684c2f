"""Opening a store by what the user typed: a file path (SQLite) or a URL (PostgreSQL).

``open_store`` is the one place that tells the two apart; ``Memory.open``, every command's
``--db`` and the benchmarks call it. The PostgreSQL backend is imported only when a URL is
given, so the core install (no ``postgres`` extra) never needs psycopg.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .protocol import MemoryStore

URL_SCHEMES = ("postgresql://", "postgres://")
"""What a database URL starts with; anything else is a SQLite file path."""


def is_url(target: str | Path) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than a SQLite file."""
    return isinstance(target, str) and target.startswith(URL_SCHEMES)


def open_store(target: str | Path, *, embedder: Any = "default", **options: Any
               ) -> MemoryStore:
    """Open (creating and migrating if needed) the store at ``target``.

    A ``postgresql://`` or ``postgres://`` URL opens ``PgStore`` (needs the ``postgres``
    extra; ``options`` go to ``PgStore.open``: ``role``, ``max_size``, ...); anything else
    is a SQLite file path (``":memory:"`` included; ``options`` go to ``Store.open``).

    Raises:
        MissingExtraError: a URL, and psycopg is not installed (the message names the
            extra to install).
        StoreError: the file or the database cannot be opened; for a URL the message
            names the server without its password, and nothing was written.
    """
    if is_url(target):
        from .pg import PgStore

        return PgStore.open(str(target), embedder=embedder, **options)
    from . import Store

    return Store.open(target, embedder=embedder, **options)


def describe(target: str | Path) -> str:
    """``target`` as it may be printed: a URL without its password, a path as given."""
    if is_url(target):
        from .pg import redacted

        return redacted(str(target))
    return str(target)


def store_missing(target: str | Path) -> bool:
    """Whether ``target`` is a SQLite path with no file yet (a URL is never "missing": the
    server is asked when it is opened)."""
    return not is_url(target) and str(target) != ":memory:" and not Path(target).exists()


def schema_versions(target: str | Path) -> tuple[list[int], list[int]]:
    """``(recorded, known)``: the migration versions recorded in the store at ``target``
    (empty for a new file or database) and those this memstrata knows. Writes nothing.

    Raises:
        StoreError: the file or the database cannot be read (for a URL: unreachable, or
            the login refused; the message names the server without its password).
    """
    if is_url(target):
        from .pg import schema as pgschema
        from .pg.connection import recorded_versions

        return recorded_versions(str(target)), [v for v, _, _ in pgschema.MIGRATIONS]
    import sqlite3

    from ..locking import file_faults
    from ..schema import MIGRATIONS

    known = [v for v, _, _ in MIGRATIONS]
    if store_missing(target) or str(target) == ":memory:":
        return [], known
    with file_faults(str(target)):
        conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
        try:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'schema_migrations'"
                                 ).fetchone()
            rows = conn.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall() \
                if found else []
        finally:
            conn.close()
    return [r[0] for r in rows], known
