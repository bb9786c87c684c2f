"""Transactions: rollback of every table and index, nesting, cache invalidation, WAL readers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memstrata.memory import Conversation, Edge, FactItem, Session, Store, Turn
from memstrata.memory.text import tokens

U = "tenant"


class Boom(Exception):
    """Raised on purpose inside a transaction."""


def _turn(text: str, seq: int, speaker: str = "Ann", session: str = "s1") -> Turn:
    return Turn(user_id=U, conversation_id="c1", session_id=session, turn_id=f"D1:{seq}",
                seq=seq, speaker=speaker, text=text)


def _all_rows(store: Store) -> dict[str, int]:
    tables = ("conversations", "sessions", "turns", "turns_fts", "items", "items_fts", "edges",
              "item_tags", "embeddings")
    return {
        t: store.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables
    }


def test_exception_rolls_back_every_write(store: Store, embedder) -> None:
    kept = store.add(FactItem(user_id=U, text="kept before", tags=["old"]))
    before = _all_rows(store)
    with pytest.raises(Boom), store.transaction():
        store.add_conversation(Conversation(id="c1", user_id=U, speakers=["Ann"]))
        store.add_session(Session(id="s1", user_id=U, conversation_id="c1", index=1))
        turn_ids = store.add_turns([_turn("pottery class today", 0)])
        item_id = store.add(FactItem(user_id=U, text="pottery is fun", tags=["pottery"]))
        store.add_edges([Edge(user_id=U, src=turn_ids[0], dst=item_id, relation="derived")])
        store.set_embeddings(U, [item_id], embedder.encode(["pottery is fun"]), embedder.name)
        store.update(U, kept, text="changed inside")
        assert store.get(U, item_id) is not None
        raise Boom
    assert _all_rows(store) == before
    assert store.get(U, kept).text == "kept before"
    assert store.lexical(U, tokens("pottery"), node="item", k=5) == []
    assert store.lexical(U, tokens("pottery"), node="turn", k=5) == []
    assert [i for i, _ in store.lexical(U, tokens("kept"), node="item", k=5)] == [kept]
    assert store.tag_vocabulary(U) == ["old"]
    assert not store.conn.in_transaction


def test_commit_persists_all_writes_together(store: Store) -> None:
    with store.transaction():
        a = store.add(FactItem(user_id=U, text="first"))
        b = store.add(FactItem(user_id=U, text="second"))
        assert store.conn.in_transaction
    assert not store.conn.in_transaction
    assert [i.id for i in store.items(U)] == [b, a]


def test_nested_inner_failure_rolls_back_only_the_inner_block(store: Store) -> None:
    with store.transaction():
        outer = store.add(FactItem(user_id=U, text="outer item"))
        try:
            with store.transaction():
                inner = store.add(FactItem(user_id=U, text="inner item"))
                store.add_turns([_turn("inner turn", 0)])
                assert store.get(U, inner) is not None
                raise Boom
        except Boom:
            pass
        assert store.get(U, inner) is None
        after = store.add(FactItem(user_id=U, text="added afterwards"))
    assert {i.id for i in store.items(U)} == {outer, after}
    assert store.turns(U) == []
    assert store.lexical(U, tokens("inner"), node="item", k=5) == []
    assert store.lexical(U, tokens("inner"), node="turn", k=5) == []


def test_nested_outer_failure_rolls_back_committed_inner_blocks(store: Store) -> None:
    with pytest.raises(Boom), store.transaction():
        with store.transaction():
            store.add(FactItem(user_id=U, text="inner committed"))
        with store.transaction(), store.transaction():
            store.add(FactItem(user_id=U, text="deeper committed"))
        raise Boom
    assert store.items(U) == []
    assert store.conn.execute("SELECT count(*) FROM items_fts").fetchone()[0] == 0
    # the store is usable afterwards
    item_id = store.add(FactItem(user_id=U, text="afterwards"))
    assert store.get(U, item_id) is not None


def test_failed_batch_write_is_atomic(store: Store) -> None:
    store.add(FactItem(user_id=U, text="existing", id="i_fixed"))
    with pytest.raises(Exception):  # noqa: B017 - a unique-id clash, whatever its type
        store.add_many([
            FactItem(user_id=U, text="fresh one"),
            FactItem(user_id=U, text="clashing id", id="i_fixed"),
        ])
    assert [i.text for i in store.items(U)] == ["existing"]
    assert store.lexical(U, tokens("fresh"), node="item", k=5) == []


def test_rollback_invalidates_cached_speakers_and_vectors(store: Store, embedder) -> None:
    store.add_turns([_turn("hello there", 0, speaker="Ann")])
    assert store.speakers(U) == ["Ann"]
    assert store.vectors(U, embedder.name)[0] == []
    with pytest.raises(Boom), store.transaction():
        ids = store.add_turns([_turn("new voice", 1, speaker="Zed")])
        store.set_embeddings(U, ids, embedder.encode(["new voice"]), embedder.name)
        assert store.speakers(U) == ["Ann", "Zed"]
        assert store.vectors(U, embedder.name)[0] == ids
        raise Boom
    assert store.speakers(U) == ["Ann"]
    assert store.vectors(U, embedder.name)[0] == []


def test_second_connection_sees_commits_and_cache_refreshes(tmp_path: Path, embedder) -> None:
    path = tmp_path / "shared.db"
    with Store.open(path) as writer, Store.open(path) as reader:
        assert reader.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        a = writer.add(FactItem(user_id=U, text="first"))
        writer.set_embeddings(U, [a], embedder.encode(["first"]), embedder.name)
        ids, matrix = reader.vectors(U, embedder.name)
        assert ids == [a]
        b = writer.add(FactItem(user_id=U, text="second"))
        writer.set_embeddings(U, [b], embedder.encode(["second"]), embedder.name)
        ids, matrix = reader.vectors(U, embedder.name)
        assert sorted(ids) == sorted([a, b])
        assert matrix.dtype == np.float32 and matrix.shape == (2, embedder.dim)
        assert reader.get(U, b).text == "second"


def test_uncommitted_writes_are_invisible_to_other_connections(tmp_path: Path) -> None:
    path = tmp_path / "isolated.db"
    with Store.open(path) as writer, Store.open(path) as reader:
        with writer.transaction():
            item_id = writer.add(FactItem(user_id=U, text="not yet"))
            assert reader.get(U, item_id) is None
        assert reader.get(U, item_id) is not None


def test_the_tag_vocabulary_follows_adds_rollbacks_and_other_processes(tmp_path: Path) -> None:
    """Kept across this process's adds (no full read), exact again after a rollback and
    after another connection's commit."""
    store = Store.open(tmp_path / "m.db", embedder=None)
    other = Store.open(tmp_path / "m.db", embedder=None)
    try:
        store.add(FactItem(user_id=U, text="first", tags=["Old"]))
        assert store.tag_vocabulary(U) == ["old"]
        reads: list[str] = []
        store.conn.raw.set_trace_callback(
            lambda sql: reads.append(sql) if "min(tag)" in sql else None)
        store.add(FactItem(user_id=U, text="second", tags=["New", "old"]))
        assert store.tag_vocabulary(U) == ["new", "old"] and reads == []
        with pytest.raises(Boom), store.transaction():
            store.add(FactItem(user_id=U, text="third", tags=["ghost"]))
            assert "ghost" in store.tag_vocabulary(U)
            raise Boom
        assert store.tag_vocabulary(U) == ["new", "old"] and len(reads) == 1
        other.add(FactItem(user_id=U, text="fourth", tags=["elsewhere"]))
        assert store.tag_vocabulary(U) == ["elsewhere", "new", "old"]
    finally:
        store.close()
        other.close()


