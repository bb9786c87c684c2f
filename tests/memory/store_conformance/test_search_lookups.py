"""The search-side lookups of ``SearchStore`` apart from the lexical channel, on both
backends (``backend``/``two``, see ``conftest.py``): refs, ids, facets and summary rows;
search filters; the tag channel; a tenant's vectors and their cache; read snapshots and
the data version. Another process is a second store object on the same file or database.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstrata.memory import FactItem, Store
from memstrata.memory.models import Conversation, EpisodicItem, Session, Turn
from memstrata.memory.store import Filters

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def two(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two store objects of each backend on one file or database: two processes."""
    if request.param == "sqlite":
        stores: tuple[Any, Any] = (Store.open(tmp_path / "memory.db", embedder=None),
                                   Store.open(tmp_path / "memory.db", embedder=None))
    else:
        from memstrata.memory.store.pg import PgStore

        url = request.getfixturevalue("pg_url")
        stores = (PgStore.open(url, embedder=None), PgStore.open(url, embedder=None))
    yield stores
    for store in stores:
        store.close()


def _turns(store: Any, user: str = "u1", conv: str = "c1", n: int = 3,
           start: datetime = T0) -> list[str]:
    store.add_conversation(Conversation(id=conv, user_id=user))
    store.add_session(Session(id="s1", user_id=user, conversation_id=conv, index=0))
    return store.add_turns([
        Turn(user_id=user, conversation_id=conv, session_id="s1", turn_id=f"s1:{i}", seq=i,
             speaker="Ana" if i % 2 == 0 else "Ben", text=f"turn {i} of {conv}",
             event_time=start + timedelta(days=i), metadata={"caption": "a cat"} if i else {})
        for i in range(n)])


def test_refs_ids_facets_and_nodes_round_trip(backend: Any) -> None:
    turns = _turns(backend)
    item = backend.add(FactItem(user_id="u1", text="Ana likes tea", speaker="Ana",
                                conversation_id="c1", event_time=T0))
    refs = backend.refs("u1", [*turns, item, "t_missing", "i_missing"])
    assert set(refs) == {*turns, item}
    assert [refs[t][0] for t in turns] == ["turn"] * 3 and refs[item][0] == "item"
    assert all(isinstance(r[1], int) for r in refs.values())
    back = backend.ids("u1", [*refs.values(), ("turn", 10**9), ("item", 10**9)])
    assert back == {r: n for n, r in refs.items()}
    ranked = [(refs[item], 2.0), (("turn", 10**9), 1.5), (refs[turns[1]], 1.0)]
    assert backend.with_ids("u1", ranked) == [(item, 2.0), (turns[1], 1.0)]

    facets = backend.facets("u1", [refs[turns[1]], refs[item]])
    assert tuple(facets[refs[turns[1]]]) == ("Ben", (T0 + timedelta(days=1)).isoformat(),
                                             "c1", "s1")
    assert tuple(facets[refs[item]]) == ("Ana", T0.isoformat(), "c1", None)

    rows = backend.nodes("u1", [turns[1], item, "t_missing"])
    assert set(rows) == {turns[1], item}
    turn = rows[turns[1]]
    assert (turn["kind"], turn["speaker"], turn["session_id"], turn["turn_id"]) == (
        "turn", "Ben", "s1", "s1:1")
    assert turn["text"] == "turn 1 of c1" and turn["metadata"] is not None
    assert json.loads(turn["metadata"]) == {"caption": "a cat"}
    assert (rows[item]["kind"], rows[item]["text"], json.loads(rows[item]["metadata"])) == (
        "fact", "Ana likes tea", {})
    assert rows[item]["event_time"] == T0.isoformat()
    bare = backend.nodes("u1", [turns[1], item], text=False)
    assert all(r["text"] is None and r["metadata"] is None for r in bare.values())
    assert bare[item]["speaker"] == "Ana"
    assert backend.refs("u1", []) == {} and backend.ids("u1", []) == {}
    assert backend.nodes("u1", []) == {} and backend.facets("u1", []) == {}


