"""Concurrent clients of ``memstrata bench scale --db URL``: writer and reader processes
against one PostgreSQL store.

Every client is a process of its own (``multiprocessing``'s spawn context) that opens its
own store with ``open_store(url, embedder=None)``, so clients share nothing but the server.
Clients open their store, then wait on a barrier, so process start-up, imports and the
connection are never timed; times are ``time.monotonic()`` (one clock for every process
of the machine).

- **Writers** (:func:`ingest_concurrently`): the corpus is cut into contiguous shares
  (:func:`split`), one per writer; each writer adds its share in the batches and
  transactions of the single-writer ingest (``BATCH`` items, ``store.add_many`` inside
  ``store.transaction()``), waits until every writer's items are in, then adds its share
  of the edges. Throughput is all items over the items phase's wall clock: first writer's
  start to last writer's end. Each writer also reports how long it waited in the store's
  ``_lock_writers`` (PostgreSQL: the tenants' advisory locks, held to the end of the
  transaction), which is where writers of one tenant queue behind each other.
- **Readers** (:func:`search_concurrently`): each runs one warm-up query, waits for the
  others, then the whole query list with ``Retriever(store, embedder=None).search``;
  latency percentiles are over every reader's queries together.

A database is never emptied silently: each measurement runs in a schema of its own
(:data:`SCHEMA_PREFIX` and the size), selected through the URL's ``search_path``;
:func:`prepare_database` refuses to start while such schemas exist unless told to drop them
(``--fresh``); the benchmark drops each schema it created once it has measured it.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import queue
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from multiprocessing.synchronize import Barrier
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import numpy as np

SCHEMA_PREFIX = "memstrata_scale_"
"""Every schema the benchmark creates starts with this (and only those are ever dropped)."""

OWN_TENANT_SUFFIX = ".w{writer}"
"""Appended to every tenant's name by writer ``{writer}`` in the own-tenants ingest."""

_POLL_S = 0.5  # how often the parent checks that no client died without reporting


def split(total: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``(start, stop)`` shares of ``range(total)``, in order, sizes
    differing by at most one; together they cover every index exactly once.

    Raises:
        ValueError: ``parts`` is not positive or ``total`` is negative.
    """
    if parts <= 0 or total < 0:
        raise ValueError("split needs parts >= 1 and total >= 0")
    bounds = [total * p // parts for p in range(parts + 1)]
    return list(itertools.pairwise(bounds))


def schema_url(url: str, schema: str) -> str:
    """``url`` with ``schema`` first on its ``search_path`` (the ``options`` parameter; any
    options the URL already carries are kept)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    options = [v for k, v in query if k == "options"]
    query = [(k, v) for k, v in query if k != "options"]
    query.append(("options", " ".join([*options, f"-c search_path={schema}"])))
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


@contextmanager
def _connect(url: str) -> Iterator[Any]:
    """An autocommit connection as the URL's own role (creating and dropping schemas);
    the driver's errors become ``PgStoreError`` naming the server without its password."""
    from memstrata.memory.extras import require

    psycopg = require("psycopg", "postgres", "the PostgreSQL benchmark")
    from memstrata.memory.store.pg import PgStoreError, redacted

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            yield conn
    except psycopg.Error as exc:
        raise PgStoreError(redacted(url), " ".join(str(exc).split())[:300]) from None


def bench_schemas(url: str) -> list[str]:
    """The benchmark's schemas (:data:`SCHEMA_PREFIX`) that exist in ``url``'s database."""
    with _connect(url) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)"
                            " ORDER BY nspname", (SCHEMA_PREFIX,)).fetchall()
    return [r[0] for r in rows]


