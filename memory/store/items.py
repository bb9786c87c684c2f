"""Items of every kind: storing with exact-duplicate merging, reading, updating (the old
version kept) and deleting, with their full-text and tag index rows.

Holds ``ItemStore``.

SQLite-specific: the ``items_fts`` FTS5 rows (``_index_item``/``_unindex_item``, by rowid,
the tenant token in the text; PostgreSQL: a ``tsvector`` column); ``last_insert_rowid()``
(PostgreSQL: ``RETURNING``); ``INSERT OR IGNORE`` into ``item_tags`` (``ON CONFLICT DO
NOTHING``); ``+user_id`` planner hints. The duplicate check reads, then inserts or merges,
relying on ``BEGIN IMMEDIATE``'s single writer: a server backend needs a row lock or a
unique index on (tenant, kind, content hash) to keep that race closed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .. import text as textmod
from ..locking import stored_json, stored_value
from ..models import ITEM_ADAPTER, Item, utcnow
from . import versions as versionsmod
from .rows import ITEM_PREFIX, _new_id, _ts, _versioned, content_hash, tenant_token
from .shared import ItemWrites
from .vectors import VectorStore


class ItemStore(VectorStore, ItemWrites):
    """Items of every kind (see the module)."""

    def duplicate_of(self, item: Item) -> str | None:
        """The id of the stored item ``add`` would merge ``item`` into, or None."""
        row = self.conn.execute(
            "SELECT id FROM items WHERE user_id = ? AND kind = ? AND content_hash = ?",
            (item.user_id, item.kind, content_hash(item))).fetchone()
        return None if row is None else row[0]

    def _add_one(self, item: Item, now: datetime) -> tuple[str, bool]:
        """Insert ``item`` or merge it into its exact duplicate: (id, whether inserted)."""
        digest = content_hash(item)
        existing = self.conn.execute(
            "SELECT id, tags, evidence, confidence FROM items"
            " WHERE user_id = ? AND kind = ? AND content_hash = ?",
            (item.user_id, item.kind, digest),
        ).fetchone()
        if existing:
            old_id, tags, evidence, confidence = existing
            merged_tags = list(dict.fromkeys(stored_json(tags, f"item {old_id}", list) + item.tags))
            merged_evidence = list(dict.fromkeys(stored_json(evidence, f"item {old_id}", list)
                                                 + item.evidence))
            self.update(
                item.user_id, old_id, tags=merged_tags, evidence=merged_evidence,
                confidence=max(confidence, item.confidence),
            )
            return old_id, False
        item_id = item.id or _new_id(ITEM_PREFIX)
        self.conn.execute(
            "INSERT INTO items (id, user_id, agent_id, kind, text, title, tags, confidence,"
            " source, speaker, about, conversation_id, evidence, event_time, valid_to,"
            " recorded_at, updated_at, content_hash, data)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                item_id, item.user_id, item.agent_id, item.kind, item.text, item.title,
                json.dumps(item.tags), item.confidence, item.source, item.speaker, item.about,
                item.conversation_id, json.dumps(item.evidence), _ts(item.event_time),
                _ts(item.valid_to), _ts(item.recorded_at or now),
                _ts(item.updated_at or now), digest, json.dumps(item.data()),
            ),
        )
        rowid = self.conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        self._index_item(rowid, item)
        return item_id, True

    def _index_item(self, rowid: int, item: Item) -> None:
        body = textmod.index_text(" ".join([item.title, item.text, *item.tags]),
                                  tenant_token(item.user_id))
        self.inserting("item", [rowid])
        self.conn.execute("INSERT INTO items_fts (rowid, body) VALUES (?,?)", (rowid, body))
        tags = {t.casefold() for t in item.tags}
        self.conn.executemany(
            "INSERT OR IGNORE INTO item_tags (user_id, tag, item_rowid) VALUES (?,?,?)",
            [(item.user_id, tag, rowid) for tag in tags],
        )
        kept = self._tag_sets.get(item.user_id)  # see LexicalSearch.tag_vocabulary
        if kept is not None and not tags.issubset(kept[1]):
            # A new list: a search may be reading the one it holds.
            self._tag_sets[item.user_id] = (kept[0], sorted(tags.union(kept[1])))

    def _unindex_item(self, rowid: int) -> None:
        self.changing("item", [rowid])
        self.conn.execute("DELETE FROM items_fts WHERE rowid = ?", (rowid,))
        self.conn.execute("DELETE FROM item_tags WHERE item_rowid = ?", (rowid,))
        self._tag_sets.clear()  # a tag may have gone: the next search reads them again

    def get(self, user_id: str, item_id: str) -> Item | None:
        """One item of the tenant, or None."""
        rows = self.get_many(user_id, [item_id])
        return rows[0] if rows else None

    def get_many(self, user_id: str, item_ids: Sequence[str]) -> list[Item]:
        """The tenant's items with these ids, in the order asked (missing ids skipped)."""
        if not item_ids:
            return []
        rows = self._q(
            f"SELECT * FROM items WHERE +user_id = ? AND id IN ({','.join('?' * len(item_ids))})",
            [user_id, *item_ids],
        )
        by_id = {r["id"]: self._item(r) for r in rows}
        return [by_id[i] for i in item_ids if i in by_id]

    @staticmethod
    def _item(r: dict[str, Any]) -> Item:
        with stored_value(f"item {r.get('id')}"):
            fields = {k: r[k] for k in Item.BASE_FIELDS if k in r}
            fields["tags"] = json.loads(r["tags"])
            fields["evidence"] = json.loads(r["evidence"])
            return ITEM_ADAPTER.validate_python({**fields, **json.loads(r["data"])})

    def items(
        self, user_id: str, *, kind: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[Item]:
        """A page of the tenant's items, newest record first."""
        sql, args = "SELECT * FROM items WHERE user_id = ?", [user_id]
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        sql += " ORDER BY recorded_at DESC, rowid DESC LIMIT ? OFFSET ?"
        return [self._item(r) for r in self._q(sql, [*args, limit, offset])]

    def source_ids(self, user_id: str, kind: str, source: str, *, skip: int = 0) -> list[str]:
        """Ids of the tenant's items of one kind and ``source``, newest record first,
        after the newest ``skip`` (ids only: no model validation)."""
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM items WHERE user_id = ? AND kind = ? AND source = ?"
            " ORDER BY recorded_at DESC, rowid DESC LIMIT -1 OFFSET ?",
            (user_id, kind, source, int(skip))).fetchall()]

    def source_items(self, user_id: str, kind: str, source: str) -> list[Item]:
        """The tenant's items of one kind and ``source``, oldest record first."""
        rows = self._q("SELECT * FROM items WHERE user_id = ? AND kind = ? AND source = ?"
                       " ORDER BY recorded_at, rowid", (user_id, kind, source))
        return [self._item(r) for r in rows]

    def last_source_text(self, user_id: str, kind: str, source: str) -> str | None:
        """The text of the tenant's last written item of one kind and ``source``, or None."""
        row = self.conn.execute(
            "SELECT text FROM items WHERE user_id = ? AND kind = ? AND source = ?"
            " ORDER BY rowid DESC LIMIT 1", (user_id, kind, source)).fetchone()
        return None if row is None else row[0]

    def entity_names(self, user_id: str, entity_type: str) -> list[str]:
        """The non-empty names of the tenant's entity items of ``entity_type``, in row order.

        SQLite-specific: ``json_extract`` on the ``data`` column (PostgreSQL: ``->>``).
        """
        rows = self.conn.execute(
            "SELECT json_extract(data, '$.name') FROM items WHERE user_id = ?"
            " AND kind = 'entity' AND json_extract(data, '$.entity_type') = ?",
            (user_id, entity_type))
        return [r[0] for r in rows if r[0]]

    def current_ids(self, user_id: str, conversation_id: str, kinds: Sequence[str]
                    ) -> list[str]:
        """Ids of the tenant's current items (``valid_to`` unset) of ``kinds`` in one
        conversation (in no set order)."""
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM items WHERE user_id = ? AND conversation_id = ? AND valid_to IS NULL"
            f" AND kind IN ({','.join('?' * len(kinds))})",
            (user_id, conversation_id, *kinds))]

    def update(self, user_id: str, item_id: str, **changes: Any) -> Item:
        """Change fields of an item (validated by its kind's model); returns the new item.

        Raises:
            KeyError: no such item for this tenant.
            ValueError: the change would make it a copy of another stored item (same
                kind and content: ``add`` would have merged them); nothing is written.
        """
        if {"id", "user_id", "kind"} & changes.keys():
            raise ValueError("id, user_id and kind cannot be updated")
        with self.transaction():
            # Read under the write lock: from a read taken before another process's
            # update, this one would undo that update's other fields and drop it from the
            # history.
            current = self.get(user_id, item_id)
            if current is None:
                raise KeyError(f"no item {item_id!r} for user {user_id!r}")
            new = ITEM_ADAPTER.validate_python(
                {**current.model_dump(), **changes, "updated_at": utcnow()}
            )
            twin = self.duplicate_of(new)
            if twin is not None and twin != item_id:
                raise ValueError(f"updating {item_id!r} would duplicate item {twin!r} (same"
                                 " kind and content); delete one of them or change it"
                                 " differently")
            rowid, updated_at = self.conn.execute(
                "SELECT rowid, updated_at FROM items WHERE user_id = ? AND id = ?",
                (user_id, item_id)).fetchone()
            if _versioned(current) != _versioned(new):
                versionsmod.keep(self, user_id, item_id, current.model_dump(mode="json"),
                                 updated_at, _ts(new.updated_at) or "")
            self.conn.execute(
                "UPDATE items SET text=?, title=?, tags=?, confidence=?, source=?, speaker=?,"
                " about=?, conversation_id=?, evidence=?, event_time=?, valid_to=?,"
                " updated_at=?, content_hash=?, data=? WHERE rowid = ?",
                (
                    new.text, new.title, json.dumps(new.tags), new.confidence, new.source,
                    new.speaker, new.about, new.conversation_id, json.dumps(new.evidence),
                    _ts(new.event_time), _ts(new.valid_to), _ts(new.updated_at),
                    content_hash(new), json.dumps(new.data()), rowid,
                ),
            )
            self._unindex_item(rowid)
            self._index_item(rowid, new)
            if new.text != current.text:
                self.conn.execute("DELETE FROM embeddings WHERE node_id = ?", (item_id,))
                embedder = self.embedder
                if embedder is not None:
                    self._put_vectors([user_id], [item_id], embedder.encode([new.text]),
                                      embedder.name)
        return new

    def delete(self, user_id: str, item_id: str) -> bool:
        """Delete an item, its index rows, embeddings and edges. True if it existed."""
        with self.transaction():
            row = self.conn.execute(
                "SELECT rowid FROM items WHERE user_id = ? AND id = ?", (user_id, item_id)
            ).fetchone()
            if row is None:
                return False
            self._unindex_item(row[0])
            self.conn.execute("DELETE FROM items WHERE rowid = ?", (row[0],))
            self.conn.execute("DELETE FROM embeddings WHERE node_id = ?", (item_id,))
            self.conn.execute(
                "DELETE FROM edges WHERE user_id = ? AND (src = ? OR dst = ?)",
                (user_id, item_id, item_id),
            )
            versionsmod.forget(self, user_id, [item_id])
        return True
