"""Memory health: the strategy bank's state after a run, and how the run shaped it.

Two sources feed :func:`memory_health`. The store says what the bank *is* now (active
rows, every row ever written, uses per active item); the run's task results say what
*happened* to it (what extraction proposed and what consolidation did with each
proposal, what forgetting retired, and whether tasks that were shown strategies
succeeded more often later in the pass than earlier).

Definitions, over the ``extracted`` actions of every task (``n`` of them):

- ``duplicate_rate`` = ``merge`` / n: proposals the bank already held.
- ``novelty_rate`` = ``add`` / n: proposals stored as new rows. A ``supersede`` also
  stores a new row, but it replaces advice the bank held, so it gets its own rate
  (``supersede_rate``) rather than counting as novel.
- ``discard_rate`` = ``discard`` / n: generic noise or stale proposals.

Actions are the bank's four (``BankAction.action`` is typed), so the rates sum to 1.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from memstrata.memory import MemoryStore, StrategyItem
from memstrata.memory.bank import active_strategies

from .records import MemoryHealth, TaskResult

POLARITIES: tuple[Literal["success", "failure"], ...] = ("success", "failure")
"""Both polarities always appear in ``by_polarity``, so an empty side reads as 0."""

_PAGE = 500


def _share(part: int, whole: int) -> float:
    # Rates are rounded to 4 places everywhere in the reports; 0 of 0 is 0, not an error.
    return round(part / whole, 4) if whole else 0.0


def count_strategies(store: MemoryStore, user_id: str) -> int:
    """Every strategy row of the tenant, retired ones included.

    Args:
        store: The run's store.
        user_id: The tenant whose bank is counted.

    Returns:
        The number of ``kind="strategy"`` rows, paged so a large bank never loads at once.
    """
    total, offset = 0, 0
    while True:
        rows = store.items(user_id, kind="strategy", limit=_PAGE, offset=offset)
        total += len(rows)
        if len(rows) < _PAGE:
            return total
        offset += _PAGE


def usage_distribution(uses: Sequence[int]) -> dict[str, float]:
    """Uses per active item: ``min``, ``median``, ``max`` and the ``unused`` share.

    Args:
        uses: One count per active strategy.

    Returns:
        The four figures; all 0.0 for an empty bank.

    Example:
        >>> usage_distribution([0, 4])
        {'min': 0.0, 'median': 2.0, 'max': 4.0, 'unused': 0.5}
    """
    if not uses:
        return {"min": 0.0, "median": 0.0, "max": 0.0, "unused": 0.0}
    return {
        "min": float(min(uses)),
        "median": float(statistics.median(uses)),
        "max": float(max(uses)),
        "unused": _share(sum(1 for u in uses if u == 0), len(uses)),
    }


def injections(items: Sequence[StrategyItem], results: Sequence[TaskResult]) -> list[int]:
    """How many of the run's tasks were shown each item (``injected_ids``), in order."""
    shown = Counter(i for r in results for i in r.injected_ids)
    return [shown[item.id] for item in items]


def win_rate_halves(results: Sequence[TaskResult]) -> tuple[float | None, float | None]:
    """Gold success rate of the tasks shown strategies, first half then second half.

    Only tasks whose ``injected_ids`` is non-empty count: the question is whether the
    advice the bank gives gets better as the pass goes on, and tasks that saw no advice
    say nothing about that. With an odd count the middle task falls in the second half.

    Args:
        results: The run's task results, in the order the tasks ran.

    Returns:
        ``(first, second)``, both None when fewer than two tasks were shown strategies.
    """
    shown = [r for r in results if r.injected_ids]
    if len(shown) < 2:
        return None, None
    half = len(shown) // 2
    first, second = shown[:half], shown[half:]
    return (_share(sum(r.success for r in first), len(first)),
            _share(sum(r.success for r in second), len(second)))


def memory_health(store: MemoryStore, user_id: str, results: Sequence[TaskResult], *,
                  counted: bool = True) -> MemoryHealth:
    """Measure the strategy bank after a run.

    Args:
        store: The store the run used (its ``memory.db``).
        user_id: The tenant that holds the run's strategy bank.
        results: The run's task results, in task order.
        counted: whether the run wrote the bank's usage counters (only a learning run's
            loop does). When not, usage is each item's injections in this run instead, so a
            retrieval-only run (E5, E6) does not read as "every item unused".

    Returns:
        Size (``active``, ``total``, ``by_polarity``), what consolidation did with the
        extracted proposals (rates as defined in the module docstring), how many items
        forgetting retired (distinct ids), the win-rate drift of tasks shown strategies
        (second half minus first, None below two such tasks) and the usage
        distribution. An empty bank and an empty run give zeros, never an error.
    """
    active = active_strategies(store, user_id)
    polarity = Counter(item.polarity for item in active)
    actions = Counter(a.action for r in results for a in r.extracted)
    extracted = sum(actions.values())
    first, second = win_rate_halves(results)
    drift = None if first is None or second is None else round(second - first, 4)
    return MemoryHealth(
        active=len(active),
        total=count_strategies(store, user_id),
        by_polarity={p: polarity.get(p, 0) for p in POLARITIES},
        extracted=extracted,
        dropped=sum(len(r.dropped) for r in results),
        duplicate_rate=_share(actions["merge"], extracted),
        novelty_rate=_share(actions["add"], extracted),
        discard_rate=_share(actions["discard"], extracted),
        supersede_rate=_share(actions["supersede"], extracted),
        # Distinct ids: a row retired once is one retirement however often it is logged.
        retired=len({rid for r in results for rid in r.retired}),
        win_rate_first_half=first,
        win_rate_second_half=second,
        win_rate_drift=drift,
        usage=usage_distribution([item.uses for item in active] if counted
                                 else injections(active, results)),
        usage_source="bank counters" if counted else "injections this run",
    )
