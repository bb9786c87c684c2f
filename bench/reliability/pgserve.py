"""A throwaway PostgreSQL server for the scenarios that compare or check the PostgreSQL
store: ``pgserver`` (the ``dev`` extra) starts one in a temporary folder (no root, no
network), each caller gets a fresh database of it, and the server is stopped and its
folder removed at the end.

Without pgserver or psycopg the server is ``None`` with the reason, and the scenario says
it skipped PostgreSQL (never that PostgreSQL passed).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Postgres:
    """A running server: its superuser URL and the databases made on it."""

    server: Any
    admin: str
    names: Iterator[int] = field(default_factory=itertools.count)

    def new_database(self) -> str:
        """A fresh, empty database; its ``postgresql://`` URL (what ``Memory.open`` and
        ``--db`` take)."""
        import psycopg

        name = f"reliability_{next(self.names)}"
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return str(self.server.get_uri(database=name))


def unavailable() -> str | None:
    """Why no server can be started here (a missing package), or None."""
    try:
        with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set"
            warnings.simplefilter("ignore")
            import pgserver  # noqa: F401
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        return (f"{exc.name} is not installed (PostgreSQL needs pgserver and psycopg: "
                "pip install 'memstrata[postgres,dev]')")
    return None


@contextmanager
def postgres() -> Iterator[Postgres]:
    """Start a server (call :func:`unavailable` first); stopped and removed on exit."""
    import pgserver
    import psycopg

    # Its Unix socket lives in the folder: a short path (sockets are capped at ~107 bytes).
    folder = tempfile.mkdtemp(prefix="msrel-pg-")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pgserver.get_server(folder, cleanup_mode="stop")
        try:
            admin = str(server.get_uri())
            with psycopg.connect(admin, autocommit=True) as conn:
                # A throwaway server: durability is not what these scenarios measure.
                for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                    conn.execute(f"ALTER SYSTEM SET {setting} = off")
                conn.execute("SELECT pg_reload_conf()")
            yield Postgres(server=server, admin=admin)
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
