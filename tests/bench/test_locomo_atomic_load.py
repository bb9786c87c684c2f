"""An interrupted LoCoMo load leaves the store consistent; reloading replaces, never duplicates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memstrata.bench.locomo import LoCoMoConversation, load_conversation, load_locomo, read_locomo
from memstrata.memory import FactItem, Retriever, Store
from memstrata.memory.store import tenant_token


class Interrupted(RuntimeError):
    """Raised on purpose halfway through a load."""


class ShortEmbedder:
    """Encodes fine but returns one row too few, so storing the vectors fails mid-load."""

    name = "short"
    dim = 8

    def encode(self, texts):
        return np.ones((max(len(texts) - 1, 0), self.dim), dtype=np.float32) / np.sqrt(self.dim)


def _fts_rows(store: Store, user: str) -> int:
    # Index rows whose terms are the tenant's own (every term carries its tenant token).
    return store.conn.execute(
        "SELECT count(*) FROM turns_fts WHERE substr(body, 1, ?) = ?",
        (len(tenant_token(user)) + 1, tenant_token(user) + "x"),
    ).fetchone()[0]


def _assert_absent(store: Store, user: str) -> None:
    assert store.counts(user) == {k: 0 for k in store.counts(user)}
    assert _fts_rows(store, user) == 0
    assert store.turns(user) == []
    assert Retriever(store).search(user, "guinea pig violin Alps Sweden", k=5) == []


def _assert_consistent(store: Store) -> None:
    conn = store.conn
    assert conn.execute("SELECT count(*) FROM turns_fts").fetchone()[0] == \
        conn.execute("SELECT count(*) FROM turns").fetchone()[0]
    orphans = conn.execute(
        "SELECT count(*) FROM turns_fts WHERE rowid NOT IN (SELECT rowid FROM turns)"
    ).fetchone()[0]
    assert orphans == 0
    dangling = conn.execute(
        "SELECT count(*) FROM edges WHERE src LIKE 't_%' AND src NOT IN (SELECT id FROM turns)"
        " OR dst LIKE 't_%' AND dst NOT IN (SELECT id FROM turns)"
    ).fetchone()[0]
    assert dangling == 0
    assert not conn.in_transaction


@pytest.fixture
def convs(make_record, write_json) -> tuple[LoCoMoConversation, LoCoMoConversation]:
    a = make_record("conv-A")
    b = make_record("conv-B", speakers=("Carl", "Dana"))
    path: Path = write_json("two.json", [a, b])
    first, second = read_locomo(path)
    return first, second


def _check_a(store: Store, turn_count: int = 5) -> None:
    turns = store.turns("conv-A")
    assert len(turns) == turn_count
    assert len({t.turn_id for t in turns}) == turn_count
    assert store.counts("conv-A")["conversations"] == 1
    assert store.counts("conv-A")["sessions"] == 2
    assert _fts_rows(store, "conv-A") == turn_count
    hits = Retriever(store).search("conv-A", "Which pet did Alice adopt? guinea pig", k=3)
    assert hits and hits[0].turn_id == "D1:1"


def test_failing_edges_roll_back_the_whole_conversation(
    store: Store, convs, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = convs
    load_conversation(store, a)
    before = store.counts("conv-A")

    def boom(edges):
        list(edges)
        raise Interrupted("disk on fire")

    monkeypatch.setattr(store, "add_edges", boom)
    with pytest.raises(Interrupted):
        load_conversation(store, b)
    monkeypatch.undo()
    _assert_absent(store, "conv-B")
    assert store.counts("conv-A") == before
    _check_a(store)
    _assert_consistent(store)


def test_failing_embeddings_roll_back_the_whole_conversation(store: Store, convs, embedder
                                                              ) -> None:
    a, b = convs
    load_conversation(store, a, embedder=embedder)
    with pytest.raises(ValueError):
        load_conversation(store, b, embedder=ShortEmbedder())
    _assert_absent(store, "conv-B")
    assert store.vectors("conv-B", "short")[0] == []
    assert len(store.vectors("conv-A", embedder.name)[0]) == 5
    _check_a(store)
    _assert_consistent(store)


def test_failure_in_a_batch_keeps_earlier_conversations(store: Store, convs, monkeypatch
                                                         ) -> None:
    a, b = convs
    real = store.add_turns
    calls = {"n": 0}

    def second_fails(turns, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            real(turns, **kwargs)
            raise Interrupted("after writing the turns")
        return real(turns, **kwargs)

    monkeypatch.setattr(store, "add_turns", second_fails)
    with pytest.raises(Interrupted):
        load_locomo(store, [a, b])
    monkeypatch.undo()
    _check_a(store)
    _assert_absent(store, "conv-B")
    _assert_consistent(store)


def test_reloading_a_conversation_replaces_it(store: Store, convs, embedder) -> None:
    a, b = convs
    load_locomo(store, [a, b], embedder=embedder)
    fact = store.add(FactItem(user_id="conv-A", text="Alice has a guinea pig"))
    counts_a, counts_b = store.counts("conv-A"), store.counts("conv-B")
    old_ids = {t.id for t in store.turns("conv-A")}
    load_conversation(store, a, embedder=embedder)
    assert store.counts("conv-A") == counts_a
    assert store.counts("conv-B") == counts_b
    new_ids = {t.id for t in store.turns("conv-A")}
    assert not old_ids & new_ids
    assert set(store.vectors("conv-A", embedder.name)[0]) == new_ids
    assert store.get("conv-A", fact) is not None  # derived items survive a reload
    _check_a(store)
    _assert_consistent(store)


def test_reloading_after_a_failed_reload_keeps_the_old_copy(
    store: Store, convs, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = convs
    load_conversation(store, a)
    old_ids = {t.id for t in store.turns("conv-A")}

    def boom(edges):
        raise Interrupted

    monkeypatch.setattr(store, "add_edges", boom)
    with pytest.raises(Interrupted):
        load_conversation(store, a)
    monkeypatch.undo()
    assert {t.id for t in store.turns("conv-A")} == old_ids
    _check_a(store)
    _assert_consistent(store)


def test_interrupted_load_in_a_file_store_survives_reopen(
    tmp_path: Path, convs, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = convs
    path = tmp_path / "atomic.db"
    with Store.open(path) as store:
        load_conversation(store, a)
        monkeypatch.setattr(store, "add_edges", lambda edges: (_ for _ in ()).throw(Interrupted()))
        with pytest.raises(Interrupted):
            load_conversation(store, b)
    with Store.open(path) as store:
        _assert_absent(store, "conv-B")
        _check_a(store)
        _assert_consistent(store)
