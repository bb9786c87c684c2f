"""Working memory: slots, capacity eviction, TTL expiry, and completion into an episode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstrata.memory import Store
from memstrata.memory.cognitive.base import CognitiveSettings
from memstrata.memory.cognitive.episodic import Episodic
from memstrata.memory.cognitive.working import Working
from memstrata.memory.models import WORKING_SLOTS, EpisodicItem, WorkingItem

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


class Clock:
    """A fake clock: returns ``now``, moved by ``advance``."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def working(store: Store, clock: Clock, user: str = "u1", capacity: int = 20) -> Working:
    return Working(store, user, settings=CognitiveSettings(working_capacity=capacity),
                   clock=clock)


def texts(items: list[WorkingItem]) -> list[str]:
    return [i.text for i in items]


def test_push_stores_a_slot(store: Store, clock: Clock) -> None:
    w = working(store, clock)
    wid = w.push("t1", "question", "Where does Ana live?", relevance=0.9, ttl_s=30)
    item = store.get("u1", wid)
    assert isinstance(item, WorkingItem)
    assert (item.task_id, item.slot, item.relevance) == ("t1", "question", 0.9)
    assert item.expires_at == T0 + timedelta(seconds=30)
    assert item.recorded_at == T0
    assert store.get("u1", w.push("t1", "plan", "search facts")).expires_at is None


