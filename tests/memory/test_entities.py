"""Entities made from turns, the decisions stored about them, and supersession keeping
history (old rows stay, get valid_to and a supersedes edge, and are still found)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memstrata.memory import EntityItem, FactItem, Retriever, Store
from memstrata.memory.entities import (
    DISTINCT_FROM,
    SAME_AS,
    ensure_entities,
    entity_id,
    record_merge,
    record_separate,
)
from memstrata.memory.supersede import history, supersede
from tests.personal_data import load


def test_one_entity_per_speaker_per_conversation_with_dated_states(store: Store) -> None:
    load(store)
    ents = ensure_entities(store, "u1")
    assert sorted((e.conversation_id, e.name) for e in ents) == [
        ("conv-a", "Alex"), ("conv-a", "Bea"), ("conv-b", "Alex"), ("conv-b", "Carl"),
        ("conv-c", "Alex"), ("conv-c", "Dana")]
    alex_c = next(e for e in ents if (e.conversation_id, e.name) == ("conv-c", "Alex"))
    assert alex_c.id == entity_id("u1", "conv-c", "Alex")
    assert "job: nurse @ city hospital (2023-05-10..2023-06-14)" in alex_c.states
    assert alex_c.roles == ["conversation partner of Dana"] and "D1:2" in alex_c.evidence
    assert ensure_entities(store, "u1", "conv-c")[0].id in {e.id for e in ents}  # idempotent
    assert store.counts("u1")["items"] == 6


def test_an_existing_entity_is_used_not_duplicated(store: Store) -> None:
    load(store, convs=("conv-a",))
    mine = store.add(EntityItem(user_id="u1", text="Alex, extracted", name="Alexander",
                                aliases=["Alex"], conversation_id="conv-a"))
    ents = ensure_entities(store, "u1", "conv-a")
    assert mine in {e.id for e in ents} and len(ents) == 2


def test_merge_keeps_each_conversation_and_separate_links_with_reason(store: Store) -> None:
    load(store)
    ids = {(e.conversation_id, e.name): e.id for e in ensure_entities(store, "u1")}
    a, b, c = ids[("conv-a", "Alex")], ids[("conv-b", "Alex")], ids[("conv-c", "Alex")]
    person = record_merge(store, "u1", [a, b], "same wife, dog, employer", {"confidence": 0.8})
    merged = store.get("u1", person)
    assert isinstance(merged, EntityItem) and merged.conversation_id is None
    assert {e.split(":")[0] for e in merged.evidence} == {"conv-a", "conv-b"}
    assert any(s.startswith("[conv-a] ") for s in merged.states)
    assert any(s.startswith("[conv-b] ") for s in merged.states)
    for src in (a, b):
        edge = store.edges("u1", src=src, relation=SAME_AS)[0]
        assert edge.dst == person and edge.metadata["reason"] == "same wife, dog, employer"
    assert store.get("u1", a).conversation_id == "conv-a"  # nothing rewritten
    record_separate(store, "u1", a, c, "different spouse at the same time")
    edge = store.edges("u1", src=a, relation=DISTINCT_FROM)[0]
    assert edge.dst == c and edge.metadata["reason"].startswith("different spouse")
    with pytest.raises(KeyError):
        record_separate(store, "u1", a, "i_nope", "x")
    assert store.edges("u2") == [] and store.edges("u2", src=a) == []  # per tenant


def test_merging_a_third_extends_the_same_person(store: Store) -> None:
    load(store)
    ids = [e.id for e in ensure_entities(store, "u1") if e.name == "Alex"]
    first = record_merge(store, "u1", ids[:2], "r1")
    assert record_merge(store, "u1", ids[1:], "r2") == first
    assert len(store.edges("u1", dst=first, relation=SAME_AS)) == 3


def test_supersession_keeps_history(store: Store) -> None:
    old = store.add(FactItem(user_id="u1", text="Ana lives in Oslo", about="Ana",
                             predicate="lives in", object="Oslo",
                             event_time=datetime(2023, 1, 5, tzinfo=UTC)))
    new = store.add(FactItem(user_id="u1", text="Ana moved to Bergen", about="Ana",
                             predicate="lives in", object="Bergen",
                             event_time=datetime(2023, 6, 1, tzinfo=UTC)))
    ended = supersede(store, "u1", old, new, "moved: Bergen replaces Oslo")
    assert ended.valid_to == datetime(2023, 6, 1, tzinfo=UTC)
    kept = store.get("u1", old)
    assert kept is not None and kept.text == "Ana lives in Oslo" and kept.valid_to is not None
    edge = store.edges("u1", src=new, relation="supersedes")[0]
    assert edge.dst == old and edge.metadata["reason"].startswith("moved")
    assert [i.id for i in history(store, "u1", new)] == [new, old]
    hits = Retriever(store).search("u1", "Where did Ana live in Oslo?", k=5)
    assert old in {h.id for h in hits}  # still retrievable
    # A second supersession never makes the old fact valid for longer.
    later = store.add(FactItem(user_id="u1", text="Ana moved to Tromso", about="Ana",
                               event_time=datetime(2024, 1, 1, tzinfo=UTC)))
    assert supersede(store, "u1", old, later, "again").valid_to == datetime(2023, 6, 1,
                                                                            tzinfo=UTC)


def test_supersede_refuses_bad_input(store: Store) -> None:
    a = store.add(FactItem(user_id="u1", text="x is 1"))
    other = store.add(FactItem(user_id="u2", text="x is 2"))
    with pytest.raises(ValueError):
        supersede(store, "u1", a, a, "self")
    with pytest.raises(KeyError):
        supersede(store, "u1", a, other, "another tenant's item")
    with pytest.raises(ValueError):
        supersede(store, "u1", a, store.add(FactItem(user_id="u1", text="x is 3")), " ")
    assert store.get("u1", a).valid_to is None  # nothing written
    b = store.add(FactItem(user_id="u1", text="x is 4"))  # no event time: ends now
    assert supersede(store, "u1", a, b, "newer").valid_to is not None


def test_persona_crosses_conversations_only_after_a_merge(store: Store) -> None:
    from memstrata.memory.models import PersonaItem
    from memstrata.memory.persona import persona

    load(store)
    ids = {(e.conversation_id, e.name): e.id for e in ensure_entities(store, "u1")}
    store.add_many(PersonaItem(user_id="u1", text=f"Alex - likes: {what}", person="Alex",
                               attribute="likes", value=what, conversation_id=conv)
                   for conv, what in (("conv-a", "jazz"), ("conv-b", "chess"),
                                      ("conv-c", "surfing")))
    values = lambda conv: sorted(p.value for p in persona(store, "u1", "Alex", conv))  # noqa: E731
    assert values("conv-a") == ["jazz"]  # namesakes stay apart before any decision
    record_merge(store, "u1", [ids[("conv-a", "Alex")], ids[("conv-b", "Alex")]], "same dog")
    assert values("conv-a") == values("conv-b") == ["chess", "jazz"]
    assert values("conv-c") == ["surfing"]
