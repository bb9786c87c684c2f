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

from .maintain import MaintenanceReport, maintain
from .mind import Mind
from .reading import ReadReport, read_document
from .recall import Recalled, recall


class CognitiveMemory(Mind):
    """The six cognitive memory types of one tenant over one store (a :class:`Mind`),
    with the paths that run through several of them.

    Args:
        store: the store (its embedder, if any, serves ``recall``'s dense channel).
        user_id: the tenant; every read and write is scoped to it.
        settings: TTL, capacity, batch size and similarity threshold.
        clock: the time source (tests pass a fake one).
    """

    def read(self, text: str, *, title: str = "", source: str = "",
             when: date | datetime | None = None,
             progress: Callable[[int], object] | None = None) -> ReadReport:
        """Take in a document (an article, a tutorial, a message): see ``read_document``."""
        return read_document(self, text, title=title, source=source, when=when,
                             progress=progress)

    def recall(self, query: str, *, k: int = 10, hops: int = 0,
               include_tasks: bool = False) -> list[Recalled]:
        """The ``k`` best long-term memories for ``query`` (see ``recall.recall``)."""
        return recall(self, query, k=k, hops=hops, include_tasks=include_tasks)

    def maintain(self, summarise: Callable[[list[str]], str] | None = None,
                 *, force: bool = False) -> MaintenanceReport:
        """Run the due lifecycle work (see ``maintain.maintain``)."""
        return maintain(self, summarise, force=force)