def test_another_tenants_rows_are_left_out(backend: Any) -> None:
    turns = _turns(backend, user="u1")
    item = backend.add(FactItem(user_id="u1", text="secret", tags=["x"]))
    refs = backend.refs("u1", [*turns, item])
    backend.add(FactItem(user_id="u2", text="other", tags=["y"]))
    assert backend.refs("u2", [*turns, item]) == {}
    assert backend.ids("u2", list(refs.values())) == {}
    assert backend.with_ids("u2", [(r, 1.0) for r in refs.values()]) == []
    assert backend.facets("u2", list(refs.values())) == {}
    assert backend.nodes("u2", [*turns, item]) == {}
    everything = Filters(kinds=["turn", "fact"])
    assert not backend.allowed_ids("u2", everything) & {*turns, item}
    assert not backend.allowed_refs("u2", everything) & set(refs.values())
    assert backend.tag_vocabulary("u2") == ["y"] and backend.tagged("u2", ["x"], 10) == []
    with backend.reading():  # the memo of rows read is per tenant too
        assert backend.ids("u1", list(refs.values()))
        assert backend.ids("u2", list(refs.values())) == {}


def test_filters(backend: Any) -> None:
    turns = _turns(backend)  # days 0, 1, 2; Ana, Ben, Ana
    _turns(backend, conv="c2", n=1)
    fact = backend.add(FactItem(user_id="u1", text="fact", speaker="Ben",
                                conversation_id="c1", event_time=T0 + timedelta(days=1)))
    old = backend.add(FactItem(user_id="u1", text="retired fact", valid_to=T0,
                               conversation_id="c1"))
    episode = backend.add(EpisodicItem(user_id="u1", text="an episode", valid_to=T0,
                                       conversation_id="c1"))
    c2 = backend.allowed_ids("u1", Filters(conversation_id="c2"))
    assert len(c2) == 1 and not c2 & {*turns, fact}

    def allowed(**kw: Any) -> set[str]:
        ids = backend.allowed_ids("u1", Filters(**kw))
        refs = backend.allowed_refs("u1", Filters(**kw))
        assert set(backend.ids("u1", list(refs)).values()) == ids and len(refs) == len(ids)
        return ids - c2

    assert allowed() == {*turns, fact, old, episode}
    assert allowed(kinds=["turn"]) == set(turns)
    assert allowed(kinds=["fact"]) == {fact, old}
    assert allowed(kinds=["fact", "turn"]) == {*turns, fact, old}
    assert allowed(speaker="Ben") == {turns[1], fact}
    assert allowed(conversation_id="c1") == {*turns, fact, old, episode}
    assert allowed(start=T0 + timedelta(days=1)) == {turns[1], turns[2], fact}
    assert allowed(end=T0 + timedelta(hours=1)) == {turns[0]}
    assert allowed(start=T0 + timedelta(hours=1), end=T0 + timedelta(days=1)) == {
        turns[1], fact}
    assert allowed(current=["fact"]) == {*turns, fact, episode}
    assert allowed(kinds=["fact", "episodic"], current=["fact", "episodic"]) == {fact}
    assert allowed(kinds=["fact"], speaker="Nobody") == set()


