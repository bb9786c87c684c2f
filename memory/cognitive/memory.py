"""``CognitiveMemory``: the six lifecycles of one tenant, and what crosses them.

``sensory``, ``working``, ``episodic``, ``semantic``, ``procedural`` and ``prospective``
are the per-type lifecycles; this class adds the paths that run through several:
``perceive`` (new input checked against pending intentions, triggered ones surfaced in
working memory), ``read`` (a document buffered, attended to, recorded as an episode,
split into semantic facts and procedures: see ``reading.py``), ``recall`` (search across
the long-term types: see ``recall.py``) and ``maintain`` (the due lifecycle work: see
``maintain.py``). No LLM is called here except by ``maintain``'s consolidation, through
the summariser it is given.

Example:
    >>> from memstrata.memory import Store
    >>> mind = CognitiveMemory(Store.open(":memory:", embedder=None), "u1")
    >>> _ = mind.semantic.learn("Ola Berg", "Ola Berg has won 9 world titles.")
    >>> [r.text for r in mind.recall("How many titles has Ola Berg won?")]
    ['Ola Berg has won 9 world titles.']
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime

from ..models import ProspectiveItem, utcnow
from ..store import Store
from .base import Clock, CognitiveSettings
from .episodic import Episodic
from .maintain import MaintenanceReport, maintain
from .procedural import Procedural
from .prospective import Prospective
from .reading import ReadReport, read_document
from .recall import Recalled, recall
from .semantic import Semantic
from .sensory import Sensory
from .working import Working


class CognitiveMemory:
    """The six cognitive memory types of one tenant over one store.

    Args:
        store: the store (its embedder, if any, serves ``recall``'s dense channel).
        user_id: the tenant; every read and write is scoped to it.
        settings: TTL, capacity, batch size and similarity threshold.
        clock: the time source (tests pass a fake one).
    """

    def __init__(self, store: Store, user_id: str, *,
                 settings: CognitiveSettings | None = None, clock: Clock = utcnow) -> None:
        self.store = store
        self.user_id = user_id
        self.settings = settings or CognitiveSettings()
        self.clock = clock
        common = {"settings": self.settings, "clock": clock}
        self.sensory = Sensory(store, user_id, **common)
        self.working = Working(store, user_id, **common)
        self.episodic = Episodic(store, user_id, **common)
        self.semantic = Semantic(store, user_id, **common)
        self.procedural = Procedural(store, user_id, **common)
        self.prospective = Prospective(store, user_id, **common)

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

    def read(self, text: str, *, title: str = "", source: str = "",
             when: date | datetime | None = None) -> ReadReport:
        """Take in a document (an article, a tutorial, a message): see ``read_document``."""
        return read_document(self, text, title=title, source=source, when=when)

    def recall(self, query: str, *, k: int = 10, hops: int = 0,
               include_tasks: bool = False) -> list[Recalled]:
        """The ``k`` best long-term memories for ``query`` (see ``recall.recall``)."""
        return recall(self, query, k=k, hops=hops, include_tasks=include_tasks)

    def maintain(self, summarise: Callable[[list[str]], str] | None = None,
                 *, force: bool = False) -> MaintenanceReport:
        """Run the due lifecycle work (see ``maintain.maintain``)."""
        return maintain(self, summarise, force=force)
