"""The store's item-of-one-kind queries (``store/kinds.py``) and a tenant's export rows
(``store/tenants.py``): what the cognitive lifecycles and ``formats/dump.py`` use."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memstrata.memory import Store
from memstrata.memory.models import (
    Conversation,
    Edge,
    EpisodicItem,
    ProspectiveItem,
    SemanticItem,
    Session,
)
from memstrata.memory.store import Cond, Sort


@pytest.fixture
def store() -> Store:
    return Store.open(":memory:", embedder=None)


def _episode(store: Store, user: str, n: int, *, compressed: bool = False) -> str:
    return store.add(EpisodicItem(user_id=user, text=f"episode {n}", temporal_index=n,
                                  compressed=compressed))


def test_kind_items_filter_sort_limit_and_tenant(store: Store) -> None:
    ids = {n: _episode(store, "u1", n, compressed=n == 2) for n in (3, 1, 2)}
    _episode(store, "u2", 9)
    order = [Sort("temporal_index")]
    got = store.kind_items("u1", "episodic", order=order)
    assert [i.id for i in got] == [ids[1], ids[2], ids[3]]
    fresh = store.kind_items("u1", "episodic", order=order,
                             where=[Cond("compressed", "=", False, missing=False)])
    assert [i.id for i in fresh] == [ids[1], ids[3]]
    newest = store.kind_items("u1", "episodic", order=[Sort("temporal_index", desc=True)],
                              limit=2)
    assert [i.id for i in newest] == [ids[3], ids[2]]
    assert len(store.kind_items("u1", "episodic", limit=-1)) == 3  # negative: all
    later = store.kind_items("u1", "episodic", where=[Cond("temporal_index", ">=", 2)])
    assert [i.id for i in later] == [ids[3], ids[2]]  # no sort key: insertion order
    assert store.kind_items("u1", "semantic") == []


def test_kind_items_nocase_and_is_null(store: Store) -> None:
    a = store.add(SemanticItem(user_id="u1", text="Ana lives in Oslo", concept="Home"))
    b = store.add(SemanticItem(user_id="u1", text="Ana lives in Rome", concept="home"))
    store.update("u1", a, valid_to=datetime(2024, 1, 1, tzinfo=UTC))
    assert {i.id for i in store.kind_items(
        "u1", "semantic", where=[Cond("concept", "=", "HOME", nocase=True)])} == {a, b}
    assert store.kind_items("u1", "semantic", where=[Cond("concept", "=", "HOME")]) == []
    current = store.kind_items("u1", "semantic", where=[Cond("valid_to", "is null")])
    assert [i.id for i in current] == [b]
    closed = store.kind_items("u1", "semantic", where=[Cond("valid_to", "is not null")])
    assert [i.id for i in closed] == [a]


def test_kind_max_values_and_sources(store: Store) -> None:
    assert store.kind_max("u1", "episodic", "temporal_index") is None
    e1, e2 = _episode(store, "u1", 4, compressed=True), _episode(store, "u1", 7)
    _episode(store, "u2", 99)
    assert store.kind_max("u1", "episodic", "temporal_index") == 7
    at = datetime(2030, 5, 1, tzinfo=UTC)
    p = store.add(ProspectiveItem(user_id="u1", text="call Ana", trigger_keywords=["Ana"],
                                  trigger_at=at, action="call", status="pending"))
    rows = store.kind_values("u1", "prospective", ["trigger_keywords", "trigger_at"],
                             where=[Cond("status", "=", "pending")])
    assert len(rows) == 1 and rows[0][0] == p and rows[0][1] == ["Ana"]
    assert datetime.fromisoformat(rows[0][2]) == at
    store.add_edges([Edge(user_id="u1", src="i_summary", dst=e1, relation="consolidates")])
    flagged = [Cond("compressed", "=", True)]
    assert store.kind_sources("u1", "episodic", [e1, e2], "consolidates",
                              where=flagged) == {e1: "i_summary"}
    assert store.kind_sources("u1", "episodic", [e2], "consolidates") == {e2: None}
    assert store.kind_sources("u2", "episodic", [e1], "consolidates") == {}


def test_field_names_and_comparisons_are_checked(store: Store) -> None:
    with pytest.raises(ValueError, match="field name"):
        store.kind_items("u1", "episodic", where=[Cond("x'); DROP TABLE items; --")])
    with pytest.raises(ValueError, match="comparison"):
        store.kind_items("u1", "episodic", where=[Cond("status", "LIKE", "%")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind-specific"):
        store.kind_values("u1", "episodic", ["recorded_at"])


def test_tenant_rows_and_restored_versions(store: Store) -> None:
    store.add_conversation(Conversation(id="c2", user_id="u1", speakers=["Ana"],
                                        recorded_at="2024-03-01T10:00:00Z"))  # kept
    store.add_conversation(Conversation(id="c1", user_id="u1", title="t"))
    store.add_conversation(Conversation(id="c9", user_id="u2"))
    store.add_session(Session(id="s2", user_id="u1", conversation_id="c1", index=2))
    store.add_session(Session(id="s1", user_id="u1", conversation_id="c1", index=1))
    assert [c["id"] for c in store.conversation_rows("u1")] == ["c2", "c1"]
    assert store.conversation_rows("u1")[0] == {"id": "c2", "agent_id": None, "title": "",
                                                "speakers": ["Ana"], "metadata": {},
                                                "recorded_at": "2024-03-01T10:00:00+00:00"}
    assert [(s["id"], s["index"]) for s in store.session_rows("u1")] == [("s1", 1), ("s2", 2)]
    a, b = _episode(store, "u1", 2), _episode(store, "u1", 1)
    assert store.item_ids("u1") == [a, b]
    store.update("u1", a, text="episode two")
    kept = store.version_rows("u1")
    assert [(v["node_id"], v["version"], v["snapshot"]["text"]) for v in kept] == [
        (a, 1, "episode 2")]
    other = Store.open(":memory:", embedder=None)
    assert other.restore_versions("u3", kept) == 1
    assert other.version_rows("u3") == kept and other.version_rows("u1") == []
    store.blobs.put("u1", "k2", "two")
    store.blobs.put("u1", "k1", "one", {"m": 1})
    assert [{k: b[k] for k in ("key", "text", "metadata")} for b in store.blobs.export("u1")
            ] == [{"key": "k1", "text": "one", "metadata": {"m": 1}},
                  {"key": "k2", "text": "two", "metadata": {}}]
