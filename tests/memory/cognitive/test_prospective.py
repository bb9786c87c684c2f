"""Prospective memory: intentions fired by keywords and by time, ordered, resolved."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstrata.memory import Store
from memstrata.memory.cognitive.prospective import Prospective
from memstrata.memory.models import FactItem, ProspectiveItem

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


class FakeClock:
    """A settable clock."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_intend_stores_a_pending_intention(store: Store) -> None:
    pro = Prospective(store, "u1", clock=FakeClock())
    iid = pro.intend("Check the student understands variables", keywords=[" variables ", ""],
                     priority=2)
    item = store.get("u1", iid)
    assert isinstance(item, ProspectiveItem)
    assert (item.trigger_keywords, item.trigger_at, item.status) == (["variables"], None,
                                                                     "pending")
    assert (item.action, item.priority, item.recorded_at) == (
        "Check the student understands variables", 2, T0)
    at = T0 + timedelta(hours=1)
    timed = store.get("u1", pro.intend("Call Ana", at=at, action="phone"))
    assert (timed.trigger_at, timed.event_time, timed.action) == (at, at, "phone")


@pytest.mark.parametrize(("text", "keywords", "at"), [
    ("", ["tea"], None), ("  ", (), T0), ("Call Ana", (), None), ("Call Ana", ["", " "], None),
    ("Call Ana", ["the of"], None),
])
def test_intend_rejects_no_text_or_no_trigger(store: Store, text: str, keywords: list[str],
                                              at: datetime | None) -> None:
    with pytest.raises(ValueError):
        Prospective(store, "u1").intend(text, keywords=keywords, at=at)
    assert store.items("u1") == []


def test_keyword_fires_on_normalised_tokens(store: Store) -> None:
    pro = Prospective(store, "u1")
    iid = pro.intend("Check the student understands variables before functions",
                     keywords=["variables"])
    phrase = pro.intend("Review the loop lesson", keywords=["for loops"])
    assert pro.check("Today we start with functions.") == []
    text = "Let's define a Variable x. " + "x" * 300
    [fired] = pro.check(text)
    assert (fired.id, fired.status, fired.triggered_by) == (iid, "triggered", text[:200])
    assert store.get("u1", iid).status == "triggered"
    assert pro.check("more variables") == []  # fires once
    assert [i.id for i in pro.pending()] == [phrase]


def test_a_phrase_needs_all_its_tokens(store: Store) -> None:
    pro = Prospective(store, "u1")
    iid = pro.intend("Ask about the trip", keywords=["Lisbon trip"])
    assert pro.check("I loved Lisbon") == []
    assert [i.id for i in pro.check("Our trips to Lisbon were great")] == [iid]


def test_time_trigger_fires_once_due(store: Store) -> None:
    clock = FakeClock()
    pro = Prospective(store, "u1", clock=clock)
    iid = pro.intend("Water the plants", at=T0 + timedelta(hours=2))
    kw = pro.intend("Mention the plants", keywords=["garden"])
    assert pro.due() == [] and pro.check("nothing here") == []
    clock.now = T0 + timedelta(hours=2)
    [fired] = pro.due()
    assert (fired.id, fired.triggered_by, fired.status) == (iid, "time", "triggered")
    assert [i.id for i in pro.pending()] == [kw]
    assert pro.due(now=T0 + timedelta(days=9)) == []  # keyword triggers never come due


def test_check_fires_time_triggers_with_an_explicit_now(store: Store) -> None:
    pro = Prospective(store, "u1", clock=FakeClock())
    iid = pro.intend("Water the plants", at=T0 + timedelta(hours=2))
    assert pro.check("hello", now=T0 + timedelta(hours=1)) == []
    naive = (T0 + timedelta(hours=3)).replace(tzinfo=None)
    assert [(i.id, i.triggered_by) for i in pro.check("hello", now=naive)] == [(iid, "time")]


def test_fired_in_priority_then_age_order(store: Store) -> None:
    clock = FakeClock()
    pro = Prospective(store, "u1", clock=clock)
    ids = {}
    for n, (name, priority) in enumerate([("low", 0), ("high old", 5), ("mid", 1),
                                          ("high new", 5)]):
        clock.now = T0 + timedelta(minutes=n)
        ids[name] = pro.intend(f"Remind {name}", keywords=["exam"], priority=priority)
    assert [i.id for i in pro.pending()] == [ids["high old"], ids["high new"], ids["mid"],
                                             ids["low"]]
    fired = pro.check("the exam is tomorrow")
    assert [i.id for i in fired] == [ids["high old"], ids["high new"], ids["mid"], ids["low"]]
    assert [i.id for i in pro.triggered()] == [i.id for i in fired]
    assert pro.triggered(limit=1)[0].id == ids["high old"]


def test_resolve(store: Store) -> None:
    pro = Prospective(store, "u1")
    iid = pro.intend("Ask about the exam", keywords=["exam"])
    pro.check("exam results")
    done = pro.resolve(iid)
    assert done.status == "resolved" and done.triggered_by == "exam results"
    versions = len(store.history("u1", iid))
    assert pro.resolve(iid) == done  # a no-op
    assert len(store.history("u1", iid)) == versions
    assert pro.triggered() == [] and pro.pending() == []
    assert pro.resolve(pro.intend("Pay rent", keywords=["rent"])).status == "resolved"
    fact = store.add(FactItem(user_id="u1", text="Ana likes tea"))
    for bad in ("i_missing", fact):
        with pytest.raises(KeyError):
            pro.resolve(bad)


def test_intending_again_rearms_the_intention(store: Store) -> None:
    pro = Prospective(store, "u1")
    iid = pro.intend("Ask about the exam", keywords=["exam"])
    pro.check("exam")
    pro.resolve(iid)
    assert pro.intend("Ask about the exam", keywords=["test"], priority=3) == iid
    again = store.get("u1", iid)
    assert (again.status, again.trigger_keywords, again.priority) == ("pending", ["test"], 3)


def test_tenants_are_isolated(store: Store) -> None:
    theirs = Prospective(store, "u2")
    other = theirs.intend("Ask about the exam", keywords=["exam"], at=T0)
    mine = Prospective(store, "u1")
    assert mine.check("exam", now=T0 + timedelta(days=1)) == []
    assert mine.due(now=T0 + timedelta(days=1)) == []
    assert mine.pending() == [] and mine.triggered() == []
    with pytest.raises(KeyError):
        mine.resolve(other)
    assert store.get("u2", other).status == "pending"
