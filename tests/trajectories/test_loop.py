"""The closed loop's write-back on a real store file: append-only storage with exact-dup
folding, usage and win counters, consolidation, a bounded bank with floors, tenants."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.memory import Store, StrategyItem
from memstrata.memory.bank import ConsolidationPolicy, active_strategies
from memstrata.memory.bank_forget import ForgettingPolicy
from memstrata.trajectories.loop import LoopUpdate, append, learn
from tests.conftest import FakeEmbedder

U = "u1"
OTHER = "u2"


@pytest.fixture
def bank(file_store: Store) -> Store:
    """The store the bank lives in (a real file, as a run's memory.db is)."""
    return file_store


def strat(title: str, text: str, *, description: str = "", polarity: str = "success",
          user_id: str = U) -> StrategyItem:
    return StrategyItem(user_id=user_id, title=title, description=description, text=text,
                        polarity=polarity)  # type: ignore[arg-type]


PREFIX = strat("Declare the brick prefix", "Always declare PREFIX brick: before using "
               "brick:feeds in a SPARQL query.", description="queries over Brick models")
PATHS = strat("Walk feeds transitively", "Use the property path brick:feeds+ to reach zones "
              "fed through intermediate VAV boxes.", description="multi-hop feeds questions")
GUARD = strat("Unbound prefix fails", "A query that uses rdfs: without declaring it fails "
              "to parse; declare rdfs before the SELECT.", description="any SPARQL query",
              polarity="failure")


def get(store: Store, item_id: str, user_id: str = U) -> StrategyItem:
    item = store.get(user_id, item_id)
    assert isinstance(item, StrategyItem)
    return item


def events(store: Store, kind: str, user_id: str = U) -> list[dict[str, Any]]:
    return [e["payload"] for e in reversed(store.runs.events(user_id, limit=1000))
            if e["payload"]["type"] == kind]


def test_append_stores_new_and_folds_an_exact_duplicate(bank: Store) -> None:
    first = append(bank, U, PREFIX)
    assert (first.action, first.rule) == ("add", "append") and first.item_id
    assert get(bank, first.item_id).title == PREFIX.title
    again = append(bank, U, PREFIX.model_copy(update={"title": "Another title"}))
    assert (again.action, again.rule) == ("merge", "exact")
    assert again.item_id == again.target_id == first.item_id and again.similarity == 100.0
    assert [s.id for s in active_strategies(bank, U)] == [first.item_id]  # nothing new
    logged = events(bank, "bank.append")
    assert [(e["action"], e["item_id"]) for e in logged] == [
        ("add", first.item_id), ("merge", first.item_id)]
    assert first.event_id and again.event_id and first.event_id < again.event_id


def test_learn_without_policies_appends_every_candidate(bank: Store) -> None:
    up = learn(bank, U, used=[], won=True, candidates=[PREFIX, PATHS, GUARD, PREFIX])
    assert isinstance(up, LoopUpdate) and up.won and up.used == [] and up.retired == []
    assert [d.action for d in up.decisions] == ["add", "add", "add", "merge"]
    assert len(active_strategies(bank, U)) == 3
    assert len(events(bank, "bank.append")) == 4 and events(bank, "bank.consolidate") == []


def test_used_strategies_count_uses_and_wins_only_when_won(bank: Store) -> None:
    a, b = (append(bank, U, s).item_id for s in (PREFIX, GUARD))
    assert a and b
    learn(bank, U, used=[a, b, a], won=True, candidates=[])
    up = learn(bank, U, used=[a], won=False, candidates=[])
    assert up.used == [a] and not up.won
    assert (get(bank, a).uses, get(bank, a).wins) == (2, 1)  # listed twice: one use
    assert (get(bank, b).uses, get(bank, b).wins) == (1, 1)
    assert [e["won"] for e in events(bank, "bank.use")] == [True, False]


def test_ids_that_are_not_strategies_are_ignored(bank: Store) -> None:
    from memstrata.memory.models import SemanticItem

    a = append(bank, U, PREFIX).item_id
    fact = bank.add(SemanticItem(user_id=U, text="AHU-1 feeds three zones."))
    up = learn(bank, U, used=["nope", fact, a], won=True, candidates=[])
    assert up.used == [a]
    assert (get(bank, a).uses, get(bank, a).wins) == (1, 1)
    up = learn(bank, U, used=["nope", fact], won=True, candidates=[])
    assert up.used == [] and len(events(bank, "bank.use")) == 1  # nothing to count


def test_consolidation_policy_decides_and_a_near_duplicate_merges(bank: Store) -> None:
    up = learn(bank, U, used=[], won=True, candidates=[PREFIX], consolidation=ConsolidationPolicy())
    [added] = up.decisions
    assert added.action == "add" and added.rule == "novel"
    near = strat("Declare the brick prefix first", "Put PREFIX brick: <...#> at the top "
                 "of every query that uses brick terms.",
                 description="queries over Brick models")
    up = learn(bank, U, used=[], won=True, candidates=[near, strat("Noise", "Be careful.")],
               consolidation=ConsolidationPolicy())
    merged, noise = up.decisions
    assert (merged.action, merged.rule, merged.target_id) == ("merge", "fuzzy", added.item_id)
    assert noise.action == "discard"
    assert [s.id for s in active_strategies(bank, U)] == [added.item_id]
    assert [e["action"] for e in events(bank, "bank.consolidate")] == [
        "add", "merge", "discard"]
    assert events(bank, "bank.append") == []


def test_forgetting_bounds_the_bank_and_keeps_both_floors(bank: Store) -> None:
    policy = ForgettingPolicy(max_active=2, min_success=1, min_failure=1)
    wins = [strat(f"Success strategy {n}", f"Success strategy number {n}: use brick:feeds "
                  f"path variant {n} for zone lookups.") for n in range(3)]
    losses = [strat(f"Failure guardrail {n}", f"Guardrail number {n}: a FILTER on "
                    f"literal variant {n} returned no rows.", polarity="failure")
              for n in range(2)]
    up = learn(bank, U, used=[], won=True, candidates=[*wins, *losses], forgetting=policy)
    assert [d.action for d in up.decisions] == ["add"] * 5
    assert len(up.retired) == 3
    active = active_strategies(bank, U)
    assert len(active) == 2
    assert sorted(s.polarity for s in active) == ["failure", "success"]
    assert len(events(bank, "bank.retire")) == 3
    for r in up.retired:  # retired, not deleted
        assert get(bank, r.item_id).valid_to is not None

    # A later task that uses the survivors and adds more stays bounded, floors intact.
    more = [strat(f"Late success {n}", f"Late success number {n}: group zones by their "
                  f"air handler {n} with COUNT.") for n in range(2)]
    learn(bank, U, used=[s.id for s in active], won=True, candidates=more, forgetting=policy)
    active = active_strategies(bank, U)
    assert len(active) == 2
    assert sorted(s.polarity for s in active) == ["failure", "success"]


def test_tenants_never_mix(bank: Store) -> None:
    theirs = append(bank, OTHER, PREFIX.model_copy(update={"user_id": OTHER})).item_id
    assert theirs
    up = learn(bank, U, used=[theirs], won=True, candidates=[PREFIX],
               forgetting=ForgettingPolicy(max_active=0, min_success=0, min_failure=0))
    # My copy is new (not folded into theirs), their row is neither counted nor retired.
    [mine] = up.decisions
    assert mine.action == "add" and mine.item_id != theirs
    assert up.used == []
    other = get(bank, theirs, OTHER)
    assert (other.uses, other.wins, other.valid_to) == (0, 0, None)
    assert [s.id for s in active_strategies(bank, OTHER)] == [theirs]
    assert bank.get(U, theirs) is None and bank.get(OTHER, mine.item_id or "") is None
    assert [e["action"] for e in events(bank, "bank.append", OTHER)] == ["add"]
    assert [e["action"] for e in events(bank, "bank.append")] == ["add"]


def test_tenants_never_mix_under_consolidation(bank: Store) -> None:
    theirs = ConsolidationPolicy().consolidate(
        bank, OTHER, PREFIX.model_copy(update={"user_id": OTHER})).item_id
    [d] = learn(bank, U, used=[], won=True, candidates=[PREFIX],
                consolidation=ConsolidationPolicy()).decisions
    assert d.action == "add" and d.item_id != theirs
    assert get(bank, theirs or "", OTHER).valid_to is None


def test_append_refuses_another_tenants_candidate(bank: Store) -> None:
    stray = PREFIX.model_copy(update={"user_id": OTHER})
    with pytest.raises(ValueError):  # the consolidating mode refuses it
        learn(bank, U, used=[], won=True, candidates=[stray],
              consolidation=ConsolidationPolicy())
    with pytest.raises(ValueError, match="belongs to"):  # and so does append-only
        learn(bank, U, used=[], won=True, candidates=[stray])
    assert active_strategies(bank, OTHER) == [], "u1's loop wrote into u2's bank"


def test_learn_embeds_the_strategies_it_stores(bank: Store, embedder: FakeEmbedder) -> None:
    up = learn(bank, U, used=[], won=True, candidates=[PREFIX, PATHS], embedder=embedder)
    added = [d.item_id for d in up.decisions]
    assert sorted(bank.vectors(U, embedder.name)[0]) == sorted(added)
    # A merge stores no new row (the stored one keeps its vector), noise stores nothing.
    near = strat("Declare the brick prefix first", "Put PREFIX brick: <...#> at the top "
                 "of every query that uses brick terms.",
                 description="queries over Brick models")
    up = learn(bank, U, used=[], won=True, candidates=[near, strat("Noise", "Be careful."),
                                                       GUARD],
               consolidation=ConsolidationPolicy(), embedder=embedder)
    assert [d.action for d in up.decisions] == ["merge", "discard", "add"]
    assert sorted(bank.vectors(U, embedder.name)[0]) == sorted([*added, up.decisions[2].item_id])
    # Without an embedder nothing is embedded, as before.
    other = learn(bank, OTHER, used=[], won=True, candidates=[strat(
        "Other tenant", "Declare prefixes in the other tenant's queries too.",
        user_id=OTHER)])
    assert other.decisions[0].action == "add" and bank.vectors(OTHER, embedder.name)[0] == []
