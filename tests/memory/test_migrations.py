"""Schema migrations: fresh databases, re-runs, unknown future versions, failed migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memstrata.memory import FactItem, Store
from memstrata.memory import schema as schemamod
from memstrata.memory.schema import LATEST_VERSION, MIGRATIONS, applied_versions, migrate

EXPECTED_TABLES = {
    "conversations", "sessions", "turns", "turns_fts", "items", "items_fts", "edges",
    "item_tags", "embeddings", "schema_migrations",
}


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_migrations_from_empty_record_every_version_and_create_tables(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "fresh.db")
    try:
        versions = [v for v, _, _ in MIGRATIONS]
        assert versions == sorted(versions)
        assert applied_versions(store.conn) == versions
        assert versions[-1] == LATEST_VERSION
        names = dict(store.conn.execute("SELECT version, name FROM schema_migrations"))
        assert names == {v: n for v, n, _ in MIGRATIONS}
        assert _tables(store.conn) >= EXPECTED_TABLES
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        store.close()


def test_open_creates_missing_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "nested.db"
    with Store.open(path) as store:
        assert applied_versions(store.conn)[-1] == LATEST_VERSION
    assert path.exists()


def test_rerunning_migrations_on_existing_file_is_a_noop(tmp_path: Path) -> None:
    path = tmp_path / "again.db"
    with Store.open(path) as store:
        item_id = store.add(FactItem(user_id="u1", text="Caroline moved from Sweden"))
        before = store.conn.execute(
            "SELECT version, name, applied_at FROM schema_migrations ORDER BY version"
        ).fetchall()
    with Store.open(path) as store:
        after = store.conn.execute(
            "SELECT version, name, applied_at FROM schema_migrations ORDER BY version"
        ).fetchall()
        assert after == before
        assert migrate(store.conn) == []
        assert store.get("u1", item_id) is not None
        assert store.get("u1", item_id).text == "Caroline moved from Sweden"
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_migrate_returns_applied_versions_on_new_connection() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        assert migrate(conn) == [v for v, _, _ in MIGRATIONS]
        assert migrate(conn) == []
    finally:
        conn.close()


def test_unknown_future_version_raises_clear_runtime_error(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    future = LATEST_VERSION + 7
    with Store.open(path) as store:
        store.conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (future, "from the future", "2099-01-01T00:00:00+00:00"),
        )
    with pytest.raises(RuntimeError) as info:
        Store.open(path)
    message = str(info.value)
    assert str(future) in message
    assert str(LATEST_VERSION) in message
    assert "upgrade memstrata" in message


def test_failed_migration_rolls_back_and_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "broken.db"
    Store.open(path).close()
    broken = (
        LATEST_VERSION + 1,
        "broken",
        "CREATE TABLE half_done (x INTEGER); THIS IS NOT SQL",
    )
    monkeypatch.setattr(schemamod, "MIGRATIONS", [*MIGRATIONS, broken])
    with pytest.raises(sqlite3.OperationalError):
        Store.open(path)
    monkeypatch.undo()
    with Store.open(path) as store:
        assert "half_done" not in _tables(store.conn)
        assert applied_versions(store.conn) == [v for v, _, _ in MIGRATIONS]
        assert not store.conn.in_transaction


def test_migration_6_prefixes_an_old_index_with_each_rows_tenant(tmp_path: Path) -> None:
    from memstrata.memory import Retriever, Turn
    from memstrata.memory.store import tenant_token

    path = tmp_path / "old.db"
    with Store.open(path) as store:
        store.add(FactItem(user_id="ana", text="Ana adopted a beagle", speaker="Ana"))
        store.add(FactItem(user_id="tom", text="Tom adopted a beagle too", speaker="Tom"))
        store.add_turns([Turn(user_id="ana", conversation_id="c", session_id="s", turn_id="D1:1",
                              seq=0, speaker="Ana", text="Our beagle loves walks")])
        # Put the index back as version 5 wrote it: bare terms, the tenant in its column.
        for table, columns in (("items_fts", ("body",)), ("turns_fts", ("body", "context"))):
            for rowid, *values in store.conn.execute(
                    f"SELECT rowid, {', '.join(columns)} FROM {table}").fetchall():
                bare = [" ".join(t.split("x", 1)[1] for t in (v or "").split()) for v in values]
                tenant = (values[0] or "").split("x", 1)[0]
                sets = ", ".join(f"{c} = ?" for c in columns)
                store.conn.execute(f"UPDATE {table} SET {sets}, tenant = ? WHERE rowid = ?",
                                   [*bare, tenant, rowid])
        store.conn.execute("DELETE FROM schema_migrations WHERE version = 6")
        store.conn.commit()
    with Store.open(path) as store:
        assert 6 in applied_versions(store.conn)
        body, tenant = store.conn.execute(
            "SELECT body, tenant FROM items_fts ORDER BY rowid LIMIT 1").fetchone()
        assert body.split()[0].startswith(tenant_token("ana") + "x") and tenant == ""
        found = Retriever(store).search("ana", "beagle", k=5)
        assert {h.node for h in found} == {"item", "turn"}
        assert all(h.id.startswith(("i_", "t_")) for h in found) and len(found) == 2
