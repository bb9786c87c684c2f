"""Semantic memory: similarity and provenance edges, contradictions, and value extraction."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memstrata.memory import Store
from memstrata.memory.cognitive.base import (
    CONTRADICTS,
    DERIVES_FROM,
    SIMILAR_TO,
    CognitiveSettings,
    jaccard,
)
from memstrata.memory.cognitive.semantic import Semantic
from memstrata.memory.cognitive.values import numbers, quantities
from memstrata.memory.models import EpisodicItem, FactItem
from memstrata.memory.supersede import supersede

# -- values --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("We have 1,200 users", [1200.0]),
    ("about 1.2 million people", [1.2e6]),
    ("a 3.5 billion budget", [3.5e9]),
    ("40 thousand fans", [40000.0]),
    ("40k fans and 3bn views", [40000.0, 3e9]),
    ("growth of 12% or 7 percent", [12.0, 7.0]),
    ("nine players and twenty coaches", [9.0, 20.0]),
    ("two, seventeen, twenty-five", [2.0, 17.0, 25.0]),
    ("three million and nine hundred thousand", [3e6, 9e5]),
    ("she finished 5th, at -3 degrees", [5.0, -3.0]),
    ("scores 1,2,3", [1.0, 2.0, 3.0]),
    ("the one who came", []),
    ("a margin of .5 points, then -.25", [0.5, -0.25]),
    ("version 3.2.1", [3.2]),
])
def test_numbers_normalises_values(text: str, expected: list[float]) -> None:
    assert numbers(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("Founded in 2019, it moved in 2021", []),
    ("Between 2019-2020", []),
    ("It cost $2000 or 2000%", [2000.0, 2000.0]),
    ("1,999 people and 2,024 votes", [1999.0, 2024.0]),
    ("Born 1850, it has 2101 members", [1850.0, 2101.0]),
    ("On March 5, 2024 we had 40 guests", [40.0]),
    ("Mar. 5th and the 7th of June and 12 Dec", []),
    ("Released 2024-03-05 or 05/03/2024", []),
    ("12 may come on May 12", [12.0]),
    ("In March 40% left", [40.0]),
])
def test_years_and_dates_are_not_values(text: str, expected: list[float]) -> None:
    assert numbers(text) == expected


def test_quantities_keep_the_stating_words() -> None:
    assert [q.span for q in quantities("from 1.2 million to 900,000 (12%)")] == [
        "1.2 million", "900,000", "12%"]


# -- learning: similarity and provenance ---------------------------------------------------


def _edges(store: Store, relation: str) -> list[tuple[str, str]]:
    return [(e.src, e.dst) for e in store.edges("u1", relation=relation)]


def test_similar_to_edges_above_the_threshold_only(store: Store) -> None:
    sem = Semantic(store, "u1")
    a = sem.learn("Quarry", "Quarry builds static sites from markdown files")
    b = sem.learn("Quarry", "Quarry builds static sites quickly")
    c = sem.learn("Quarry", "Quarry was written by a small team in Oslo")
    assert jaccard("Quarry builds static sites quickly",
                   "Quarry builds static sites from markdown files") > 0.3
    assert _edges(store, SIMILAR_TO) == [(b, a)]
    edge = store.edges("u1", relation=SIMILAR_TO)[0]
    assert edge.weight == pytest.approx(jaccard(store.get("u1", b).text, store.get("u1", a).text))
    assert edge.metadata == {"method": "jaccard"}
    assert [i.id for i in sem.similar(a)] == [b]
    assert sem.similar(c) == []


def test_threshold_is_a_setting(store: Store) -> None:
    strict = Semantic(store, "u1", settings=CognitiveSettings(similarity_threshold=0.9))
    strict.learn("Quarry", "Quarry builds static sites from markdown files")
    strict.learn("Quarry", "Quarry builds static sites quickly")
    assert store.edges("u1", relation=SIMILAR_TO) == []


def test_similar_needs_more_than_the_threshold_contradiction_reaches_it(store: Store) -> None:
    sem = Semantic(store, "u1", settings=CognitiveSettings(similarity_threshold=0.5))
    old = sem.learn("Greek", "alpha beta gamma")
    new = sem.learn("Greek", "alpha beta delta")
    assert jaccard("alpha beta gamma", "alpha beta delta") == 0.5
    assert store.edges("u1", relation=SIMILAR_TO) == []
    assert _edges(store, CONTRADICTS) == [(new, old)]


def test_only_current_semantic_items_are_linked(store: Store) -> None:
    sem = Semantic(store, "u1")
    old = sem.learn("Quarry", "Quarry builds static sites from markdown")
    newer = sem.learn("Quarry", "Quarry now renders static sites from notebooks")
    supersede(store, "u1", old, newer, "replaced")
    fact = store.add(FactItem(user_id="u1", text="Quarry builds static sites from markdown"))
    fresh = sem.learn("Quarry", "Quarry builds static sites from markdown quickly")
    assert jaccard(store.get("u1", old).text, store.get("u1", fresh).text) > 0.3
    assert {dst for src, dst in _edges(store, SIMILAR_TO) if src == fresh} == {newer}
    assert fact not in {e.dst for e in store.edges("u1")}
    assert [i.id for i in sem.facts()] == [fresh, newer]


def test_two_hops_reach_a_neighbour_of_a_neighbour(store: Store) -> None:
    sem = Semantic(store, "u1")
    a = sem.learn("", "red green blue yellow")
    b = sem.learn("", "red green blue yellow black white")
    c = sem.learn("", "blue yellow black white pink")
    assert jaccard("red green blue yellow", "blue yellow black white pink") < 0.3
    assert [i.id for i in sem.similar(a)] == [b]
    assert {i.id for i in sem.similar(a, hops=2)} == {b, c}


def test_derives_from_an_episode(store: Store) -> None:
    sem = Semantic(store, "u1")
    episode = store.add(EpisodicItem(user_id="u1", text="Read the Quarry tutorial"))
    fact = sem.learn("Quarry", "Quarry is a static site generator", episode_id=episode)
    assert _edges(store, DERIVES_FROM) == [(fact, episode)]


def test_derives_from_an_unknown_episode_writes_nothing(store: Store) -> None:
    sem = Semantic(store, "u1")
    not_episode = store.add(FactItem(user_id="u1", text="Ana likes tea"))
    other = store.add(EpisodicItem(user_id="u2", text="Read the Quarry tutorial"))
    for bad in ("i_missing", not_episode, other):
        with pytest.raises(KeyError):
            sem.learn("Quarry", "Quarry is a static site generator", episode_id=bad)
    assert sem.facts() == []


def test_facts_by_concept_newest_first(store: Store) -> None:
    times = iter(datetime(2024, 1, d, tzinfo=UTC) for d in range(1, 10))
    sem = Semantic(store, "u1", clock=lambda: next(times))
    a = sem.learn("Quarry", "Quarry is written in Rust")
    sem.learn("Oslo", "Oslo is the capital of Norway")
    b = sem.learn("quarry", "Quarry has a plugin system")
    assert [i.id for i in sem.facts("QUARRY")] == [b, a]
    assert len(sem.facts()) == 3
    assert len(sem.facts(limit=1)) == 1
    assert store.get("u1", a).recorded_at == datetime(2024, 1, 1, tzinfo=UTC)


# -- contradictions ------------------------------------------------------------------------


def test_disagreeing_numbers_are_flagged_newer_to_older(store: Store) -> None:
    sem = Semantic(store, "u1")
    old = sem.learn("Quarry", "Quarry has 1,200 users worldwide")
    new = sem.learn("Quarry", "Quarry has 900 users worldwide")
    [edge] = store.edges("u1", relation=CONTRADICTS)
    assert (edge.src, edge.dst) == (new, old)
    assert edge.metadata["values"] == ["900", "1,200"]
    assert edge.metadata["newer"] == new
    [seen_from_old] = sem.contradictions(old)
    [seen_from_new] = sem.contradictions(new)
    assert (seen_from_old.other_id, seen_from_old.newer_id) == (new, new)
    assert (seen_from_new.other_id, seen_from_new.newer_id) == (old, new)
    assert seen_from_new.values == ["900", "1,200"] and seen_from_new.reason
    # both claims stay current: nothing is superseded
    assert {i.id for i in sem.facts()} == {old, new}
    assert store.get("u1", old).valid_to is None


def test_lines_of_one_document_do_not_contradict_each_other(store: Store) -> None:
    # A card that lists "Point (6)" and "Equipment (23)" is one source's statements; the
    # same two lines in two reports are two reports that disagree.
    sem = Semantic(store, "u1")
    card = store.add(EpisodicItem(user_id="u1", text="Read the sense card"))
    sem.learn("", "Direct subclasses of brick:Point (6)", episode_id=card)
    sem.learn("", "Direct subclasses of brick:Point (23)", episode_id=card)
    assert store.edges("u1", relation=CONTRADICTS) == []
    other = store.add(EpisodicItem(user_id="u1", text="Read another card"))
    new = sem.learn("", "Direct subclasses of brick:Point (9)", episode_id=other)
    assert sorted(e.src for e in store.edges("u1", relation=CONTRADICTS)) == [new, new]


def test_a_replaced_name_is_flagged(store: Store) -> None:
    sem = Semantic(store, "u1")
    old = sem.learn("team", "The team captain is Ola Berg.")
    new = sem.learn("Team", "The team captain is Siri Dahl.")
    [c] = sem.contradictions(new)
    assert (c.other_id, c.newer_id, c.values) == (old, new, ["Siri Dahl", "Ola Berg"])


def test_later_event_time_is_newer_whatever_the_learning_order(store: Store) -> None:
    sem = Semantic(store, "u1")
    later = sem.learn("Quarry", "Quarry has 900 users",
                      event_time=datetime(2024, 6, 1, tzinfo=UTC))
    earlier = sem.learn("Quarry", "Quarry has 1,200 users",
                        event_time=datetime(2023, 6, 1, tzinfo=UTC))
    [edge] = store.edges("u1", relation=CONTRADICTS)
    assert (edge.src, edge.dst, edge.metadata["newer"]) == (later, earlier, later)
    assert edge.metadata["values"] == ["900", "1,200"]


@pytest.mark.parametrize(("concept_a", "a", "concept_b", "b"), [
    ("Quarry", "Quarry has 1,200 users", "Quarry", "Quarry has 1,200 users and 40 staff"),
    ("Quarry", "Quarry has 1,200 users", "Quarry", "Quarry has 1.2 thousand users today"),
    ("Quarry", "Quarry has 1,200 users", "Gravel", "Quarry has 900 users"),
    ("team", "The team captain is Ola Berg", "team", "The team captain is Ola Berg again"),
    ("team", "The team captain is Ola Berg", "team", "The team coach likes long runs"),
    ("team", "The team captain is Ola Berg", "team", "The team captain is Ola Bergh"),
    ("team", "Ola Berg is the team captain", "team", "The team captain is Siri Dahl"),
    ("Oslo", "Oslo is the capital of Norway", "Oslo", "Oslo has 700,000 residents"),
])
def test_agreeing_or_unrelated_facts_are_not_flagged(
        store: Store, concept_a: str, a: str, concept_b: str, b: str) -> None:
    sem = Semantic(store, "u1")
    first = sem.learn(concept_a, a)
    second = sem.learn(concept_b, b)
    assert store.edges("u1", relation=CONTRADICTS) == []
    assert sem.contradictions(first) == sem.contradictions(second) == []


def test_an_empty_concept_matches_any(store: Store) -> None:
    sem = Semantic(store, "u1")
    sem.learn("", "Quarry has 1,200 users")
    new = sem.learn("Quarry", "Quarry has 900 users")
    assert len(sem.contradictions(new)) == 1


# -- tenants -------------------------------------------------------------------------------


def test_tenants_never_link_or_read_each_other(store: Store) -> None:
    mine, theirs = Semantic(store, "u1"), Semantic(store, "u2")
    a = theirs.learn("Quarry", "Quarry has 1,200 users worldwide")
    b = mine.learn("Quarry", "Quarry has 900 users worldwide")
    assert store.edges("u1") == [] and store.edges("u2") == []
    assert [i.id for i in mine.facts()] == [b]
    assert mine.similar(a) == [] and mine.contradictions(a) == []
    with pytest.raises(KeyError):
        mine.learn("Quarry", "Quarry is fast",
                   episode_id=store.add(EpisodicItem(user_id="u2", text="an episode")))