def prepare_database(url: str, *, fresh: bool) -> list[str]:
    """Make sure no schema of an earlier run is in the way; the schemas dropped.

    Raises:
        ValueError: such schemas exist and ``fresh`` is false (the message names them and
            ``--fresh``); nothing was changed.
        PgStoreError: the server cannot be reached or refuses the login or the query.
    """
    found = bench_schemas(url)
    if found and not fresh:
        raise ValueError(
            f"the database already holds memstrata benchmark schemas ({', '.join(found)}), "
            "left by an earlier run: pass --fresh to drop them (and every table in them)")
    for schema in found:
        drop_schema(url, schema)
    return found


def create_schema(url: str, schema: str) -> str:
    """Create the empty schema ``schema`` (a name starting with :data:`SCHEMA_PREFIX`) and
    return the URL of a store in it."""
    if not schema.startswith(SCHEMA_PREFIX):
        raise ValueError(f"benchmark schemas start with {SCHEMA_PREFIX!r}: {schema!r}")
    from psycopg import sql

    with _connect(url) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    return schema_url(url, schema)


def drop_schema(url: str, schema: str) -> None:
    """Drop a benchmark schema and everything in it (only a :data:`SCHEMA_PREFIX` name)."""
    if not schema.startswith(SCHEMA_PREFIX):
        raise ValueError(f"refusing to drop {schema!r}: not a benchmark schema")
    from psycopg import sql

    with _connect(url) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def vacuum_analyze(url: str, schema: str) -> float:
    """``VACUUM (ANALYZE)`` every table of ``schema``; the seconds it took.

    After a bulk ingest the planner has no statistics until autovacuum gets to the tables,
    and plans made without them can be far slower: searches are timed after this, in the
    steady state autovacuum reaches by itself."""
    from psycopg import sql

    started = time.perf_counter()
    with _connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename",
            (schema,)).fetchall()]
        for table in tables:
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)))
    return round(time.perf_counter() - started, 3)


def schema_mb(url: str, schema: str) -> float:
    """Disk taken by the schema's tables, their indexes and TOAST, in MiB."""
    with _connect(url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'm')", (schema,)).fetchone()
    return round(int(row[0]) / (1024 * 1024), 2)


def server_is_local(url: str) -> bool:
    """Whether ``url`` names a server on this machine (a Unix socket or a loopback host)."""
    from psycopg.conninfo import conninfo_to_dict

    hosts = str(conninfo_to_dict(url).get("host") or "").split(",")
    return all(h in ("", "localhost", "127.0.0.1", "::1") or h.startswith("/") for h in hosts)


def server_version(url: str) -> str:
    """The server's ``server_version``."""
    with _connect(url) as conn:
        return str(conn.execute("SHOW server_version").fetchone()[0])


# -- clients (each runs in a process of its own) ---------------------------------------------


def _run_clients(target: Callable[..., None], jobs: Sequence[tuple[Any, ...]], role: str
                 ) -> list[dict[str, Any]]:
    """Run ``target(*job, barrier, results, index)`` in one spawned process per job; their
    reports in job order.

    Raises:
        RuntimeError: a client raised (its traceback is in the message) or died without
            reporting; every other client is released from the barrier and stopped.
    """
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(jobs))
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*job, barrier, results, i), daemon=True,
                         name=f"memstrata-scale-{role}-{i}") for i, job in enumerate(jobs)]
    for p in procs:
        p.start()
    got: dict[int, tuple[str, Any]] = {}
    try:
        while len(got) < len(procs):
            try:
                index, status, payload = results.get(timeout=_POLL_S)
                got[index] = (status, payload)
                if status == "error":
                    barrier.abort()
            except queue.Empty:
                dead = [i for i, p in enumerate(procs)
                        if i not in got and p.exitcode is not None]
                if dead:
                    with suppress(queue.Empty):  # a report may still be in the pipe
                        index, status, payload = results.get(timeout=_POLL_S)
                        got[index] = (status, payload)
                        continue
                    barrier.abort()
                    raise RuntimeError(f"{role} {dead[0]} died without reporting (exit code "
                                       f"{procs[dead[0]].exitcode})") from None
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join()
    errors = [(i, payload) for i, (status, payload) in sorted(got.items()) if status == "error"]
    if errors:
        # The first client to fail caused the others' BrokenBarrierError: report it.
        first = next((e for e in errors if "BrokenBarrierError" not in e[1]), errors[0])
        raise RuntimeError(f"{role} {first[0]} failed:\n{first[1]}")
    return [got[i][1] for i in range(len(procs))]


