"""Memory health against a real store: bank size, consolidation rates, drift, usage."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memstrata.bench.experiments import health as health_mod
from memstrata.bench.experiments.health import memory_health, usage_distribution
from memstrata.bench.experiments.records import BankAction, TaskResult
from memstrata.memory import Store, StrategyItem


def result(index: int, *, success: bool = False, injected: bool = False,
           actions: tuple[str, ...] = (), retired: tuple[str, ...] = ()) -> TaskResult:
    """A task result carrying only what memory health reads."""
    return TaskResult(
        index=index, task_id=f"t{index}", question="q", success=success, converged=True,
        injected_ids=["s1"] if injected else [],
        extracted=[BankAction(title=f"{a} {n}", polarity="success", action=a)
                   for n, a in enumerate(actions)],
        retired=list(retired))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """Four strategies of tenant 'u' (one retired) and one of another tenant."""
    store = Store.open(tmp_path / "m.db")
    rows: list[dict[str, Any]] = [
        dict(title="Probe classes", text="List the classes before querying.",
             polarity="success", uses=3, wins=2),
        dict(title="Bind types", text="Bind rdf:type for every variable.",
             polarity="success", uses=0, wins=0),
        dict(title="No bare predicates", text="Unprefixed predicates never match.",
             polarity="failure", uses=5, wins=1),
        dict(title="Old advice", text="Always use OPTIONAL everywhere.",
             polarity="failure", uses=1, wins=0),
    ]
    ids = [store.add(StrategyItem(user_id="u", **row)) for row in rows]
    store.update("u", ids[3], valid_to=datetime(2025, 1, 1, tzinfo=UTC))
    store.add(StrategyItem(user_id="other", title="x", text="Another tenant's advice."))
    return store


RESULTS = [
    result(0, success=True, actions=("add", "add")),   # shown nothing: not in the drift
    result(1, success=False, injected=True, actions=("merge", "merge", "discard")),
    result(2, success=True, injected=True, actions=("supersede", "add"), retired=("x",)),
    result(3, success=True, injected=True, retired=("x", "y")),
    result(4, success=False, injected=True),
    result(5, success=True, injected=True),
]


def test_memory_health_figures(store: Store) -> None:
    h = memory_health(store, "u", RESULTS)
    assert (h.active, h.total) == (3, 4)
    assert h.by_polarity == {"success": 2, "failure": 1}
    # 7 actions: add 3, merge 2, discard 1, supersede 1.
    assert h.extracted == 7
    assert h.duplicate_rate == round(2 / 7, 4) == 0.2857
    assert h.novelty_rate == round(3 / 7, 4) == 0.4286
    assert h.discard_rate == h.supersede_rate == round(1 / 7, 4) == 0.1429
    assert h.retired == 2  # distinct ids: x, y
    # Shown tasks 1-5: first half [F, T] = 0.5, second half [T, F, T] = 0.6667.
    assert h.win_rate_first_half == 0.5
    assert h.win_rate_second_half == 0.6667
    assert h.win_rate_drift == 0.1667
    # Active uses [3, 0, 5]: the retired row (uses 1) is left out.
    assert h.usage == {"min": 0.0, "median": 3.0, "max": 5.0, "unused": 0.3333}


def test_total_pages_through_the_bank(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    for page in (1, 2, 3):
        monkeypatch.setattr(health_mod, "_PAGE", page)
        assert memory_health(store, "u", []).total == 4


def test_empty_bank_and_run_give_zeros(tmp_path: Path) -> None:
    h = memory_health(Store.open(tmp_path / "m.db"), "u", [])
    assert (h.active, h.total, h.extracted, h.retired) == (0, 0, 0, 0)
    assert h.by_polarity == {"success": 0, "failure": 0}
    assert (h.duplicate_rate, h.novelty_rate, h.discard_rate, h.supersede_rate) == (0, 0, 0, 0)
    assert h.win_rate_drift is None and h.win_rate_first_half is None
    assert h.usage == {"min": 0.0, "median": 0.0, "max": 0.0, "unused": 0.0}


def test_drift_needs_two_shown_tasks(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "m.db")
    one = memory_health(store, "u", [result(0, success=True, injected=True), result(1)])
    assert (one.win_rate_first_half, one.win_rate_second_half, one.win_rate_drift) == (
        None, None, None)
    two = memory_health(store, "u", [result(0, injected=True),
                                     result(1, success=True, injected=True)])
    assert (two.win_rate_first_half, two.win_rate_second_half, two.win_rate_drift) == (
        0.0, 1.0, 1.0)


def test_usage_median_of_even_count() -> None:
    assert usage_distribution([1, 2, 4, 10]) == {"min": 1.0, "median": 3.0, "max": 10.0,
                                                 "unused": 0.0}


def test_a_run_that_does_not_learn_counts_usage_by_its_injections(store: Store) -> None:
    active = {i.title: i.id for i in store.items("u", kind="strategy") if i.valid_to is None}
    shown = [result(n).model_copy(update={"injected_ids": ids}) for n, ids in enumerate(
        [[active["Probe classes"]], [active["Probe classes"], active["Bind types"]]])]
    h = memory_health(store, "u", shown, counted=False)
    # Probe classes shown twice, Bind types once, No bare predicates never; the bank's
    # own counters (3, 0, 5) are not what this run did.
    assert h.usage == {"min": 0.0, "median": 1.0, "max": 2.0, "unused": round(1 / 3, 4)}
    assert h.usage_source == "injections this run"
    assert memory_health(store, "u", shown).usage_source == "bank counters"


def test_drafts_dropped_before_consolidation_are_counted(store: Store) -> None:
    results = [result(0).model_copy(update={"dropped": ["a: too short", "b: repetitive"]}),
               result(1).model_copy(update={"dropped": ["c: restates the task"]}), result(2)]
    assert memory_health(store, "u", results).dropped == 3
