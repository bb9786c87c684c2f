"""Working memory: the slots of the tasks in hand (seed 003, 1.2).

A task holds at most ``settings.working_capacity`` live slots; a push past it evicts the
least relevant of the task's other slots (the oldest on a tie), so new input always
enters. Slots may carry a TTL (``expires_at``); expired ones are dead: not listed, not
counted, dropped by ``expire`` (and by a push into their task). A completed task becomes
an episode, built without an LLM from its question, its outcome and its slot counts, and
its slots are deleted. Working items with task id ``""`` belong to other code (a cached
prediction of the VoE loop): only ``expire`` touches them, and only once expired.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ..models import WORKING_SLOTS, WorkingItem
from ..store import Cond
from .base import Lifecycle
from .episodic import Episodic

#: How ``complete`` counts a task's non-question slots: (singular, plural).
_COUNTED = {
    "retrieved_fact": ("retrieved fact", "retrieved facts"),
    "reasoning_step": ("reasoning step", "reasoning steps"),
    "context": ("context note", "context notes"),
    "plan": ("plan", "plans"),
    "evaluation": ("evaluation", "evaluations"),
    None: ("other note", "other notes"),
}


def _alive(item: WorkingItem, now: datetime) -> bool:
    return item.expires_at is None or item.expires_at > now


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    """The later of two expiry times, None (never) beating any time."""
    return None if a is None or b is None else max(a, b)


class Working(Lifecycle):
    """A tenant's working memory: task-scoped slots with a capacity and a TTL."""

    def push(self, task_id: str, slot: str, text: str, *, relevance: float = 0.5,
             ttl_s: float | None = None) -> str:
        """Put ``text`` into a ``slot`` of ``task_id``; returns its id.

        The same text pushed again into the same task merges into the held slot (its
        slot unchanged), keeping the higher relevance and the later expiry. Past
        capacity, the task's other slots are evicted, least relevant (then oldest) first.

        Raises:
            ValueError: empty ``task_id`` or ``text``, ``slot`` not one of
                ``WORKING_SLOTS``, ``relevance`` outside 0..1, ``ttl_s`` not positive.
        """
        if not task_id:
            raise ValueError("a working slot needs a task_id")
        if slot not in WORKING_SLOTS:
            raise ValueError(f"slot must be one of {', '.join(WORKING_SLOTS)}; got {slot!r}")
        if not 0.0 <= relevance <= 1.0:
            raise ValueError(f"relevance must be within 0..1, got {relevance}")
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        if not text.strip():
            raise ValueError("a working slot needs text")
        now = self.clock()
        item = WorkingItem(user_id=self.user_id, task_id=task_id, slot=slot, text=text,
                           relevance=relevance, recorded_at=now,
                           expires_at=None if ttl_s is None else now + timedelta(seconds=ttl_s))
        with self.store.transaction():
            held = self.store.get(self.user_id, self.store.duplicate_of(item) or "")
            if isinstance(held, WorkingItem):
                # Store.add would merge it keeping the old relevance: merge here instead
                # (an expired twin is dead: the push takes its place as if new).
                alive = _alive(held, now)
                self.store.update(
                    self.user_id, held.id,
                    relevance=max(held.relevance, relevance) if alive else relevance,
                    expires_at=_later(held.expires_at, item.expires_at) if alive
                    else item.expires_at)
                new_id = held.id
            else:
                new_id = self.store.add(item)
            live = []
            for other in self._task(task_id):
                if _alive(other, now):
                    live.append(other)
                else:
                    self.store.delete(self.user_id, other.id)
            others = sorted((o for o in live if o.id != new_id),
                            key=lambda o: (o.relevance, o.recorded_at))
            for victim in others[:max(0, len(live) - self.settings.working_capacity)]:
                self.store.delete(self.user_id, victim.id)
        return new_id

    def slots(self, task_id: str, slot: str | None = None) -> list[WorkingItem]:
        """The task's live slots (only those of ``slot`` when given), most relevant first,
        then oldest first."""
        now = self.clock()
        found = [i for i in self._task(task_id)
                 if _alive(i, now) and (slot is None or i.slot == slot)]
        return sorted(found, key=lambda i: -i.relevance)  # stable: oldest first on a tie

    def tasks(self) -> list[str]:
        """Ids of the tasks with live slots, by their oldest slot (task ``""`` left out)."""
        now = self.clock()
        return list(dict.fromkeys(i.task_id for i in self._all() if i.task_id
                                  and _alive(i, now)))

    def complete(self, task_id: str, *, outcome: str = "",
                 source_label: str = "task") -> str | None:
        """Record the finished task as an episode and delete all its slots.

        The episode reads like "Task t1: question: ... -> outcome: ... (3 retrieved facts,
        2 reasoning steps)", from the live slots, questions oldest first; its event time
        is now.

        Returns:
            The episode's id, or None (nothing recorded) when the task had no live slots
            and ``outcome`` is empty.

        Raises:
            ValueError: empty ``task_id``.
        """
        if not task_id:
            raise ValueError("complete needs a task_id")
        now = self.clock()
        with self.store.transaction():
            held = self._task(task_id)
            live = [i for i in held if _alive(i, now)]
            episode_id = None
            if live or outcome.strip():
                episode_id = Episodic(self.store, self.user_id, settings=self.settings,
                                      clock=self.clock).record(
                    _summary(task_id, live, outcome.strip()), source_label=source_label,
                    event_time=now)
            for item in held:
                self.store.delete(self.user_id, item.id)
        return episode_id

    def clear(self, task_id: str) -> int:
        """Delete all the task's slots (expired ones too) without an episode; returns how
        many.

        Raises:
            ValueError: empty ``task_id``.
        """
        if not task_id:
            raise ValueError("clear needs a task_id")
        with self.store.transaction():
            held = self._task(task_id)
            for item in held:
                self.store.delete(self.user_id, item.id)
        return len(held)

    def expire(self) -> int:
        """Delete every working item of the tenant whose ``expires_at`` has passed (any
        task, ``""`` included); returns how many."""
        now = self.clock()
        with self.store.transaction():
            dead = [i.id for i in self._all() if not _alive(i, now)]
            for item_id in dead:
                self.store.delete(self.user_id, item_id)
        return len(dead)

    def _task(self, task_id: str) -> list[WorkingItem]:
        """All the task's working items (expired too), oldest first."""
        return self._rows([Cond("task_id", "=", task_id)])

    def _all(self) -> list[WorkingItem]:
        """All the tenant's working items (expired too), oldest first."""
        return self._rows([])

    def _rows(self, where: list[Cond]) -> list[WorkingItem]:
        found = self.store.kind_items(self.user_id, "working", where=where)
        # Oldest by record time (the lifecycle's clock), then in insertion order.
        return sorted((i for i in found if isinstance(i, WorkingItem)),
                      key=lambda i: i.recorded_at or datetime.min.replace(tzinfo=UTC))


def _summary(task_id: str, slots: list[WorkingItem], outcome: str) -> str:
    """The episode text of a finished task (see ``Working.complete``)."""
    questions = [" ".join(s.text.split()) for s in slots if s.slot == "question"]
    text = f"Task {task_id}:"
    if questions:
        text += " question: " + " / ".join(questions)
    if outcome:
        text += f" -> outcome: {outcome}"
    counts: dict[str | None, int] = {}
    for s in slots:
        if s.slot != "question":
            key = s.slot if s.slot in _COUNTED else None
            counts[key] = counts.get(key, 0) + 1
    parts = [f"{n} {_COUNTED[k][0] if n == 1 else _COUNTED[k][1]}"
             for k, n in sorted(counts.items(), key=lambda kv: list(_COUNTED).index(kv[0]))]
    return text + (f" ({', '.join(parts)})" if parts else "")
