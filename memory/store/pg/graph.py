"""Edges between turns and items on PostgreSQL, and the graph walk over them.

Holds ``PgEdges`` (the SQLite ``EdgeStore``'s methods, same contracts): an upsert that
keeps the higher weight (``GREATEST`` where SQLite has the scalar ``max``), and
``neighbors`` as one recursive CTE whose step is a lateral union of out-edges and
in-edges (each arm on its own index), the seeds passed as one array and unnested (typed,
where SQLite's ``VALUES`` seeds are untyped)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from psycopg.types.json import Jsonb

from ...models import Edge, utcnow
from ..rows import _ts
from .connection import PgConnection


class PgEdges(PgConnection):
    """Edges and the graph walk (see the module)."""

    def add_edges(self, edges: Iterable[Edge]) -> int:
        """Insert edges (an existing (src, dst, relation) keeps the higher weight)."""
        now = _ts(utcnow())
        edges = list(edges)
        with self.transaction():
            for user in dict.fromkeys(e.user_id for e in edges):  # RLS: one tenant at a time
                self._many(user, "INSERT INTO edges (user_id, src, dst, relation, weight,"
                           " metadata, recorded_at) VALUES (%s,%s,%s,%s,%s,%s,%s)"
                           " ON CONFLICT (user_id, src, dst, relation)"
                           " DO UPDATE SET weight = GREATEST(edges.weight, excluded.weight)",
                           [(e.user_id, e.src, e.dst, e.relation, e.weight, Jsonb(e.metadata),
                             _ts(e.recorded_at) or now) for e in edges if e.user_id == user])
        return len(edges)

    def edges(self, user_id: str, *, src: str | None = None, dst: str | None = None,
              relation: str | None = None, limit: int = 1000) -> list[Edge]:
        """The tenant's edges from ``src`` and/or to ``dst``, optionally of one relation."""
        query, args = "SELECT * FROM edges WHERE user_id = %s", [user_id]
        for column, value in (("src", src), ("dst", dst), ("relation", relation)):
            if value is not None:
                query += f" AND {column} = %s"
                args.append(value)
        rows = self._q(user_id, query + " ORDER BY id LIMIT %s", [*args, int(limit)])
        return [Edge(id=r["id"], user_id=r["user_id"], src=r["src"], dst=r["dst"],
                     recorded_at=r["recorded_at"],
                     relation=r["relation"], weight=r["weight"],
                     metadata=r["metadata"] or {}) for r in rows]

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
            rel_sql = " AND e.relation = ANY(%s)"
            rel_args = [list(relations)]
        # UNION (not UNION ALL) drops repeated (seed, node, depth, weight) rows, as on
        # SQLite; depth bounds the walk. PostgreSQL lets the recursive term name the walk
        # once: out-edges and in-edges are one LATERAL union, each arm on its own index.
        query = f"""
            WITH RECURSIVE walk(seed, node, depth, weight) AS (
                SELECT s COLLATE "C", s COLLATE "C", 0, 1.0::double precision
                FROM unnest(%s::text[]) AS s
                UNION
                SELECT w.seed, e.node, w.depth + 1, w.weight * e.weight
                FROM walk w CROSS JOIN LATERAL (
                    SELECT e.dst AS node, e.weight FROM edges e
                    WHERE e.user_id = %s AND e.src = w.node{rel_sql}
                    UNION ALL
                    SELECT e.src, e.weight FROM edges e
                    WHERE e.user_id = %s AND e.dst = w.node{rel_sql}) e
                WHERE w.depth < %s
            )
            SELECT node, depth, weight, seed FROM walk WHERE depth > 0
            ORDER BY depth, weight DESC
        """
        args: list[Any] = [list(dict.fromkeys(node_ids)), user_id, *rel_args, user_id,
                           *rel_args, hops]
        seed_set = set(node_ids)
        nearest: dict[str, tuple[int, float, str]] = {}
        for node, depth, weight, seed in self._rows(user_id, query, args):
            if node not in seed_set and node not in nearest:  # rows come nearest-first
                nearest[node] = (depth, weight, seed)
        return nearest
