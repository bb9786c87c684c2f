"""Items of every kind on PostgreSQL, and the kinds queries over them.

Holds ``PgItems`` (the SQLite ``ItemStore``'s and ``KindQueries``' methods, same
contracts). The exact-duplicate check reads, then inserts or merges: ``add_many`` takes
each tenant's write lock first (``connection.py``), so two writers adding the same item
at once store it once, and the unique index on (tenant, kind, content hash) stays the last
wall. ``update`` takes the same lock: its check that the change does not copy another
item, the version's number and the write are one step for other writers.

The kinds queries (``Cond``, ``Sort``; see the SQLite ``kinds.py``) read a kind-specific
field as ``data -> 'field'`` with JSON ``null`` as SQL NULL, compared as jsonb with the
value as jsonb: numbers numerically, ``True`` matching a stored ``true`` (on SQLite it
reads as 1), strings bytewise (``->>`` text ``COLLATE "C"``, as SQLite compares them).
``nocase`` folds with ``lower`` in the "C" collation, ASCII only, as SQLite's NOCASE.
Sorting puts NULL first ascending and last descending, as SQLite does (PostgreSQL's
default is the other way round). A field compared with a value of a type it does not hold
(a stored string with a number) orders by jsonb's type order, not SQLite's: no caller does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from ...locking import stored_value
from ...models import ITEM_ADAPTER, Item, utcnow
from ..kinds import _COLUMNS, _NAME, _OPS, Cond, Sort
from ..rows import ITEM_PREFIX, _new_id, _ts, _versioned, content_hash
from ..shared import ItemWrites
from .conversations import PgConversations

_JSON_COLUMNS = ("tags", "evidence")


def _field(name: str, value: Any, table: str = "") -> tuple[str, bool]:
    """The SQL of a field, and whether it is compared as jsonb (a kind-specific field
    compared with anything but a string)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a field name: {name!r}")
    if name in _COLUMNS:
        return table + name, False
    if isinstance(value, str):
        return f"(({table}data ->> '{name}') COLLATE \"C\")", False
    return f"nullif({table}data -> '{name}', 'null'::jsonb)", True


def _arg(value: Any, as_json: bool) -> Any:
    return Jsonb(value) if as_json else value


def _where(conds: Sequence[Cond], table: str = "") -> tuple[str, list[Any]]:
    """The conditions as `` AND ...`` clauses, and their arguments."""
    out, args = "", []
    for c in conds:
        if c.op not in _OPS:
            raise ValueError(f"unknown comparison {c.op!r}")
        probe = c.value if c.value is not None else c.missing
        expr, as_json = _field(c.field, probe, table)
        if c.missing is not None:
            expr = f"coalesce({expr}, %s)"
            args.append(_arg(c.missing, as_json))
        if c.op in ("is null", "is not null"):
            out += f" AND {expr} {c.op.upper()}"
            continue
        if c.nocase and not as_json:
            out += f" AND lower({expr}) {c.op} lower(%s)"
        else:
            out += f" AND {expr} {c.op} %s"
        args.append(_arg(c.value, as_json))
    return out, args


def _order(keys: Sequence[Sort]) -> str:
    # A data field sorts as jsonb (numbers numerically); NULLs where SQLite puts them.
    parts = [_field(k.field, None)[0] + (" DESC NULLS LAST" if k.desc else " NULLS FIRST")
             for k in keys]
    parts.append("rowid DESC" if keys and keys[-1].desc else "rowid")
    return " ORDER BY " + ", ".join(parts)


def _data_field(name: str) -> str:
    if name in _COLUMNS or not _NAME.fullmatch(name):
        raise ValueError(f"not a kind-specific field: {name!r}")
    return f"nullif(data -> '{name}', 'null'::jsonb)"


