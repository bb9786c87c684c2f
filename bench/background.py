"""Background extraction: ``add`` latency with ``infer=True``, another tenant's search while
a worker extracts, and the background path's facts against the synchronous path's.

Three measurements, each beside its baseline in the same run (``memstrata bench
background``; writes ``background.json``):

- ``add``: p50/p95 of one ``Memory.add(infer=True)`` into a store already holding
  ``--turns`` turns (bulk-loaded with ``infer=False`` through ``import_conversations``),
  with ``extraction="background"`` against the synchronous path (``extraction="sync"``:
  each add that fills a chunk runs the model call inside it). Target: background p95
  <= 10 ms.
- ``search``: p95 of tenant B's search (the big tenant) alone, then while a worker
  extracts tenant A's chunks (its model calls in flight: B must not wait for them), and
  while A's adds run the synchronous path on another thread. Target: during / alone
  <= 1.2. The job runs as the memory's worker thread does, at its lower OS priority
  (``ExtractionSettings.nice``); the 1-minute load average is recorded beside it.
- ``facts``: one conversation's turns added one by one with each mode, into two fresh
  stores: the fact events (event and text, in order) and the stored facts must be equal.

``--lm`` is any model ``setup_lm`` takes (default: the embedded local model) or
``scripted/slow``: :class:`SlowExtractor`, a deterministic fake whose every extraction
call sleeps ``--delay`` seconds (a stand-in for a slow model; the tests use it with a short
delay).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from memstrata import Memory
from memstrata.programs.policy_engine import PolicyEngine
from memstrata.worker import Worker, lower_thread_priority

from .memory_api import _seed, _sentence, _summary

SCRIPTED = "scripted/slow"
"""The ``--lm`` value that picks :class:`SlowExtractor`."""


class SlowExtractor(PolicyEngine):
    """A deterministic fake model: each extraction call sleeps ``delay_s`` (no CPU), then
    proposes one fact, from the chunk's first turn; any other program gets an empty
    answer. ``calls`` counts extraction calls."""

    name = "local/slow-extractor"

    def __init__(self, delay_s: float = 2.0) -> None:
        self.delay_s = delay_s
        self.calls = 0
        self._lock = threading.Lock()

    def reply(self, request: Any) -> dict[str, Any]:
        """The output fields for one request."""
        fmt = request.config.response_format
        schema = (fmt.get("schema") if isinstance(fmt, dict) else None) or {}
        if "facts" not in schema.get("properties", {}):
            return {"answer": "unknown", "evidence": []}
        with self._lock:
            self.calls += 1
        time.sleep(self.delay_s)
        text = request.messages[-1].text or ""
        found = re.search(r"(?:^|\n)Turns:[ \n](.*?)(?=\n\n[A-Z][a-z ]*:[ \n]|\Z)", text, re.S)
        lines = [line for line in (found[1] if found else text).splitlines()
                 if line.strip() and not line.startswith("--")]
        said = (lines[0].split(":", 1)[-1].strip() if lines else "nothing")[:60]
        return {"facts": [{"subject": "user", "predicate": "said", "object": said}],
                "entities": [], "qa": []}


def model(lm: str, delay_s: float = 2.0) -> Any:
    """A ``ModelHandle`` for ``lm`` (``scripted/slow``: :class:`SlowExtractor`)."""
    from memstrata.programs import setup_lm

    if lm == SCRIPTED:
        return setup_lm("local/slow-extractor", engine=SlowExtractor(delay_s))
    return setup_lm(lm, max_tokens=1024)


def _chat(n: int, start: int = 0) -> list[dict[str, str]]:
    """Messages of a user/assistant chat, turn ``i`` naming ``i`` (distinct texts)."""
    rng = np.random.default_rng(start)
    return [{"role": "user" if i % 2 else "assistant", "content": _sentence(rng, i)}
            for i in range(start, start + n)]


def add_latency(path: Path, handle: Any, turns: int, calls: int) -> dict[str, Any]:
    """``add(infer=True)`` p50/p95 at ``turns`` turns: background against sync."""
    loader = Memory.open(path, extraction="queue")
    seed_s = _seed(loader, "big", turns, lambda n: _sentence(np.random.default_rng(n), n))
    loader.close()
    out: dict[str, Any] = {"turns": turns, "calls": calls, "seed_seconds": round(seed_s, 1)}
    for mode in ("sync", "background"):
        memory = Memory.open(path, lm=handle, extraction=mode)
        times = []
        for msg in _chat(calls, start=turns if mode == "sync" else 2 * turns):
            started = time.perf_counter()
            memory.add(msg, user_id="big", conversation_id=f"live-{mode}")
            times.append((time.perf_counter() - started) * 1000)
        out[mode] = {**_summary(times), "jobs": len(memory.jobs("big", limit=10_000))}
        if mode == "background":
            out[mode]["drain_s"] = memory.wait("big")["seconds"]
        memory.close()
    out["p95_ratio"] = round(out["background"]["p95_ms"] / out["sync"]["p95_ms"], 4)
    return out


def search_during_extraction(path: Path, handle: Any, queries: int, block: int = 10
                             ) -> dict[str, Any]:
    """Tenant ``big``'s search p95 alone and while a worker extracts tenant ``a``'s chunks,
    in alternating rounds (so both see the same machine load): ``block`` searches alone,
    then searches one after another for the whole of one job (claim, model call, writes),
    then as many alone as that, and so on until ``queries`` ran during jobs (so as many
    ran alone); and while ``a``'s adds run the synchronous path on another thread."""
    rng = np.random.default_rng(7)
    words = [_sentence(rng, n).split(": ", 1)[1] for n in range(queries)]

    def timed(memory: Memory, batch: list[str]) -> list[float]:
        times = []
        for q in batch:
            started = time.perf_counter()
            memory.search(q, user_id="big", k=10)
            times.append((time.perf_counter() - started) * 1000)
        return times

    out: dict[str, Any] = {"queries": queries, "block": block}
    with Memory.open(path, extraction="queue") as queue:  # A's chunks: 40 jobs waiting
        for n, msg in enumerate(_chat(19 * 40, start=5 * 10**6)):
            queue.add(msg, user_id="a", conversation_id=f"a{n // 190}")
    memory = Memory.open(path, lm=handle, extraction="background")
    timed(memory, words[:block])  # warm: caches and vectors of the big tenant
    worker = Worker(memory, memory.extraction)

    def one_job() -> None:
        # As the memory's own worker thread runs (Worker.start): at its lower priority.
        lower_thread_priority(memory.extraction.nice)
        worker.run(max_jobs=1)

    alone: list[float] = []
    during: list[float] = []
    jobs_run = 0
    step = block
    while len(during) < queries and jobs_run < 40:
        alone += timed(memory, [words[(len(alone) + i) % queries] for i in range(step)])
        # One whole job (claim, model call, write) on the worker; searches all along.
        runner = threading.Thread(target=one_job)
        runner.start()
        before = len(during)
        while runner.is_alive():
            during += timed(memory, [words[len(during) % queries]])
        runner.join()
        jobs_run += 1
        step = max(len(during) - before, 1)  # as many alone as there were during
    # The last job's searches get their alone ones too (with a slow model one job may
    # hold them all: the alone side would otherwise be the first block only).
    alone += timed(memory, [words[(len(alone) + i) % queries] for i in range(step)])
    out["alone"] = {**_summary(alone), "searches": len(alone)}
    out["during_background"] = {**_summary(during), "jobs_run": jobs_run,
                                "searches": len(during)}
    out["worker_nice"] = memory.extraction.nice
    out["load_avg_1m"] = _load()
    memory.close()
    # For comparison: A's adds on another thread with extraction="sync" (the model call
    # inside each add that fills a chunk, outside the memory's lock there too).
    memory = Memory.open(path, lm=handle, extraction="sync")
    stop = threading.Event()

    def writer() -> None:
        for n, msg in enumerate(_chat(19 * 1000, start=7 * 10**6)):
            if stop.is_set():
                return
            memory.add(msg, user_id="a2", conversation_id=f"b{n // 190}")

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    out["during_sync"] = _summary(timed(memory, words))
    stop.set()
    thread.join()
    memory.close()
    out["p95_ratio"] = round(out["during_background"]["p95_ms"] / out["alone"]["p95_ms"], 3)
    return out


