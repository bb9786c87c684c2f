"""Reconciliation rules: exact before fuzzy, per person, single-valued contradictions."""

from __future__ import annotations

from datetime import UTC, datetime

from memstrata.memory.hierarchy import HierarchyStats, contradictions, dedup, single_valued
from memstrata.memory.models import FactItem


def fact(about: str, text: str, predicate: str = "likes", obj: str = "x",
         when: datetime | None = None, evidence: str = "D1:1") -> FactItem:
    return FactItem(user_id="u", text=text, about=about, subject=about, predicate=predicate,
                    object=obj, event_time=when, evidence=[evidence])


def test_exact_then_fuzzy_and_never_across_people() -> None:
    stats = HierarchyStats()
    kept = dedup([
        fact("Ana", "Ana likes green tea", evidence="D1:1"),
        fact("Ana", "ana likes  green tea!", evidence="D2:4"),        # exact once folded
        fact("Ana", "Ana likes green tea a lot", evidence="D3:2"),    # fuzzy twin
        fact("Tom", "Ana likes green tea", evidence="D4:1"),          # same words, Tom's
        fact("Ana", "Ana likes rock climbing", evidence="D5:5"),
    ], fuzzy=90, stats=stats)
    assert [(f.about, f.evidence) for f in kept] == [
        ("Ana", ["D1:1", "D2:4", "D3:2"]), ("Tom", ["D4:1"]), ("Ana", ["D5:5"])]
    assert (stats.exact_merged, stats.fuzzy_merged) == (1, 1)


def test_contradictions_need_a_single_valued_predicate_and_another_value() -> None:
    may, june, july = (datetime(2023, m, 1, tzinfo=UTC) for m in (5, 6, 7))
    oslo = fact("Ana", "Ana lives in Oslo", "lives in", "Oslo", may)
    lyon = fact("Ana", "Ana lives in Lyon", "lives in", "Lyon", july)
    lyon_again = fact("Ana", "Ana lives in lyon", "lives in", "lyon", july)
    tom = fact("Tom", "Tom lives in Rome", "lives in", "Rome", june)
    tea = fact("Ana", "Ana likes tea", "likes", "tea", may)
    coffee = fact("Ana", "Ana likes coffee", "likes", "coffee", july)
    pairs = contradictions([lyon, tom, oslo, tea, coffee, lyon_again])
    assert [(new.object, old.object) for new, old in pairs] == [("Lyon", "Oslo")]
    assert single_valued("works as") and single_valued("moved to")
    assert not single_valued("likes")
