"""Regression tests of issue 44's defects in the ``Memory`` API: what a new user found with
the README and the public API only (data lost on import, a URL become a file, deleted text
left in the file, input one backend stores and the other refuses, unbounded sizes)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from memstrata import Memory
from memstrata.api import MAX_MESSAGE_BYTES, MAX_METADATA_DEPTH, MAX_QUERY_BYTES
from memstrata.formats.records import ConversationRecord, Message, SessionRecord
from memstrata.memory import FactItem, StoreError
from memstrata.memory.store.opener import is_url, open_store
from memstrata.memory.text import NEIGHBOUR_CHARS

SECRET = "hunter2zebra"


def _record(conv: str, *texts: str) -> ConversationRecord:
    return ConversationRecord(id=conv, sessions=[SessionRecord(id="s1", messages=[
        Message(speaker="user", content=t) for t in texts])])


# -- 1: an import never deletes silently ---------------------------------------------------


def test_import_appends_to_a_conversation_that_exists_and_replaces_only_when_told() -> None:
    m = Memory.open(":memory:", embedder=None)
    m.add("My passport number is in the blue drawer", user_id="zed", infer=False)
    m.add("The spare key is under the mat", user_id="zed", infer=False)
    counts = m.import_conversations([_record("default", "I like tea")], user_id="zed")
    # Untimed, after turns the file did not hold: a second import could not recognise it.
    assert counts == {"conversations": 1, "sessions": 1, "turns": 1, "unrecognisable": 1}
    texts = [t.text for t in m.store.turns("zed", conversation_id="default")]
    assert texts == ["My passport number is in the blue drawer",
                     "The spare key is under the mat", "I like tea"]
    assert [t.seq for t in m.store.turns("zed")] == [0, 1, 2]
    counts = m.import_conversations([_record("default", "only this")], user_id="zed",
                                    replace=True)
    assert counts["replaced"] == 3
    assert [t.text for t in m.store.turns("zed")] == ["only this"]


# -- 2: what Memory.open accepts as a place --------------------------------------------------


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://app:secret@db.internal/memstrata",
    "mysql://app:secret@db.internal/prod",
    "sqlite:///app.db",
    "https://app:secret@example.com/db",
    "redis://:secret@cache:6379/0",
])
def test_a_url_memstrata_does_not_serve_is_refused_without_its_password(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="URL is not a store") as exc:
        Memory.open(url)
    assert "secret" not in str(exc.value)
    assert list(tmp_path.iterdir()) == []  # no file named after the URL


def test_postgres_urls_are_still_urls() -> None:
    for url in ("postgresql://u:p@host/db", "postgres://u@host/db"):
        assert is_url(url)
    assert not is_url("notes/postgresql.db")


def test_home_is_expanded_and_a_missing_folder_is_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    Memory.open("~/x.db", embedder=None).close()
    assert (home / "x.db").is_file() and not (tmp_path / "~").exists()
    with pytest.raises(StoreError, match="no folder"):
        Memory.open(tmp_path / "nonexistent" / "dir" / "x.db")
    assert not (tmp_path / "nonexistent").exists()


# -- 3: delete scrubs like delete_all ------------------------------------------------------


def _file_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal"))
                    if p.exists())


@pytest.mark.parametrize("close", [True, False])
def test_delete_leaves_no_byte_of_the_deleted_text(tmp_path: Path, close: bool) -> None:
    """Turns: the text was also in the FTS body, the neighbours' context column and a kept
    version; an item: its FTS row. ``close=False``: read with the WAL file beside it."""
    db = tmp_path / "m.db"
    m = Memory.open(db, embedder=None)
    events = m.add(["we met at the lido", f"my password is {SECRET}", "see you on Sunday"],
                   user_id="u", infer=False)
    secret_id = events[1]["id"]
    m.update(secret_id, f"my password is {SECRET} (old)")  # a kept version holds it too
    item = m.store.add(FactItem(user_id="u", text=f"the vault code is {SECRET[::-1]}"))
    assert SECRET.encode() in _file_bytes(db)
    assert m.delete(secret_id) and m.delete(item)
    if close:
        m.close()
    data = _file_bytes(db)
    assert SECRET.encode() not in data and SECRET[::-1].encode() not in data
    if not close:
        assert m.search("lido", user_id="u")[0].id == events[0]["id"]
        m.close()


# -- 4/5: one validation at the door ---------------------------------------------------------

HOSTILE: list[tuple[str, dict]] = [
    ("metadata", {"messages": "hello", "metadata": {"k": "\udc80"}}),
    ("metadata", {"messages": "hello", "metadata": {"\udc80": 1}}),
    ("metadata", {"messages": "hello", "metadata": {"k": "a\x00b"}}),
    ("metadata", {"messages": "hello", "metadata": {"k\x00": 1}}),
    ("metadata", {"messages": "hello", "metadata": {"k": float("nan")}}),
    ("metadata", {"messages": {"role": "user", "content": "hi", "metadata": {"k": "\ud800"}}}),
    ("a message", {"messages": "nul \x00 char"}),
    ("message", {"messages": {"speaker": "A\x00na", "content": "hi"}}),
    ("message", {"messages": {"speaker": "A\udc80na", "content": "hi"}}),
    ("user_id", {"messages": "hello", "user_id": "u\udc80"}),
    ("conversation_id", {"messages": "hello", "conversation_id": "c\udc80"}),
    ("session_id", {"messages": "hello", "session_id": "s\x00"}),
]


def _deep(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels - 1):
        value = {"k": value}
    return value


@pytest.mark.parametrize(("names", "call"), [
    *HOSTILE,
    ("nested", {"messages": "hello", "metadata": _deep(MAX_METADATA_DEPTH + 1)}),
    ("bytes as JSON", {"messages": "hello", "metadata": {"k": "x" * 70_000}}),
])
def test_what_the_store_cannot_keep_or_export_is_refused_naming_the_argument(
        names: str, call: dict) -> None:
    m = Memory.open(":memory:", embedder=None)
    with pytest.raises(ValueError) as exc:
        m.add(**{"user_id": "u1", "infer": False, **call})
    assert names in str(exc.value)
    assert "codec" not in str(exc.value)
    assert m.store.counts()["turns"] == 0


def test_metadata_at_the_depth_limit_is_stored_and_exported(tmp_path: Path) -> None:
    m = Memory.open(tmp_path / "m.db", embedder=None)
    m.add("hello", user_id="u1", metadata=_deep(MAX_METADATA_DEPTH), infer=False)
    assert m.export("u1", tmp_path / "u1.jsonl") > 1


def test_an_import_names_the_conversation_session_and_message() -> None:
    m = Memory.open(":memory:", embedder=None)
    bad = ConversationRecord(id="c9", sessions=[SessionRecord(id="s2", messages=[
        Message(speaker="user", content="fine"),
        Message(speaker="user", content="bad", metadata={"k": "\udc80"})])])
    with pytest.raises(ValueError, match="conversation 'c9', session 's2', message 2"):
        m.import_conversations([_record("c1", "kept out"), bad], user_id="u")
    assert m.store.counts("u")["turns"] == 0


def test_a_row_stored_before_the_checks_still_exports_and_leaves_no_partial(
        tmp_path: Path) -> None:
    m = Memory.open(tmp_path / "m.db", embedder=None)
    m.add("hello", user_id="u1", infer=False)
    m.store.conn.execute("UPDATE turns SET metadata = ?", (json.dumps({"k": "\udc80"}),))
    out = tmp_path / "u1.jsonl"
    assert m.export("u1", out) > 1
    assert "\\udc80" in out.read_text(encoding="utf-8")
    with pytest.raises(OSError, match="folder"):
        m.export("u1", tmp_path)
    assert not list(tmp_path.glob("*.partial"))


def test_both_backends_refuse_the_same_input(tmp_path: Path, pg_db_url: str) -> None:
    """The door is above the store: SQLite and PostgreSQL give the same outcome class."""
    memories = [Memory.open(tmp_path / "m.db", embedder=None),
                Memory.open(pg_db_url, embedder=None)]
    calls = [call for _, call in HOSTILE] + [{"messages": "fine"}, {"messages": "ok ünï"}]
    outcomes = []
    for memory in memories:
        row = []
        for call in calls:
            try:
                memory.add(**{"user_id": "u1", "infer": False, **call})
                row.append("stored")
            except Exception as exc:  # the class is what is compared
                row.append(type(exc).__name__)
        outcomes.append(row)
        memory.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][-2:] == ["stored", "stored"]


# -- 6/7: sizes ----------------------------------------------------------------------------


def test_a_message_and_a_query_have_documented_limits() -> None:
    m = Memory.open(":memory:", embedder=None)
    with pytest.raises(ValueError, match=r"a message is .* bytes"):
        m.add("x" * (MAX_MESSAGE_BYTES + 1), user_id="u", infer=False)
    with pytest.raises(ValueError, match=r"a message is .* bytes"):
        m.add("é" * (MAX_MESSAGE_BYTES // 2 + 1), user_id="u", infer=False)  # UTF-8 bytes
    m.add("y" * (MAX_MESSAGE_BYTES - len("user")), user_id="u", infer=False)  # + speaker
    with pytest.raises(ValueError, match=r"query is .* bytes"):
        m.search("q " * MAX_QUERY_BYTES, user_id="u")
    assert m.search("q" * MAX_QUERY_BYTES, user_id="u") == []


def test_a_long_turn_is_not_copied_whole_into_its_neighbours_context(tmp_path: Path) -> None:
    m = Memory.open(tmp_path / "m.db", embedder=None)
    big = "word " * 40_000
    m.add(["before it", big, "after it"], user_id="u", infer=False)
    m.close()
    with sqlite3.connect(tmp_path / "m.db") as conn:
        contexts = [r[0] for r in conn.execute("SELECT length(context) FROM turns_fts")]
    assert max(contexts) < 16 * NEIGHBOUR_CHARS  # index text: a tenant token per word


# -- 8: the small ones ---------------------------------------------------------------------


def test_k_limit_and_offset_must_be_whole_numbers() -> None:
    m = Memory.open(":memory:", embedder=None)
    m.add("hello river", user_id="u", infer=False)
    for bad in (float("inf"), None, 2.5, "3", float("nan")):
        with pytest.raises(ValueError, match="k must be a whole number"):
            m.search("river", user_id="u", k=bad)  # type: ignore[arg-type]
    assert len(m.search("river", user_id="u", k=10**30)) == 1
    assert len(m.search("river", user_id="u", k=3.0)) == 1  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit must be a whole number"):
        m.get_all("u", limit=None)  # type: ignore[arg-type]


def test_unknown_kinds_are_refused_and_get_all_returns_turns_too() -> None:
    m = Memory.open(":memory:", embedder=None)
    ids = [e["id"] for e in m.add(["one", "two"], user_id="u", infer=False)]
    fact = m.store.add(FactItem(user_id="u", text="a fact"))
    with pytest.raises(ValueError, match="no kind 'bogus'"):
        m.get_all("u", kind="bogus")
    with pytest.raises(ValueError, match="no kind 'bogus'"):
        m.search("one", user_id="u", filters={"kinds": ["bogus"]})
    rows = m.get_all("u")
    assert {r["id"] for r in rows} == {*ids, fact}
    assert {r["node"] for r in rows} == {"turn", "item"}
    assert [r["id"] for r in m.get_all("u", limit=1, offset=2)] == [rows[2]["id"]]
    assert m.get_all("u", offset=3) == [] and m.get_all("u", offset=10**30) == []
    assert [r["id"] for r in m.get_all("u", kind="turn")] == ids[::-1]


def test_a_bad_id_is_named() -> None:
    m = Memory.open(":memory:", embedder=None)
    with pytest.raises(ValueError, match=r"^id "):
        m.get("t_\udc80")
    with pytest.raises(ValueError, match=r"^id "):
        m.delete("t_\x00")


# -- 9: durability -------------------------------------------------------------------------


def test_durability_full_syncs_every_commit(tmp_path: Path) -> None:
    def synchronous(memory: Memory) -> int:
        return memory.store.conn.execute("PRAGMA synchronous").fetchone()[0]

    with Memory.open(tmp_path / "a.db", embedder=None) as m:
        assert synchronous(m) == 1  # NORMAL
        assert m.store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 8_000
    with Memory.open(tmp_path / "a.db", embedder=None, durability="full") as m:
        assert synchronous(m) == 2  # FULL
        m.add("kept", user_id="u", infer=False)
    with pytest.raises(ValueError, match="durability"):
        open_store(tmp_path / "a.db", durability="fast")  # type: ignore[arg-type]