def _writer(url: str, corpus: Any, edges: list[Any], suffix: str, batch: int,
            barrier: Barrier, results: Any, index: int) -> None:
    """One writer: its share of the items in batches, then (after every writer's items)
    its share of the edges; reports its timings on ``results``."""
    store = None
    try:
        from memstrata.memory.store.opener import open_store

        store = open_store(url, embedder=None)
        lock_s = 0.0
        locks = getattr(store, "_lock_writers", None)
        if locks is not None:
            # Time the tenant locks add_many takes: where writers of one tenant queue.
            def timed_locks(user_ids: Sequence[str]) -> None:
                nonlocal lock_s
                started = time.perf_counter()
                try:
                    locks(user_ids)
                finally:
                    lock_s += time.perf_counter() - started

            # A backend's private hook, found above: patched by name.
            setattr(store, "_lock_writers", timed_locks)  # noqa: B010
        barrier.wait()
        start = time.monotonic()
        build_s = store_s = 0.0
        for lo in range(0, len(corpus), batch):
            hi = min(lo + batch, len(corpus))
            t0 = time.perf_counter()
            items = [corpus.item(i) for i in range(lo, hi)]
            if suffix:
                for item in items:
                    item.user_id = item.user_id + suffix
            t1 = time.perf_counter()
            with store.transaction():
                store.add_many(items)
            store_s += time.perf_counter() - t1
            build_s += t1 - t0
        items_end = time.monotonic()
        barrier.wait()  # every writer's items are in: edges may point into other shares
        edges_start = time.monotonic()
        if edges:
            store.add_edges(edges)
        edges_end = time.monotonic()
        results.put((index, "ok", {
            "items": len(corpus), "edges": len(edges), "start": start, "items_end": items_end,
            "edges_start": edges_start, "edges_end": edges_end, "store_s": store_s,
            "model_build_s": build_s, "lock_wait_s": lock_s if locks is not None else None,
        }))
    except BaseException:
        barrier.abort()
        results.put((index, "error", traceback.format_exc()))
    finally:
        if store is not None:
            store.close()


def _reader(url: str, user_id: str, id_prefix: str, queries: list[str], warmup: str, k: int,
            barrier: Barrier, results: Any, index: int) -> None:
    """One reader: a warm-up query, then (with the others) every query, timed one by one."""
    store = None
    try:
        from memstrata.memory import Retriever
        from memstrata.memory.store.opener import open_store

        store = open_store(url, embedder=None)
        retriever = Retriever(store, embedder=None)
        started = time.perf_counter()
        retriever.search(user_id, warmup, k=k)
        warmup_ms = (time.perf_counter() - started) * 1000
        barrier.wait()
        start = time.monotonic()
        lat, sizes, foreign = [], [], 0
        for q in queries:
            t0 = time.perf_counter()
            hits = retriever.search(user_id, q, k=k)
            lat.append((time.perf_counter() - t0) * 1000)
            sizes.append(len(hits))
            foreign += sum(1 for h in hits if not h.id.startswith(id_prefix))
        end = time.monotonic()
        results.put((index, "ok", {"latencies_ms": lat, "sizes": sizes, "foreign": foreign,
                                   "warmup_ms": warmup_ms, "start": start, "end": end}))
    except BaseException:
        barrier.abort()
        results.put((index, "error", traceback.format_exc()))
    finally:
        if store is not None:
            store.close()


# -- the two phases ----------------------------------------------------------------------------


