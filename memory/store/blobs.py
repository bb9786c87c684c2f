"""Large texts kept whole in the store and read back in bounded pieces.

A blob is one tenant's text under a key (a conversation, a document, a result set). The
tools hand an agent a ``BlobRef(key, n)``; the text itself stays here and only bounded
slices of it ever leave.

Part of the store: ``store.blobs`` is a ``Blobs`` over the store. Its queries: ``put`` (an upsert on
``(user_id, key)``), ``info``, ``text`` (memoised by the store's ``_cached``), ``keys``,
``export`` (every blob of a tenant, for ``formats/dump.py``) and ``delete``; every one
filters by tenant.

Also holds ``StoreTables``, the base of ``Blobs`` and ``Runs`` (``memory/runs.py``): their
SQL is written once, with ``?`` placeholders, and runs through its few hooks (rows as
dicts, a change's row count, a JSON column's value in and out). The hooks here are
SQLite's; the PostgreSQL store's subclasses (``memory/store/pg/aux.py``) override them and
the few statements whose syntax differs (class attributes such as ``UPSERT``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, TypeVar, cast

from pydantic import BaseModel, Field

from ..locking import LockedConnection, stored_json
from ..models import UTCDateTime, utcnow

T = TypeVar("T")


class TablesHost(Protocol):
    """What the tables' shared methods use of their store, whichever the backend."""

    def transaction(self) -> AbstractContextManager[Any]: ...

    def _cached(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T: ...


class SQLiteHost(TablesHost, Protocol):
    """What the SQLite hooks use of the SQLite store (``StoreConnection``)."""

    conn: LockedConnection

    def _q(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]: ...


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


class StoreTables:
    """Some tables of one store, reached through these hooks (SQLite's; see the module).

    Every hook takes the tenant the statement is for (``None``: none, a lookup that spans
    tenants); SQLite filters in the SQL alone and ignores it, PostgreSQL also sets its
    row-level security tenant from it. Writes call the hooks inside ``store.transaction()``.
    """

    def __init__(self, store: TablesHost) -> None:
        self._host = store

    @property
    def store(self) -> TablesHost:
        """The store these tables are part of."""
        return self._host

    @property
    def _sqlite(self) -> SQLiteHost:
        """The store, as the SQLite one these hooks run on (another backend's subclass
        overrides every hook that reads it)."""
        return cast(SQLiteHost, self.store)

    def _select(self, user_id: str | None, query: str, args: Sequence[Any] = ()
                ) -> list[dict[str, Any]]:
        """The rows of a query, as dicts."""
        return self._sqlite._q(query, args)

    def _change(self, user_id: str | None, query: str, args: Sequence[Any] = ()) -> int:
        """Run one write; the rows it changed."""
        return int(self._sqlite.conn.execute(query, args).rowcount)

    def _change_many(self, user_id: str | None, query: str, rows: Sequence[Sequence[Any]]
                     ) -> None:
        """Run one write for each of ``rows``."""
        self._sqlite.conn.executemany(query, rows)

    def _json(self, value: Any) -> Any:
        """A JSON column's value as written (SQLite: the JSON text)."""
        return json.dumps(value)

    def _parsed(self, stored: Any) -> Any:
        """A JSON column's value as read back, parsed (SQLite: from its text)."""
        return stored_json(stored, "a stored JSON value")


class Blobs(StoreTables):
    """The ``blobs`` table of one store (reach it as ``store.blobs``)."""

    UPSERT = ("INSERT OR REPLACE INTO blobs (user_id, key, text, chars, lines, sha256,"
              " metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
    """Write one blob, replacing the tenant's blob under the same key."""

    def put(self, user_id: str, key: str, text: str, metadata: dict[str, Any] | None = None,
            *, recorded_at: datetime | None = None) -> BlobInfo:
        """Store (or replace) the text under ``key`` for ``user_id``; returns its header.
        ``recorded_at``: the record time to keep (an import's); default now."""
        if not key or not key.strip():
            raise ValueError("a blob key must be a non-empty string")
        info = BlobInfo(user_id=user_id, key=key, chars=len(text), lines=_lines(text),
                        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                        metadata=metadata or {}, recorded_at=recorded_at or utcnow())
        with self.store.transaction():
            self._change(user_id, self.UPSERT,
                         (user_id, key, text, info.chars, info.lines, info.sha256,
                          self._json(info.metadata), info.recorded_at.isoformat()))
        return info

    def info(self, user_id: str, key: str) -> BlobInfo | None:
        """The header of one blob of this tenant, or None."""
        rows = self._select(
            user_id, "SELECT user_id, key, chars, lines, sha256, metadata, recorded_at FROM"
            " blobs WHERE user_id = ? AND key = ?", (user_id, key))
        if not rows:
            return None
        row = rows[0]
        row["metadata"] = self._parsed(row["metadata"])
        return BlobInfo.model_validate(row)

    def text(self, user_id: str, key: str) -> str | None:
        """The whole text of one blob of this tenant, or None (memoised until a write)."""
        def load() -> str | None:
            rows = self._select(user_id, "SELECT text FROM blobs WHERE user_id = ? AND key = ?",
                                (user_id, key))
            return None if not rows else rows[0]["text"]
        return self.store._cached(("blob", user_id, key), load)

    def keys(self, user_id: str) -> list[str]:
        """This tenant's blob keys, sorted."""
        return [r["key"] for r in self._select(
            user_id, "SELECT key FROM blobs WHERE user_id = ? ORDER BY key", (user_id,))]

    def export(self, user_id: str) -> list[dict[str, Any]]:
        """Every blob of this tenant as ``{key, text, metadata, recorded_at}``, sorted by
        key."""
        return [{"key": r["key"], "text": r["text"], "metadata": self._parsed(r["metadata"]),
                 "recorded_at": r["recorded_at"]}
                for r in self._select(user_id, "SELECT key, text, metadata, recorded_at FROM"
                                      " blobs WHERE user_id = ? ORDER BY key", (user_id,))]

    def delete(self, user_id: str, key: str) -> bool:
        """Delete one blob; True if it existed."""
        with self.store.transaction():
            changed = self._change(user_id, "DELETE FROM blobs WHERE user_id = ? AND key = ?",
                                   (user_id, key))
        return changed > 0