class PgItems(PgConversations, ItemWrites):
    """Items of every kind and the kinds queries (see the module)."""

    if TYPE_CHECKING:
        # The search index's upkeep, from ``PgLexical`` (every store combines the two).
        def _index_items(self, user_id: str, rows: Sequence[tuple[int, Item]], *,
                         replace: Sequence[int] = ()) -> None: ...

        def _index_item(self, item_id: str, item: Item) -> None: ...

        def _reindex_item(self, rowid: int, current: Item, new: Item) -> None: ...

        def _unindex_item(self, user_id: str, item_id: str) -> None: ...

    def _lock_writers(self, user_ids: Sequence[str]) -> None:
        """Every tenant's advisory lock up front, in the order given (sorted by
        ``add_many``): two transactions adding items of the same tenants cannot each hold
        a lock the other waits for."""
        for user in user_ids:
            self._lock_tenant(user)

    def duplicate_of(self, item: Item) -> str | None:
        """The id of the stored item ``add`` would merge ``item`` into, or None."""
        rows = self._rows(item.user_id, "SELECT id FROM items WHERE user_id = %s AND kind = %s"
                          " AND content_hash = %s", (item.user_id, item.kind, content_hash(item)))
        return rows[0][0] if rows else None

    def add_many(self, items: Iterable[Item]) -> list[str]:
        """Store several items in one transaction; returns their ids in order (the SQLite
        store's contract: exact duplicates, stored or earlier in ``items``, merge).

        Set-based, where the SQLite store goes item by item: one query finds the stored
        duplicates of the whole batch, one ``INSERT ... SELECT FROM unnest`` writes the new
        rows, one statement a tenant indexes them. Each statement is a round trip to the
        server, and a per-item loop cost about six of them an item. Merges (rare) go
        through ``_add_one`` after the inserts, in input order, as on SQLite.
        """
        items = list(items)
        if not items:
            return []
        now = utcnow()
        digests = [content_hash(i) for i in items]
        ids: list[str] = [""] * len(items)
        with self.transaction():
            self._lock_writers(sorted({i.user_id for i in items}))
            stored = self._stored_duplicates(items, digests)
            first: set[tuple[str, str, str]] = set()
            new: list[tuple[Item, str, str]] = []  # (item, id, digest)
            merges: list[int] = []
            for n, (item, digest) in enumerate(zip(items, digests, strict=True)):
                key = (item.user_id, item.kind, digest)
                if key in stored or key in first:
                    merges.append(n)
                    continue
                first.add(key)
                ids[n] = item.id or _new_id(ITEM_PREFIX)
                new.append((item, ids[n], digest))
            rowids = self._insert_items(new, now)
            by_user: dict[str, list[tuple[int, Item]]] = {}
            for item, item_id, _ in new:
                by_user.setdefault(item.user_id, []).append((rowids[item_id], item))
            for user, rows in by_user.items():
                self._index_items(user, rows)
            for n in merges:
                ids[n] = self._add_one(items[n], now)[0]
            embedder = self.embedder
            if new and embedder is not None:
                self._put_vectors([i.user_id for i, _, _ in new], [n for _, n, _ in new],
                                  embedder.encode([i.text for i, _, _ in new]), embedder.name)
        return ids

    def _stored_duplicates(self, items: Sequence[Item], digests: Sequence[str]
                           ) -> set[tuple[str, str, str]]:
        """(tenant, kind, content hash) of the stored rows ``items`` would merge into."""
        found: set[tuple[str, str, str]] = set()
        for user in sorted({i.user_id for i in items}):
            mine = [(i.kind, d) for i, d in zip(items, digests, strict=True)
                    if i.user_id == user]
            rows = self._rows(
                user, "SELECT i.kind, i.content_hash FROM items i JOIN unnest(%s::text[],"
                " %s::text[]) AS x(kind, digest) ON i.kind = x.kind AND i.content_hash ="
                " x.digest WHERE i.user_id = %s",
                ([k for k, _ in mine], [d for _, d in mine], user))
            found.update((user, kind, digest) for kind, digest in rows)
        return found

    def _insert_items(self, new: Sequence[tuple[Item, str, str]], now: datetime
                      ) -> dict[str, int]:
        """Insert new rows (item, id, content hash), one statement a tenant: id -> rowid."""
        out: dict[str, int] = {}
        for user in sorted({i.user_id for i, _, _ in new}):
            mine = [(i, n, d) for i, n, d in new if i.user_id == user]
            columns = list(zip(*[
                (n, i.agent_id, i.kind, i.text, i.title, json.dumps(i.tags), i.confidence,
                 i.source, i.speaker, i.about, i.conversation_id, json.dumps(i.evidence),
                 _ts(i.event_time), _ts(i.valid_to), _ts(i.recorded_at or now),
                 _ts(i.updated_at or now), d,
                 json.dumps(i.data())) for i, n, d in mine], strict=True))
            rows = self._rows(
                user,
                "INSERT INTO items (id, user_id, agent_id, kind, text, title, tags, confidence,"
                " source, speaker, about, conversation_id, evidence, event_time, valid_to,"
                " recorded_at, updated_at, content_hash, data)"
                " SELECT id, %s, agent_id, kind, text, title, tags::jsonb, confidence, source,"
                " speaker, about, conversation_id, evidence::jsonb, event_time, valid_to,"
                " recorded_at, updated_at, content_hash, data::jsonb FROM unnest("
                "%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],"
                " %s::float8[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],"
                " %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])"
                " AS x(id, agent_id, kind, text, title, tags, confidence, source, speaker,"
                " about, conversation_id, evidence, event_time, valid_to, recorded_at,"
                " updated_at, content_hash, data) RETURNING id, rowid",
                (user, *map(list, columns)))
            out.update((item_id, rowid) for item_id, rowid in rows)
        return out

    def _add_one(self, item: Item, now: datetime) -> tuple[str, bool]:
        """Insert ``item`` or merge it into its exact duplicate: (id, whether inserted).
        Call under the tenant's write lock."""
        digest = content_hash(item)
        existing = self._rows(item.user_id, "SELECT id, tags, evidence, confidence FROM items"
                              " WHERE user_id = %s AND kind = %s AND content_hash = %s",
                              (item.user_id, item.kind, digest))
        if existing:
            old_id, tags, evidence, confidence = existing[0]
            self.update(item.user_id, old_id,
                        tags=list(dict.fromkeys(tags + item.tags)),
                        evidence=list(dict.fromkeys(evidence + item.evidence)),
                        confidence=max(confidence, item.confidence))
            return old_id, False
        item_id = item.id or _new_id(ITEM_PREFIX)
        self._exec(
            item.user_id,
            "INSERT INTO items (id, user_id, agent_id, kind, text, title, tags, confidence,"
            " source, speaker, about, conversation_id, evidence, event_time, valid_to,"
            " recorded_at, updated_at, content_hash, data)"
            " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (item_id, item.user_id, item.agent_id, item.kind, item.text, item.title,
             Jsonb(item.tags), item.confidence, item.source, item.speaker, item.about,
             item.conversation_id, Jsonb(item.evidence), _ts(item.event_time),
             _ts(item.valid_to), _ts(item.recorded_at or now), _ts(item.updated_at or now),
             digest, Jsonb(item.data())))
        self._index_item(item_id, item)
        return item_id, True

    def get(self, user_id: str, item_id: str) -> Item | None:
        """One item of the tenant, or None."""
        rows = self.get_many(user_id, [item_id])
        return rows[0] if rows else None

    def get_many(self, user_id: str, item_ids: Sequence[str]) -> list[Item]:
        """The tenant's items with these ids, in the order asked (missing ids skipped)."""
        if not item_ids:
            return []
        rows = self._q(user_id, "SELECT * FROM items WHERE user_id = %s AND id = ANY(%s)",
                       (user_id, list(item_ids)))
        by_id = {r["id"]: self._item(r) for r in rows}
        return [by_id[i] for i in item_ids if i in by_id]

    @staticmethod
    def _item(r: dict[str, Any]) -> Item:
        with stored_value(f"item {r.get('id')}"):
            fields = {k: r[k] for k in Item.BASE_FIELDS if k in r}
            return ITEM_ADAPTER.validate_python({**fields, **r["data"]})

    def items(self, user_id: str, *, kind: str | None = None, limit: int = 100,
              offset: int = 0) -> list[Item]:
        """A page of the tenant's items, newest record first."""
        query, args = "SELECT * FROM items WHERE user_id = %s", [user_id]
        if kind is not None:
            query += " AND kind = %s"
            args.append(kind)
        query += " ORDER BY recorded_at DESC, rowid DESC LIMIT %s OFFSET %s"
        return [self._item(r) for r in self._q(user_id, query, [*args, limit, offset])]

    def source_ids(self, user_id: str, kind: str, source: str, *, skip: int = 0) -> list[str]:
        """Ids of the tenant's items of one kind and ``source``, newest record first,
        after the newest ``skip``."""
        return [r[0] for r in self._rows(
            user_id, "SELECT id FROM items WHERE user_id = %s AND kind = %s AND source = %s"
            " ORDER BY recorded_at DESC, rowid DESC OFFSET %s",
            (user_id, kind, source, int(skip)))]

    def source_items(self, user_id: str, kind: str, source: str) -> list[Item]:
        """The tenant's items of one kind and ``source``, oldest record first."""
        rows = self._q(user_id, "SELECT * FROM items WHERE user_id = %s AND kind = %s AND"
                       " source = %s ORDER BY recorded_at, rowid", (user_id, kind, source))
        return [self._item(r) for r in rows]

    def last_source_text(self, user_id: str, kind: str, source: str) -> str | None:
        """The text of the tenant's last written item of one kind and ``source``, or None."""
        rows = self._rows(user_id, "SELECT text FROM items WHERE user_id = %s AND kind = %s AND"
                          " source = %s ORDER BY rowid DESC LIMIT 1", (user_id, kind, source))
        return rows[0][0] if rows else None

    def entity_names(self, user_id: str, entity_type: str) -> list[str]:
        """The non-empty names of the tenant's entity items of ``entity_type``, in row order."""
        rows = self._rows(user_id, "SELECT data ->> 'name' FROM items WHERE user_id = %s AND"
                          " kind = 'entity' AND data ->> 'entity_type' = %s ORDER BY rowid",
                          (user_id, entity_type))
        return [r[0] for r in rows if r[0]]

    def current_ids(self, user_id: str, conversation_id: str, kinds: Sequence[str]
                    ) -> list[str]:
        """Ids of the tenant's current items (``valid_to`` unset) of ``kinds`` in one
        conversation (in no set order)."""
        return [r[0] for r in self._rows(
            user_id, "SELECT id FROM items WHERE user_id = %s AND conversation_id = %s AND"
            " valid_to IS NULL AND kind = ANY(%s)", (user_id, conversation_id, list(kinds)))]

    def update(self, user_id: str, item_id: str, **changes: Any) -> Item:
        """Change fields of an item (validated by its kind's model); returns the new item.

        Raises:
            KeyError: no such item for this tenant.
            ValueError: the change would make it a copy of another stored item; nothing
                is written.
        """
        if {"id", "user_id", "kind"} & changes.keys():
            raise ValueError("id, user_id and kind cannot be updated")
        with self.transaction():
            self._lock_tenant(user_id)
            rows = self._q(user_id, "SELECT * FROM items WHERE user_id = %s AND id = %s",
                           (user_id, item_id))
            if not rows:
                raise KeyError(f"no item {item_id!r} for user {user_id!r}")
            current = self._item(rows[0])
            new = ITEM_ADAPTER.validate_python(
                {**current.model_dump(), **changes, "updated_at": utcnow()})
            twin = self.duplicate_of(new)
            if twin is not None and twin != item_id:
                raise ValueError(f"updating {item_id!r} would duplicate item {twin!r} (same"
                                 " kind and content); delete one of them or change it"
                                 " differently")
            if _versioned(current) != _versioned(new):
                self._keep(user_id, item_id, current.model_dump(mode="json"),
                           rows[0]["updated_at"], _ts(new.updated_at) or "")
            self._exec(
                user_id,
                "UPDATE items SET text=%s, title=%s, tags=%s, confidence=%s, source=%s,"
                " speaker=%s, about=%s, conversation_id=%s, evidence=%s, event_time=%s,"
                " valid_to=%s, updated_at=%s, content_hash=%s, data=%s WHERE rowid = %s",
                (new.text, new.title, Jsonb(new.tags), new.confidence, new.source,
                 new.speaker, new.about, new.conversation_id, Jsonb(new.evidence),
                 _ts(new.event_time), _ts(new.valid_to), _ts(new.updated_at),
                 content_hash(new), Jsonb(new.data()), rows[0]["rowid"]))
            self._reindex_item(rows[0]["rowid"], current, new)
            if new.text != current.text:
                self._exec(user_id, "DELETE FROM embeddings WHERE user_id = %s AND"
                           " node_id = %s", (user_id, item_id))
                embedder = self.embedder
                if embedder is not None:
                    self._put_vectors([user_id], [item_id], embedder.encode([new.text]),
                                      embedder.name)
        return new

    def delete(self, user_id: str, item_id: str) -> bool:
        """Delete an item, its embeddings, edges and versions. True if it existed."""
        with self.transaction():
            self._unindex_item(user_id, item_id)
            if not self._exec(user_id, "DELETE FROM items WHERE user_id = %s AND id = %s",
                              (user_id, item_id)):
                return False
            self._forget_nodes(user_id, [item_id])
        return True

    # kinds queries
    def kind_items(self, user_id: str, kind: str, *, where: Sequence[Cond] = (),
                   order: Sequence[Sort] = (), limit: int | None = None) -> list[Item]:
        """The tenant's items of ``kind`` that pass every condition, sorted by ``order``
        (ties in insertion order), at most ``limit`` (None or negative: all)."""
        query, args = self._kind_sql("*", user_id, kind, where, order, limit)
        return [self._item(r) for r in self._q(user_id, query, args)]

    def kind_values(self, user_id: str, kind: str, fields: Sequence[str], *,
                    where: Sequence[Cond] = (), order: Sequence[Sort] = (),
                    limit: int | None = None) -> list[tuple[Any, ...]]:
        """Like :meth:`kind_items`, but each item as ``(id, *values of fields)``."""
        cols = ", ".join(["id", *map(_data_field, fields)])
        query, args = self._kind_sql(cols, user_id, kind, where, order, limit)
        return [tuple(row) for row in self._rows(user_id, query, args)]

    def kind_max(self, user_id: str, kind: str, field: str) -> Any:
        """The highest value of ``field`` among the tenant's items of ``kind`` (None when
        there is none). Inside a transaction it takes the tenant's write lock first, so
        two writers numbering new items by it cannot take one number."""
        expr = _field(field, None)[0]
        if self._bound.conn is not None:
            self._lock_tenant(user_id)
        # jsonb has no max(): the top row by the jsonb order instead.
        rows = self._rows(user_id, f"SELECT {expr} FROM items WHERE user_id = %s AND"
                          f" kind = %s AND {expr} IS NOT NULL ORDER BY {expr} DESC LIMIT 1",
                          (user_id, kind))
        return rows[0][0] if rows else None

    def kind_sources(self, user_id: str, kind: str, ids: Sequence[str], relation: str, *,
                     where: Sequence[Cond] = ()) -> dict[str, str | None]:
        """The tenant's items of ``kind`` among ``ids`` that pass every condition -> the
        ``src`` of the newest ``relation`` edge into each (None: no such edge)."""
        if not ids:
            return {}
        cond, cond_args = _where(where, "i.")
        rows = self._rows(
            user_id,
            "SELECT i.id, e.src FROM items i LEFT JOIN edges e ON e.user_id = i.user_id"
            " AND e.dst = i.id AND e.relation = %s WHERE i.user_id = %s AND i.id = ANY(%s)"
            f" AND i.kind = %s{cond} ORDER BY e.id NULLS FIRST",
            [relation, user_id, list(ids), kind, *cond_args])
        return dict(rows)  # in edge order: the newest edge's source wins

    def _kind_sql(self, cols: str, user_id: str, kind: str, where: Sequence[Cond],
                  order: Sequence[Sort], limit: int | None) -> tuple[str, list[Any]]:
        cond, args = _where(where)
        query = f"SELECT {cols} FROM items WHERE user_id = %s AND kind = %s{cond}{_order(order)}"
        if limit is not None and limit >= 0:
            query += " LIMIT %s"
            args.append(int(limit))
        return query, [user_id, kind, *args]
