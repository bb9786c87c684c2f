"""A tenant's rows on PostgreSQL: export rows and kept versions (``formats/dump.py``),
``history``, ``forget_user``, and the people a tenant's memory names.

Holds ``PgTenants`` (the SQLite ``TenantRows``' methods, ``history``/``forget_user`` of
``Store``, and ``speakers``/``conversations_with`` of ``NodeLookups``; same contracts).

``forget_user`` deletes the tenant's rows from every table of this schema with a
``user_id`` column (``information_schema``, so a table added later is covered), in one
transaction under the tenant's write lock. There is no scrub after it, as there is on
SQLite: PostgreSQL's (auto)vacuum reclaims the dead rows, and until then their bytes
stay in the table files, as any PostgreSQL deletion leaves them (``VACUUM FULL`` by an
operator rewrites the tables without them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from psycopg import sql
from psycopg.types.json import Jsonb

from .. import versions as versionsmod
from ..nodes import _DISTINCT as SQLITE_DISTINCT
from ..rows import node_type
from ..versions import Version, _version
from .connection import PgConnection
from .schema import TENANT_TABLES

if TYPE_CHECKING:
    from ...models import Item, Turn

# SQLite's skip scan, the tenant bound as psycopg's named parameter %(user_id)s.
_DISTINCT = SQLITE_DISTINCT.replace("?1", "%(user_id)s")

_SPEAKERS = " UNION ".join(
    f"SELECT x FROM ({_DISTINCT.format(table=table, column=column)}) {table}_{column}"
    for table, column in (("turns", "speaker"), ("items", "speaker"), ("items", "about")))
"""Every name a tenant's turns speak or its items are by or about, in one statement."""


