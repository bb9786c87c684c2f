"""Large texts kept whole in the store and read back in bounded pieces.

A blob is one tenant's text under a key (a conversation, a document, a result set). The
tools hand an agent a ``BlobRef(key, n)``; the text itself stays here and only bounded
slices of it ever leave.

Part of the store (moved here from ``memory/blobs.py``, which re-exports its names):
``store.blobs`` is a ``Blobs`` over the store's connection. Its queries: ``put`` (``INSERT
OR REPLACE``: SQLite's upsert, PostgreSQL's ``ON CONFLICT (user_id, key) DO UPDATE``),
``info``, ``text`` (memoised by ``_cached``), ``keys``, ``export`` (every blob of a tenant,
for ``formats/dump.py``) and ``delete``; all but ``put`` are portable SQL with ``?``
placeholders.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from ..models import UTCDateTime, utcnow

if TYPE_CHECKING:
    from .connection import StoreConnection as Store


class BlobInfo(BaseModel):
    """A blob's header: everything about it but its text."""

    user_id: str
    key: str
    chars: int
    lines: int
    sha256: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    recorded_at: UTCDateTime


def _lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


class Blobs:
    """The ``blobs`` table of one store (reach it as ``store.blobs``)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def put(self, user_id: str, key: str, text: str, metadata: dict[str, Any] | None = None
            ) -> BlobInfo:
        """Store (or replace) the text under ``key`` for ``user_id``; returns its header."""
        if not key or not key.strip():
            raise ValueError("a blob key must be a non-empty string")
        info = BlobInfo(user_id=user_id, key=key, chars=len(text), lines=_lines(text),
                        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                        metadata=metadata or {}, recorded_at=utcnow())
        with self.store.transaction():
            self.store.conn.execute(
                "INSERT OR REPLACE INTO blobs (user_id, key, text, chars, lines, sha256, metadata,"
                " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (user_id, key, text, info.chars, info.lines, info.sha256,
                 json.dumps(info.metadata), info.recorded_at.isoformat()),
            )
        return info

    def info(self, user_id: str, key: str) -> BlobInfo | None:
        """The header of one blob of this tenant, or None."""
        rows = self.store._q(
            "SELECT user_id, key, chars, lines, sha256, metadata, recorded_at FROM blobs"
            " WHERE user_id = ? AND key = ?", (user_id, key))
        if not rows:
            return None
        row = rows[0]
        row["metadata"] = json.loads(row["metadata"])
        return BlobInfo.model_validate(row)

    def text(self, user_id: str, key: str) -> str | None:
        """The whole text of one blob of this tenant, or None (memoised until a write)."""
        def load() -> str | None:
            row = self.store.conn.execute(
                "SELECT text FROM blobs WHERE user_id = ? AND key = ?", (user_id, key)).fetchone()
            return None if row is None else row[0]
        return self.store._cached(("blob", user_id, key), load)

    def keys(self, user_id: str) -> list[str]:
        """This tenant's blob keys, sorted."""
        return [r[0] for r in self.store.conn.execute(
            "SELECT key FROM blobs WHERE user_id = ? ORDER BY key", (user_id,))]

    def export(self, user_id: str) -> list[dict[str, Any]]:
        """Every blob of this tenant as ``{key, text, metadata}``, sorted by key."""
        return [{"key": k, "text": t, "metadata": json.loads(m)} for k, t, m in
                self.store.conn.execute("SELECT key, text, metadata FROM blobs"
                                        " WHERE user_id = ? ORDER BY key", (user_id,))]

    def delete(self, user_id: str, key: str) -> bool:
        """Delete one blob; True if it existed."""
        with self.store.transaction():
            cur = self.store.conn.execute(
                "DELETE FROM blobs WHERE user_id = ? AND key = ?", (user_id, key))
        return cur.rowcount > 0