def test_tag_channel(backend: Any) -> None:
    a = backend.add(FactItem(user_id="u1", text="a", tags=["Hiking", "books"]))
    b = backend.add(FactItem(user_id="u1", text="b", tags=["hiking"]))
    c = backend.add(FactItem(user_id="u1", text="c", tags=["BOOKS", "Hiking", "tea"]))
    d = backend.add(FactItem(user_id="u1", text="d", tags=["tea"]))
    refs = backend.refs("u1", [a, b, c, d])
    assert backend.tag_vocabulary("u1") == ["books", "hiking", "tea"]

    def tagged(tags: list[str], limit: int) -> list[str]:
        found = backend.tagged("u1", tags, limit)
        assert all(r[0] == "item" for r in found)
        ids = backend.ids("u1", found)
        return [ids[r] for r in found]

    # Most tags matched first, then newest.
    assert tagged(["books", "hiking", "tea"], 10) == [c, a, d, b]
    assert tagged(["hiking"], 10) == [c, b, a]
    assert tagged(["books"], 10) == [c, a]
    # Only each tag's newest `limit` items are considered, then the best `limit` kept.
    assert tagged(["hiking"], 2) == [c, b]
    assert tagged(["books", "tea"], 1) == [d]
    assert tagged(["Hiking"], 10) == []  # tags are looked up as the vocabulary folds them
    assert tagged(["nothing"], 10) == [] and tagged([], 10) == []
    assert refs[c] in backend.tagged("u1", ["tea"], 10)
    # A new tag is found at once, an updated item is found by its new tags only.
    backend.update("u1", d, tags=["Coffee"])
    assert backend.tag_vocabulary("u1") == ["books", "coffee", "hiking", "tea"]
    assert tagged(["coffee"], 10) == [d] and tagged(["tea"], 10) == [c]
    backend.delete("u1", c)
    assert backend.tag_vocabulary("u1") == ["books", "coffee", "hiking"]
    with backend.transaction():  # inside a transaction: its own writes are seen
        backend.add(FactItem(user_id="u1", text="e", tags=["Zen"]))
        assert "zen" in backend.tag_vocabulary("u1")
    assert "zen" in backend.tag_vocabulary("u1")


def test_speakers_follow_writes(two: tuple[Any, Any]) -> None:
    mine, other = two
    _turns(mine)
    assert mine.speakers("u1") == ["Ana", "Ben"]
    assert mine.speakers("u1") == ["Ana", "Ben"]  # from the cache: nothing else read since
    other.add(FactItem(user_id="u1", text="about Cleo", about="Cleo"))
    assert mine.speakers("u1") == ["Ana", "Ben", "Cleo"]


def test_speakers_are_the_tenants_distinct_names_only(backend: Any) -> None:
    # Names of another tenant sort between and around this tenant's: the index walk from
    # one name to the next must not step onto them.
    _turns(backend, n=5)
    _turns(backend, user="u2", conv="c2")
    for user, name in (("u2", "Aaron"), ("u2", "Bea"), ("u2", "Zed")):
        backend.add(FactItem(user_id=user, text=f"by {name}", speaker=name))
    kept = backend.add(FactItem(user_id="u1", text="Cleo's fact", speaker="Cleo"))
    about = backend.add(FactItem(user_id="u1", text="about Dev", about="Dev"))
    backend.add(FactItem(user_id="u1", text="nobody's"))
    assert backend.speakers("u1") == ["Ana", "Ben", "Cleo", "Dev"]
    assert backend.speakers("u2") == ["Aaron", "Ana", "Bea", "Ben", "Zed"]
    assert backend.speakers("nobody") == []
    backend.delete("u1", kept)
    backend.delete("u1", about)
    assert backend.speakers("u1") == ["Ana", "Ben"]


