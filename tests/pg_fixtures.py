"""The PostgreSQL test server and databases, the fixtures of every test that needs one.

``tests/conftest.py`` imports them, so they are every test's fixtures and the session has
one server at most, started by the first test that asks. ``pg_server`` is a real server
that ``pgserver`` starts once per test session in a temporary folder (no root, no
network); ``pg_url`` is a fresh database for each test (a key=value conninfo string, which
``PgStore.open`` takes; ``CREATE DATABASE`` takes ~50 ms there) and ``pg_db_url`` the same
as a ``postgresql://`` URL (what ``--db`` and ``Memory.open`` take). Without pgserver or
psycopg, every test that uses them is skipped, saying why.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

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


@pytest.fixture
def pg_db_url(pg_server: Any, pg_url: str) -> str:
    """A fresh, empty database as a ``postgresql://`` URL."""
    from psycopg.conninfo import conninfo_to_dict

    return str(pg_server.get_uri(database=conninfo_to_dict(pg_url)["dbname"]))
