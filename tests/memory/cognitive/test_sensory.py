"""Sensory memory: TTL expiry and pruning, observation order, and attention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstrata.memory import Store
from memstrata.memory.cognitive.base import ATTENDED_TO, CognitiveSettings
from memstrata.memory.cognitive.episodic import Episodic
from memstrata.memory.cognitive.sensory import Sensory
from memstrata.memory.models import EpisodicItem, SensoryItem

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


def sensory(store: Store, clock: Clock, user: str = "u1", ttl: float = 60.0) -> Sensory:
    return Sensory(store, user, settings=CognitiveSettings(sensory_ttl_s=ttl), clock=clock)


def test_observe_numbers_and_times_observations(store: Store, clock: Clock) -> None:
    s = sensory(store, clock)
    at = datetime(2025, 12, 31, tzinfo=UTC)
    a = s.observe("a photo of sunflowers", modality="image", event_time=at)
    clock.advance(1)
    b = s.observe("the teacher said hello", ttl_s=5)
    first, second = store.get("u1", a), store.get("u1", b)
    assert isinstance(first, SensoryItem) and isinstance(second, SensoryItem)
    assert (first.observation_order, second.observation_order) == (1, 2)
    assert (first.modality, second.modality) == ("image", "text")
    assert first.event_time == at and first.recorded_at == T0
    assert first.expires_at == T0 + timedelta(seconds=60)
    assert second.expires_at == T0 + timedelta(seconds=6)
    assert not first.attended


def test_identical_observations_are_two_rows(store: Store, clock: Clock) -> None:
    s = sensory(store, clock)
    a, b = s.observe("ping"), s.observe("ping")
    assert a != b
    assert [o.observation_order for o in s.buffer()] == [1, 2]
    assert [o.text for o in s.buffer()] == ["ping", "ping"]


@pytest.mark.parametrize(("text", "ttl"), [("", None), ("  ", None), ("x", 0), ("x", -1.0)])
def test_observe_rejects_bad_input(store: Store, clock: Clock, text: str,
                                   ttl: float | None) -> None:
    with pytest.raises(ValueError):
        sensory(store, clock).observe(text, ttl_s=ttl)
    assert store.items("u1") == []


def test_ttl_expiry_and_pruning(store: Store, clock: Clock) -> None:
    s = sensory(store, clock, ttl=60)
    short = s.observe("short-lived", ttl_s=10)
    long = s.observe("default ttl")
    kept = s.observe("attended one", ttl_s=10)
    s.attend(kept, "looked at it")
    clock.advance(9.5)
    assert s.prune() == 0
    clock.advance(0.5)  # exactly at expires_at: expired
    assert s.prune() == 1
    assert store.get("u1", short) is None
    assert [o.id for o in s.buffer()] == [long, kept]
    clock.advance(60)
    buffered = s.buffer()  # prunes first
    assert [(o.id, o.attended) for o in buffered] == [(kept, True)]  # attended outlives TTL
    assert s.prune() == 0


def test_buffer_is_in_observation_order(store: Store, clock: Clock) -> None:
    s = sensory(store, clock)
    ids = [s.observe(t) for t in ("first", "second", "third")]
    assert [o.id for o in s.buffer()] == ids
    assert [o.observation_order for o in s.buffer()] == [1, 2, 3]


def test_attend_records_an_episode_with_an_edge(store: Store, clock: Clock) -> None:
    s = sensory(store, clock)
    at = datetime(2025, 12, 31, tzinfo=UTC)
    Episodic(store, "u1", clock=clock).record("an earlier episode")
    oid = s.observe("Ana moved to Oslo", event_time=at)
    episode_id = s.attend(oid, "about Ana", source_label="chat")
    episode = store.get("u1", episode_id)
    assert isinstance(episode, EpisodicItem)
    assert (episode.text, episode.event_time, episode.source_label) == (
        "Ana moved to Oslo", at, "chat")
    assert episode.temporal_index == 2
    (edge,) = store.edges("u1", src=oid)
    assert (edge.dst, edge.relation, edge.metadata) == (episode_id, ATTENDED_TO,
                                                        {"reason": "about Ana"})
    assert store.get("u1", oid).attended


def test_attend_with_a_summary_records_it(store: Store, clock: Clock) -> None:
    s = sensory(store, clock)
    oid = s.observe("a long article ...")
    episode_id = s.attend(oid, "read it", summary="Read an article about Oslo")
    assert store.get("u1", episode_id).text == "Read an article about Oslo"
    assert store.get("u1", oid).text == "a long article ..."


def test_attend_errors(store: Store, clock: Clock) -> None:
    s = sensory(store, clock)
    oid = s.observe("seen once", ttl_s=10)
    episode = Episodic(store, "u1", clock=clock).record("not sensory")
    with pytest.raises(KeyError):
        s.attend("i_missing", "why")
    with pytest.raises(KeyError):
        s.attend(episode, "why")
    with pytest.raises(ValueError, match="reason"):
        s.attend(oid, " ")
    with pytest.raises(ValueError, match="summary"):
        s.attend(oid, "why", summary="")
    s.attend(oid, "why")
    with pytest.raises(ValueError, match="already attended"):
        s.attend(oid, "again")
    late = s.observe("missed it", ttl_s=10)
    clock.advance(10)
    before = store.counts("u1")
    with pytest.raises(ValueError, match="expired"):
        s.attend(late, "too late")
    assert store.counts("u1") == before  # nothing written
    s.prune()
    with pytest.raises(KeyError):
        s.attend(late, "too late")  # pruned: gone


def test_no_read_crosses_tenants(store: Store, clock: Clock) -> None:
    mine, theirs = sensory(store, clock), sensory(store, clock, "u2")
    oid = mine.observe("mine", ttl_s=10)
    clock.advance(20)
    assert theirs.observe("theirs") != oid
    assert [o.observation_order for o in theirs.buffer()] == [1]  # own numbering
    assert theirs.prune() == 0
    with pytest.raises(KeyError):
        theirs.attend(oid, "not mine")
    assert store.get("u1", oid) is not None  # their prune left mine alone
    assert mine.prune() == 1
    assert [o.text for o in theirs.buffer()] == ["theirs"]
