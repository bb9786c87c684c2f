"""Fixtures of the backend conformance suite: the same tests over SQLite and PostgreSQL.

``backend`` is a fresh store of each backend (parametrised: ``sqlite``, ``postgres``).
The PostgreSQL one runs against a real server that ``pgserver`` starts once per test
session in a temporary folder (no root, no network); every test gets a database of its
own (``CREATE DATABASE`` takes ~50 ms there). Tests of the PostgreSQL parameter carry the
``postgres`` marker and are skipped, saying why, when pgserver or psycopg is missing.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from memstrata.memory import Store

_DATABASES = itertools.count()


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A PostgreSQL server for the whole session (pgserver), stopped at its end."""
    try:
        with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set"
            warnings.simplefilter("ignore")
            import pgserver
        import psycopg
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"PostgreSQL tests need pgserver and psycopg ({exc.name} is not"
                    " installed): pip install 'memstrata[postgres,dev]'")

    # The server's Unix socket lives in this folder (socket paths are capped at ~107 bytes).
    folder = tmp_path_factory.mktemp("pg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(folder, cleanup_mode="stop")
    server.folder = folder  # the data folder (pg_hba.conf), for the login tests
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        # A throwaway server: no fsync. Its shutdown checkpoint otherwise flushed every test
        # database to disk (~10 s at the end of the session).
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {setting} = off")
        conn.execute("SELECT pg_reload_conf()")
    yield server
    server.cleanup()


@pytest.fixture
def pg_admin(pg_server: Any) -> str:
    """The superuser's URL to the server's ``postgres`` database."""
    return str(pg_server.get_uri())


def new_database(admin_url: str) -> str:
    """Create an empty database on the test server; its URL (the superuser's login)."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"memstrata_{os.getpid()}_{next(_DATABASES)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(admin_url, dbname=name)


@pytest.fixture
def make_database(pg_admin: str) -> Any:
    """``new_database`` bound to the session's server."""
    return lambda: new_database(pg_admin)


@pytest.fixture
def pg_url(pg_admin: str) -> str:
    """A fresh, empty database of the session's server."""
    return new_database(pg_admin)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A fresh store of each backend, without an embedder."""
    if request.param == "sqlite":
        store: Any = Store.open(tmp_path / "memory.db", embedder=None)
    else:
        from memstrata.memory.store.pg import PgStore

        store = PgStore.open(request.getfixturevalue("pg_url"), embedder=None)
    yield store
    store.close()


@pytest.fixture
def backend_name(backend: Any) -> str:
    return "sqlite" if isinstance(backend, Store) else "postgres"
