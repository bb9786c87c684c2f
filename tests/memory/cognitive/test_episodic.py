"""Episodic memory: temporal order, batch consolidation, and summaries preferred in recall."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstrata.memory import Store
from memstrata.memory.cognitive.base import CONSOLIDATES, CognitiveSettings
from memstrata.memory.cognitive.episodic import Episodic
from memstrata.memory.models import ConsolidatedItem, EpisodicItem, Hit

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


class Clock:
    """A fake clock: returns ``now``, moved by ``advance``."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def episodic(store: Store, user: str = "u1", batch: int = 3, weight: float = 0.5) -> Episodic:
    settings = CognitiveSettings(consolidation_batch=batch, compressed_weight=weight)
    return Episodic(store, user, settings=settings, clock=Clock())


def joined(texts: list[str]) -> str:
    return " | ".join(texts)


def record_days(ep: Episodic, n: int, first: int = 0) -> list[str]:
    """``n`` episodes, the later ones given earlier event days (event != record order)."""
    return [ep.record(f"episode {i}", source_label="diary",
                      event_time=T0 - timedelta(days=i)) for i in range(first, first + n)]


def test_record_numbers_episodes_per_tenant(store: Store) -> None:
    ep, other = episodic(store), episodic(store, "u2")
    a = ep.record("Went to the market", source_label="diary", session_id="s1")
    b = ep.record("Met Ana for coffee")
    c = other.record("Someone else's day")
    items = {i: store.get(u, i) for u, i in (("u1", a), ("u1", b), ("u2", c))}
    assert [items[i].temporal_index for i in (a, b, c)] == [1, 2, 1]
    first = items[a]
    assert isinstance(first, EpisodicItem)
    assert (first.source_label, first.session_id, first.compressed) == ("diary", "s1", False)
    assert first.recorded_at == T0
    assert [e.id for e in ep.episodes()] == [a, b]
    assert [e.id for e in ep.episodes(limit=1)] == [a]


def test_record_rejects_empty_text_and_merges_an_exact_duplicate(store: Store) -> None:
    ep = episodic(store)
    with pytest.raises(ValueError, match="needs text"):
        ep.record("  ")
    a = ep.record("Went to the market")
    assert ep.record("went to  the market") == a
    assert ep.record("Then home").startswith("i_")
    assert [e.temporal_index for e in ep.episodes()] == [1, 2]


def test_consolidation_after_a_full_batch_keeps_flags_and_links(store: Store) -> None:
    ep = episodic(store, batch=3)
    calls: list[list[str]] = []

    def summarise(texts: list[str]) -> str:
        calls.append(texts)
        return joined(texts)

    ids = record_days(ep, 2)
    assert ep.consolidate(summarise) == []  # two pending: below the batch
    assert calls == []
    ids += record_days(ep, 5, first=2)
    made = ep.consolidate(summarise)
    assert len(made) == 2 and calls == [[f"episode {i}" for i in range(3)],
                                        [f"episode {i}" for i in range(3, 6)]]
    first = store.get("u1", made[0])
    assert isinstance(first, ConsolidatedItem)
    assert first.sources == ids[:3]
    assert (first.title, first.source, first.text) == ("3 episodes", "consolidation",
                                                       "episode 0 | episode 1 | episode 2")
    assert first.event_time == T0 - timedelta(days=2)  # the batch's earliest event
    edges = store.edges("u1", src=made[0], relation=CONSOLIDATES)
    assert [e.dst for e in edges] == ids[:3]
    assert all(e.metadata == {"method": "summary"} for e in edges)
    assert [e.id for e in ep.originals(made[0])] == ids[:3]
    assert [e.id for e in ep.pending()] == [ids[6]]
    assert len(ep.episodes()) == 7  # originals kept
    assert [e.compressed for e in ep.episodes()] == [True] * 6 + [False]
    assert ep.summary_of(ids[4]) == made[1]
    assert ep.summary_of(ids[6]) is None


@pytest.mark.parametrize("bad", ["", "   ", None, 42])
def test_a_bad_summary_writes_nothing_for_its_batch(store: Store, bad: object) -> None:
    ep = episodic(store, batch=2)
    ids = record_days(ep, 2)
    before = store.counts("u1")
    with pytest.raises(ValueError, match=ids[0]) as err:
        ep.consolidate(lambda texts: bad)  # type: ignore[arg-type, return-value]
    assert ids[1] in str(err.value)
    assert store.counts("u1") == before
    assert [e.id for e in ep.pending()] == ids
    assert store.items("u1", kind="consolidated") == []


