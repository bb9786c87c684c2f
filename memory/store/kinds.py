"""Items of one kind, selected by their kind-specific fields: what the cognitive
lifecycles (``memory/cognitive/``) ask of the store.

Holds ``KindQueries`` and the two small values its methods take: ``Cond`` (one condition
on a field) and ``Sort`` (one sort key). A field is a stored column when it is one of the
scalar base fields of ``Item`` (``valid_to``, ``recorded_at``, ``source``, ...), else a
kind-specific field in the ``data`` column (``temporal_index``, ``status``, ...). There is
no query language: conditions are ANDed, and what a query can do is what the lifecycles
need (equality, comparison, IS NULL, a default for a missing field, ASCII case folding;
sort keys; a limit; the highest value of a field; the sources of one relation's edges).

Rows that tie on every sort key come in insertion order, in the direction of the last key
(oldest first with no key or an ascending last key, newest first after a descending one).

SQLite-specific: ``json_extract(data, '$.field')`` for data fields (a JSON ``true`` reads
as 1, so ``Cond("compressed", "=", True)`` matches it) and ``data -> '$.field'`` to read
values back as JSON; ``COLLATE NOCASE``; ``rowid`` as insertion order; ``LIMIT -1``.
PostgreSQL would use jsonb operators on a ``jsonb`` column: ``data ->> 'field'`` for text
comparisons (``lower(...)`` for ``nocase``), ``data -> 'field'`` for numbers and booleans
(jsonb orders numbers numerically) and for reading values back, ``coalesce`` for
``missing``, and an identity column for insertion order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..locking import stored_json
from ..models import Item
from .items import ItemStore

Op = Literal["=", "!=", "<", "<=", ">", ">=", "is null", "is not null"]
"""How a ``Cond`` compares its field."""

_OPS = frozenset({"=", "!=", "<", "<=", ">", ">=", "is null", "is not null"})
_NAME = re.compile(r"[a-z_][a-z0-9_]*")
# Base fields stored as plain columns (tags and evidence are JSON lists: not comparable).
_COLUMNS = frozenset(Item.BASE_FIELDS) - {"tags", "evidence", "user_id", "kind"}


@dataclass(frozen=True)
class Cond:
    """One condition on an item's field: ``field op value``.

    ``missing`` is what an absent (null) field counts as (None: it stays null, and then
    only ``is null`` matches it). ``nocase`` compares ``=`` ignoring ASCII case.
    """

    field: str
    op: Op = "="
    value: Any = None
    missing: Any = None
    nocase: bool = False


@dataclass(frozen=True)
class Sort:
    """One sort key: a field, ascending unless ``desc``."""

    field: str
    desc: bool = False


def _field(name: str, table: str = "") -> str:
    """The SQL of a field: its column, or its value in the ``data`` column."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a field name: {name!r}")
    return table + name if name in _COLUMNS else f"json_extract({table}data, '$.{name}')"


def _data_field(name: str) -> str:
    """The JSON value of a kind-specific field (``kind_values`` reads those only)."""
    if name in _COLUMNS or not _NAME.fullmatch(name):
        raise ValueError(f"not a kind-specific field: {name!r}")
    return f"data -> '$.{name}'"


def _where(conds: Sequence[Cond], table: str = "") -> tuple[str, list[Any]]:
    """The conditions as `` AND ...`` clauses, and their arguments."""
    sql, args = "", []
    for c in conds:
        if c.op not in _OPS:
            raise ValueError(f"unknown comparison {c.op!r}")
        expr = _field(c.field, table)
        if c.missing is not None:
            expr = f"coalesce({expr}, ?)"
            args.append(c.missing)
        if c.op in ("is null", "is not null"):
            sql += f" AND {expr} {c.op.upper()}"
            continue
        sql += f" AND {expr} {c.op} ?" + (" COLLATE NOCASE" if c.nocase else "")
        args.append(c.value)
    return sql, args


def _order(keys: Sequence[Sort]) -> str:
    parts = [_field(k.field) + (" DESC" if k.desc else "") for k in keys]
    parts.append("rowid DESC" if keys and keys[-1].desc else "rowid")
    return " ORDER BY " + ", ".join(parts)


class KindQueries(ItemStore):
    """Items of one kind by their fields (see the module)."""

    def kind_items(self, user_id: str, kind: str, *, where: Sequence[Cond] = (),
                   order: Sequence[Sort] = (), limit: int | None = None) -> list[Item]:
        """The tenant's items of ``kind`` that pass every condition, sorted by ``order``
        (ties in insertion order), at most ``limit`` (None or negative: all)."""
        sql, args = self._kind_sql("*", user_id, kind, where, order, limit)
        return [self._item(r) for r in self._q(sql, args)]

    def kind_values(self, user_id: str, kind: str, fields: Sequence[str], *,
                    where: Sequence[Cond] = (), order: Sequence[Sort] = (),
                    limit: int | None = None) -> list[tuple[Any, ...]]:
        """Like :meth:`kind_items`, but each item as ``(id, *values of fields)`` (a
        missing field None; lists and objects decoded), without reading whole rows."""
        cols = ", ".join(["id", *map(_data_field, fields)])
        sql, args = self._kind_sql(cols, user_id, kind, where, order, limit)
        return [(row[0], *(None if v is None else stored_json(v, f"item {row[0]}")
                           for v in row[1:]))
                for row in self.conn.execute(sql, args)]

    def kind_max(self, user_id: str, kind: str, field: str) -> Any:
        """The highest value of ``field`` among the tenant's items of ``kind`` (None when
        there is none). Call inside a transaction when numbering a new item by it: the
        write lock then keeps two writers from taking one number."""
        (top,) = self.conn.execute(
            f"SELECT max({_field(field)}) FROM items WHERE user_id = ? AND kind = ?",
            (user_id, kind)).fetchone()
        return top

    def kind_sources(self, user_id: str, kind: str, ids: Sequence[str], relation: str, *,
                     where: Sequence[Cond] = ()) -> dict[str, str | None]:
        """The tenant's items of ``kind`` among ``ids`` that pass every condition -> the
        ``src`` of the newest ``relation`` edge into each (None: no such edge). One query."""
        if not ids:
            return {}
        cond, cond_args = _where(where, "i.")
        rows = self.conn.execute(
            "SELECT i.id, e.src FROM items i LEFT JOIN edges e ON e.user_id = i.user_id"
            " AND e.dst = i.id AND e.relation = ? WHERE i.user_id = ?"
            f" AND i.id IN ({','.join('?' * len(ids))}) AND i.kind = ?{cond} ORDER BY e.id",
            [relation, user_id, *ids, kind, *cond_args]).fetchall()
        return dict(rows)  # in edge order: the newest edge's source wins

    def _kind_sql(self, cols: str, user_id: str, kind: str, where: Sequence[Cond],
                  order: Sequence[Sort], limit: int | None) -> tuple[str, list[Any]]:
        cond, args = _where(where)
        sql = f"SELECT {cols} FROM items WHERE user_id = ? AND kind = ?{cond}{_order(order)}"
        if limit is not None and limit >= 0:
            sql += " LIMIT ?"
            args.append(int(limit))
        return sql, [user_id, kind, *args]

