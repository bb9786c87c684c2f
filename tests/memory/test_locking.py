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
