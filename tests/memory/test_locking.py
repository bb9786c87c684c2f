"""Sharing a store: statements under one lock, BUSY retried, rows read whole."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from memstrata.memory import Store
from memstrata.memory.locking import Rows, retry_busy


def test_rows_fetch_like_a_cursor() -> None:
    conn = sqlite3.connect(":memory:")
    rows = Rows(conn.execute("SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3"))
    assert rows.fetchone() == (1,)
    assert rows.fetchall() == [(2,), (3,)]
    assert rows.fetchone() is None and rows.fetchall() == []
    assert list(Rows(conn.execute("SELECT 4"))) == [(4,)]


def test_retry_busy_retries_only_locked_errors() -> None:
    tries = {"n": 0}

    def flaky() -> str:
        tries["n"] += 1
        if tries["n"] < 3:
            raise sqlite3.OperationalError("database is locked")
        return "done"

    assert retry_busy(flaky) == "done" and tries["n"] == 3
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_busy(lambda: (_ for _ in ()).throw(sqlite3.OperationalError("no such table")))
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        retry_busy(lambda: (_ for _ in ()).throw(
            sqlite3.OperationalError("database is locked")), budget_s=0.05)


def test_a_writer_waits_for_another_process_lock(tmp_path) -> None:
    path = tmp_path / "s.db"
    store = Store.open(path, embedder=None)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock

    def release() -> None:
        time.sleep(0.3)
        other.execute("COMMIT")

    threading.Thread(target=release).start()
    started = time.perf_counter()
    with store.transaction():
        store.conn.execute("CREATE TABLE t (x)")
    assert time.perf_counter() - started >= 0.25  # it waited instead of failing
    store.close()


# -- file faults (issue 21): one clear StoreError, the committed rows kept -----------------


def test_a_full_store_raises_store_error_and_takes_writes_again(tmp_path) -> None:
    """SQLite rolls a transaction back by itself on SQLITE_FULL; the ROLLBACK that
    followed used to fail and hide the error ("cannot rollback - no transaction")."""
    from memstrata.memory import FactItem, StoreError

    store = Store.open(tmp_path / "s.db", embedder=None)
    kept = store.add(FactItem(user_id="u", text="kept"))
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    store.conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError, match="is full") as caught:
        for n in range(500):
            store.add(FactItem(user_id="u", text=f"fill {n} " + "x" * 3000))
    assert isinstance(caught.value, sqlite3.DatabaseError)
    assert caught.value.code == sqlite3.SQLITE_FULL and str(tmp_path) in str(caught.value)
    assert not store.conn.in_transaction
    store.conn.execute("PRAGMA max_page_count = 1073741823")
    assert store.get("u", store.add(FactItem(user_id="u", text="after"))).text == "after"
    assert store.get("u", kept).text == "kept"
    store.close()


def test_a_corrupt_or_foreign_file_raises_store_error(tmp_path) -> None:
    from memstrata.memory import StoreError

    path = tmp_path / "s.db"
    path.write_bytes(b"this is not a database" * 300)
    with pytest.raises(StoreError, match="not a SQLite store"):
        Store.open(path)


def test_a_damaged_stored_value_raises_store_error(tmp_path) -> None:
    from memstrata.memory import StoreError, Turn

    store = Store.open(tmp_path / "s.db", embedder=None)
    [tid] = store.add_turns([Turn(user_id="u", conversation_id="c", session_id="s",
                                  turn_id="t0", seq=0, speaker="A", text="hello")])
    store.conn.execute("UPDATE turns SET event_time = '2026-13-45T99' WHERE id = ?", (tid,))
    with pytest.raises(StoreError, match=r"corrupt.*unreadable"):
        store.turn("u", tid)
    store.conn.execute("UPDATE turns SET text = CAST(x'ff00' AS TEXT) WHERE id = ?", (tid,))
    with pytest.raises(StoreError, match="corrupt"):
        store.turn("u", tid)
    store.close()


def test_a_read_that_fails_on_damaged_text_leaves_no_statement_open(tmp_path) -> None:
    # Its statement was left active: a later write that drops a table (sqlite-utils'
    # upsert probes with a temporary one) failed with "database table is locked".
    from memstrata.memory import Session, StoreError, Turn

    store = Store.open(tmp_path / "s.db", embedder=None)
    turns = store.add_turns([Turn(user_id="u", conversation_id="c", session_id="s",
                                  turn_id=f"t{i}", seq=i, speaker="A", text="hello")
                             for i in range(3)])
    store.conn.execute("UPDATE turns SET speaker = CAST(x'ff00' AS TEXT) WHERE id = ?",
                       (turns[1],))
    with pytest.raises(StoreError, match="corrupt"):
        store.turns("u")
    store.add_session(Session(id="s2", user_id="u", conversation_id="c", index=1))
    assert store.session_ids("u", "c") == ["s2"]
    store.close()


def test_a_column_renamed_on_disk_raises_store_error(tmp_path) -> None:
    # A byte of the schema's text altered ("session_id" -> "seIsion_id"), as the
    # reliability bench's random corruption once did: reading a turn found no such column.
    from memstrata.memory import StoreError, Turn

    path = tmp_path / "s.db"
    store = Store.open(path, embedder=None)
    [tid] = store.add_turns([Turn(user_id="u", conversation_id="c", session_id="s",
                                  turn_id="t0", seq=0, speaker="A", text="hello")])
    store.close()
    data = path.read_bytes()
    at = data.index(b"session_id TEXT NOT NULL,\n            turn_id")
    path.write_bytes(data[:at + 2] + b"I" + data[at + 3:])
    store = Store.open(path, embedder=None)
    with pytest.raises(StoreError, match=r"corrupt.*unreadable"):
        store.turn("u", tid)
    store.close()


def test_sql_mistakes_and_locks_are_not_translated() -> None:
    from memstrata.memory.locking import store_error

    assert store_error(sqlite3.OperationalError("near \"x\": syntax error"), "p") is None
    assert store_error(ValueError("x"), "p") is None


def test_damaged_json_in_any_table_raises_store_error(tmp_path) -> None:
    from memstrata.memory import Conversation, Edge, FactItem, StoreError

    store = Store.open(tmp_path / "s.db", embedder=None)
    store.add_conversation(Conversation(id="c", user_id="u", speakers=["A"]))
    item = store.add(FactItem(user_id="u", text="tea"))
    store.update("u", item, text="coffee")  # a kept version
    store.add_edges([Edge(user_id="u", src=item, dst=item, relation="self")])
    for table, column in (("conversations", "speakers"), ("edges", "metadata"),
                          ("versions", "snapshot")):
        store.conn.execute(f"UPDATE {table} SET {column} = '{{not json'")
    for read in (lambda: store.conversation("u", "c"), lambda: store.conversation_rows("u"),
                 lambda: store.edges("u"), lambda: store.history("u", item)):
        with pytest.raises(StoreError, match="corrupt"):
            read()
    store.close()