def test_a_later_bad_batch_keeps_the_earlier_ones(store: Store) -> None:
    ep = episodic(store, batch=2)
    ids = record_days(ep, 4)
    answers = iter(["first two", ""])
    with pytest.raises(ValueError):
        ep.consolidate(lambda texts: next(answers))
    assert [e.id for e in ep.pending()] == ids[2:]
    assert len(store.items("u1", kind="consolidated")) == 1


def test_force_consolidates_a_partial_batch_of_two_or_more(store: Store) -> None:
    ep = episodic(store, batch=5)
    ids = record_days(ep, 1)
    assert ep.consolidate(joined, force=True) == []  # one episode: nothing to merge
    ids += record_days(ep, 1, first=1)
    assert ep.consolidate(joined) == []
    made = ep.consolidate(joined, force=True)
    assert len(made) == 1
    assert [e.id for e in ep.originals(made[0])] == ids
    assert store.get("u1", made[0]).title == "2 episodes"
    assert ep.pending() == []


def test_an_identical_summary_of_two_batches_covers_both(store: Store) -> None:
    ep = episodic(store, batch=2)
    ids = record_days(ep, 4)
    made = ep.consolidate(lambda texts: "A quiet week")
    assert len(made) == 1
    summary = store.get("u1", made[0])
    assert isinstance(summary, ConsolidatedItem)
    assert summary.sources == ids and summary.title == "4 episodes"
    assert summary.event_time == T0 - timedelta(days=3)
    assert [e.id for e in ep.originals(made[0])] == ids


def hit(item_id: str, kind: str, score: float, text: str = "t") -> Hit:
    return Hit(id=item_id, node="item", kind=kind, text=text, score=score)


def test_prefer_summaries_weights_originals_and_adds_their_summary(store: Store) -> None:
    ep = episodic(store, batch=2, weight=0.5)
    ids = record_days(ep, 3)
    (summary,) = ep.consolidate(joined)
    hits = [hit("i_fact", "semantic", 0.7), hit(ids[0], "episodic", 0.9),
            hit(ids[1], "episodic", 0.8), hit(ids[2], "episodic", 0.6)]
    out = ep.prefer_summaries(hits)
    assert [(h.id, h.kind, h.score) for h in out] == [
        (summary, "consolidated", 0.9),  # the best of its episodes' unweighted scores
        ("i_fact", "semantic", 0.7),
        (ids[2], "episodic", 0.6),  # not compressed: unchanged
        (ids[0], "episodic", pytest.approx(0.45)),
        (ids[1], "episodic", pytest.approx(0.4)),
    ]
    assert out[0].text == "episode 0 | episode 1"


def test_prefer_summaries_keeps_a_present_summary_and_dedups(store: Store) -> None:
    ep = episodic(store, batch=2, weight=1.0)
    ids = record_days(ep, 2)
    (summary,) = ep.consolidate(joined)
    hits = [hit(ids[0], "episodic", 0.5), hit(summary, "consolidated", 0.3),
            hit("i_x", "semantic", 0.2), hit("i_x", "semantic", 0.4)]
    out = ep.prefer_summaries(hits)
    assert [(h.id, h.score) for h in out] == [(ids[0], 0.5), ("i_x", 0.4), (summary, 0.3)]
    tie = ep.prefer_summaries([hit(ids[1], "episodic", 0.5)])
    assert [h.id for h in tie] == [summary, ids[1]]  # on a tie the summary first
    assert ep.prefer_summaries([]) == []


def test_prefer_summaries_reads_flags_in_one_query(store: Store) -> None:
    ep = episodic(store, batch=2)
    ids = record_days(ep, 6)
    ep.consolidate(joined)
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    try:
        ep.prefer_summaries([hit(i, "episodic", 1.0) for i in ids])
    finally:
        store.conn.set_trace_callback(None)
    assert len(statements) == 2  # the flags with their summaries, then the summaries


def test_no_read_crosses_tenants(store: Store) -> None:
    mine, theirs = episodic(store, batch=2), episodic(store, "u2", batch=2)
    ids = record_days(mine, 2)
    (summary,) = mine.consolidate(joined)
    other = record_days(theirs, 1)
    assert [e.id for e in theirs.episodes()] == other
    assert [e.id for e in theirs.pending()] == other
    assert theirs.consolidate(joined, force=True) == []
    assert theirs.originals(summary) == []
    assert theirs.summary_of(ids[0]) is None
    # Another tenant's compressed episode is not theirs to weight or summarise.
    assert [h.score for h in theirs.prefer_summaries([hit(ids[0], "episodic", 1.0)])] == [1.0]
    assert [e.id for e in mine.pending()] == []
