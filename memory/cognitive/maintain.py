"""``maintain``: the lifecycle work that is due, run on demand (``memstrata maintain``).

Expired sensory observations are pruned, expired working slots dropped, intentions whose
time has come triggered, and, when a summariser is given, every full batch of
unconsolidated episodes consolidated (the only step that may call an LLM: once per
batch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from .mind import Mind


class MaintenanceReport(BaseModel):
    """What one ``maintain`` run did."""

    user_id: str
    pruned_sensory: int = 0
    expired_working: int = 0
    triggered: list[str] = Field(default_factory=list)
    consolidated: list[str] = Field(default_factory=list)
    compressed_episodes: int = 0
    pending_episodes: int = 0
    consolidation_due: bool = False
    llm_calls: int = 0


def maintain(mind: Mind, summarise: Callable[[list[str]], str] | None = None,
             *, force: bool = False) -> MaintenanceReport:
    """Run the due lifecycle work for ``mind``'s tenant.

    Args:
        summarise: episode texts -> one summary (an LLM program); without it nothing is
            consolidated and ``consolidation_due`` says whether a batch is waiting.
        force: also consolidate a last partial batch (at least two episodes).
    """
    report = MaintenanceReport(user_id=mind.user_id,
                               pruned_sensory=mind.sensory.prune(),
                               expired_working=mind.working.expire(),
                               triggered=[i.id for i in mind.prospective.due()])
    calls = 0
    if summarise is not None:
        def counted(texts: list[str]) -> str:
            nonlocal calls
            calls += 1
            return summarise(texts)

        report.consolidated = mind.episodic.consolidate(counted, force=force)
        report.compressed_episodes = sum(
            len(mind.episodic.originals(c)) for c in report.consolidated)
    report.llm_calls = calls
    report.pending_episodes = len(mind.episodic.pending())
    report.consolidation_due = report.pending_episodes >= (
        2 if force else mind.settings.consolidation_batch)
    return report
