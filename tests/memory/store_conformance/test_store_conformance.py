"""The backend conformance suite: every test runs on SQLite and on PostgreSQL (``backend``,
see ``conftest.py``) and asserts the same results: CRUD of conversations, turns and items,
exact-duplicate merging (also under concurrent writers), versions and history, the kinds
queries, edges and the graph walk, export rows, tenancy (no read crosses tenants) and
forgetting. PostgreSQL-only checks (row-level security, migrations, login errors) are in
``test_store_postgres.py``."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from memstrata.memory import FactItem
from memstrata.memory.models import (
    Conversation,
    Edge,
    EntityItem,
    EpisodicItem,
    ProceduralItem,
    ProspectiveItem,
    SemanticItem,
    Session,
    Turn,
)
from memstrata.memory.store import Cond, Sort

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def _conversation(store: Any, user: str = "u1", conv: str = "c1", n: int = 4) -> list[str]:
    store.add_conversation(Conversation(id=conv, user_id=user, title="Chat",
                                        speakers=["Ana", "Ben"], metadata={"b": 1, "a": [2]}))
    store.add_session(Session(id="s1", user_id=user, conversation_id=conv, index=0,
                              started_at=T0, metadata={"where": "home"}))
    store.add_session(Session(id="s2", user_id=user, conversation_id=conv, index=1))
    return store.add_turns([
        Turn(user_id=user, conversation_id=conv, session_id="s1", turn_id=f"s1:{i}", seq=i,
             speaker="Ana" if i % 2 == 0 else "Ben", text=f"turn {i} of {conv}",
             event_time=T0, metadata={"caption": "a cat"} if i == 1 else {})
        for i in range(n)])


def test_conversations_sessions_and_turns(backend: Any) -> None:
    ids = _conversation(backend)
    assert [t.id for t in backend.turns("u1")] == ids
    assert [t.seq for t in backend.turns("u1", conversation_id="c1", after_seq=1)] == [2, 3]
    assert [t.seq for t in backend.turns("u1", newest=True, limit=2)] == [3, 2]
    assert [t.seq for t in backend.turns("u1", limit=2, offset=1)] == [1, 2]
    assert [t.seq for t in backend.turns("u1", offset=3)] == [3]
    # By the conversation's own turn ids: only this tenant's, only this conversation's.
    other = _conversation(backend, conv="c2", n=2)
    _conversation(backend, user="u2", n=2)
    assert [t.id for t in backend.turns("u1", labels=["s1:1", "s1:3"])] == [
        ids[1], ids[3], other[1]]
    assert [t.id for t in backend.turns("u1", conversation_id="c2", labels=["s1:1"])] == [
        other[1]]
    assert backend.turns("u1", labels=["nope"]) == []
    assert backend.delete_conversation("u1", "c2") == 2
    one = backend.turn("u1", ids[1])
    assert one.text == "turn 1 of c1" and one.metadata == {"caption": "a cat"}
    assert one.event_time == T0
    assert backend.last_turn("u1", "c1").seq == 3
    conv = backend.conversation("u1", "c1")
    assert (conv.title, conv.speakers, conv.metadata) == ("Chat", ["Ana", "Ben"],
                                                          {"b": 1, "a": [2]})
    assert backend.conversation_ids("u1") == ["c1"]
    assert backend.session_ids("u1", "c1") == ["s1", "s2"]
    assert backend.speakers("u1") == ["Ana", "Ben"]
    assert backend.conversations_with("u1", ["Ben"]) == ["c1"]
    assert backend.conversations_with("u1", ["Zoe"]) == []
    # Upserting a conversation replaces its header and keeps its place.
    backend.add_conversation(Conversation(id="c0", user_id="u1"))
    backend.add_conversation(Conversation(id="c1", user_id="u1", title="Renamed"))
    assert [r["id"] for r in backend.conversation_rows("u1")] == ["c1", "c0"]
    assert backend.conversation("u1", "c1").title == "Renamed"

    new = backend.update_turn("u1", ids[2], "turn two, edited")
    assert new.text == "turn two, edited" and backend.turn("u1", ids[2]).text == new.text
    assert backend.update_turn("u1", ids[2], "turn two, edited") == new  # same text: no-op
    history = backend.history("u1", ids[2])
    assert [(v.version, v.event, v.text, v.valid_to is None) for v in history] == [
        (1, "ADD", "turn 2 of c1", False), (2, "UPDATE", "turn two, edited", True)]
    with pytest.raises(KeyError):
        backend.update_turn("u2", ids[2], "not yours")

    assert backend.delete_turn("u1", ids[0]) is True
    assert backend.delete_turn("u1", ids[0]) is False
    assert backend.delete_conversation("u1", "c1") == 3
    assert backend.turns("u1") == [] and backend.session_ids("u1", "c1") == []
    assert backend.history("u1", ids[2]) == []


def test_items_crud_and_exact_duplicates(backend: Any) -> None:
    a = backend.add(FactItem(user_id="u1", text="Ana moved from Sweden", tags=["move"],
                             evidence=["t1"], confidence=0.5, source="chat"))
    same = backend.add(FactItem(user_id="u1", text="  ana MOVED from sweden ", tags=["x"],
                                evidence=["t2"], confidence=0.9))
    assert same == a
    merged = backend.get("u1", a)
    assert (merged.tags, merged.evidence, merged.confidence) == (["move", "x"], ["t1", "t2"],
                                                                 0.9)
    assert backend.duplicate_of(FactItem(user_id="u1", text="ANA moved from Sweden")) == a
    assert backend.duplicate_of(FactItem(user_id="u2", text="Ana moved from Sweden")) is None
    b, c = backend.add_many([FactItem(user_id="u1", text="Ben likes tea", source="chat"),
                             SemanticItem(user_id="u1", text="Tea is a drink", concept="tea")])
    assert [i.id for i in backend.get_many("u1", [c, "i_missing", a])] == [c, a]
    assert [i.id for i in backend.items("u1")] == [c, b, a]
    assert [i.id for i in backend.items("u1", kind="fact", limit=1, offset=1)] == [a]
    assert backend.source_ids("u1", "fact", "chat") == [b, a]
    assert backend.source_ids("u1", "fact", "chat", skip=1) == [a]
    assert [i.id for i in backend.source_items("u1", "fact", "chat")] == [a, b]
    assert backend.last_source_text("u1", "fact", "chat") == "Ben likes tea"
    assert backend.last_source_text("u1", "fact", "nowhere") is None

    with pytest.raises(ValueError, match="duplicate"):
        backend.update("u1", b, text="Ana moved from Sweden")
    with pytest.raises(KeyError):
        backend.update("u2", b, text="not yours")
    with pytest.raises(ValueError):
        backend.update("u1", b, kind="semantic")
    updated = backend.update("u1", b, text="Ben likes green tea", valid_to=T0)
    assert backend.get("u1", b) == updated
    assert backend.current_ids("u1", "none", ["fact"]) == []
    assert backend.delete("u1", b) is True and backend.get("u1", b) is None
    assert backend.delete("u1", b) is False
    assert backend.history("u1", b) == []


def test_entities_and_current_ids(backend: Any) -> None:
    backend.add_many([
        EntityItem(user_id="u1", text="Ana", name="Ana", conversation_id="c1"),
        EntityItem(user_id="u1", text="Rex", name="Rex", entity_type="pet"),
        EntityItem(user_id="u1", text="Ben", name="Ben", conversation_id="c1", valid_to=T0),
    ])
    assert backend.entity_names("u1", "person") == ["Ana", "Ben"]
    assert backend.entity_names("u1", "pet") == ["Rex"]
    assert [backend.get("u1", i).text for i in backend.current_ids("u1", "c1", ["entity"])
            ] == ["Ana"]


def test_versions_history_and_export_rows(backend: Any) -> None:
    _conversation(backend, n=2)
    item = backend.add(FactItem(user_id="u1", text="v1"))
    backend.update("u1", item, text="v2")
    backend.update("u1", item, confidence=0.5)  # not a new version: content unchanged
    backend.update("u1", item, text="v3")
    history = backend.history("u1", item)
    assert [(v.version, v.event, v.text) for v in history] == [
        (1, "ADD", "v1"), (2, "UPDATE", "v2"), (3, "UPDATE", "v3")]
    assert history[0].valid_to is not None and history[1].valid_to is not None
    assert history[2].valid_to is None
    # The confidence change made no version: v2's snapshot holds it, v1's does not.
    assert history[0].node["confidence"] == 1.0 and history[1].node["confidence"] == 0.5
    rows = backend.version_rows("u1")
    assert [(r["node_id"], r["version"], r["event"]) for r in rows] == [
        (item, 1, "ADD"), (item, 2, "UPDATE")]
    assert rows[0]["snapshot"]["text"] == "v1"
    sessions = backend.session_rows("u1")
    assert [(s["id"], s["index"], s["started_at"]) for s in sessions] == [
        ("s1", 0, "2023-05-08T13:56:00+00:00"), ("s2", 1, None)]
    assert sessions[0]["metadata"] == {"where": "home"}
    assert backend.item_ids("u1") == [item]
    # Restoring into another tenant (an import): the rows come back as they were.
    copy = [{**r, "node_id": r["node_id"] + "_copy"} for r in rows]
    assert backend.restore_versions("u2", copy) == 2
    assert [(r["node_id"], r["version"], r["snapshot"], r["recorded_at"], r["valid_to"])
            for r in backend.version_rows("u2")] == [
        (r["node_id"], r["version"], r["snapshot"], r["recorded_at"], r["valid_to"])
        for r in copy]


def test_kinds_queries(backend: Any) -> None:
    e = [backend.add(EpisodicItem(user_id="u1", text=f"episode {i}", temporal_index=i,
                                  compressed=i == 1)) for i in (2, 0, 1)]
    assert [i.text for i in backend.kind_items("u1", "episodic", order=[Sort("temporal_index")])
            ] == ["episode 0", "episode 1", "episode 2"]
    assert [i.text for i in backend.kind_items(
        "u1", "episodic", where=[Cond("compressed", "=", False, missing=False)],
        order=[Sort("temporal_index", desc=True)])] == ["episode 2", "episode 0"]
    assert [i.text for i in backend.kind_items(
        "u1", "episodic", where=[Cond("compressed", "=", True)])] == ["episode 1"]
    assert [i.text for i in backend.kind_items(
        "u1", "episodic", where=[Cond("temporal_index", ">=", 1)], limit=1)] == ["episode 2"]
    assert backend.kind_max("u1", "episodic", "temporal_index") == 2
    assert backend.kind_max("u1", "episodic", "recorded_at") == max(
        backend.get("u1", i).recorded_at.isoformat() for i in e)
    assert backend.kind_max("u1", "sensory", "temporal_index") is None
    assert backend.kind_max("u2", "episodic", "temporal_index") is None

    backend.add_many([
        ProspectiveItem(user_id="u1", text="call mum", priority=1, trigger_keywords=["mum"]),
        ProspectiveItem(user_id="u1", text="buy milk", priority=3, status="resolved"),
        ProspectiveItem(user_id="u1", text="pay rent", priority=3),
        ProspectiveItem(user_id="u1", text="old plan", priority=9, valid_to=T0),
    ])
    order = [Sort("priority", desc=True), Sort("recorded_at")]
    assert [i.text for i in backend.kind_items(
        "u1", "prospective", where=[Cond("valid_to", "is null"), Cond("status", "=", "pending")],
        order=order)] == ["pay rent", "call mum"]
    values = backend.kind_values("u1", "prospective", ["priority", "trigger_keywords", "nope"],
                                 where=[Cond("valid_to", "is not null")])
    assert [v[1:] for v in values] == [(9, [], None)]

    backend.add_many([SemanticItem(user_id="u1", text="Oslo is cold", concept="Oslo"),
                      SemanticItem(user_id="u1", text="Bergen is wet", concept="bergen")])
    assert [i.text for i in backend.kind_items(
        "u1", "semantic", where=[Cond("concept", "=", "OSLO", nocase=True)])] == ["Oslo is cold"]
    assert backend.kind_items("u1", "semantic", where=[Cond("concept", "=", "OSLO")]) == []
    assert [i.text for i in backend.kind_items("u1", "semantic", where=[
        Cond("concept", ">", "a")])] == ["Bergen is wet"]  # bytewise: "O" < "a" < "b"

    p = [backend.add(ProceduralItem(user_id="u1", text=f"how {i}", usage_count=n))
         for i, n in enumerate((1, 5, 5))]
    assert [i.id for i in backend.kind_items("u1", "procedural", order=[
        Sort("usage_count", desc=True)])] == [p[2], p[1], p[0]]  # ties: newest first
    backend.add_edges([Edge(user_id="u1", src="t_a", dst=p[0], relation="learned_from"),
                       Edge(user_id="u1", src="t_b", dst=p[0], relation="learned_from")])
    assert backend.kind_sources("u1", "procedural", [p[0], p[1], "i_none"], "learned_from") == {
        p[0]: "t_b", p[1]: None}
    assert backend.kind_sources("u1", "procedural", [p[0]], "learned_from", where=[
        Cond("usage_count", ">", 1)]) == {}
    with pytest.raises(ValueError):
        backend.kind_items("u1", "episodic", where=[Cond("x; DROP TABLE items", "=", 1)])
    with pytest.raises(ValueError):
        backend.kind_items("u1", "episodic", where=[Cond("x", "LIKE", 1)])  # type: ignore[arg-type]


def test_edges_and_neighbors(backend: Any) -> None:
    backend.add_edges([
        Edge(user_id="u1", src="a", dst="b", relation="r", weight=0.5),
        Edge(user_id="u1", src="b", dst="c", relation="r", weight=0.8),
        Edge(user_id="u1", src="d", dst="a", relation="s", weight=0.9, metadata={"k": "v"}),
        Edge(user_id="u2", src="a", dst="z", relation="r"),
    ])
    assert backend.add_edges([Edge(user_id="u1", src="a", dst="b", relation="r", weight=0.7),
                              Edge(user_id="u1", src="b", dst="c", relation="r", weight=0.1)]
                             ) == 2
    edges = backend.edges("u1")
    assert [(e.src, e.dst, e.weight) for e in edges] == [("a", "b", 0.7), ("b", "c", 0.8),
                                                         ("d", "a", 0.9)]
    assert backend.edges("u1", dst="a")[0].metadata == {"k": "v"}
    assert [e.dst for e in backend.edges("u1", src="a", relation="r")] == ["b"]
    assert backend.neighbors("u1", ["a"]) == {"d": (1, 0.9, "a"), "b": (1, 0.7, "a")}
    two = backend.neighbors("u1", ["a"], hops=2)
    assert two["c"] == (2, pytest.approx(0.56), "a") and set(two) == {"b", "c", "d"}
    assert backend.neighbors("u1", ["a"], hops=2, relations=["s"]) == {"d": (1, 0.9, "a")}
    assert backend.neighbors("u1", []) == {}
    assert "z" not in backend.neighbors("u1", ["a"], hops=2)
    assert backend.neighbors("u2", ["a"]) == {"z": (1, 1.0, "a")}
    with pytest.raises(ValueError):
        backend.neighbors("u1", ["a"], hops=3)


def test_embeddings_follow_writes(backend: Any, embedder: Any) -> None:
    backend.embedder = embedder
    _conversation(backend, n=2)
    item = backend.add(FactItem(user_id="u1", text="Ana likes tea"))
    ids, matrix = backend.vectors("u1", embedder.name)
    assert len(ids) == 3 and matrix.shape == (3, embedder.dim)
    assert np.allclose(matrix[ids.index(item)], embedder.encode(["Ana likes tea"])[0])
    backend.update("u1", item, text="Ana likes coffee")
    ids, matrix = backend.vectors("u1", embedder.name)
    assert np.allclose(matrix[ids.index(item)], embedder.encode(["Ana likes coffee"])[0])
    backend.delete("u1", item)
    assert item not in backend.vectors("u1", embedder.name)[0]
    assert backend.vectors("u2", embedder.name)[0] == []


def test_no_read_crosses_tenants(backend: Any) -> None:
    turns = _conversation(backend, user="u1")
    item = backend.add(FactItem(user_id="u1", text="secret of u1", speaker="Ana"))
    backend.add(FactItem(user_id="u2", text="secret of u1", speaker="Ana"))  # same content
    backend.add_edges([Edge(user_id="u1", src=item, dst=turns[0], relation="r")])
    assert backend.owner(item) == "u1" and backend.owner(turns[0]) == "u1"
    assert backend.owner("i_nobody") is None
    for other in ("u2", "u3"):
        assert backend.get(other, item) is None and backend.get_many(other, [item]) == []
        assert backend.turn(other, turns[0]) is None
        assert backend.turns(other, conversation_id="c1") == []
        assert backend.conversation(other, "c1") is None
        assert backend.conversation_ids(other) == [] and backend.session_ids(other, "c1") == []
        assert backend.edges(other) == [] and backend.neighbors(other, [item]) == {}
        assert backend.history(other, item) == [] and backend.history(other, turns[0]) == []
        assert backend.kind_items(other, "fact", where=[Cond("text", "=", "secret of u1")]
                                  ) == ([] if other == "u3" else backend.kind_items("u2", "fact"))
        assert backend.conversation_rows(other) == [] and backend.session_rows(other) == []
        assert backend.version_rows(other) == []
        assert backend.delete(other, item) is False
        assert backend.delete_turn(other, turns[0]) is False
        with pytest.raises(KeyError):
            backend.update(other, item, text="stolen")
    assert backend.speakers("u2") == ["Ana"] and backend.item_ids("u3") == []
    assert backend.counts("u1") == {"conversations": 1, "sessions": 2, "turns": 4, "items": 1,
                                    "edges": 1, "embeddings": 0}
    assert backend.counts("u2")["items"] == 1 and backend.counts()["items"] == 2
    assert backend.get("u1", item).text == "secret of u1"  # nothing above changed it


def test_forget_user(backend: Any) -> None:
    turns = _conversation(backend, user="u1")
    item = backend.add(FactItem(user_id="u1", text="to forget"))
    backend.update("u1", item, text="to forget, v2")
    backend.add_edges([Edge(user_id="u1", src=item, dst=turns[0], relation="r")])
    _conversation(backend, user="u2")
    kept = backend.add(FactItem(user_id="u2", text="to keep"))
    before = backend.counts("u2")
    deleted = backend.forget_user("u1")
    assert {k: v for k, v in deleted.items() if k in (
        "conversations", "sessions", "turns", "items", "edges", "versions")} == {
        "conversations": 1, "sessions": 2, "turns": 4, "items": 1, "edges": 1, "versions": 1}
    assert set(backend.counts("u1").values()) == {0}
    assert backend.owner(item) is None and backend.history("u1", item) == []
    assert backend.counts("u2") == before and backend.get("u2", kept).text == "to keep"
    assert backend.forget_user("u1") == {}


def test_forget_user_leaves_another_programs_table_alone(
        backend: Any, backend_name: str, request: pytest.FixtureRequest) -> None:
    # The file or database also holds a table of the application's, with its own user_id.
    if backend_name == "sqlite":
        def sql(statement: str) -> list[Any]:
            return backend.conn.execute(statement).fetchall()
    else:
        import psycopg

        def sql(statement: str) -> list[Any]:
            with psycopg.connect(request.getfixturevalue("pg_url"), autocommit=True) as conn:
                cursor = conn.execute(statement)
                return cursor.fetchall() if cursor.description else []
    sql("CREATE TABLE app_profiles (user_id TEXT, email TEXT)")
    sql("INSERT INTO app_profiles VALUES ('u1', 'u1@example.com')")
    if backend_name == "postgres":  # a deployment whose app role may write every table
        sql(f"GRANT ALL ON app_profiles TO {backend.DEFAULT_ROLE}")
    _conversation(backend, user="u1")
    deleted = backend.forget_user("u1")
    assert deleted["turns"] == 4 and "app_profiles" not in deleted
    assert set(backend.counts("u1").values()) == {0}
    assert sql("SELECT user_id, email FROM app_profiles") == [("u1", "u1@example.com")]


def test_transactions_roll_back_together(backend: Any) -> None:
    with pytest.raises(RuntimeError), backend.transaction():
        backend.add(FactItem(user_id="u1", text="never stored"))
        with backend.transaction():
            backend.add(FactItem(user_id="u1", text="nested, never stored"))
        raise RuntimeError("boom")
    assert backend.items("u1") == []
    with backend.transaction():
        backend.add(FactItem(user_id="u1", text="kept"))
        with pytest.raises(RuntimeError), backend.transaction():
            backend.add(FactItem(user_id="u1", text="inner, rolled back"))
            raise RuntimeError("inner")
        backend.add(FactItem(user_id="u2", text="another tenant in the same transaction"))
    assert [i.text for i in backend.items("u1")] == ["kept"]
    assert len(backend.items("u2")) == 1


def _in_threads(n: int, work: Any) -> list[Any]:
    """Run ``work(i)`` in ``n`` threads released together; their results (errors raised)."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    return results


def test_duplicate_merge_under_concurrent_writers(backend: Any) -> None:
    ids = _in_threads(8, lambda i: backend.add(FactItem(
        user_id="u1", text="Ana moved from Sweden", tags=[f"t{i}"], evidence=[f"e{i}"])))
    assert len(set(ids)) == 1
    item = backend.get("u1", ids[0])
    assert sorted(item.tags) == [f"t{i}" for i in range(8)]
    assert sorted(item.evidence) == [f"e{i}" for i in range(8)]
    assert backend.counts("u1")["items"] == 1


def test_numbering_and_versions_under_concurrent_writers(backend: Any) -> None:
    def number(i: int) -> int:
        with backend.transaction():  # kind_max then add: one step for other writers
            top = backend.kind_max("u1", "episodic", "temporal_index")
            n = 0 if top is None else top + 1
            backend.add(EpisodicItem(user_id="u1", text=f"episode by {i}", temporal_index=n))
            return n

    assert sorted(_in_threads(6, number)) == list(range(6))
    item = backend.add(FactItem(user_id="u1", text="v0"))
    _in_threads(6, lambda i: backend.update("u1", item, text=f"v{i + 1}"))
    assert [v.version for v in backend.history("u1", item)] == list(range(1, 8))