def _load() -> float | None:
    """The 1-minute load average (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def facts_equal(handle: Any, turns: int, data: Path | None) -> dict[str, Any]:
    """One conversation added turn by turn with each mode: equal fact events and facts?"""
    if data is not None and data.exists():
        from memstrata.formats import read_locomo

        record = read_locomo(data)[0]
        msgs = [m.model_dump() for s in record.sessions for m in s.messages][:turns]
        source = str(data)
    else:
        msgs, source = _chat(turns, start=11 * 10**6), "synthetic chat"
    found: dict[str, Any] = {}
    for mode in ("sync", "background"):
        # Both modes start from the same model state: a local model's prompt cache would
        # otherwise carry the other mode's (or the last phase's) last prompt into the
        # first call, and a prompt evaluated in other pieces may round differently.
        clear = getattr(getattr(handle.lm, "_engine_spec", None), "clear_cache", None)
        if clear is not None:
            clear()
        memory = Memory.open(":memory:", lm=handle, extraction=mode)
        events: list[dict[str, Any]] = []
        started = time.perf_counter()
        for msg in msgs:
            events += [e for e in memory.add(msg, user_id="u", conversation_id="c")
                       if e["kind"] == "fact"]
        memory.wait("u")
        if mode == "background":
            events = [e for j in reversed(memory.jobs("u", limit=10_000))
                      for e in (memory.job(j["id"]) or {}).get("events", [])]
        found[mode] = {"events": [(e["event"], e["memory"]) for e in events],
                       "facts": sorted(r["text"] for r in memory.get_all(
                           "u", kind="fact", limit=10_000)),
                       "seconds": round(time.perf_counter() - started, 2)}
        memory.close()
    sync, back = found["sync"], found["background"]
    return {"source": source, "turns": len(msgs), "fact_events": len(sync["events"]),
            "facts": len(sync["facts"]), "events_equal": sync["events"] == back["events"],
            "facts_equal": sync["facts"] == back["facts"],
            "sync_seconds": sync["seconds"], "background_seconds": back["seconds"]}


PARTS = ("add", "search", "facts")
"""The measurements, in the order they run; ``only`` picks some of them."""


def check_parts(only: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``only`` names one or more of :data:`PARTS`."""
    if not only or set(only) - set(PARTS):
        raise ValueError(f"unknown part(s) in {','.join(only)!r}: choose one or more of "
                         f"{', '.join(PARTS)}")


