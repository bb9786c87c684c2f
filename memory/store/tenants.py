"""A tenant's rows for an export, and writing kept versions back on an import: what
``formats/dump.py`` (``Memory.export``/``Memory.import_``) reads and writes besides the
ordinary store API (``turns``, ``get_many``, ``edges``, ``add_*``, ``blobs``).

Holds ``TenantRows``: the tenant's conversations and sessions as stored (times as the
stored text, so an export round-trips them unchanged), its item ids in insertion order,
and its kept versions (``versions.rows``/``versions.restore``).

SQLite-specific: ``rowid`` as insertion order (PostgreSQL: an identity column) and ``?``
placeholders; the rest is portable SQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..locking import stored_json
from . import versions as versionsmod
from .connection import StoreConnection


class TenantRows(StoreConnection):
    """A tenant's rows for an export, and kept versions restored (see the module)."""

    def conversation_rows(self, user_id: str) -> list[dict[str, Any]]:
        """The tenant's conversations (``id``, ``agent_id``, ``title``, ``speakers``,
        ``metadata``, ``recorded_at``), in the order they were first written."""
        return [{"id": cid, "agent_id": agent, "title": title,
                 "speakers": stored_json(speakers, f"conversation {cid}", list),
                 "metadata": stored_json(meta, f"conversation {cid}", dict),
                 "recorded_at": recorded}
                for cid, agent, title, speakers, meta, recorded in
                self.conn.execute("SELECT id, agent_id, title, speakers, metadata, recorded_at"
                                  " FROM conversations WHERE user_id = ? ORDER BY rowid",
                                  (user_id,))]

    def session_rows(self, user_id: str) -> list[dict[str, Any]]:
        """The tenant's sessions (``id``, ``conversation_id``, ``index``, ``started_at`` as
        stored, ``metadata``), by conversation then index."""
        return [{"id": sid, "conversation_id": cid, "index": idx, "started_at": started,
                 "metadata": stored_json(meta, f"session {sid}", dict)}
                for sid, cid, idx, started, meta in
                self.conn.execute("SELECT id, conversation_id, idx, started_at, metadata"
                                  " FROM sessions WHERE user_id = ?"
                                  " ORDER BY conversation_id, idx", (user_id,))]

    def item_ids(self, user_id: str) -> list[str]:
        """The ids of all the tenant's items, in the order they were written."""
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM items WHERE user_id = ? ORDER BY rowid", (user_id,))]

    def version_rows(self, user_id: str) -> list[dict[str, Any]]:
        """The tenant's kept versions of turns and items, by node then version (see
        ``versions.rows``)."""
        return versionsmod.rows(self, user_id)

    def restore_versions(self, user_id: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Write kept versions back, as :meth:`version_rows` returns them, into
        ``user_id`` in one transaction; returns how many."""
        with self.transaction():
            return versionsmod.restore(self, user_id, rows)
