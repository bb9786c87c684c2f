"""``WholeMemory``: cognitive memory whose recall also reads what was said.

``CognitiveMemory.recall`` searches the long-term types (semantic facts, procedures,
episodes, summaries): what a tenant *read*. A tenant's conversations live apart, as
turns and the items extracted from them (facts, QA pairs, personas). The adaptive
reasoner, run by ``Memory.answer`` over a tenant's whole memory, needs both, so this
recall merges them: the long-term recall as it is (its hops, its contradiction
partners), then the best turns and conversation items of one more search, each as a
:class:`~memstrata.memory.cognitive.recall.Recalled` whose ``source`` is its speaker
and whose text has its relative times resolved against its own date ("last week [the
week before 2023-05-08]"), best first by the retriever's score. No LLM is called.

With a ``lock``, every read and write of the mind (recall, the intention check and
each working-memory call) holds it, so a program that calls a model between them
never holds it across that call (see ``memory.guarded``).
"""

from __future__ import annotations

import threading

from ..guarded import guarded
from ..models import ProspectiveItem
from ..query import annotate_times
from ..retrieval import Retriever
from ..store import Filters
from ..store.protocol import MemoryStore
from .base import CognitiveSettings
from .memory import CognitiveMemory
from .recall import Recalled, recall


class WholeMemory(CognitiveMemory):
    """One tenant's cognitive memory with a recall over turns and their items too.

    Args:
        store: the store.
        user_id: the tenant.
        retriever: the search over turns and items (default: one over ``store`` with its
            embedder).
        lock: held by each call into the store (None: no lock).
        settings: the lifecycles' knobs.
    """

    def __init__(self, store: MemoryStore, user_id: str, *, retriever: Retriever | None = None,
                 lock: threading.RLock | None = None,
                 settings: CognitiveSettings | None = None) -> None:
        super().__init__(store, user_id, settings=settings)
        self.retriever = retriever or Retriever(store, store.embedder)
        self._lock = lock
        if lock is not None:
            self.working = guarded(self.working, lock)
            self.prospective = guarded(self.prospective, lock)

    def recall(self, query: str, *, k: int = 10, hops: int = 0,
               include_tasks: bool = False) -> list[Recalled]:
        """The long-term recall's memories, then up to ``k`` turns and conversation
        items (:data:`SAID_KINDS`) for ``query`` that it did not already hold."""
        if self._lock is None:
            return self._recall(query, k, hops, include_tasks)
        with self._lock:
            return self._recall(query, k, hops, include_tasks)

    def _recall(self, query: str, k: int, hops: int, include_tasks: bool) -> list[Recalled]:
        read = recall(self, query, k=k, hops=hops, include_tasks=include_tasks)
        if k <= 0 or not query.strip():
            return read
        hits = self.retriever.search(
            self.user_id, query, k=k, nodes=("turn", "item"),
            filters=Filters.said())
        held = {r.id for r in read}
        said = [Recalled(id=h.id, kind=h.kind, text=annotate_times(h.text, h.event_time),
                         score=round(h.score, 6), source=h.speaker or "",
                         document=h.conversation_id or "", event_time=h.event_time)
                for h in hits if h.id not in held]
        return sorted([*read, *said], key=lambda r: -r.score)

    def perceive(self, text: str, *, task_id: str | None = None) -> list[ProspectiveItem]:
        """As ``CognitiveMemory.perceive``, under the lock."""
        if self._lock is None:
            return super().perceive(text, task_id=task_id)
        with self._lock:
            return super().perceive(text, task_id=task_id)
