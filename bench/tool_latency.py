"""Tool-call latency at scale (``memstrata bench tools``).

One synthetic tenant of N items (the scale benchmark's corpus, four small tenants beside
it) plus one large blob; every handle tool is called repeatedly through a bound
``ToolSession`` and timed end to end (argument checks, SQL, JSON sizing, logging). The
floor measured in the same run is a bare ``Store.get`` of one item: the cost of any
SQLite round trip from Python on this machine.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from memstrata.tools import ToolSession
from memstrata.trajectories import code_version

from .scale import MAIN_USER, _ingest, _latency, make_corpus, make_queries

TARGET_MS = 20.0
BLOB_CHARS = 1_000_000


def _timed(fn: Callable[[int], Any], calls: int) -> list[float]:
    lat = []
    for i in range(calls):
        started = time.perf_counter()
        fn(i)
        lat.append((time.perf_counter() - started) * 1000)
    return lat


def run_tool_bench(items: int = 100_000, calls: int = 200, seed: int = 0,
                   progress: bool = True) -> dict[str, Any]:
    """Time each tool ``calls`` times over a store of ``items`` items; returns the doc."""
    rng = np.random.default_rng(seed)
    corpus = make_corpus(items, seed)
    queries = make_queries(corpus, calls, seed)
    with tempfile.TemporaryDirectory() as tmp:
        from memstrata.memory import Store

        store = Store.open(Path(tmp) / "tools.db")
        ingest = _ingest(store, corpus, rng, progress, f"ingest {items:,}")
        main_ids = [corpus.ids[i] for i in np.flatnonzero(corpus.tenant == 0)[:5000]]
        text, n = [], 0
        for i in range(len(corpus)):  # a ~1M-character document made of corpus texts
            line = f"[{i}] {corpus.text(i)}"
            text.append(line)
            n += len(line) + 1
            if n >= BLOB_CHARS:
                break
        session = ToolSession(store, MAIN_USER)
        ref = session.put_blob("document", "\n".join(text))
        t = {fn.__name__: fn for fn in session.handle_tools()}
        words = [q.split()[0] for q in queries]
        found: list[list[str]] = []

        def search(i: int) -> None:
            found.append([r["id"] for r in t["mem_search"](queries[i], k=6)["results"]])

        plan: dict[str, Callable[[int], Any]] = {
            "store.get (floor)": lambda i: store.get(MAIN_USER, main_ids[i % len(main_ids)]),
            "mem_search": search,
            "mem_get": lambda i: t["mem_get"]((found[i % len(found)] or main_ids[:1])[:3]),
            "mem_quote": lambda i: t["mem_quote"](main_ids[i % len(main_ids)], 300),
            "ctx_stats": lambda i: t["ctx_stats"](ref.key),
            "ctx_peek": lambda i: t["ctx_peek"](ref.key, 500),
            "ctx_slice": lambda i: t["ctx_slice"](ref.key, (i * 7919) % (ref.n - 2000),
                                                  (i * 7919) % (ref.n - 2000) + 2000),
            "ctx_find": lambda i: t["ctx_find"](ref.key, words[i], 20),
            "mem_add": lambda i: t["mem_add"](f"bench note {i}: {queries[i]}", tags=["bench"]),
            "event_log": lambda i: t["event_log"]({"type": "bench", "i": i}),
        }
        tools: dict[str, Any] = {}
        for name, fn in tqdm(plan.items(), desc="tools", disable=not progress):
            fn(0)  # warm caches (the blob, the speaker list) as a live session would
            tools[name] = _latency(_timed(fn, calls))
        store.close()
    floor = tools["store.get (floor)"]["p50_ms"] or 1e-9
    worst = max((v["p95_ms"], k) for k, v in tools.items() if "floor" not in k)
    return {
        "benchmark": "tool latency", "items": items, "calls_per_tool": calls,
        "blob_chars": ref.n, "ingest": ingest, "code": code_version(), "tools": tools,
        "p50_over_floor": {k: round(v["p50_ms"] / floor, 1) for k, v in tools.items()},
        "target_ms": TARGET_MS, "worst_p95": {"tool": worst[1], "ms": worst[0]},
        "all_p95_under_target": worst[0] < TARGET_MS,
    }


def tool_table(doc: dict[str, Any]) -> str:
    """p50 / p95 / max per tool, as markdown."""
    lines = [f"tool latency at {doc['items']:,} items ({doc['calls_per_tool']} calls each, "
             f"blob {doc['blob_chars']:,} chars)", "",
             "| tool | p50 ms | p95 ms | max ms | p50 / floor |", "|---|---|---|---|---|"]
    for name, v in doc["tools"].items():
        lines.append(f"| {name} | {v['p50_ms']} | {v['p95_ms']} | {v['max_ms']} | "
                     f"{doc['p50_over_floor'][name]} |")
    lines.append("")
    lines.append(f"worst p95: {doc['worst_p95']['tool']} {doc['worst_p95']['ms']} ms "
                 f"(target < {doc['target_ms']} ms: "
                 f"{'met' if doc['all_p95_under_target'] else 'missed'})")
    return "\n".join(lines)


def write_tool_outputs(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """``tools.json`` and ``tools.md``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "tools.json", out / "tools.md"]
    paths[0].write_text(json.dumps(doc, indent=2))
    paths[1].write_text(tool_table(doc) + "\n")
    return paths
