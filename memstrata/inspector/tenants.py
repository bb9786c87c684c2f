"""The tenants a store holds, for the inspector's first page.

The store's interface reads one tenant at a time (every method takes ``user_id``), so
listing them all is a query of its own: on SQLite, one pass over the tenant indexes of
``turns``, ``items`` and ``runs``. PostgreSQL's row-level security hides other tenants'
rows from the application's role, so there the list is not available (``None``) and the
inspector opens a tenant by its id instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memstrata.memory import Store


@dataclass(frozen=True)
class TenantRow:
    """One tenant with how much it holds."""

    user_id: str
    turns: int
    items: int
    runs: int


_TENANTS = """
SELECT user_id, sum(turns), sum(items), sum(runs) FROM (
    SELECT user_id, count(*) AS turns, 0 AS items, 0 AS runs FROM turns GROUP BY user_id
    UNION ALL SELECT user_id, 0, count(*), 0 FROM items GROUP BY user_id
    UNION ALL SELECT user_id, 0, 0, count(*) FROM runs GROUP BY user_id
) GROUP BY user_id ORDER BY user_id LIMIT ? OFFSET ?
"""


def list_tenants(store: Any, *, limit: int, offset: int = 0) -> list[TenantRow] | None:
    """A page of the store's tenants by id (``limit`` rows after ``offset``), or None
    when the backend cannot list them (see the module)."""
    if not isinstance(store, Store):
        return None
    rows = store.conn.execute(_TENANTS, (int(limit), int(offset))).fetchall()
    return [TenantRow(str(u), int(t), int(i), int(r)) for u, t, i, r in rows]
