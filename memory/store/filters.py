"""Search filters as SQL, and the rows that pass them.

Holds ``Filters`` (kinds, speaker, conversation, an event-time window, kinds of which only
current rows count, as one ``WHERE`` fragment) and ``FilterQueries`` (``allowed_ids``,
``allowed_refs``).

SQLite-specific: ``Filters.sql`` writes ``0`` for false (PostgreSQL: ``FALSE``) and ``?``
placeholders (psycopg: ``%s``); event times compare as ISO text; refs are rowids."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from ..models import as_utc
from .connection import StoreConnection
from .rows import _TABLE, Ref, _ts

SAID_KINDS: tuple[str, ...] = ("fact", "qa", "persona")
"""Item kinds extracted from conversations: with the turns, what was said."""


class Filters:
    """Optional search filters, turned into SQL once. All are ANDed with the tenant."""

    def __init__(
        self,
        *,
        kinds: Sequence[str] | None = None,
        speaker: str | None = None,
        conversation_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        current: Sequence[str] | None = None,
    ) -> None:
        """``current``: item kinds of which retired rows (``valid_to`` set) are left out."""
        self.kinds = list(kinds) if kinds else None
        self.current = list(current) if current else None
        self.speaker = speaker
        self.conversation_id = conversation_id
        self.start, self.end = as_utc(start), as_utc(end)

    @classmethod
    def said(cls, conversation_id: str | None = None) -> Filters:
        """What was said (of one conversation when given): turns and the items extracted
        from them (:data:`SAID_KINDS`), retired ones left out."""
        return cls(kinds=["turn", *SAID_KINDS], current=list(SAID_KINDS),
                   conversation_id=conversation_id)

    def active(self) -> bool:
        """Whether any filter is set."""
        return any(
            v is not None for v in (self.kinds, self.speaker, self.conversation_id, self.start,
                                    self.end, self.current)
        )

    def sql(self, node: str, alias: str) -> tuple[str, list[Any]]:
        """A ``WHERE`` fragment (starting with AND) over table ``alias`` of ``node`` rows."""
        parts: list[str] = []
        args: list[Any] = []
        if self.kinds is not None:
            if node == "turn" and "turn" not in self.kinds:
                parts.append("0")
            elif node == "item":
                wanted = [k for k in self.kinds if k != "turn"]
                parts.append(f"{alias}.kind IN ({','.join('?' * len(wanted))})" if wanted else "0")
                args += wanted
        if self.current is not None and node == "item":
            marks = ",".join("?" * len(self.current))
            parts.append(f"NOT ({alias}.kind IN ({marks}) AND {alias}.valid_to IS NOT NULL)")
            args += self.current
        for column, value in (("speaker", self.speaker), ("conversation_id",
                                                           self.conversation_id)):
            if value is not None:
                parts.append(f"{alias}.{column} = ?")
                args.append(value)
        if self.start is not None:
            parts.append(f"{alias}.event_time >= ?")
            args.append(_ts(self.start))
        if self.end is not None:
            parts.append(f"{alias}.event_time <= ?")
            args.append(_ts(self.end))
        return "".join(f" AND {p}" for p in parts), args


class FilterQueries(StoreConnection):
    """The tenant's rows that pass a ``Filters`` (see the module)."""

    def allowed_ids(self, user_id: str, filters: Filters) -> set[str]:
        """Ids of the tenant's turns and items that pass ``filters``."""
        return set(self._allowed(user_id, filters, "id"))

    def allowed_refs(self, user_id: str, filters: Filters) -> set[Ref]:
        """:meth:`allowed_ids` as refs."""
        return set(self._allowed(user_id, filters, "rowid"))

    def _allowed(self, user_id: str, filters: Filters, column: str) -> Iterator[Any]:
        for node, table in _TABLE.items():
            where, args = filters.sql(node, "t")
            for (value,) in self.conn.execute(
                    f"SELECT {column} FROM {table} t WHERE t.user_id = ?{where}",
                    [user_id, *args]):
                yield value if column == "id" else (node, value)