def test_rows_a_search_read_are_kept_across_inserts(store: Store) -> None:
    """The next search reads no row again while this process only inserts; an update, a
    delete, or more rows than ``KEPT_ROWS`` read them afresh. A rolled-back update leaves
    them as they were."""
    ids = store.add_turns([_turn(f"turn {i}", i) for i in range(3)])
    refs = list(store.refs(U, ids).values())
    reads: list[str] = []
    store.conn.raw.set_trace_callback(
        lambda sql: reads.append(sql) if "SELECT rowid, id, speaker" in sql else None)

    def search(speaker: str = "Ann") -> int:
        before = len(reads)
        with store.reading():
            assert [f.speaker for f in store.facets(U, refs).values()] == [speaker] * 3
        return len(reads) - before

    assert search() == 1 and search() == 0
    store.add(FactItem(user_id=U, text="an insert"))
    store.add_turns([_turn("one more", 9)])
    assert search() == 0
    with pytest.raises(Boom), store.transaction():
        store.update_turn(U, ids[0], "rolled back")
        raise Boom
    assert search() == 0
    store.update_turn(U, ids[0], "edited")  # an update: its row may have changed
    assert search() == 1 and search() == 0
    store.delete(U, store.add(FactItem(user_id=U, text="gone")))
    assert search() == 1 and search() == 0
    store.KEPT_ROWS = 2  # three rows: too many to keep
    assert search() == 0 and search() == 1 and search() == 1
