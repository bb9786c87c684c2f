"""Sharing a store: statements under one lock, BUSY retried, rows read whole."""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterator

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


def test_a_folder_given_as_the_store_says_so_and_creates_nothing(tmp_path) -> None:
    from memstrata.memory import StoreError

    with pytest.raises(StoreError, match="a folder, not a store file") as caught:
        Store.open(tmp_path)
    assert caught.value.code == sqlite3.SQLITE_CANTOPEN
    assert str(tmp_path / "memstrata.db") in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_another_programs_database_is_refused_and_left_as_it_was(tmp_path) -> None:
    from memstrata.memory import StoreError
    from memstrata.memory.store.opener import schema_versions

    app = tmp_path / "app.db"
    with sqlite3.connect(app) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, user_id TEXT)")
        conn.execute("INSERT INTO users (user_id) VALUES ('ana')")
    conn.close()
    rails = tmp_path / "rails.db"
    with sqlite3.connect(rails) as conn:
        conn.execute("CREATE TABLE schema_migrations (version VARCHAR PRIMARY KEY)")
        conn.execute("INSERT INTO schema_migrations VALUES ('20240101000000')")
    conn.close()
    for path, said in [(app, "it holds tables memstrata did not make (users)"),
                       (rails, "its schema_migrations table is not memstrata's")]:
        before = path.read_bytes()
        with pytest.raises(StoreError, match="another program's database") as caught:
            Store.open(path)
        assert said in str(caught.value) and str(path) in str(caught.value)
        assert caught.value.code == sqlite3.SQLITE_SCHEMA
        with pytest.raises(StoreError, match=re.escape(said)):
            schema_versions(path)  # `memstrata migrate --check` reads it the same way
        assert path.read_bytes() == before


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


def _stored_file(path) -> str:
    from memstrata.memory import Turn

    store = Store.open(path, embedder=None)
    [tid] = store.add_turns([Turn(user_id="u", conversation_id="c", session_id="s",
                                  turn_id="t0", seq=0, speaker="A", text="hello there")])
    store.close()
    return tid


def _alter(path, old: bytes, new: bytes) -> None:
    """Overwrite the first ``old`` in the file's bytes (as much of it as ``new`` spans)."""
    data = path.read_bytes()
    at = data.index(old)
    path.write_bytes(data[:at] + new + data[at + len(new):])


@pytest.mark.parametrize(("old", "new", "says"), [
    # A column's name: every SELECT * named it otherwise ("no such column" at best). (An
    # indexed column's, SQLite itself refuses: the index names a column that is gone.)
    (b"turn_id TEXT NOT NULL,\n            seq", b"tuX", "turns: turn_id"),
    # A declared rowid's type: an ordinary column then, which may hold NULL.
    (b"rowid INTEGER PRIMARY KEY,\n            id TEXT NOT NULL UNIQUE,\n"
     b"            user_id TEXT NOT NULL,\n            agent_id", b"rowid INTEGEB", "rowid"),
    # An FTS5 table's stored options: SQLite cannot load the table at all.
    (b"tokenize", b"tokBnize", "tokBnize"),
])
def test_a_schema_altered_on_disk_is_refused_at_open(tmp_path, old: bytes, new: bytes,
                                                     says: str) -> None:
    # Bytes of the schema's text altered, as the reliability bench's random corruption
    # does: SQLite opens such a file without a word.
    from memstrata.memory import StoreError

    path = tmp_path / "s.db"
    _stored_file(path)
    _alter(path, old, new)
    with pytest.raises(StoreError, match="schema is not the one memstrata wrote") as caught:
        Store.open(path, embedder=None)
    assert says in str(caught.value) and str(path) in str(caught.value)


def test_a_damaged_header_format_number_is_refused_at_open(tmp_path) -> None:
    from memstrata.memory import StoreError

    path = tmp_path / "s.db"
    _stored_file(path)
    data = bytearray(path.read_bytes())
    data[44:48] = (9).to_bytes(4, "big")  # the schema format number: 1-4 are SQLite's
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="unsupported file format"):
        Store.open(path, embedder=None)


def test_an_unknown_version_beside_a_missing_known_one_is_damage(
        tmp_path) -> None:
    from memstrata.memory import StoreError
    from memstrata.memory.schema import LATEST_VERSION

    path = tmp_path / "s.db"
    _stored_file(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE schema_migrations SET version = 99 WHERE version = 2")
    conn.close()
    with pytest.raises(StoreError, match=r"corrupt.*99\], as no memstrata does"):
        Store.open(path, embedder=None)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE schema_migrations SET version = 2 WHERE version = 99")
        conn.execute("INSERT INTO schema_migrations VALUES (?, 'later', '')",
                     (LATEST_VERSION + 1,))
    conn.close()
    with pytest.raises(RuntimeError, match="upgrade memstrata"):
        Store.open(path, embedder=None)


@pytest.fixture
def one_turn(tmp_path) -> Iterator[Store]:
    """An open store holding one turn of tenant "u" (conversation "c")."""
    _stored_file(tmp_path / "s.db")
    store = Store.open(tmp_path / "s.db", embedder=None)
    yield store
    store.close()


def test_json_of_another_type_than_stored_is_damage(one_turn: Store) -> None:
    from memstrata.memory import Conversation, StoreError

    store = one_turn
    store.conn.execute("UPDATE turns SET metadata = '7'")
    with pytest.raises(StoreError, match=r"corrupt.*a JSON int where a dict was stored"):
        store.texts_since("u", 0, 0)
    store.add_conversation(Conversation(id="c", user_id="u", speakers=["A"]))
    store.conn.execute("UPDATE conversations SET speakers = '{}'")
    with pytest.raises(StoreError, match="a JSON dict where a list was stored"):
        store.conversation("u", "c")


def test_a_damaged_search_index_raises_store_error(one_turn: Store) -> None:
    from memstrata.memory import Retriever, StoreError

    one_turn.conn.execute("UPDATE turns_fts_docsize SET sz = NULL")
    with pytest.raises(StoreError, match=r"corrupt.*turns_fts_docsize is unreadable"):
        Retriever(one_turn).search("u", "hello")


def test_a_term_in_more_rows_than_the_tenant_has_is_damage() -> None:
    from memstrata.memory import StoreError
    from memstrata.memory.store.postings import TenantStats, idf

    stats = TenantStats(rows=3, avgdl=4.0, idf_shift=1.0)
    assert idf(stats, 3) > 1.0
    with pytest.raises(StoreError, match="a term in 4 rows of 3"):
        idf(stats, 4)


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


def test_an_edge_read_back_as_another_type_is_damage(tmp_path) -> None:
    # SQLite checks no stored value's type: a flipped byte can make text a blob.
    from memstrata.memory import Edge, StoreError, Turn

    store = Store.open(tmp_path / "s.db", embedder=None)
    a, b = store.add_turns([Turn(user_id="u", conversation_id="c", session_id="s",
                                 turn_id=f"t{i}", seq=i, speaker="A", text="hello")
                            for i in range(2)])
    store.add_edges([Edge(user_id="u", src=a, dst=b, relation="next")])
    assert b in store.neighbors("u", [a])
    store.conn.execute("UPDATE edges SET dst = CAST(dst AS BLOB)")
    with pytest.raises(StoreError, match=f"corrupt.*an edge of {a} is unreadable"):
        store.neighbors("u", [a])
    store.close()
