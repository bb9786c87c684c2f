"""Sensory memory: raw input buffered for a while, kept only if attended to (seed 003, 1.1).

Every observation is its own row (``SensoryItem.SCOPE`` is its ``observation_order``, so
two identical observations are never merged), numbered 1 + the tenant's highest, and
lives until ``expires_at`` (``settings.sensory_ttl_s`` by default). Attending to one
records it as an episode with an ``ATTENDED_TO`` edge (sensory -> episode) and flags it
``attended``: attended rows outlive their TTL as the episode's provenance. ``prune``
deletes the expired, unattended rest.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..models import Edge, SensoryItem
from ..store import Cond, Sort
from .base import ATTENDED_TO, Lifecycle
from .episodic import Episodic


class Sensory(Lifecycle):
    """A tenant's sensory buffer: observe, prune, attend."""

    def observe(self, text: str, *, modality: str = "text", ttl_s: float | None = None,
                event_time: datetime | None = None) -> str:
        """Buffer one observation for ``ttl_s`` seconds (default ``settings.sensory_ttl_s``);
        returns its id.

        Raises:
            ValueError: ``text`` is empty or ``ttl_s`` is not positive.
        """
        if not text.strip():
            raise ValueError("an observation needs text")
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        now = self.clock()
        ttl = self.settings.sensory_ttl_s if ttl_s is None else ttl_s
        with self.store.transaction():
            # Read the highest number under the write lock: two writers cannot share one.
            top = self.store.kind_max(self.user_id, "sensory", "observation_order")
            return self.store.add(SensoryItem(
                user_id=self.user_id, text=text, modality=modality, event_time=event_time,
                observation_order=int(top or 0) + 1, expires_at=now + timedelta(seconds=ttl),
                recorded_at=now))

    def prune(self) -> int:
        """Delete this tenant's expired, unattended observations; returns how many."""
        now = self.clock()
        with self.store.transaction():
            expired = [o.id for o in self._held(attended=False)
                       if o.expires_at is not None and o.expires_at <= now]
            for item_id in expired:
                self.store.delete(self.user_id, item_id)
        return len(expired)

    def buffer(self) -> list[SensoryItem]:
        """Prune, then every observation still held, in observation order (attended ones
        included, flagged ``attended``)."""
        self.prune()
        return self._held()

    def _held(self, *, attended: bool | None = None) -> list[SensoryItem]:
        """The tenant's observations in observation order (only unattended ones, or only
        attended ones, when ``attended`` is given)."""
        where = () if attended is None else (Cond("attended", "=", attended, missing=False),)
        found = self.store.kind_items(self.user_id, "sensory", where=where,
                                      order=[Sort("observation_order")])
        return [o for o in found if isinstance(o, SensoryItem)]

    def attend(self, sensory_id: str, reason: str, *, source_label: str = "sensory",
               summary: str | None = None) -> str:
        """Promote an observation to an episode; returns the episode's id.

        The episode's text is ``summary`` or else the observation's text, its event time
        the observation's. In one transaction: the episode (``Episodic.record``), an
        ``ATTENDED_TO`` edge observation -> episode with ``{"reason": reason}``, and
        ``attended=True`` on the observation.

        Raises:
            KeyError: no sensory observation ``sensory_id`` of this tenant (a pruned one
                is gone, so it is unknown too).
            ValueError: ``reason`` or ``summary`` is empty, or the observation has expired
                or was already attended to.
        """
        if not reason.strip():
            raise ValueError("attending needs a reason")
        if summary is not None and not summary.strip():
            raise ValueError("summary, when given, cannot be empty")
        now = self.clock()
        with self.store.transaction():
            # Read under the write lock: two attends of one observation cannot both pass.
            seen = self.store.get(self.user_id, sensory_id)
            if not isinstance(seen, SensoryItem):
                raise KeyError(f"no sensory observation {sensory_id!r} for user"
                               f" {self.user_id!r}")
            if seen.attended:
                raise ValueError(f"observation {sensory_id!r} was already attended to")
            if seen.expires_at is not None and seen.expires_at <= now:
                raise ValueError(f"observation {sensory_id!r} expired at"
                                 f" {seen.expires_at.isoformat()}")
            episodic = Episodic(self.store, self.user_id, settings=self.settings,
                                clock=self.clock)
            episode_id = episodic.record(summary or seen.text, source_label=source_label,
                                         event_time=seen.event_time)
            self.store.add_edges([Edge(user_id=self.user_id, src=sensory_id, dst=episode_id,
                                       relation=ATTENDED_TO, metadata={"reason": reason})])
            self.store.update(self.user_id, sensory_id, attended=True)
        return episode_id