def test_vectors_cache_follows_writes_of_this_and_other_processes(two: tuple[Any, Any]
                                                                  ) -> None:
    mine, other = two
    turns = _turns(mine, n=2)
    # Compared by value: a commit anywhere on a PostgreSQL server moves the snapshot, so
    # two reads may be two arrays (and == of two arrays is no truth value).
    ids, matrix = mine.vectors("u1", "m")
    assert ids == [] and matrix.shape == (0, 0)
    mine.set_embeddings("u1", turns, np.eye(2, 3, dtype=np.float32), "m")
    ids, matrix = mine.vectors("u1", "m")  # this process's write: seen at once
    assert sorted(ids) == sorted(turns) and matrix.shape == (2, 3)
    assert np.allclose(matrix[ids.index(turns[1])], [0, 1, 0])
    assert mine.vectors("u1", "m")[1] is matrix  # no write since: served from the cache
    refs, speakers = mine.vector_refs("u1", "m"), mine.vector_speakers("u1", "m")
    assert refs == [mine.refs("u1", [i])[i] for i in ids]
    assert list(speakers) == [mine.nodes("u1", [i])[i]["speaker"] for i in ids]

    # Another process writes: a vector replaced, a turn and its vector added. (Read the
    # vectors once more first: this process then reads nothing until it looks again.)
    assert mine.vectors("u1", "m")[1] is mine.vectors("u1", "m")[1]
    more = _turns(other, conv="c2", n=1)
    other.set_embeddings("u1", [turns[1], *more], np.array([[0, 0, 1], [1, 1, 0]],
                                                           dtype=np.float32), "m")
    ids, matrix = mine.vectors("u1", "m")
    assert sorted(ids) == sorted([*turns, *more])
    assert np.allclose(matrix[ids.index(turns[1])], [0, 0, 1])
    assert np.allclose(matrix[ids.index(more[0])], [1, 1, 0])
    # The refs and speakers follow the same vectors, row for row.
    assert mine.vector_refs("u1", "m") == [mine.refs("u1", [i])[i] for i in ids]
    assert list(mine.vector_speakers("u1", "m")) == [
        mine.nodes("u1", [i])[i]["speaker"] for i in ids]
    # Another process deletes a turn: its vector goes, from this process's view too.
    assert mine.vectors("u1", "m")[0] is mine.vectors("u1", "m")[0]
    other.delete_turn("u1", turns[0])
    assert turns[0] not in mine.vectors("u1", "m")[0]
    assert mine.vectors("u2", "m")[0] == [] and mine.vectors("u1", "other")[0] == []


def test_reading_reads_one_snapshot(two: tuple[Any, Any]) -> None:
    mine, other = two
    turns = _turns(mine, n=2)
    before = mine.data_version()
    assert mine.data_version() == before  # nothing written: steady
    with mine.reading():
        pinned = mine.data_version()
        refs = mine.refs("u1", turns)
        assert mine.facets("u1", list(refs.values()))[refs[turns[0]]].speaker == "Ana"
        new = _turns(other, conv="c2", n=1)
        other.add(FactItem(user_id="u1", text="later", tags=["late"]))
        # Another process's commits are not seen inside: one snapshot, one version.
        assert mine.data_version() == pinned
        assert mine.refs("u1", new) == {}
        assert mine.allowed_ids("u1", Filters()) == set(turns)
        assert mine.tag_vocabulary("u1") == []
        assert mine.ids("u1", list(refs.values())) == {r: n for n, r in refs.items()}
    assert mine.data_version() != pinned
    assert set(mine.refs("u1", new)) == set(new)
    assert mine.tag_vocabulary("u1") == ["late"]
    with mine.reading(), mine.reading():  # nested: the outer one holds
        assert len(mine.allowed_ids("u1", Filters())) == 4


def test_rows_read_by_a_search_are_not_served_after_a_write(two: tuple[Any, Any]) -> None:
    mine, other = two
    _turns(mine, n=1)
    item = mine.add(FactItem(user_id="u1", text="fact", speaker="Ana"))
    ref = mine.refs("u1", [item])[item]

    def speaker() -> str | None:
        with mine.reading():
            found = mine.facets("u1", [ref])
            return found[ref].speaker if ref in found else None

    assert speaker() == "Ana"
    mine.update("u1", item, speaker="Ben")  # this process's write
    assert speaker() == "Ben"
    other.update("u1", item, speaker="Cy")  # another process's commit
    assert speaker() == "Cy"
    with pytest.raises(RuntimeError), mine.transaction():  # rolled back: never kept
        mine.update("u1", item, speaker="Di")
        assert speaker() == "Di"
        raise RuntimeError
    assert speaker() == "Cy"
    with mine.transaction():
        mine.delete("u1", item)
        assert speaker() is None
    assert speaker() is None


def test_data_version_moves_with_every_write(two: tuple[Any, Any]) -> None:
    mine, other = two
    _turns(mine, n=1)
    first = mine.data_version()
    mine.add(FactItem(user_id="u1", text="mine"))
    second = mine.data_version()
    assert second != first
    other.add(FactItem(user_id="u2", text="theirs"))
    assert mine.data_version() != second
    assert all(isinstance(v, int) for v in mine.data_version())
