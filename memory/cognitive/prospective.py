"""Prospective memory: intentions that fire on a keyword in new input or at a time.

An intention goes pending -> triggered -> resolved. ``check`` runs on every new input
(no LLM): a keyword phrase fires when all its normalised tokens (``text.tokens``:
stemmed, stop-words removed) occur in the input, so "variables" fires on "Variable";
a time trigger fires once ``trigger_at`` has passed. Pending rows are picked by the store
by their status (``Store.kind_values``), so a check reads only the triggers of pending
intentions.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import cast

from ..models import ProspectiveItem, ProspectiveStatus
from ..store import Cond, Sort
from ..text import tokens
from .base import Lifecycle

TRIGGERED_BY_CHARS = 200
"""How much of the input that fired an intention is kept in ``triggered_by``."""
_ORDER = (Sort("priority", desc=True), Sort("recorded_at"))
_CURRENT = Cond("valid_to", "is null")


@lru_cache(maxsize=4096)
def _phrase(keyword: str) -> frozenset[str]:
    """A keyword phrase's normalised tokens (cached: every check re-reads each phrase)."""
    return frozenset(tokens(keyword))


def _utc(value: datetime) -> datetime:
    """Aware UTC (a naive time, from a fake clock say, is taken as UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Prospective(Lifecycle):
    """A tenant's intentions: set, fired by input or time, resolved."""

    def intend(self, text: str, *, keywords: Sequence[str] = (), at: datetime | None = None,
               action: str = "", priority: int = 0) -> str:
        """Store a pending intention; returns its id. ``action`` defaults to ``text``.

        Intending the text of a stored intention again re-arms that one (its triggers,
        action and priority replaced, status pending) rather than adding a twin.

        Raises:
            ValueError: ``text`` is empty, neither ``keywords`` nor ``at`` is given, or a
                keyword has no searchable word (only stop-words would match any input).
        """
        if not text.strip():
            raise ValueError("an intention needs a text")
        phrases = [k.strip() for k in keywords if k.strip()]
        if any(not _phrase(k) for k in phrases):
            raise ValueError("every keyword needs a searchable word (not only stop-words)")
        if not phrases and at is None:
            raise ValueError("an intention needs trigger keywords or a time (at)")
        fields = {"trigger_keywords": phrases, "trigger_at": at, "action": action or text,
                  "priority": priority, "status": "pending", "triggered_by": "",
                  "event_time": at}
        item = ProspectiveItem(user_id=self.user_id, text=text, recorded_at=self.clock(),
                               **fields)
        with self.store.transaction():
            twin = self.store.duplicate_of(item)
            if twin is not None:
                self.store.update(self.user_id, twin, **fields)
                return twin
            return self.store.add(item)

    def check(self, text: str, *, now: datetime | None = None) -> list[ProspectiveItem]:
        """Fire every pending intention whose keyword phrase occurs in ``text`` or whose
        time has come (``now``, default the clock); returns them as triggered, highest
        priority first, then oldest. ``triggered_by`` keeps the input's first 200
        characters, or "time"."""
        return self._fire(text, now)

    def due(self, now: datetime | None = None) -> list[ProspectiveItem]:
        """:meth:`check` for time triggers only (what maintenance runs)."""
        return self._fire(None, now)

    def _fire(self, text: str | None, now: datetime | None) -> list[ProspectiveItem]:
        when = _utc(now or self.clock())
        seen = set(tokens(text)) if text else set()
        fired: list[tuple[str, str]] = []
        with self.store.transaction():  # the pending ones read and fired under one lock
            rows = self.store.kind_values(
                self.user_id, "prospective", ["trigger_keywords", "trigger_at"],
                where=[_CURRENT, Cond("status", "=", "pending")], order=_ORDER)
            for item_id, keywords, at in rows:
                if seen and any(_phrase(k) <= seen for k in keywords or []):
                    fired.append((item_id, (text or "")[:TRIGGERED_BY_CHARS]))
                elif at is not None and _utc(datetime.fromisoformat(at)) <= when:
                    fired.append((item_id, "time"))
            out = [self.store.update(self.user_id, item_id, status="triggered", triggered_by=by)
                   for item_id, by in fired]
        return [i for i in out if isinstance(i, ProspectiveItem)]

    def pending(self, limit: int = 100) -> list[ProspectiveItem]:
        """Pending intentions, highest priority first, then oldest."""
        return self._with_status("pending", limit)

    def triggered(self, limit: int = 100) -> list[ProspectiveItem]:
        """Triggered (not yet resolved) intentions, highest priority first, then oldest."""
        return self._with_status("triggered", limit)

    def _with_status(self, status: ProspectiveStatus, limit: int) -> list[ProspectiveItem]:
        found = self.store.kind_items(self.user_id, "prospective",
                                      where=[_CURRENT, Cond("status", "=", status)],
                                      order=_ORDER, limit=int(limit))
        return [i for i in found if isinstance(i, ProspectiveItem)]

    def resolve(self, intention_id: str) -> ProspectiveItem:
        """Mark an intention done; resolving a resolved one changes nothing.

        Raises:
            KeyError: no prospective item ``intention_id`` for this tenant.
        """
        with self.store.transaction():
            item = self.store.get(self.user_id, intention_id)
            if not isinstance(item, ProspectiveItem):
                raise KeyError(f"no intention {intention_id!r} for user {self.user_id!r}")
            if item.status == "resolved":
                return item
            return cast(ProspectiveItem, self.store.update(self.user_id, intention_id,
                                                           status="resolved"))
