"""Fixtures of the backend conformance suite: the same tests over SQLite and PostgreSQL.

``backend`` is a fresh store of each backend (parametrised: ``sqlite``, ``postgres``).
The PostgreSQL one runs against a real server that ``pgserver`` starts once per test
session in a temporary folder (no root, no network); every test gets a database of its
own (``CREATE DATABASE`` takes ~50 ms there). Tests of the PostgreSQL parameter carry the
``postgres`` marker and are skipped, saying why, when pgserver or psycopg is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstrata.memory import Store

# The server and database fixtures (pg_server, pg_url, pg_db_url, ...) come from
# tests/pg_fixtures.py through tests/conftest.py.


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
