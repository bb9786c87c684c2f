"""``Mind``: the six lifecycles of one tenant over one store, bound together.

The paths that cross the types (``reading``, ``recall``, ``maintain``) take a ``Mind``;
``CognitiveMemory`` is a ``Mind`` with those paths as methods.
"""

from __future__ import annotations

from ..models import ProspectiveItem, utcnow
from ..store.protocol import MemoryStore
from .base import Clock, CognitiveSettings
from .episodic import Episodic
from .procedural import Procedural
from .prospective import Prospective
from .semantic import Semantic
from .sensory import Sensory
from .working import Working


class Mind:
    """The six cognitive memory types of one tenant over one store, and ``perceive``: what
    the cross-type paths (``reading``, ``recall``, ``maintain``) work on.

    Args:
        store: the store (its embedder, if any, serves ``recall``'s dense channel).
        user_id: the tenant; every read and write is scoped to it.
        settings: TTL, capacity, batch size and similarity threshold.
        clock: the time source (tests pass a fake one).
    """

    def __init__(self, store: MemoryStore, user_id: str, *,
                 settings: CognitiveSettings | None = None, clock: Clock = utcnow) -> None:
        self.store = store
        self.user_id = user_id
        self.settings = settings or CognitiveSettings()
        self.clock = clock
        settings = self.settings
        self.sensory = Sensory(store, user_id, settings=settings, clock=clock)
        self.working = Working(store, user_id, settings=settings, clock=clock)
        self.episodic = Episodic(store, user_id, settings=settings, clock=clock)
        self.semantic = Semantic(store, user_id, settings=settings, clock=clock)
        self.procedural = Procedural(store, user_id, settings=settings, clock=clock)
        self.prospective = Prospective(store, user_id, settings=settings, clock=clock)

    def perceive(self, text: str, *, task_id: str | None = None) -> list[ProspectiveItem]:
        """Check new input against pending intentions (no LLM); the triggered ones are
        returned and, with a ``task_id``, surfaced in that task's working memory as
        ``context`` slots (higher priority, higher relevance)."""
        fired = self.prospective.check(text)
        if task_id:
            for item in fired:
                relevance = min(1.0, 0.6 + 0.1 * max(0, item.priority))
                self.working.push(task_id, "context",
                                  f"Reminder: {item.action or item.text}", relevance=relevance)
        return fired


__all__ = ["Mind"]