class PgTenants(PgConnection):
    """A tenant's rows, versions, history and forgetting (see the module)."""

    if TYPE_CHECKING:
        # The records part's reads (``conversations.py``, ``items.py``).
        def turns(self, user_id: str, *, conversation_id: str | None = None,
                  ids: Sequence[str] | None = None, limit: int | None = None,
                  after_seq: int | None = None, newest: bool = False,
                  offset: int = 0, labels: Sequence[str] | None = None) -> list[Turn]: ...

        def get_many(self, user_id: str, item_ids: Sequence[str]) -> list[Item]: ...

    def conversation_rows(self, user_id: str) -> list[dict[str, Any]]:
        """The tenant's conversations (``id``, ``agent_id``, ``title``, ``speakers``,
        ``metadata``, ``recorded_at``), in the order they were first written."""
        return self._q(user_id, "SELECT id, agent_id, title, speakers, metadata, recorded_at"
                       " FROM conversations WHERE user_id = %s ORDER BY rowid", (user_id,))

    def session_rows(self, user_id: str) -> list[dict[str, Any]]:
        """The tenant's sessions (``id``, ``conversation_id``, ``index``, ``started_at`` as
        stored, ``metadata``), by conversation then index."""
        return self._q(user_id, 'SELECT id, conversation_id, idx AS "index", started_at,'
                       " metadata FROM sessions WHERE user_id = %s ORDER BY conversation_id,"
                       " idx", (user_id,))

    def item_ids(self, user_id: str) -> list[str]:
        """The ids of all the tenant's items, in the order they were written."""
        return [r[0] for r in self._rows(
            user_id, "SELECT id FROM items WHERE user_id = %s ORDER BY rowid", (user_id,))]

    def version_rows(self, user_id: str) -> list[dict[str, Any]]:
        """The tenant's kept versions (``node_id``, ``version``, ``event``, ``snapshot``,
        ``recorded_at``, ``valid_to``), by node then version."""
        return self._q(user_id, "SELECT node_id, version, event, snapshot, recorded_at,"
                       " valid_to FROM versions WHERE user_id = %s ORDER BY node_id, version",
                       (user_id,))

    def restore_versions(self, user_id: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Write kept versions back, as :meth:`version_rows` returns them, into ``user_id``
        in one transaction; returns how many."""
        batch = [(user_id, v["node_id"], v["version"], v["event"], Jsonb(v["snapshot"]),
                  v["recorded_at"], v["valid_to"]) for v in rows]
        with self.transaction():
            self._lock_tenant(user_id)
            self._many(user_id, "INSERT INTO versions (user_id, node_id, version, event,"
                       " snapshot, recorded_at, valid_to) VALUES (%s,%s,%s,%s,%s,%s,%s)", batch)
            # As SQLite's: a turn's last edit time is its newest kept version's valid_to.
            self._exec(user_id, versionsmod.TURN_EDITED.replace("?", "%s"),
                       (user_id, user_id))
        return len(batch)

    def history(self, user_id: str, node_id: str) -> list[Version]:
        """Every version of a turn or item of this tenant, oldest first, the current last
        (empty when there is no such node)."""
        found: Sequence[Turn | Item]
        with self._tx():
            if node_type(node_id) == "turn":
                found = self.turns(user_id, ids=[node_id])
                stamp = self._rows(user_id, "SELECT coalesce(updated_at, recorded_at) FROM"
                                   " turns WHERE id = %s AND user_id = %s", (node_id, user_id))
            else:
                found = self.get_many(user_id, [node_id])
                stamp = self._rows(user_id, "SELECT updated_at FROM items WHERE id = %s AND"
                                   " user_id = %s", (node_id, user_id))
            if not found:
                return []
            rows = self._rows(user_id, "SELECT version, event, snapshot, recorded_at, valid_to"
                              " FROM versions WHERE node_id = %s AND user_id = %s ORDER BY"
                              " version", (node_id, user_id))
        out = [_version(node_id, v, e, s, r, t) for v, e, s, r, t in rows]
        out.append(_version(node_id, len(rows) + 1, "UPDATE" if rows else "ADD",
                            found[0].model_dump(mode="json"), stamp[0][0] if stamp else None,
                            None))
        return out

    def forget_user(self, user_id: str) -> dict[str, int]:
        """Delete everything of one tenant, in every table (see the module); returns the
        rows deleted per table (non-zero only). No other tenant's row is read or changed."""
        deleted: dict[str, int] = {}
        with self.transaction():
            self._lock_tenant(user_id)
            # memstrata's tables only: the database may hold another program's tables
            # with a user_id column of their own.
            tables = [r[0] for r in self._rows(
                user_id, "SELECT table_name FROM information_schema.columns WHERE"
                " table_schema = current_schema() AND column_name = 'user_id'"
                " AND table_name = ANY(%s) ORDER BY table_name", (list(TENANT_TABLES),))]
            for table in tables:
                count = self._exec(user_id, sql.SQL("DELETE FROM {} WHERE user_id = %s")
                                   .format(sql.Identifier(table)), (user_id,))
                if count:
                    deleted[table] = count
        return deleted

    def speakers(self, user_id: str) -> list[str]:
        """Every speaker and subject person the tenant's memory knows by name."""
        # A skip scan, one index seek per distinct name (as on SQLite, NodeLookups.speakers):
        # a UNION read every row of the tenant, and the cache that holds its result is
        # dropped by every write (34 ms at 100k items).
        rows = self._rows(user_id, _SPEAKERS, {"user_id": user_id})
        return sorted({r[0] for r in rows if r[0]})

    def conversations_with(self, user_id: str, people: Sequence[str]) -> list[str]:
        """The tenant's conversations where any of ``people`` speaks or is an item's speaker
        or subject, sorted; with no ``people``, every conversation its turns and items name."""
        if not people:
            rows = self._rows(
                user_id, "SELECT conversation_id FROM turns WHERE user_id = %s UNION SELECT"
                " conversation_id FROM items WHERE user_id = %s AND conversation_id IS NOT"
                " NULL", (user_id, user_id))
        else:
            who = list(people)
            rows = self._rows(
                user_id, "SELECT conversation_id FROM turns WHERE user_id = %s AND"
                " speaker = ANY(%s) UNION SELECT conversation_id FROM items WHERE user_id = %s"
                " AND conversation_id IS NOT NULL AND (speaker = ANY(%s) OR about = ANY(%s))",
                (user_id, who, user_id, who, who))
        return sorted(r[0] for r in rows)
