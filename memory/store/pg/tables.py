"""``StoreTables``' hooks over the PostgreSQL store, which every table class of it builds
on (``aux.py``'s blobs and runs, ``jobs.py``, ``keys.py``): ``%s`` placeholders, each
statement in its tenant's transaction (row-level security), JSON as ``jsonb``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from .connection import PgConnection


def _pg(query: str) -> str:
    """The shared SQL with PostgreSQL's placeholders (none of it holds a literal ``?``
    or ``%``)."""
    return query.replace("?", "%s")


class _PgTables:
    """``StoreTables``' hooks over the PostgreSQL store (see the module)."""

    def __init__(self, store: PgConnection) -> None:
        self._pg = store

    @property
    def store(self) -> PgConnection:
        """The store these tables are part of."""
        return self._pg

    def _select(self, user_id: str | None, query: str, args: Sequence[Any] = ()
                ) -> list[dict[str, Any]]:
        return self.store._q(user_id, _pg(query), args)

    def _change(self, user_id: str | None, query: str, args: Sequence[Any] = ()) -> int:
        return self.store._exec(user_id, _pg(query), args)

    def _change_many(self, user_id: str | None, query: str, rows: Sequence[Sequence[Any]]
                     ) -> None:
        self.store._many(user_id, _pg(query), rows)

    def _json(self, value: Any) -> Any:
        return Jsonb(value)

    def _parsed(self, stored: Any) -> Any:
        return stored  # psycopg parses jsonb


__all__ = ["_PgTables", "_pg"]
