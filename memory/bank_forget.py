"""The strategy bank's forgetting policy: a bounded active bank with per-polarity floors.

The ReasoningBank seed (002, E11) asks to "bound active memory size; keep floors for both
success and failure items", and for "wins/uses" counters fed by a usage logger.
:class:`ForgettingPolicy` does both:

- ``record_use`` counts one use per strategy shown in a run (and a win when the run
  succeeded), all ids in one transaction.
- ``enforce`` retires active strategies while more than ``max_active`` are active,
  lowest value first, older first among equals (then by id, so it is deterministic),
  but never takes a polarity below its floor (``min_success``, ``min_failure``): a bank of
  only successes teaches an agent nothing about what to avoid, and the reverse.
  Retiring sets ``valid_to`` and logs a ``bank.retire`` event; nothing is deleted, so
  ``store.get`` still finds a retired strategy and retrieval can still filter it out.

Value is :func:`memstrata.memory.bank.strategy_score` at relevance 1 (the smoothed win
rate ``(wins + 1) / (uses + 2)``), the ranking the L2 packer uses too, so the bank
forgets by the same measure that decides what enters a prompt. Pass ``value=`` to
``enforce`` to rank by anything else.

Example:
    >>> from memstrata.memory import Store, StrategyItem
    >>> from memstrata.memory.bank_forget import ForgettingPolicy
    >>> store = Store.open(":memory:")
    >>> ids = store.add_many([StrategyItem(user_id="u", text=f"strategy number {n}",
    ...                                    polarity="success") for n in range(3)])
    >>> policy = ForgettingPolicy(max_active=2, min_success=1, min_failure=0)
    >>> len(policy.enforce(store, "u"))
    1
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from pydantic import BaseModel, Field, model_validator

from .bank import active_strategies, strategy_score
from .models import StrategyItem, utcnow
from .store.protocol import MemoryStore

Value = Callable[[StrategyItem], float]


def default_value(item: StrategyItem) -> float:
    """``strategy_score(item)`` at relevance 1: the smoothed win rate."""
    return strategy_score(item)


class Retirement(BaseModel):
    """One strategy the forgetting policy retired, with its value and the reason."""

    item_id: str
    title: str
    polarity: str
    uses: int
    wins: int
    value: float
    reason: str
    event_id: int | None = None


class ForgettingPolicy(BaseModel):
    """Keep at most ``max_active`` active strategies, never fewer than each floor.

    Defaults: 200 active strategies (a bank whose best few per polarity are packed into
    a prompt needs depth for retrieval, not thousands of near-stale rows), and floors of
    10 per polarity, so guardrails survive a run of successes and vice versa.
    """

    max_active: int = Field(default=200, ge=0)
    min_success: int = Field(default=10, ge=0)
    min_failure: int = Field(default=10, ge=0)

    @model_validator(mode="after")
    def _floors_fit(self) -> ForgettingPolicy:
        # Floors larger than the bank would make the bound unreachable; fail loudly.
        if self.min_success + self.min_failure > self.max_active:
            raise ValueError("min_success + min_failure must not exceed max_active")
        return self

    def floor(self, polarity: str) -> int:
        """The fewest active strategies of ``polarity`` that ``enforce`` leaves."""
        return self.min_success if polarity == "success" else self.min_failure

    def record_use(self, store: MemoryStore, user_id: str, ids: Sequence[str], won: bool
                   ) -> list[StrategyItem]:
        """Count one use of each strategy in ``ids`` (a win too if ``won``); one transaction.

        An id listed twice is one use: a strategy shown twice in a run was used once.
        Returns the updated strategies in the order given.

        Raises:
            KeyError: an id is not one of this tenant's strategies (nothing is written).
        """
        updated: list[StrategyItem] = []
        with store.transaction():
            for item_id in dict.fromkeys(ids):
                item = store.get(user_id, item_id)
                if not isinstance(item, StrategyItem):
                    raise KeyError(f"no strategy {item_id!r} for user {user_id!r}")
                new = store.update(user_id, item_id, uses=item.uses + 1,
                                   wins=item.wins + int(won))
                assert isinstance(new, StrategyItem)
                updated.append(new)
            store.runs.log_event(user_id, {"type": "bank.use", "ids": [u.id for u in updated],
                                           "won": won})
        return updated

    def enforce(self, store: MemoryStore, user_id: str, *, value: Value | None = None
                ) -> list[Retirement]:
        """Retire the lowest-value strategies until the bank fits; returns them in order.

        Order: value ascending, then older record first, then id. A strategy is skipped
        (kept) when retiring it would take its polarity below its floor.
        """
        value_of = value or default_value
        active = active_strategies(store, user_id)  # oldest first
        excess = len(active) - self.max_active
        if excess <= 0:
            return []
        counts = Counter(s.polarity for s in active)
        # sorted() is stable and ``active`` is oldest first, so equal values keep age order.
        ranked = sorted(((value_of(s), s) for s in active), key=lambda vs: vs[0])
        retired: list[Retirement] = []
        now = utcnow()
        with store.transaction():
            for score, item in ranked:
                if len(retired) == excess:
                    break
                if counts[item.polarity] <= self.floor(item.polarity):
                    continue
                counts[item.polarity] -= 1
                store.update(user_id, item.id, valid_to=now)
                reason = (f"bank over max_active ({len(active)} > {self.max_active}); lowest "
                          f"value {score:.3f} ({item.wins}/{item.uses} wins)")
                out = Retirement(item_id=item.id, title=item.title, polarity=item.polarity,
                                 uses=item.uses, wins=item.wins, value=score, reason=reason)
                out.event_id = store.runs.log_event(user_id, {
                    "type": "bank.retire", **out.model_dump(exclude={"event_id"})},
                    agent_id=item.agent_id)
                retired.append(out)
        return retired


__all__ = ["ForgettingPolicy", "Retirement", "default_value"]
