"""Items API: add/get/update/delete/list per kind, dedup, re-indexing, embeddings upkeep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pydantic
import pytest

from memstrata.memory import (
    ITEM_KINDS,
    ConsolidatedItem,
    Edge,
    EntityItem,
    EpisodicItem,
    FactItem,
    Item,
    PersonaItem,
    ProceduralItem,
    ProspectiveItem,
    QAPairItem,
    Retriever,
    SemanticItem,
    SensoryItem,
    Store,
    StrategyItem,
    WorkingItem,
)
from memstrata.memory.text import tokens

U = "user-1"

SAMPLES: list[Item] = [
    FactItem(user_id=U, text="Caroline moved from Sweden four years ago", subject="Caroline",
             predicate="moved_from", object="Sweden", location="Sweden", speaker="Caroline",
             tags=["move", "sweden"], evidence=["t_a"], confidence=0.8),
    SemanticItem(user_id=U, text="Melanie enjoys classical music like Bach and Mozart"),
    EpisodicItem(user_id=U, text="Melanie ran a charity race for mental health",
                 session_id="session_2", event_time=datetime(2023, 5, 20, 9, 0, tzinfo=UTC)),
    ProceduralItem(user_id=U, text="How to glaze a pot", steps=["clean", "dip", "fire"]),
    ProspectiveItem(user_id=U, text="Call the adoption agency", status="resolved",
                    event_time=datetime(2023, 6, 1, tzinfo=UTC)),
    WorkingItem(user_id=U, text="Currently comparing flights to Rome",
                expires_at=datetime(2023, 6, 2, 12, 30, tzinfo=UTC)),
    SensoryItem(user_id=U, text="a photo of sunflowers by a fence", modality="image",
                uri="https://example.invalid/sunflowers.jpg"),
    StrategyItem(user_id=U, text="Check the session date before answering when-questions",
                 description="temporal questions need the session date", polarity="failure",
                 uses=7, wins=3, title="dates first"),
    PersonaItem(user_id=U, text="Caroline's favourite song is Brave", person="Caroline",
                attribute="favourite song", value="Brave by Sara Bareilles", about="Caroline"),
    EntityItem(user_id=U, text="John (conv-41)", name="John", conversation_id="conv-41",
               roles=["Maria's friend"], states=["works in politics"], evidence=["D1:2"]),
    QAPairItem(user_id=U, text="What did Caroline research? adoption agencies",
               title="What did Caroline research?", question="What did Caroline research?",
               answer="adoption agencies", evidence=["D2:8"]),
    ConsolidatedItem(user_id=U, text="Caroline is researching adoption agencies",
                     sources=["i_x", "i_y"]),
]

STORE_MANAGED = {"id", "recorded_at", "updated_at"}


def test_every_kind_has_a_sample() -> None:
    assert {s.kind for s in SAMPLES} == set(ITEM_KINDS)


@pytest.mark.parametrize("item", SAMPLES, ids=[s.kind for s in SAMPLES])
def test_add_get_round_trips_kind_specific_fields(store: Store, item: Item) -> None:
    item_id = store.add(item)
    assert item_id.startswith("i_")
    got = store.get(U, item_id)
    assert type(got) is type(item)
    assert got.id == item_id
    assert got.recorded_at is not None and got.updated_at is not None
    assert got.model_dump(exclude=STORE_MANAGED) == item.model_dump(exclude=STORE_MANAGED)
    assert got.data() == item.data()


def test_kind_specific_fields_are_stored_in_data_column(store: Store) -> None:
    item_id = store.add(SAMPLES[7])  # StrategyItem
    raw = store.conn.execute("SELECT data FROM items WHERE id = ?", (item_id,)).fetchone()[0]
    assert '"polarity": "failure"' in raw
    assert '"uses": 7' in raw
    assert '"text"' not in raw  # base fields live in their own columns


def test_event_time_is_normalised_to_utc(store: Store) -> None:
    plus_two = timezone(timedelta(hours=2))
    item_id = store.add(FactItem(user_id=U, text="met at noon",
                                 event_time=datetime(2023, 5, 8, 12, 0, tzinfo=plus_two)))
    naive_id = store.add(FactItem(user_id=U, text="naive time",
                                  event_time=datetime(2023, 5, 8, 12, 0)))
    assert store.get(U, item_id).event_time == datetime(2023, 5, 8, 10, 0, tzinfo=UTC)
    assert store.get(U, naive_id).event_time == datetime(2023, 5, 8, 12, 0, tzinfo=UTC)


def test_items_listing_by_kind_newest_first_with_paging(store: Store) -> None:
    ids = store.add_many(SAMPLES)
    assert len(set(ids)) == len(SAMPLES)
    listed = store.items(U, limit=100)
    assert [i.id for i in listed] == list(reversed(ids))
    facts = store.items(U, kind="fact")
    assert [i.id for i in facts] == [ids[0]]
    assert isinstance(facts[0], FactItem)
    page1 = store.items(U, limit=3)
    page2 = store.items(U, limit=3, offset=3)
    assert [i.id for i in page1 + page2] == list(reversed(ids))[:6]
    assert store.items("someone-else") == []
    assert store.items(U, kind="no-such-kind") == []


def test_get_many_keeps_requested_order_and_skips_missing(store: Store) -> None:
    ids = store.add_many(SAMPLES[:3])
    got = store.get_many(U, [ids[2], "i_missing", ids[0]])
    assert [g.id for g in got] == [ids[2], ids[0]]
    assert store.get_many(U, []) == []
    assert store.get(U, "i_missing") is None


def test_exact_duplicate_merges_tags_evidence_and_keeps_higher_confidence(store: Store) -> None:
    first = store.add(FactItem(user_id=U, text="Caroline moved from Sweden", tags=["move"],
                               evidence=["t_1"], confidence=0.4, speaker="Caroline"))
    second = store.add(FactItem(user_id=U, text="  caroline   MOVED from\tsweden ",
                                tags=["sweden", "move"], evidence=["t_2", "t_1"],
                                confidence=0.9, speaker="Caroline"))
    assert second == first
    merged = store.get(U, first)
    assert merged.text == "Caroline moved from Sweden"
    assert merged.tags == ["move", "sweden"]
    assert merged.evidence == ["t_1", "t_2"]
    assert merged.confidence == pytest.approx(0.9)
    assert len(store.items(U)) == 1
    assert store.counts(U)["items"] == 1
    # the merged tag is indexed for the tag channel
    assert "sweden" in store.tag_vocabulary(U)


def test_duplicate_with_lower_confidence_keeps_the_higher_one(store: Store) -> None:
    first = store.add(SemanticItem(user_id=U, text="likes tea", confidence=0.9))
    assert store.add(SemanticItem(user_id=U, text="Likes tea", confidence=0.2)) == first
    assert store.get(U, first).confidence == pytest.approx(0.9)


def test_duplicates_differ_by_speaker_kind_about_and_tenant(store: Store) -> None:
    base = store.add(FactItem(user_id=U, text="went to the park", speaker="Caroline"))
    other_speaker = store.add(FactItem(user_id=U, text="went to the park", speaker="Melanie"))
    no_speaker = store.add(FactItem(user_id=U, text="went to the park"))
    other_kind = store.add(SemanticItem(user_id=U, text="went to the park", speaker="Caroline"))
    other_about = store.add(FactItem(user_id=U, text="went to the park", speaker="Caroline",
                                     about="Melanie"))
    other_tenant = store.add(FactItem(user_id="user-2", text="went to the park",
                                      speaker="Caroline"))
    ids = [base, other_speaker, no_speaker, other_kind, other_about, other_tenant]
    assert len(set(ids)) == len(ids)
    assert store.get("user-2", base) is None
    assert store.get(U, other_tenant) is None


def test_duplicates_within_one_batch_collapse(store: Store) -> None:
    ids = store.add_many([
        FactItem(user_id=U, text="Oscar is a guinea pig", tags=["pet"]),
        FactItem(user_id=U, text="oscar is a GUINEA pig", tags=["oscar"]),
    ])
    assert ids[0] == ids[1]
    assert store.get(U, ids[0]).tags == ["pet", "oscar"]


def test_update_changes_fields_and_reindexes_text(store: Store) -> None:
    item_id = store.add(FactItem(user_id=U, text="Caroline plays the violin", tags=["music"]))
    before = store.get(U, item_id)
    assert [i for i, _ in store.lexical(U, tokens("violin"), node="item", k=5)] == [item_id]
    updated = store.update(U, item_id, text="Caroline plays the trombone", tags=["brass"],
                           subject="Caroline")
    assert isinstance(updated, FactItem)
    assert updated.text == "Caroline plays the trombone"
    assert updated.updated_at >= before.updated_at
    got = store.get(U, item_id)
    assert got.text == "Caroline plays the trombone"
    assert got.subject == "Caroline"
    assert got.recorded_at == before.recorded_at
    assert store.lexical(U, tokens("violin"), node="item", k=5) == []
    assert store.lexical(U, tokens("music"), node="item", k=5) == []
    assert [i for i, _ in store.lexical(U, tokens("trombone"), node="item", k=5)] == [item_id]
    assert [i for i, _ in store.lexical(U, tokens("brass"), node="item", k=5)] == [item_id]
    assert store.tag_vocabulary(U) == ["brass"]
    hits = Retriever(store).search(U, "trombone", k=5)
    assert [h.id for h in hits] == [item_id]
    assert Retriever(store).search(U, "violin", k=5) == []


def test_update_refuses_identity_fields_and_unknown_items(store: Store) -> None:
    item_id = store.add(FactItem(user_id=U, text="a fact"))
    with pytest.raises(ValueError):
        store.update(U, item_id, kind="semantic")
    with pytest.raises(ValueError):
        store.update(U, item_id, id="i_other")
    with pytest.raises(KeyError):
        store.update(U, "i_nope", text="x")
    with pytest.raises(KeyError):
        store.update("user-2", item_id, text="stolen")
    assert store.get(U, item_id).text == "a fact"


def test_update_with_invalid_value_changes_nothing(store: Store) -> None:
    item_id = store.add(FactItem(user_id=U, text="a fact", confidence=0.5))
    with pytest.raises(pydantic.ValidationError):
        store.update(U, item_id, confidence=2.0)
    with pytest.raises(pydantic.ValidationError):
        store.update(U, item_id, text="")
    assert store.get(U, item_id).confidence == pytest.approx(0.5)


def test_update_colliding_with_another_item_rolls_back_cleanly(store: Store) -> None:
    a = store.add(FactItem(user_id=U, text="alpha fact"))
    b = store.add(FactItem(user_id=U, text="beta fact"))
    with pytest.raises(ValueError, match=f"would duplicate item '{a}'"):
        store.update(U, b, text="Alpha fact")
    assert store.get(U, b).text == "beta fact"
    assert [i for i, _ in store.lexical(U, tokens("beta"), node="item", k=5)] == [b]
    assert [i for i, _ in store.lexical(U, tokens("alpha"), node="item", k=5)] == [a]
    assert not store.conn.in_transaction


def test_update_text_drops_stale_embedding_but_tag_change_keeps_it(
    store: Store, embedder
) -> None:
    a = store.add(FactItem(user_id=U, text="violin lessons"))
    b = store.add(FactItem(user_id=U, text="pottery class"))
    store.set_embeddings(U, [a, b], embedder.encode(["violin lessons", "pottery class"]),
                         embedder.name)
    store.update(U, b, tags=["art"])
    ids, matrix = store.vectors(U, embedder.name)
    assert sorted(ids) == sorted([a, b])
    assert matrix.shape == (2, embedder.dim)
    store.update(U, a, text="cello lessons")
    ids, matrix = store.vectors(U, embedder.name)
    assert ids == [b]
    assert np.allclose(matrix[0], embedder.encode(["pottery class"])[0])


def test_delete_removes_item_index_embeddings_and_edges(store: Store, embedder) -> None:
    keep = store.add(FactItem(user_id=U, text="Melanie paints sunsets", tags=["art"]))
    gone = store.add(FactItem(user_id=U, text="Melanie paints lakes", tags=["lake"]))
    store.set_embeddings(U, [keep, gone], embedder.encode(["a", "b"]), embedder.name)
    store.add_edges([Edge(user_id=U, src=keep, dst=gone, relation="related")])
    assert store.delete("user-2", gone) is False
    assert store.get(U, gone) is not None
    assert store.delete(U, gone) is True
    assert store.delete(U, gone) is False
    assert store.get(U, gone) is None
    assert [i for i, _ in store.lexical(U, tokens("paints"), node="item", k=5)] == [keep]
    assert store.lexical(U, tokens("lake"), node="item", k=5) == []
    assert "lake" not in store.tag_vocabulary(U)
    assert store.vectors(U, embedder.name)[0] == [keep]
    assert store.neighbors(U, [keep]) == {}
    assert store.counts(U)["edges"] == 0
    hits = Retriever(store, embedder).search(U, "Melanie paints lakes", k=10)
    assert [h.id for h in hits] == [keep]
    fts_rows = store.conn.execute("SELECT count(*) FROM items_fts").fetchone()[0]
    assert fts_rows == 1


def test_readding_deleted_text_creates_a_fresh_item(store: Store) -> None:
    first = store.add(FactItem(user_id=U, text="a fact"))
    store.delete(U, first)
    second = store.add(FactItem(user_id=U, text="a fact"))
    assert second != first
    assert [i.id for i in store.items(U)] == [second]