def ingest_concurrently(url: str, corpus: Any, edges: Sequence[Any], writers: int, *,
                        batch: int, own_tenants: bool = False) -> dict[str, Any]:
    """Ingest ``corpus`` (a ``bench.scale.Corpus``) with ``writers`` processes into the
    store at ``url`` (already migrated), then ``edges`` split among them the same way.

    ``own_tenants``: writer ``w`` appends :data:`OWN_TENANT_SUFFIX` to every item's tenant,
    so no two writers share a tenant (no edges are added then: an edge's two ends may fall
    to different writers, hence tenants).

    Returns the figures: ``ingest_per_s`` = items / (last writer's end - first writer's
    start), the edges phase likewise, and each writer's own timings.
    """
    shares = split(len(corpus), writers)
    edge_shares = split(len(edges), writers)
    jobs = [(url, corpus.share(lo, hi),
             [] if own_tenants else list(edges[elo:ehi]),
             OWN_TENANT_SUFFIX.format(writer=w) if own_tenants else "", batch)
            for w, ((lo, hi), (elo, ehi)) in enumerate(zip(shares, edge_shares, strict=True))]
    reports = _run_clients(_writer, jobs, "writer")
    first = min(r["start"] for r in reports)
    wall = max(r["items_end"] for r in reports) - first
    n = len(corpus)
    locks = [r["lock_wait_s"] for r in reports if r["lock_wait_s"] is not None]
    out: dict[str, Any] = {
        "writers": writers,
        "items": n,
        "ingest_s": round(wall, 3),
        "ingest_per_s": round(n / max(wall, 1e-9), 1),
        "lock_wait_s_total": round(sum(locks), 3) if locks else None,
        "lock_wait_share": (round(sum(locks) / max(wall * writers, 1e-9), 3)
                            if locks else None),
        "per_writer": [{
            "items": r["items"],
            "ingest_s": round(r["items_end"] - r["start"], 3),
            "started_after_s": round(r["start"] - first, 3),
            "store_s": round(r["store_s"], 3),
            "model_build_s": round(r["model_build_s"], 3),
            "lock_wait_s": None if r["lock_wait_s"] is None else round(r["lock_wait_s"], 3),
            "edges": r["edges"],
        } for r in reports],
    }
    if not own_tenants:
        edge_wall = (max(r["edges_end"] for r in reports)
                     - min(r["edges_start"] for r in reports))
        out.update({"edges": len(edges), "edges_s": round(edge_wall, 3),
                    "edges_per_s": round(len(edges) / max(edge_wall, 1e-9), 1)})
    return out


def search_concurrently(url: str, user_id: str, queries: list[str], warmup: str,
                        readers: int, *, id_prefix: str, k: int = 10) -> dict[str, Any]:
    """Every one of ``readers`` processes runs ``queries`` for ``user_id`` against the
    store at ``url`` at the same time; latency percentiles over all their queries together.

    ``foreign_tenant_hits`` counts hits whose id lacks ``id_prefix`` (the tenant's ids all
    start with it): another tenant's rows, which must never come back.
    """
    from .metrics import percentiles

    jobs = [(url, user_id, id_prefix, queries, warmup, k) for _ in range(readers)]
    reports = _run_clients(_reader, jobs, "reader")
    lat = [x for r in reports for x in r["latencies_ms"]]
    sizes = [s for r in reports for s in r["sizes"]]
    wall = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    pct = percentiles(lat)
    return {
        "readers": readers,
        "queries": len(lat),
        "p50_ms": pct["p50"],
        "p95_ms": pct["p95"],
        "mean_ms": round(float(np.mean(lat)), 3),
        "max_ms": round(float(np.max(lat)), 3),
        "queries_per_s": round(len(lat) / max(wall, 1e-9), 1),
        "warmup_ms": round(max(r["warmup_ms"] for r in reports), 3),
        "mean_hits": round(float(np.mean(sizes)), 2),
        "empty_results": sum(1 for s in sizes if s == 0),
        "foreign_tenant_hits": sum(r["foreign"] for r in reports),
    }
