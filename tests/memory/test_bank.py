"""Consolidation decisions on scripted cases, and forgetting with floors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memstrata.memory import Store, StrategyItem
from memstrata.memory.bank import ConsolidationPolicy, active_strategies
from memstrata.memory.bank_forget import ForgettingPolicy
from memstrata.memory.supersede import RELATION
from tests.conftest import FakeEmbedder

U = "u1"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def strat(title: str, text: str, *, description: str = "", polarity: str = "success",
          uses: int = 0, wins: int = 0, evidence: list[str] | None = None,
          age: int | None = None) -> StrategyItem:
    """A strategy of tenant ``U``; ``age`` (days after T0) sets its record time."""
    return StrategyItem(user_id=U, title=title, description=description, text=text,
                        polarity=polarity, uses=uses, wins=wins,  # type: ignore[arg-type]
                        evidence=evidence or [],
                        recorded_at=None if age is None else T0 + timedelta(days=age))


def get(store: Store, item_id: str) -> StrategyItem:
    item = store.get(U, item_id)
    assert isinstance(item, StrategyItem)
    return item


def events(store: Store, kind: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in store.runs.events(U, limit=1000)
            if e["payload"]["type"] == kind]


PROBE = strat("Probe the schema first", "Run a query that lists the classes before writing "
              "the real SPARQL query.", description="list classes before querying",
              uses=3, wins=2, evidence=["run-1"])


@pytest.fixture
def policy() -> ConsolidationPolicy:
    return ConsolidationPolicy()


def test_novel_strategy_is_added_and_logged(store: Store, policy: ConsolidationPolicy) -> None:
    d = policy.consolidate(store, U, PROBE)
    assert (d.action, d.rule, d.target_id) == ("add", "novel", None)
    assert d.item_id is not None and get(store, d.item_id).title == PROBE.title
    [event] = events(store, "bank.consolidate")
    assert event["action"] == "add" and event["item_id"] == d.item_id


def test_exact_duplicate_merges_with_pooled_counters(store: Store,
                                                     policy: ConsolidationPolicy) -> None:
    first = policy.consolidate(store, U, PROBE).item_id
    again = PROBE.model_copy(update={"uses": 4, "wins": 1, "evidence": ["run-2"],
                                     "tags": ["sparql"]})
    d = policy.consolidate(store, U, again)
    assert (d.action, d.rule, d.target_id, d.item_id) == ("merge", "exact", first, first)
    merged = get(store, first)  # type: ignore[arg-type]
    assert (merged.uses, merged.wins) == (7, 3)
    assert merged.evidence == ["run-1", "run-2"] and merged.tags == ["sparql"]
    assert len(active_strategies(store, U)) == 1


def test_fuzzy_duplicate_merges(store: Store, policy: ConsolidationPolicy) -> None:
    first = policy.consolidate(store, U, PROBE).item_id
    near = strat("Probe schema first!", "Before the real query, list the classes so the "
                 "query uses real names.", description="List the classes before querying.",
                 uses=1, wins=1)
    d = policy.decide(store, U, near)
    assert (d.action, d.rule, d.target_id) == ("merge", "fuzzy", first)
    assert d.similarity is not None and d.similarity >= policy.fuzzy_merge
    policy.apply(store, U, d)
    assert (get(store, first).uses, get(store, first).wins) == (4, 3)  # type: ignore[arg-type]
    assert len(active_strategies(store, U)) == 1


def test_same_title_new_guidance_supersedes_and_keeps_old(store: Store,
                                                          policy: ConsolidationPolicy) -> None:
    old = policy.consolidate(store, U, PROBE).item_id
    assert old is not None
    newer = strat("Probe the schema first", "Fetch the ontology's property list with one "
                  "DESCRIBE call; class lists time out on big endpoints.",
                  description="describe properties, skip class listing")
    d = policy.consolidate(store, U, newer)
    assert (d.action, d.rule, d.target_id) == ("supersede", "same_title", old)
    kept = get(store, old)
    assert kept.valid_to is not None  # ended, never deleted
    [edge] = store.edges(U, src=d.item_id, relation=RELATION)
    assert edge.dst == old and "same_title" in edge.metadata["reason"]
    assert [s.id for s in active_strategies(store, U)] == [d.item_id]


def test_older_candidate_with_same_title_is_stale(store: Store,
                                                  policy: ConsolidationPolicy) -> None:
    policy.consolidate(store, U, PROBE.model_copy(update={"recorded_at": T0}))
    old = strat("Probe the schema first", "Fetch the property list with one DESCRIBE call "
                "instead of listing classes.", age=-30)
    d = policy.consolidate(store, U, old)
    assert (d.action, d.rule) == ("discard", "stale")
    assert len(active_strategies(store, U)) == 1


def test_success_contradicting_a_guardrail_supersedes_it(store: Store,
                                                         policy: ConsolidationPolicy) -> None:
    guard = strat("Avoid OPTIONAL", "Never use OPTIONAL clauses in SPARQL queries over "
                  "Wikidata.", polarity="failure")
    gid = policy.consolidate(store, U, guard).item_id
    flip = strat("Use OPTIONAL for sparse properties", "Use OPTIONAL clauses in SPARQL "
                 "queries over Wikidata.")
    d = policy.consolidate(store, U, flip)
    assert (d.action, d.rule, d.target_id) == ("supersede", "contradiction", gid)
    assert get(store, gid).valid_to is not None  # type: ignore[arg-type]
    assert store.edges(U, src=d.item_id, dst=gid, relation=RELATION)


def test_complementary_guardrail_is_added_not_superseding(store: Store,
                                                          policy: ConsolidationPolicy) -> None:
    # "do X" and "not doing X fails" back each other up: both stay active.
    sid = policy.consolidate(store, U, strat("Verify the endpoint", "Verify the endpoint "
                                             "answers before querying.")).item_id
    d = policy.consolidate(store, U, strat("Unverified endpoints", "Not verifying that the "
                                           "endpoint answers led to long timeouts and a "
                                           "wasted run.", polarity="failure"))
    assert d.action == "add"
    assert get(store, sid).valid_to is None  # type: ignore[arg-type]


def test_polarity_respected_success_never_merges_into_failure(
        store: Store, policy: ConsolidationPolicy) -> None:
    fail = strat("Probe the schema first", PROBE.text, description=PROBE.description,
                 polarity="failure")
    fid = policy.consolidate(store, U, fail).item_id
    # Same text, other polarity: the store's unique key would fold it into the failure row.
    d = policy.consolidate(store, U, PROBE)
    assert (d.action, d.rule, d.target_id) == ("discard", "exact_conflict", fid)
    # Same gist, other words, other polarity: no merge either.
    near = strat("Probe schema first", "Listing classes first helped the query find real "
                 "names.", description="list classes before querying")
    d2 = policy.consolidate(store, U, near)
    assert d2.action == "add" and d2.target_id is None
    assert get(store, fid).uses == 0 and get(store, fid).polarity == "failure"  # type: ignore
    assert len(active_strategies(store, U)) == 2


@pytest.mark.parametrize("text,rule", [
    ("Be careful.", "generic"),
    ("Double-check your work!", "generic"),
    ("think step-by-step", "generic"),
    ("Use SPARQL.", "too_short"),
    ("It is what it is, you know, and so on.", "no_content"),
])
def test_generic_noise_is_discarded(store: Store, policy: ConsolidationPolicy, text: str,
                                    rule: str) -> None:
    d = policy.consolidate(store, U, strat("Tip", text))
    assert (d.action, d.rule, d.item_id) == ("discard", rule, None)
    assert active_strategies(store, U) == []
    assert events(store, "bank.consolidate")[0]["rule"] == rule


def test_blocklist_is_a_setting(store: Store) -> None:
    text = "Always ask the user for the ontology name first."
    assert ConsolidationPolicy().decide(store, U, strat("Ask", text)).action == "add"
    custom = ConsolidationPolicy(generic=["always ask the user for the ontology name first"])
    assert custom.decide(store, U, strat("Ask", text)).action == "discard"


def test_decide_writes_nothing_and_every_apply_is_logged(store: Store,
                                                         policy: ConsolidationPolicy) -> None:
    policy.decide(store, U, PROBE)
    assert store.runs.events(U) == [] and active_strategies(store, U) == []
    for item in (PROBE, PROBE, strat("Tip", "Be careful")):
        policy.consolidate(store, U, item)
    assert [e["action"] for e in reversed(events(store, "bank.consolidate"))] == [
        "add", "merge", "discard"]


def test_other_tenant_candidate_is_refused(store: Store, policy: ConsolidationPolicy) -> None:
    with pytest.raises(ValueError):
        policy.decide(store, "someone-else", PROBE)


# -- forgetting ------------------------------------------------------------------------------

def fill(store: Store, specs: list[tuple[str, int, int]]) -> list[str]:
    """Store strategies from (polarity, uses, wins), one day apart, oldest first."""
    return store.add_many([strat(f"s{n}", f"strategy number {n} with {pol} guidance",
                                 polarity=pol, uses=u, wins=w, age=n)
                           for n, (pol, u, w) in enumerate(specs)])


def test_bank_bounded_retires_lowest_value_then_oldest(store: Store) -> None:
    ids = fill(store, [("success", 10, 9), ("success", 4, 0), ("success", 0, 0),
                       ("success", 4, 0), ("failure", 2, 2), ("failure", 10, 1)])
    retired = ForgettingPolicy(max_active=3, min_success=1, min_failure=1).enforce(store, U)
    # values: 0.83, 0.17, 0.5, 0.17, 0.75, 0.17 -> the three 0.17s, older first.
    assert [r.item_id for r in retired] == [ids[1], ids[3], ids[5]]
    assert len(active_strategies(store, U)) == 3
    for r in retired:
        assert get(store, r.item_id).valid_to is not None  # retired rows are kept
        assert "max_active" in r.reason
    assert [e["item_id"] for e in reversed(events(store, "bank.retire"))] == [
        r.item_id for r in retired]


def test_floors_hold_for_both_polarities_even_when_lowest(store: Store) -> None:
    # The successes score lowest of all, yet both floors bind before the bound is met.
    ids = fill(store, [("success", 10, 0), ("success", 9, 0), ("success", 8, 0),
                       ("failure", 0, 0), ("failure", 1, 1), ("failure", 9, 9)])
    retired = ForgettingPolicy(max_active=3, min_success=2, min_failure=1).enforce(store, U)
    # s0 goes; s1, s2 are held by the success floor; then the failures, lowest first,
    # down to the failure floor.
    assert [r.item_id for r in retired] == [ids[0], ids[3], ids[4]]
    active = active_strategies(store, U)
    assert [s.id for s in active] == [ids[1], ids[2], ids[5]]
    assert [s.polarity for s in active] == ["success", "success", "failure"]


def test_success_floor_holds_when_successes_score_lowest(store: Store) -> None:
    fill(store, [("success", 10, 0), ("success", 10, 0), ("failure", 4, 4),
                 ("failure", 4, 4), ("failure", 4, 4)])
    retired = ForgettingPolicy(max_active=2, min_success=2, min_failure=0).enforce(store, U)
    assert {r.polarity for r in retired} == {"failure"} and len(retired) == 3
    assert [s.polarity for s in active_strategies(store, U)] == ["success", "success"]


def test_under_the_bound_nothing_is_retired(store: Store) -> None:
    fill(store, [("success", 0, 0), ("failure", 0, 0)])
    assert ForgettingPolicy(max_active=2, min_success=0, min_failure=0).enforce(store, U) == []
    assert events(store, "bank.retire") == []


def test_floors_larger_than_bank_are_refused() -> None:
    with pytest.raises(ValueError):
        ForgettingPolicy(max_active=3, min_success=2, min_failure=2)


def test_custom_value_ranks_retirement(store: Store) -> None:
    ids = fill(store, [("success", 0, 0), ("success", 0, 0), ("success", 0, 0)])
    policy = ForgettingPolicy(max_active=2, min_success=0, min_failure=0)
    retired = policy.enforce(store, U, value=lambda s: -float(s.title[1:]))
    assert [r.item_id for r in retired] == [ids[2]]  # the newest, by this value


def test_record_use_counts_uses_and_wins(store: Store) -> None:
    a, b = fill(store, [("success", 0, 0), ("failure", 0, 0)])
    policy = ForgettingPolicy(max_active=10, min_success=0, min_failure=0)
    policy.record_use(store, U, [a, b, a], won=True)
    policy.record_use(store, U, [a], won=False)
    assert (get(store, a).uses, get(store, a).wins) == (2, 1)
    assert (get(store, b).uses, get(store, b).wins) == (1, 1)
    assert [e["won"] for e in reversed(events(store, "bank.use"))] == [True, False]


def test_record_use_is_one_transaction(store: Store) -> None:
    [a] = fill(store, [("success", 0, 0)])
    policy = ForgettingPolicy(max_active=10, min_success=0, min_failure=0)
    with pytest.raises(KeyError):
        policy.record_use(store, U, [a, "missing"], won=True)
    assert get(store, a).uses == 0  # rolled back with the failing id
    assert events(store, "bank.use") == []


def test_record_use_feeds_forgetting(store: Store) -> None:
    a, b = fill(store, [("success", 0, 0), ("success", 0, 0)])
    policy = ForgettingPolicy(max_active=1, min_success=0, min_failure=0)
    policy.record_use(store, U, [a], won=False)  # a now scores 1/3 < b's 1/2
    assert [r.item_id for r in policy.enforce(store, U)] == [a]
    assert [s.id for s in active_strategies(store, U)] == [b]


@pytest.mark.parametrize("text", [
    "1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1",
    "the next thought is that the next thought is that the next thought is that the next"
    " thought is that",
])
def test_repetition_loops_are_noise(store: Store, policy: ConsolidationPolicy,
                                    text: str) -> None:
    decision = policy.decide(store, "u", StrategyItem(user_id="u", text=text))
    assert decision.action == "discard" and decision.rule == "repetitive"


def test_embed_strategies_stores_what_dense_retrieval_reads(store: Store,
                                                            embedder: FakeEmbedder) -> None:
    from memstrata.memory.bank import embed_strategies, embedding_text
    from memstrata.memory.models import SemanticItem, utcnow

    a = store.add(PROBE)
    b = store.add(strat("Declare prefixes", "Put PREFIX lines above the SELECT clause.",
                        description="any SPARQL query", polarity="failure"))
    retired = store.add(strat("Old advice", "Query the whole graph with no LIMIT at all."))
    store.update(U, retired, valid_to=utcnow())
    fact = store.add(SemanticItem(user_id=U, text="AHU-1 feeds three zones."))
    # None: every active strategy without a vector (not retired ones, not other kinds).
    assert embed_strategies(store, U, embedder) == 2
    ids, matrix = store.vectors(U, embedder.name)
    assert sorted(ids) == sorted([a, b])
    row = matrix[ids.index(a)]
    assert (row == embedder.encode([embedding_text(get(store, a))])[0]).all()
    assert "list classes before querying" in embedding_text(get(store, a))
    calls = embedder.calls
    assert embed_strategies(store, U, embedder) == 0 and embedder.calls == calls
    # Rewriting a strategy's text drops its vector; the next pass embeds it again.
    store.update(U, b, text="Declare every prefix the query uses before SELECT.")
    assert sorted(store.vectors(U, embedder.name)[0]) == [a]
    assert embed_strategies(store, U, embedder) == 1
    # Named ids: strategies only, this tenant only.
    assert embed_strategies(store, U, embedder, [fact, a, a, "missing"]) == 1
    assert embed_strategies(store, "u2", embedder, [a]) == 0
    assert fact not in store.vectors(U, embedder.name)[0]
