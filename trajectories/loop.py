"""The memory side of the ReasoningBank closed loop: what one judged task writes back.

After each task the loop (1) counts a use of every strategy the task was shown, and a
win when the judge called the task a success; (2) stores the extraction policy's
candidates, either append-only (E9: only exact duplicates are folded, so the bank's
growth is what the experiment measures) or through ``ConsolidationPolicy`` (E10:
merge / supersede / discard / add, each decision logged); (3) with a
``ForgettingPolicy`` (E11), retires the lowest-value strategies down to the bound,
keeping both polarities' floors. Given an embedder, the strategies it stores get their
vectors in the same step, so the dense channel of the next task's retrieval sees them.

The judging and extraction themselves are programs (``programs.judging``,
``programs.distill``); this module only writes memory, so it imports no DSPy.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from memstrata.memory.bank import ConsolidationPolicy, Decision, embed_strategies
from memstrata.memory.bank_forget import ForgettingPolicy, Retirement
from memstrata.memory.embed import Embedder
from memstrata.memory.models import StrategyItem
from memstrata.memory.store.protocol import MemoryStore


class LoopUpdate(BaseModel):
    """What one task wrote to the bank."""

    used: list[str] = Field(default_factory=list, description="strategies counted as used")
    won: bool = False
    decisions: list[Decision] = Field(default_factory=list)
    retired: list[Retirement] = Field(default_factory=list)


def append(store: MemoryStore, user_id: str, candidate: StrategyItem) -> Decision:
    """Store ``candidate`` as it is (append-only), folding only an exact duplicate; logged.

    Raises:
        ValueError: the candidate belongs to another tenant.
    """
    if candidate.user_id != user_id:
        raise ValueError(f"candidate belongs to {candidate.user_id!r}, not {user_id!r}")
    found = store.duplicate_of(candidate)
    if found is not None:
        decision = Decision(action="merge", candidate=candidate, rule="exact",
                            reason="identical text already stored (append-only: not counted)",
                            target_id=found, item_id=found, similarity=100.0)
    else:
        decision = Decision(action="add", candidate=candidate, rule="append",
                            reason="append-only bank", item_id=store.add(candidate))
    decision.event_id = store.runs.log_event(user_id, {
        "type": "bank.append", "action": decision.action, "item_id": decision.item_id,
        "title": candidate.title, "polarity": candidate.polarity}, agent_id=candidate.agent_id)
    return decision


def learn(store: MemoryStore, user_id: str, *, used: Sequence[str], won: bool,
          candidates: Sequence[StrategyItem],
          consolidation: ConsolidationPolicy | None = None,
          forgetting: ForgettingPolicy | None = None,
          embedder: Embedder | None = None) -> LoopUpdate:
    """One task's write-back: usage counters, new candidates, then the bound.

    Args:
        used: ids of the strategies injected into (or fetched by) the task's context.
        won: the judge's verdict on the task (never gold: the loop learns as in use).
        candidates: the extraction policy's items, not yet stored.
        consolidation: decide merge/supersede/discard/add per candidate; None appends.
        forgetting: bound the active bank after storing; None lets it grow.
        embedder: embeds the strategies stored as new rows (a merge keeps the stored
            row's text, hence its vector); None stores no vectors.
    """
    counter = forgetting or ForgettingPolicy()  # usage counters are kept in every mode
    shown = [i for i in dict.fromkeys(used)
             if isinstance(store.get(user_id, i), StrategyItem)]
    if shown:
        counter.record_use(store, user_id, shown, won)
    decisions = [consolidation.consolidate(store, user_id, c) if consolidation is not None
                 else append(store, user_id, c) for c in candidates]
    if embedder is not None:
        embed_strategies(store, user_id, embedder, [
            d.item_id for d in decisions if d.action in ("add", "supersede") and d.item_id])
    retired = forgetting.enforce(store, user_id) if forgetting is not None else []
    return LoopUpdate(used=shown, won=won, decisions=decisions, retired=retired)
