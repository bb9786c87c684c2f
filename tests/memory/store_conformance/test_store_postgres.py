"""PostgreSQL-only checks of the store: migrations recorded in the database, row-level
security as the second wall (a query without the tenant setting sees nothing), and clear
errors for an unreachable server, a refused login or a role RLS would not bind, with
nothing written. Runs against the session's pgserver (``conftest.py``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from memstrata.memory import FactItem, Store
from memstrata.memory.schema import LATEST_VERSION as SQLITE_LATEST

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg(pg_url: str) -> Any:
    from memstrata.memory.store.pg import PgStore

    store = PgStore.open(pg_url, embedder=None)
    yield store
    store.close()


def _tables(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]


def test_migrations_are_recorded_and_applied_once(pg_url: str, tmp_path: Any) -> None:
    import psycopg

    from memstrata.memory.store.pg import PgStore
    from memstrata.memory.store.pg.schema import LATEST_VERSION, MIGRATIONS

    for _ in range(2):  # a second open finds every version recorded and applies none
        PgStore.open(pg_url, embedder=None).close()
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT version, name FROM schema_migrations ORDER BY 1").fetchall()
    assert rows == [(v, n) for v, n, _ in MIGRATIONS] and rows[-1][0] == LATEST_VERSION
    # The SQLite store records its migrations in the same table name, as before.
    Store.open(tmp_path / "m.db", embedder=None).close()
    import sqlite3

    with sqlite3.connect(tmp_path / "m.db") as conn:
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone() == (
            SQLITE_LATEST,)


def test_a_newer_schema_is_refused(pg_url: str) -> None:
    import psycopg

    from memstrata.memory.store.pg import PgStore

    PgStore.open(pg_url, embedder=None).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 'x')")
    with pytest.raises(RuntimeError, match="999"):
        PgStore.open(pg_url, embedder=None)


def test_rls_without_the_tenant_setting_sees_nothing(pg: Any, pg_url: str) -> None:
    import psycopg

    item = pg.add(FactItem(user_id="u1", text="secret"))
    pg.add(FactItem(user_id="u2", text="other secret"))
    # The store's own pooled connection (the app role), outside any store call: no
    # app.tenant set, so no row is visible and none can be written.
    with pg._pool.connection() as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("memstrata_app",)
        assert conn.execute("SELECT count(*) FROM items").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM items WHERE id = %s", (item,)).fetchone() == (
            0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO edges (user_id, src, dst, relation, recorded_at)"
                         " VALUES ('u1', 'a', 'b', 'r', 'now')")
        with conn.transaction():  # one tenant set: that tenant's rows only, even unfiltered
            conn.execute("SELECT set_config('app.tenant', 'u2', true)")
            assert conn.execute("SELECT text FROM items").fetchall() == [("other secret",)]
            assert conn.execute("UPDATE items SET text = 'x' WHERE id = %s", (item,)
                                ).rowcount == 0
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("UPDATE items SET user_id = 'u1'")  # moving rows out: refused
        assert conn.execute("SELECT current_setting('app.tenant', true)").fetchone()[0] in (
            None, "")  # the setting ended with its transaction
    # A fresh login as the URL's role, then the app role: the same wall.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET ROLE memstrata_app")
        for table in ("conversations", "sessions", "turns", "items", "edges", "embeddings",
                      "versions"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
        assert conn.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles"
                            " WHERE rolname = current_user").fetchone() == (False,)
    assert pg.get("u1", item).text == "secret"


def test_unreachable_server_is_a_clear_error(tmp_path: Any) -> None:
    from memstrata.memory.store.pg import PgStore, PgStoreError

    start = time.monotonic()
    with pytest.raises(PgStoreError, match="cannot be reached") as info:
        PgStore.open("postgresql://someone:hunter2@127.0.0.1:1/memstrata", connect_timeout=2)
    assert time.monotonic() - start < 10
    assert "hunter2" not in str(info.value) and "127.0.0.1:1/memstrata" in str(info.value)
    with pytest.raises(PgStoreError, match="not a valid connection URL"):
        PgStore.open("postgresql://[not a url")


def test_refused_login_is_a_clear_error_and_writes_nothing(pg_server: Any, pg_admin: str,
                                                           make_database: Any) -> None:
    import psycopg
    from psycopg.conninfo import make_conninfo

    from memstrata.memory.store.pg import PgStore, PgStoreError

    url = make_database()
    # A role that must give its password (the server trusts every other local login).
    hba = pg_server.folder / "pg_hba.conf"
    if "memstrata_pw" not in hba.read_text():
        hba.write_text("local all memstrata_pw scram-sha-256\n" + hba.read_text())
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS memstrata_pw")
        conn.execute("CREATE ROLE memstrata_pw LOGIN PASSWORD 'right-password'")
        conn.execute("SELECT pg_reload_conf()")
    wrong = make_conninfo(url, user="memstrata_pw", password="wrong-password")
    # The postmaster rereads pg_hba.conf on the signal, in its own time (a busy machine
    # took over 0.2 s): until then the role is trusted and logs in.
    deadline = time.monotonic() + 10
    while True:
        try:
            psycopg.connect(wrong).close()
        except psycopg.OperationalError:
            break
        assert time.monotonic() < deadline, "the server did not reload pg_hba.conf"
        time.sleep(0.05)
    with pytest.raises(PgStoreError, match="login was refused") as info:
        PgStore.open(wrong)
    assert "wrong-password" not in str(info.value) and "memstrata_pw@" in str(info.value)
    with pytest.raises(PgStoreError, match="login was refused"):
        PgStore.open(make_conninfo(url, user="no_such_role"))
    with pytest.raises(PgStoreError):
        PgStore.open(make_conninfo(url, dbname="no_such_database"))
    assert _tables(url) == []  # nothing was written


def test_a_role_rls_would_not_bind_is_refused_and_nothing_written(pg_url: str) -> None:
    from memstrata.memory.store.pg import PgStore, PgStoreError

    # role=None: the queries would run as the URL's role, here a superuser.
    with pytest.raises(PgStoreError, match="row-level security would not bind"):
        PgStore.open(pg_url, role=None, embedder=None)
    assert _tables(pg_url) == []  # the migrations rolled back with the refusal


def test_core_store_never_imports_psycopg() -> None:
    import subprocess
    import sys

    code = ("import sys, memstrata, memstrata.memory, memstrata.memory.store;"
            " print(sorted(m for m in sys.modules if m.startswith(('psycopg', 'pgserver'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