def run_background_bench(out: str | Path, *, lm: str, delay_s: float = 2.0,
                         turns: int = 100_000, calls: int = 200, queries: int = 200,
                         fact_turns: int = 60, data: Path | None = None,
                         only: tuple[str, ...] = PARTS) -> dict[str, Any]:
    """Run the measurements named in ``only`` (default all three, see the module); write
    and return ``background.json``, whose ``targets`` hold the parts that ran. An unknown
    part is a ``ValueError`` before anything runs."""
    import tempfile

    check_parts(only)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    handle = model(lm, delay_s)
    doc: dict[str, Any] = {"lm": handle.name, "delay_s": delay_s if lm == SCRIPTED else None,
                           "cpus": os.cpu_count(), "load_avg_1m_start": _load()}
    if "add" in only or "search" in only:
        with tempfile.TemporaryDirectory(prefix="memstrata-background-") as tmp:
            path = Path(tmp) / "background.db"
            if "add" in only:
                doc["add"] = add_latency(path, handle, turns, calls)
            if "search" in only:
                doc["search"] = search_during_extraction(path, handle, queries)
    if "facts" in only:
        doc["facts"] = facts_equal(handle, fact_turns, data)
    doc["load_avg_1m_end"] = _load()
    targets = {}
    if "add" in doc:
        targets["add_p95_ms<=10"] = doc["add"]["background"]["p95_ms"] <= 10
    if "search" in doc:
        targets["search_p95_ratio<=1.2"] = doc["search"]["p95_ratio"] <= 1.2
    if "facts" in doc:
        targets["facts_equal"] = doc["facts"]["events_equal"] and doc["facts"]["facts_equal"]
    doc["targets"] = targets
    (folder / "background.json").write_text(json.dumps(doc, indent=2) + "\n",
                                            encoding="utf-8")
    return doc


def table(doc: dict[str, Any]) -> str:
    """The figures of the parts that ran, as markdown."""
    rows = ["| measure | baseline | background | target |", "|---|---:|---:|---|"]
    if (add := doc.get("add")) is not None:
        rows.append(f"| add p95 at {add['turns']:,} turns (ms) | {add['sync']['p95_ms']} "
                    f"(sync) | {add['background']['p95_ms']} | <= 10 ms |")
    if (search := doc.get("search")) is not None:
        rows.append(f"| other tenant's search p95 (ms) | {search['alone']['p95_ms']} (alone); "
                    f"{search['during_sync']['p95_ms']} (sync extraction) | "
                    f"{search['during_background']['p95_ms']} | <= 1.2x alone "
                    f"({search['p95_ratio']}x) |")
    if (facts := doc.get("facts")) is not None:
        rows.append(f"| fact events equal ({facts['fact_events']} events, {facts['turns']} "
                    f"turns) | sync | {facts['events_equal'] and facts['facts_equal']} | "
                    "equal |")
    return "\n".join(rows) + f"\n\nmodel: {doc['lm']}" + (
        f" (each extraction call sleeps {doc['delay_s']} s)" if doc.get("delay_s") else "")