def test_push_rejects_bad_input(store: Store, clock: Clock) -> None:
    w = working(store, clock)
    with pytest.raises(ValueError) as err:
        w.push("t1", "scratch", "x")
    assert all(slot in str(err.value) for slot in WORKING_SLOTS)
    for bad in ({"relevance": 1.5}, {"relevance": -0.1}, {"ttl_s": 0}):
        with pytest.raises(ValueError):
            w.push("t1", "plan", "x", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        w.push("", "plan", "x")
    with pytest.raises(ValueError):
        w.push("t1", "plan", " ")
    assert store.items("u1") == []


def test_slots_order_by_relevance_then_age(store: Store, clock: Clock) -> None:
    w = working(store, clock)
    w.push("t1", "retrieved_fact", "low", relevance=0.2)
    clock.advance(1)
    w.push("t1", "retrieved_fact", "high", relevance=0.9)
    clock.advance(1)
    w.push("t1", "retrieved_fact", "tie older", relevance=0.5)
    clock.advance(1)
    w.push("t1", "retrieved_fact", "tie newer", relevance=0.5)
    w.push("t1", "plan", "a plan", relevance=1.0)
    assert texts(w.slots("t1")) == ["a plan", "high", "tie older", "tie newer", "low"]
    assert texts(w.slots("t1", "retrieved_fact")) == ["high", "tie older", "tie newer", "low"]
    assert w.slots("t2") == []


def test_eviction_at_capacity_takes_the_least_relevant_other_slot(store: Store,
                                                                 clock: Clock) -> None:
    w = working(store, clock, capacity=3)
    w.push("t1", "retrieved_fact", "tie older", relevance=0.3)
    clock.advance(1)
    w.push("t1", "retrieved_fact", "tie newer", relevance=0.3)
    clock.advance(1)
    w.push("t1", "question", "the question", relevance=0.9)
    w.push("t2", "question", "another task", relevance=0.0)  # not counted for t1
    clock.advance(1)
    new = w.push("t1", "reasoning_step", "a weak step", relevance=0.1)
    assert texts(w.slots("t1")) == ["the question", "tie newer", "a weak step"]  # oldest tie
    clock.advance(1)
    newest = w.push("t1", "reasoning_step", "weaker step", relevance=0.05)  # new input enters
    assert texts(w.slots("t1")) == ["the question", "tie newer", "weaker step"]
    assert store.get("u1", new) is None and store.get("u1", newest) is not None
    assert texts(w.slots("t2")) == ["another task"]


def test_expired_slots_are_dead_and_make_room(store: Store, clock: Clock) -> None:
    w = working(store, clock, capacity=2)
    w.push("t1", "context", "short", relevance=0.9, ttl_s=5)
    w.push("t1", "plan", "the plan", relevance=0.8)
    clock.advance(5)
    assert texts(w.slots("t1")) == ["the plan"]
    w.push("t1", "reasoning_step", "step", relevance=0.1)  # the expired slot goes, not the plan
    assert texts(w.slots("t1")) == ["the plan", "step"]
    assert len(store.items("u1", kind="working")) == 2


def test_same_text_merges_in_a_task_keeping_the_higher_relevance(store: Store,
                                                                 clock: Clock) -> None:
    w = working(store, clock)
    a = w.push("t1", "retrieved_fact", "Ana lives in Oslo", relevance=0.8, ttl_s=10)
    clock.advance(5)
    assert w.push("t1", "retrieved_fact", "Ana lives in Oslo", relevance=0.4, ttl_s=20) == a
    merged = store.get("u1", a)
    assert merged.relevance == 0.8
    assert merged.expires_at == T0 + timedelta(seconds=25)  # the later expiry
    assert w.push("t1", "retrieved_fact", "Ana lives in Oslo", relevance=0.95) == a
    assert store.get("u1", a).relevance == 0.95 and store.get("u1", a).expires_at is None
    b = w.push("t2", "retrieved_fact", "Ana lives in Oslo", relevance=0.1)
    assert b != a and store.get("u1", b).relevance == 0.1
    assert len(store.items("u1", kind="working")) == 2


def test_an_expired_twin_is_replaced_not_merged(store: Store, clock: Clock) -> None:
    w = working(store, clock)
    a = w.push("t1", "context", "note", relevance=0.9, ttl_s=5)
    clock.advance(6)
    assert w.push("t1", "context", "note", relevance=0.2, ttl_s=5) == a
    item = store.get("u1", a)
    assert (item.relevance, item.expires_at) == (0.2, T0 + timedelta(seconds=11))
    assert texts(w.slots("t1")) == ["note"]


def test_complete_records_an_episode_and_clears_the_task(store: Store, clock: Clock) -> None:
    w = working(store, clock)
    Episodic(store, "u1", clock=clock).record("before")
    w.push("t1", "question", "Where does Ana live?")
    for n in range(3):
        w.push("t1", "retrieved_fact", f"fact {n}")
    w.push("t1", "reasoning_step", "step 1")
    w.push("t1", "reasoning_step", "step 2")
    w.push("t1", "plan", "the plan")
    w.push("t2", "question", "untouched")
    clock.advance(30)
    episode_id = w.complete("t1", outcome="Oslo")
    episode = store.get("u1", episode_id)
    assert isinstance(episode, EpisodicItem)
    assert episode.text == ("Task t1: question: Where does Ana live? -> outcome: Oslo"
                            " (3 retrieved facts, 2 reasoning steps, 1 plan)")
    assert (episode.source_label, episode.event_time, episode.temporal_index) == (
        "task", T0 + timedelta(seconds=30), 2)
    assert w.slots("t1") == [] and w.tasks() == ["t2"]


def test_complete_edge_cases(store: Store, clock: Clock) -> None:
    w = working(store, clock)
    assert w.complete("none") is None
    assert store.items("u1") == []
    only = w.complete("none", outcome="done anyway", source_label="job")
    assert store.get("u1", only).text == "Task none: -> outcome: done anyway"
    w.push("t3", "evaluation", "sufficient", ttl_s=5)
    clock.advance(5)
    assert w.complete("t3") is None  # only dead slots: no episode, but they are gone
    assert store.items("u1", kind="working") == []
    with pytest.raises(ValueError):
        w.complete("")


def test_clear_deletes_without_an_episode(store: Store, clock: Clock) -> None:
    w = working(store, clock)
    w.push("t1", "question", "q")
    w.push("t1", "context", "c", ttl_s=1)
    w.push("t2", "question", "q2")
    clock.advance(2)
    assert w.clear("t1") == 2
    assert store.items("u1", kind="episodic") == []
    assert w.tasks() == ["t2"]
    assert w.clear("t1") == 0


def test_expire_drops_expired_items_of_any_task(store: Store, clock: Clock) -> None:
    w = working(store, clock)
    w.push("t1", "context", "soon", ttl_s=5)
    w.push("t2", "context", "later", ttl_s=50)
    w.push("t2", "plan", "never")
    cached = store.add(WorkingItem(user_id="u1", text="predicted reply", task_id="",
                                   expires_at=T0 + timedelta(seconds=5)))
    kept = store.add(WorkingItem(user_id="u1", text="kept prediction", task_id=""))
    assert w.tasks() == ["t1", "t2"]  # task "" left out
    clock.advance(5)
    assert w.tasks() == ["t2"]
    assert w.expire() == 2
    assert store.get("u1", cached) is None and store.get("u1", kept) is not None
    assert texts(w.slots("t2")) == ["later", "never"]
    assert w.expire() == 0


def test_no_read_crosses_tenants(store: Store, clock: Clock) -> None:
    mine, theirs = working(store, clock, capacity=1), working(store, clock, "u2", capacity=1)
    mine.push("t1", "question", "mine", ttl_s=1)
    theirs.push("t1", "question", "theirs")
    theirs.push("t1", "plan", "their plan")  # evicts their question only
    assert texts(mine.slots("t1")) == ["mine"]
    assert texts(theirs.slots("t1")) == ["their plan"]
    clock.advance(1)
    assert theirs.expire() == 0 and theirs.tasks() == ["t1"]
    assert theirs.clear("t1") == 1
    assert store.items("u1", kind="working")[0].text == "mine"
    assert mine.complete("t1", outcome="x") is not None
    assert store.items("u2", kind="episodic") == []
