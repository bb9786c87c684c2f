"""Edges between turns and items, and the graph walk over them.

Holds ``EdgeStore``.

Mostly portable SQL: ``ON CONFLICT ... DO UPDATE`` and ``WITH RECURSIVE`` run on PostgreSQL
as written. SQLite-specific: the scalar two-argument ``max(weight, excluded.weight)``
(PostgreSQL: ``GREATEST``), the untyped ``VALUES`` seeds of the walk (PostgreSQL needs casts)
and ``?`` placeholders."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from ..locking import StoreError, stored_value
from ..models import Edge, utcnow
from .connection import StoreConnection
from .rows import _ts


class EdgeStore(StoreConnection):
    """Edges and the graph walk (see the module)."""

    def add_edges(self, edges: Iterable[Edge]) -> int:
        """Insert edges (an existing (src, dst, relation) keeps the higher weight)."""
        now = _ts(utcnow())
        rows = [
            (e.user_id, e.src, e.dst, e.relation, e.weight, json.dumps(e.metadata),
             _ts(e.recorded_at) or now)
            for e in edges
        ]
        with self.transaction():
            self.conn.executemany(
                "INSERT INTO edges (user_id, src, dst, relation, weight, metadata, recorded_at)"
                " VALUES (?,?,?,?,?,?,?) ON CONFLICT (user_id, src, dst, relation)"
                " DO UPDATE SET weight = max(weight, excluded.weight)",
                rows,
            )
        return len(rows)

    def edges(self, user_id: str, *, src: str | None = None, dst: str | None = None,
              relation: str | None = None, limit: int = 1000) -> list[Edge]:
        """The tenant's edges from ``src`` and/or to ``dst``, optionally of one relation."""
        sql, args = "SELECT * FROM edges WHERE user_id = ?", [user_id]
        for column, value in (("src", src), ("dst", dst), ("relation", relation)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        rows = self._q(sql + " ORDER BY id LIMIT ?", [*args, int(limit)])
        with stored_value("an edge"):
            return [Edge(id=r["id"], user_id=r["user_id"], src=r["src"], dst=r["dst"],
                         recorded_at=r["recorded_at"],
                         relation=r["relation"], weight=r["weight"],
                         metadata=json.loads(r["metadata"] or "{}")) for r in rows]

    def neighbors(
        self,
        user_id: str,
        node_ids: Sequence[str],
        *,
        hops: int = 1,
        relations: Sequence[str] | None = None,
    ) -> dict[str, tuple[int, float, str]]:
        """Nodes within ``hops`` (1 or 2) of ``node_ids``, in either direction.

        Returns ``{node: (distance, weight product, seed node)}`` for the nearest reach of
        each node, seeds excluded. The walk is one recursive SQL query.
        """
        if not node_ids:
            return {}
        if hops not in (1, 2):
            raise ValueError("hops must be 1 or 2")
        rel_sql, rel_args = "", []
        if relations:
            rel_sql = f" AND e.relation IN ({','.join('?' * len(relations))})"
            rel_args = list(relations)
        seeds = ",".join("(?, ?, 0, 1.0)" for _ in node_ids)
        # Two recursive arms (out-edges, in-edges) so each join uses an index; an OR in
        # one join condition would scan the tenant's edges.
        sql = f"""
            WITH RECURSIVE walk(seed, node, depth, weight) AS (
                VALUES {seeds}
                UNION
                SELECT w.seed, e.dst, w.depth + 1, w.weight * e.weight
                FROM walk w JOIN edges e ON e.user_id = ? AND e.src = w.node{rel_sql}
                WHERE w.depth < ?
                UNION
                SELECT w.seed, e.src, w.depth + 1, w.weight * e.weight
                FROM walk w JOIN edges e ON e.user_id = ? AND e.dst = w.node{rel_sql}
                WHERE w.depth < ?
            )
            SELECT node, depth, weight, seed FROM walk WHERE depth > 0
            ORDER BY depth, weight DESC
        """
        args: list[Any] = [v for n in node_ids for v in (n, n)]
        args += [user_id, *rel_args, hops, user_id, *rel_args, hops]
        seed_set = set(node_ids)
        nearest: dict[str, tuple[int, float, str]] = {}
        for node, depth, weight, seed in self.conn.execute(sql, args):
            if not isinstance(node, str) or not isinstance(weight, int | float):
                # SQLite checks no stored value's type: an edge's bytes altered on disk.
                raise StoreError("", sqlite3.SQLITE_CORRUPT, f"an edge of {seed} is unreadable"
                                 f" (node {node!r:.40}, weight {weight!r:.20})")
            if node not in seed_set and node not in nearest:  # rows come nearest-first
                nearest[node] = (depth, weight, seed)
        return nearest
