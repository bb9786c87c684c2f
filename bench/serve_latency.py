"""``memstrata bench serve``: REST search latency under concurrent clients against
in-process search on the same store, in the same run.

The store: one tenant of ``turns`` turns (100k by default), their texts the scale bench's
synthetic sentences (``scale.make_corpus``: Zipf-distributed words, speakers, tags as
words), imported through ``Memory.import_conversations`` (so each turn is indexed and
embedded by the default static model, as ``add`` does), plus a small second tenant. The
queries are the scale bench's (``scale.make_queries``).

Every query is first met once by each process (unmeasured), then timed in four arms:

* ``in_process`` and ``rest_sequential``: ``Memory.search`` in this process and ``POST
  /v1/search`` to ``memstrata serve`` (a process of its own on 127.0.0.1, uvicorn), one
  call at a time, paired: each query in both, the order alternating, so neither load
  drifts nor a cache one query warms favours an arm; ``rest_overhead_ms`` is the paired
  difference's p50 and p95;
* ``in_process_threads`` and ``rest``: the same from ``clients`` threads at once (one
  shared ``Memory``; one keep-alive connection per REST client), in alternating blocks of
  the queries. The store's lock serialises searches, so a call's latency includes its
  wait.

The target compares ``rest`` with ``in_process_threads`` (the same concurrency): REST
p95 at most the in-process p95 plus ``TARGET_MS``. Clients and server share the machine's
cores; the document records the load average before and after.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .metrics import percentiles
from .scale import make_corpus, make_queries

MAIN, OTHER = "main", "other"
TARGET_MS = 5.0
BLOCKS = 8
"""The concurrent arms alternate over this many blocks of the queries."""
PER_CONVERSATION = 10_000
PER_SESSION = 100
SPEAKERS = ("user", "assistant")


def build_store(path: Path, turns: int, seed: int = 0,
                progress: Callable[[int], None] | None = None) -> None:
    """``turns`` turns of ``MAIN`` (and 1% as many of ``OTHER``) in a new store at
    ``path`` (``progress`` is called with each conversation's turn count)."""
    from memstrata import Memory
    from memstrata.formats import ConversationRecord, Message, SessionRecord

    corpus = make_corpus(turns, seed=seed)
    texts = [corpus.text(i) for i in range(len(corpus))]
    mains = [t for t, who in zip(texts, corpus.tenant.tolist(), strict=True) if who == 0]
    others = [t for t, who in zip(texts, corpus.tenant.tolist(), strict=True) if who != 0]
    with Memory.open(path) as memory:
        for user, sentences in ((MAIN, mains[:turns]), (OTHER, others[:max(100, turns // 100)])):
            for c in range(0, len(sentences), PER_CONVERSATION):
                chunk = sentences[c:c + PER_CONVERSATION]
                sessions = [SessionRecord(id=f"s{s // PER_SESSION}", messages=[
                    Message(speaker=SPEAKERS[n % 2], content=text)
                    for n, text in enumerate(chunk[s:s + PER_SESSION], s)])
                    for s in range(0, len(chunk), PER_SESSION)]
                memory.import_conversations([ConversationRecord(id=f"c{c}", sessions=sessions)],
                                            user_id=user, progress=progress)


def _timed(fn: Callable[[str], Any], queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        started = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - started) * 1000)
    return out


def _threads(fn: Callable[[], Callable[[str], Any]], queries: list[str], clients: int
             ) -> tuple[list[float], float]:
    """Each of ``clients`` threads runs its share of ``queries`` with its own ``fn()``;
    the latencies and the wall time."""
    shares = [queries[i::clients] for i in range(clients)]
    results: list[list[float]] = [[] for _ in range(clients)]
    barrier = threading.Barrier(clients)

    def run(n: int) -> None:
        call = fn()
        barrier.wait()
        results[n] = _timed(call, shares[n])

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [x for r in results for x in r], time.perf_counter() - started


def _summary(latencies: list[float], wall_s: float | None = None) -> dict[str, Any]:
    pct = percentiles(latencies)
    out: dict[str, Any] = {"calls": len(latencies), "p50_ms": pct["p50"], "p95_ms": pct["p95"],
                           "max_ms": round(max(latencies), 3)}
    if wall_s:
        out["per_s"] = round(len(latencies) / wall_s, 1)
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _server(path: Path) -> Iterator[str]:
    """``memstrata serve`` over ``path`` in a process of its own; yields its base URL."""
    import httpx

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "memstrata.cli", "serve", "--db", str(path), "--port",
         str(port), "--no-ui", "--no-mcp"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{base}/openapi.json", timeout=2)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("memstrata serve did not start: "
                                       + (server.stderr.read() if server.stderr else "")
                                       ) from None
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=60)


def run_serve_bench(*, turns: int = 100_000, queries: int = 400, clients: int = 8,
                    seed: int = 0, db: str | Path | None = None,
                    progress: bool = True) -> dict[str, Any]:
    """Build (or reuse, at ``db``) the store, run the three arms; returns the document
    (see the module)."""
    import httpx
    from tqdm import tqdm

    from memstrata import Memory

    folder = Path(tempfile.mkdtemp(prefix="memstrata-serve-bench-"))
    path = Path(db) if db else folder / "serve.db"
    doc: dict[str, Any] = {"benchmark": "serve-latency", "turns": turns, "clients": clients,
                           "seed": seed, "target_ms": TARGET_MS,
                           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                       "python": platform.python_version()}}
    started = time.perf_counter()
    if not path.exists():
        with tqdm(total=turns, unit="turn", desc="build", disable=not progress,
                  file=sys.stderr) as bar:
            build_store(path, turns, seed, progress=bar.update)
    doc["build_s"] = round(time.perf_counter() - started, 1)
    asked = make_queries(make_corpus(turns, seed=seed), queries, seed)

    doc["load_before"] = [round(x, 2) for x in os.getloadavg()]
    with Memory.open(path) as memory, _server(path) as base:
        doc["stored_turns"] = memory.store.counts(MAIN)["turns"]
        key, _ = memory.store.keys.create(MAIN, name="bench serve")
        headers = {"Authorization": f"Bearer {key}"}

        def in_process() -> Callable[[str], Any]:
            return lambda q: memory.search(q, user_id=MAIN, k=10)

        def rest() -> Callable[[str], Any]:
            client = httpx.Client(base_url=base, headers=headers, timeout=60)

            def call(q: str) -> Any:
                response = client.post("/v1/search", json={"query": q, "k": 10})
                response.raise_for_status()
                return response.json()
            return call

        local, remote = in_process(), rest()
        for q in asked:  # warm both: every query met once by each process before timing
            local(q)
            remote(q)
        # One at a time, paired: each query in both arms, the order alternating, so load
        # drifts and caches a query warms favour neither arm.
        seq: dict[str, list[float]] = {"in_process": [], "rest": []}
        for n, q in enumerate(asked):
            order = (("in_process", local), ("rest", remote))
            for arm, call in (order if n % 2 == 0 else order[::-1]):
                seq[arm] += _timed(call, [q])
        doc["in_process"] = _summary(seq["in_process"])
        doc["rest_sequential"] = _summary(seq["rest"])
        gaps = [r - i for r, i in zip(seq["rest"], seq["in_process"], strict=True)]
        doc["rest_overhead_ms"] = percentiles(gaps)
        # ``clients`` at once, in alternating blocks of the queries (same reason).
        conc: dict[str, tuple[list[float], float]] = {"in_process_threads": ([], 0.0),
                                                      "rest": ([], 0.0)}
        step = max(clients, len(asked) // BLOCKS)
        for b, at in enumerate(range(0, len(asked), step)):
            block = asked[at:at + step]
            order2 = (("in_process_threads", in_process), ("rest", rest))
            for arm, make in (order2 if b % 2 == 0 else order2[::-1]):
                lat, wall = _threads(make, block, clients)
                conc[arm] = (conc[arm][0] + lat, conc[arm][1] + wall)
        doc["in_process_threads"] = _summary(*conc["in_process_threads"])
        doc["rest"] = _summary(*conc["rest"])
    doc["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if not db:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    base_p95 = doc["in_process_threads"]["p95_ms"]
    doc["rest_minus_in_process_p95_ms"] = round(doc["rest"]["p95_ms"] - base_p95, 3)
    doc["target_met"] = doc["rest"]["p95_ms"] <= base_p95 + TARGET_MS
    doc["seconds"] = round(time.perf_counter() - started, 1)
    return doc


def serve_table(doc: dict[str, Any]) -> str:
    """The arms as a markdown table, and the verdict."""
    lines = [f"REST search vs in-process at {doc['stored_turns']:,} turns, "
             f"{doc['clients']} concurrent clients", "",
             "| arm | calls | p50 ms | p95 ms | max ms | searches/s |",
             "|---|---:|---:|---:|---:|---:|"]
    for arm in ("in_process", "in_process_threads", "rest", "rest_sequential"):
        s = doc[arm]
        lines.append(f"| {arm} | {s['calls']} | {s['p50_ms']} | {s['p95_ms']} | "
                     f"{s['max_ms']} | {s.get('per_s', '')} |")
    gap = doc["rest_overhead_ms"]
    lines += ["", f"REST overhead, one call at a time (paired): p50 {gap['p50']} ms, "
              f"p95 {gap['p95']} ms; load average {doc['load_before']} -> "
              f"{doc['load_after']}",
              f"REST p95 - in-process p95 (both {doc['clients']} clients): "
              f"{doc['rest_minus_in_process_p95_ms']} ms (target <= {doc['target_ms']} ms): "
              + ("met" if doc["target_met"] else "NOT met")]
    return "\n".join(lines)


def write_serve_outputs(doc: dict[str, Any], out: str | Path) -> list[Path]:
    """``serve.json`` and ``serve.md`` in ``out``."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "serve.json", folder / "serve.md"]
    paths[0].write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(serve_table(doc) + "\n", encoding="utf-8")
    return paths
