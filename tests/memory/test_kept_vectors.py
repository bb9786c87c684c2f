"""A tenant's vectors kept in memory across this process's writes (``KeptVectors``): after
every kind of write, what a search reads equals a fresh read of the file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstrata.memory import Conversation, FactItem, Session, Store, Turn

U = "tenant"


class Boom(Exception):
    """Raised on purpose inside a transaction."""


@pytest.fixture
def pair(tmp_path: Path, embedder: Any) -> Iterator[tuple[Store, Store, str]]:
    """The store under test and a second connection to the same file (another process)."""
    first = Store.open(tmp_path / "m.db", embedder=embedder)
    second = Store.open(tmp_path / "m.db", embedder=embedder)
    try:
        yield first, second, embedder.name
    finally:
        first.close()
        second.close()


def _same_as_a_fresh_read(store: Store, model: str) -> None:
    fresh = Store.open(store.path, embedder=None)
    try:
        ids, matrix = store.vectors(U, model)
        want_ids, want = fresh.vectors(U, model)
        assert ids == want_ids and np.array_equal(matrix, want)
        assert store.vector_refs(U, model) == fresh.vector_refs(U, model)
        assert list(store.vector_speakers(U, model)) == list(fresh.vector_speakers(U, model))
    finally:
        fresh.close()


def _full_reads(store: Store) -> list[str]:
    reads: list[str] = []
    store.conn.raw.set_trace_callback(
        lambda sql: reads.append(sql) if "FROM embeddings WHERE user_id" in sql
        and "count(*)" not in sql else None)
    return reads


def _add(store: Store, text: str, speaker: str = "Ana") -> str:
    return store.add(FactItem(user_id=U, text=text, speaker=speaker))


def test_adds_are_read_alone_and_match_a_fresh_read(pair: tuple[Store, Store, str]) -> None:
    store, _, model = pair
    for n in range(3):
        _add(store, f"note {n} about the garden")
    _same_as_a_fresh_read(store, model)
    reads = _full_reads(store)
    new = _add(store, "bees make honey", "Ben")
    _same_as_a_fresh_read(store, model)
    assert reads == []  # only the rows added since were read
    assert store.vectors(U, model)[0][-1] == new


def test_deletes_replacements_and_a_reused_rowid_read_everything_again(
        pair: tuple[Store, Store, str]) -> None:
    store, _, model = pair
    ids = [_add(store, f"note {n} about the garden") for n in range(4)]
    _same_as_a_fresh_read(store, model)
    store.delete(U, ids[1])  # a row in the middle
    _same_as_a_fresh_read(store, model)
    store.update(U, ids[0], text="a rewritten note about kayaks")  # its vector replaced
    _same_as_a_fresh_read(store, model)
    last = store.vectors(U, model)[0][-1]
    store.delete(U, last)  # the file's last row: SQLite may give its rowid to the next one
    _add(store, "a note that may take the freed rowid")
    _same_as_a_fresh_read(store, model)


def test_a_rolled_back_add_and_another_process_add(pair: tuple[Store, Store, str]) -> None:
    store, other, model = pair
    _add(store, "first note")
    _same_as_a_fresh_read(store, model)
    with pytest.raises(Boom), store.transaction():
        ghost = _add(store, "a note rolled back")
        assert ghost in store.vectors(U, model)[0]  # visible inside its transaction
        raise Boom
    assert ghost not in store.vectors(U, model)[0]
    _same_as_a_fresh_read(store, model)
    elsewhere = _add(other, "a note from another process")
    assert elsewhere in store.vectors(U, model)[0]
    _same_as_a_fresh_read(store, model)


def test_a_search_right_after_an_add_finds_it_by_its_vector(
        pair: tuple[Store, Store, str]) -> None:
    store, _, model = pair
    for n in range(5):
        _add(store, f"note {n} about the garden")
    store.dense_refs(U, model, store.embedder.encode(["garden"])[0], 3)  # read and kept
    new = _add(store, "volcano glacier expedition")
    found = store.dense_refs(U, model, store.embedder.encode(["volcano glacier"])[0], 1)
    assert store.ids(U, [found[0][0]]) == {found[0][0]: new}


def test_every_turn_write_matches_a_fresh_read(pair: tuple[Store, Store, str]) -> None:
    """Turns appended, rewritten (their vector and the next turn's replaced), deleted one
    by one and by conversation, a tenant forgotten: each read equals a fresh one, and an
    append reads only the new rows."""
    store, _, model = pair
    store.add_conversation(Conversation(id="c", user_id=U))
    store.add_session(Session(id="s", user_id=U, conversation_id="c", index=0))
    turns = [Turn(user_id=U, conversation_id="c", session_id="s", turn_id=f"t{i}", seq=i,
                  speaker="Ana" if i % 2 else "Ben", text=f"turn {i} about bees and honey")
             for i in range(8)]
    ids = store.add_turns(turns[:5])
    _same_as_a_fresh_read(store, model)
    reads = _full_reads(store)
    store.add_turns(turns[5:])
    _same_as_a_fresh_read(store, model)
    assert reads == []
    store.update_turn(U, ids[1], "a kayak trip on the lake")
    _same_as_a_fresh_read(store, model)
    store.delete_turn(U, ids[3])
    _same_as_a_fresh_read(store, model)
    _add(store, "an item beside the turns")
    store.delete_conversation(U, "c")
    _same_as_a_fresh_read(store, model)
    store.forget_user(U)
    _same_as_a_fresh_read(store, model)
    assert store.vectors(U, model)[0] == []


def test_deletes_are_marked_for_this_connection_only(pair: tuple[Store, Store, str]) -> None:
    store, other, model = pair
    kept = _add(store, "a note")
    gone = "SELECT user_id, model FROM temp.vectors_gone"
    store.vectors(U, model)  # a full read clears the mark
    assert store.conn.execute(gone).fetchall() == []
    with pytest.raises(Boom), store.transaction():
        store.delete(U, kept)
        raise Boom
    assert store.conn.execute(gone).fetchall() == []  # rolled back with the delete
    other.delete(U, kept)
    assert store.conn.execute(gone).fetchall() == []  # another connection's
    again = _add(store, "another note")
    store.vectors(U, model)
    # INSERT OR REPLACE deletes the old row: that delete is marked too.
    store.set_embeddings(U, [again], store.embedder.encode(["a new vector"]), model)
    assert store.conn.execute(gone).fetchall() == [(U, model)]
    _same_as_a_fresh_read(store, model)
    assert store.conn.execute(gone).fetchall() == []


def test_a_vector_read_back_as_nan_is_left_out_of_the_dense_channel(
        pair: tuple[Store, Store, str]) -> None:
    # SQLite checks no stored value: flipped bytes of a float can read back as NaN, whose
    # cosine sorted and scored as a number (a NaN score in a search's results).
    store, fresh, model = pair  # fresh: has read no vector yet
    ids = store.add_turns([Turn(user_id=U, conversation_id="c", session_id="s",
                                turn_id=f"t{i}", seq=i, speaker="A", text=text)
                           for i, text in enumerate(["the river lamp", "a maple orchard"])])
    query = store.vectors(U, model)[1][1]
    nan = np.full(len(query), np.nan, np.float32).tobytes()
    store.conn.execute("UPDATE embeddings SET vector = ? WHERE node_id = ?", (nan, ids[0]))
    found = fresh.dense_refs(U, model, query, 10)
    assert [fresh.ids(U, [r])[r] for r, _ in found] == [ids[1]]
    assert all(np.isfinite(score) for _, score in found)


def test_speaker_channels_reuse_the_last_pass_until_a_write(
        pair: tuple[Store, Store, str]) -> None:
    """The dense channel's pass is reused by a speaker channel for the same query, and
    never after a write: the new turn is found by its speaker's channel at once."""
    store, _, model = pair
    store.add_turns([Turn(user_id=U, conversation_id="c", session_id="s", turn_id=f"t{i}",
                          seq=i, speaker="Ana" if i % 2 else "Ben", text=text)
                     for i, text in enumerate(["bees and honey", "kayak", "kayak river",
                                               "kayak river trip"])])
    query = store.embedder.encode(["kayak river trip lamp"])[0]  # no two cosines tie

    def expected(speaker: str | None) -> list[str]:
        ids, matrix = store.vectors(U, model)
        spoken = store.vector_speakers(U, model)
        ranked = sorted(range(len(ids)), key=lambda i: -float(matrix[i] @ query))
        return [ids[i] for i in ranked if speaker is None or spoken[i] == speaker]

    def found(speaker: str | None) -> list[str]:
        refs = store.dense_refs(U, model, query, 10, speaker=speaker)
        return [store.ids(U, [r])[r] for r, _ in refs]

    assert found(None) == expected(None)
    matrix = store.vectors(U, model)[1]
    assert store._dense_memo.held(matrix, query) is not None
    assert found("Ana") == expected("Ana") and found("Ben") == expected("Ben")
    [new] = store.add_turns([Turn(user_id=U, conversation_id="c", session_id="s",
                                  turn_id="t9", seq=9, speaker="Ana",
                                  text="kayak river trip lamp")])
    assert store._dense_memo.held(store.vectors(U, model)[1], query) is None
    assert found("Ana")[0] == new and found("Ana") == expected("Ana")
    assert found("Cleo") == []


def test_speaker_rows_follow_adds_and_deletes(pair: tuple[Store, Store, str]) -> None:
    """Each speaker's rows, kept across searches and extended from the rows an add brings,
    are what a fresh comparison finds: after adds by known and new speakers, and after a
    delete (a full read)."""
    store, _, model = pair
    query = store.embedder.encode(["kayak river trip lamp"])[0]
    store.add_turns([Turn(user_id=U, conversation_id="c", session_id="s", turn_id=f"t{i}",
                          seq=i, speaker="Ana" if i % 2 else "Ben", text=f"kayak note {i}")
                     for i in range(6)])

    def check() -> None:
        ids, _ = store.vectors(U, model)
        spoken = store.vector_speakers(U, model)
        for name in ("Ana", "Ben", "Cleo"):
            refs = store.dense_refs(U, model, query, 50, speaker=name)
            found = sorted(store.ids(U, [r])[r] for r, _ in refs)
            assert found == sorted(i for i, s in zip(ids, spoken, strict=True) if s == name)

    check()
    for n, name in enumerate(["Ana", "Cleo", "Ben", "Cleo", "Ana"]):
        store.add_turns([Turn(user_id=U, conversation_id="c", session_id="s",
                              turn_id=f"n{n}", seq=10 + n, speaker=name,
                              text=f"river trip {n}")])
        check()
    # A delete makes the next read a full one, into a new buffer, its rows shifted down;
    # with an add after it, as many rows as the speaker rows kept, not the same ones.
    store.delete_turn(U, store.vectors(U, model)[0][1])
    store.add_turns([Turn(user_id=U, conversation_id="c", session_id="s", turn_id="m",
                          seq=20, speaker="Cleo", text="river trip again")])
    check()


def test_speakers_read_by_a_tenant_scan_and_by_id_agree(pair: tuple[Store, Store, str]
                                                        ) -> None:
    """A first read (most of the tenant: one scan of its speaker indexes) and the few rows
    an add brings (looked up by id) give each vector's speaker, as the rows say."""
    store, other, model = pair
    store.add_turns([Turn(user_id=U, conversation_id="c", session_id="s", turn_id=f"t{i}",
                          seq=i, speaker=("Ana", "Ben", "Cleo")[i % 3], text=f"note {i}")
                     for i in range(20)])
    _add(store, "a fact Ben stated", speaker="Ben")
    other.add_turns([Turn(user_id="someone else", conversation_id="c", session_id="s",
                          turn_id="x", seq=0, speaker="Zed", text="note 0")])

    def said() -> list[str | None]:
        ids = store.vectors(U, model)[0]
        return [store.nodes(U, [i])[i]["speaker"] for i in ids]

    assert list(store.vector_speakers(U, model)) == said()  # a scan: all 21 rows
    store.add_turns([Turn(user_id=U, conversation_id="c", session_id="s", turn_id="t99",
                          seq=99, speaker="Dora", text="note 99")])
    spoken = store.vector_speakers(U, model)  # one row looked up by its id
    assert list(spoken) == said() and spoken[-1] == "Dora"
