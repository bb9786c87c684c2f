"""Turn and item rows looked up across both tables.

Holds ``NodeLookups``: ``owner``; ``refs``, ``ids``, ``with_ids`` and ``facets`` (between
ids and refs, tenant-checked, each row read once until rows change); ``nodes`` (summary
rows); ``speakers`` and ``counts``.

SQLite-specific: refs are ``rowid``s (a PostgreSQL backend needs an integer identity column
per table); ``+user_id`` is SQLite's way of keeping the planner on the id index rather than
the tenant index; ids go in chunks of 500 to stay under SQLite's bound-parameter limit
(PostgreSQL: ``= ANY(%s)`` with one array)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .connection import StoreConnection
from .rows import _TABLE, Facets, Ref, node_type
from .shared import RefLookups

_DISTINCT = (
    "WITH RECURSIVE v(x) AS ("
    "SELECT (SELECT min({column}) FROM {table} WHERE user_id = ?1 AND {column} IS NOT NULL)"
    " UNION ALL SELECT (SELECT min({column}) FROM {table} WHERE user_id = ?1"
    " AND {column} > v.x) FROM v WHERE v.x IS NOT NULL) SELECT x FROM v WHERE x IS NOT NULL")
"""The distinct non-NULL values of a column among one tenant's rows (``?1``), ascending."""


class NodeLookups(StoreConnection, RefLookups):
    """Lookups of turn and item rows by id or rowid (see the module)."""

    def owner(self, node_id: str) -> str | None:
        """The tenant a turn or item id belongs to (ids are unique across tenants), or None."""
        row = self.conn.execute(f"SELECT user_id FROM {_TABLE[node_type(node_id)]} WHERE id = ?",
                                (node_id,)).fetchone()
        return None if row is None else row[0]

    def refs(self, user_id: str, node_ids: Sequence[str]) -> dict[str, Ref]:
        """The refs of the tenant's turns and items among ``node_ids`` (others left out)."""
        out: dict[str, Ref] = {}
        for node, table in _TABLE.items():
            ids = [n for n in node_ids if node_type(n) == node]
            for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500)):
                out.update((node_id, (node, rowid)) for node_id, rowid in self.conn.execute(
                    f"SELECT id, rowid FROM {table} WHERE +user_id = ?"
                    f" AND id IN ({','.join('?' * len(chunk))})", [user_id, *chunk]))
        return out

    def _ref_rows(self, user_id: str, refs: Sequence[Ref]) -> dict[Ref, tuple[str, Facets]]:
        """(id, facets) of the tenant's rows among ``refs``; read once per :meth:`reading`,
        and kept for the next one until a row is updated or deleted or another process
        commits (see :meth:`reading`)."""
        seen = self._seen if self._seen is not None else {}
        out: dict[Ref, tuple[str, Facets]] = {}
        todo: dict[str, list[int]] = {"turn": [], "item": []}
        for ref in refs:
            hit = seen.get((user_id, ref))
            if hit is not None:
                out[ref] = hit
            elif ref[0] in todo:
                todo[ref[0]].append(ref[1])
        for node, rowids in todo.items():
            session = "session_id" if node == "turn" else "NULL"
            # A turn's facets from the narrow index beside its rowid, not its long row.
            source = "turns INDEXED BY turns_facets" if node == "turn" else _TABLE[node]
            for i in range(0, len(rowids), 500):
                chunk = rowids[i : i + 500]
                # "+user_id": stay on the rowid (see nodes()); the tenant is checked here
                # although most rowids come from the tenant's own index terms.
                for rowid, node_id, *fields in self.conn.execute(
                    f"SELECT rowid, id, speaker, event_time, conversation_id, {session}"
                    f" FROM {source} WHERE rowid IN ({','.join('?' * len(chunk))})"
                    " AND +user_id = ?", [*chunk, user_id]
                ):
                    out[(node, rowid)] = seen[(user_id, (node, rowid))] = (
                        node_id, Facets(*fields))
        return out

    def nodes(
        self, user_id: str, node_ids: Sequence[str], *, text: bool = True
    ) -> dict[str, dict[str, Any]]:
        """Summary rows (kind, speaker, conversation, session, time; ``text`` and
        ``metadata`` too unless ``text=False``) for turn and item ids of a tenant."""
        out: dict[str, dict[str, Any]] = {}
        turn_body = "text, metadata" if text else "NULL AS text, NULL AS metadata"
        item_body = "text, '{}' AS metadata" if text else "NULL AS text, NULL AS metadata"
        queries = (
            ("turn", f"SELECT id, 'turn' AS kind, speaker, conversation_id, session_id, turn_id,"
                     f" event_time, recorded_at, {turn_body} FROM turns"),
            ("item", f"SELECT id, kind, speaker, conversation_id, NULL AS session_id,"
                     f" NULL AS turn_id, event_time, recorded_at, {item_body} FROM items"),
        )
        for node, sql in queries:
            ids = [n for n in node_ids if node_type(n) == node]
            for chunk in (ids[i : i + 500] for i in range(0, len(ids), 500)):
                # "+user_id": keep the planner on the unique id index, not the tenant index
                # (which would scan every row of a large tenant).
                where = f" WHERE +user_id = ? AND id IN ({','.join('?' * len(chunk))})"
                for r in self._q(sql + where, [user_id, *chunk]):
                    out[r["id"]] = r
        return out

    def speakers(self, user_id: str) -> list[str]:
        """Every speaker and subject person the tenant's memory knows by name (cached)."""
        return self._cached(("speakers", user_id), lambda: self._load_speakers(user_id))

    def _load_speakers(self, user_id: str) -> list[str]:
        # A skip scan (one index seek per distinct name, over the (user_id, column)
        # indexes): GROUP BY walked every row of the tenant, ~70 ms at 100k items, paid by
        # the first search after every write.
        names: set[str] = set()
        for table, column in (("turns", "speaker"), ("items", "speaker"), ("items", "about")):
            names.update(r[0] for r in self.conn.execute(_DISTINCT.format(table=table,
                                                                          column=column),
                                                         (user_id,)) if r[0])
        return sorted(names)

    def counts(self, user_id: str | None = None) -> dict[str, int]:
        """Row counts per table (for one tenant, or all)."""
        where, args = ("WHERE user_id = ?", [user_id]) if user_id is not None else ("", [])
        return {
            table: self.conn.execute(f"SELECT count(*) FROM {table} {where}", args).fetchone()[0]
            for table in ("conversations", "sessions", "turns", "items", "edges", "embeddings")
        }

    def conversations_with(self, user_id: str, people: Sequence[str]) -> list[str]:
        """The tenant's conversations (those its turns and items name) where any of
        ``people`` speaks or is an item's speaker or subject, sorted; with no ``people``,
        every conversation a turn or an item of the tenant names."""
        if not people:
            rows = self.conn.execute(
                "SELECT DISTINCT conversation_id FROM turns WHERE user_id = ?"
                " UNION SELECT DISTINCT conversation_id FROM items WHERE user_id = ?"
                " AND conversation_id IS NOT NULL", (user_id, user_id))
            return sorted(r[0] for r in rows)
        marks = ",".join("?" * len(people))
        rows = self.conn.execute(
            f"SELECT DISTINCT conversation_id FROM turns WHERE user_id = ? AND speaker IN"
            f" ({marks}) UNION SELECT DISTINCT conversation_id FROM items WHERE user_id = ?"
            f" AND conversation_id IS NOT NULL AND (speaker IN ({marks}) OR about IN ({marks}))",
            (user_id, *people, user_id, *people, *people))
        return sorted(r[0] for r in rows)
