"""The ``Memory`` facade under load: ``add`` latency at scale and a search right after an
add there (on a synthetic tenant and on one of real chat), threads and processes on one
file, and (with ``--lm``) LLM calls per ten turns with extraction on.

Run: ``python -m memstrata.bench.memory_api [--items 100000] [--lm local/qwen2.5-coder-1.5b]
--out DIR``. Writes ``memory_api.json`` and prints it. Latencies are reported with a
baseline measured in the same run (the same ``add`` on an empty tenant; searches of other
queries of the same kind with no write before them, paired with the timed ones), since
these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from memstrata import Memory
from memstrata.formats import ConversationRecord, Message, SessionRecord
from memstrata.formats.locomo import parse_locomo
from memstrata.memory import Store

WORDS = ["garden", "bees", "honey", "trail", "marathon", "bakery", "museum", "violin",
         "harbour", "lantern", "orchard", "pottery", "kayak", "recipe", "chess", "novel",
         "tram", "island", "festival", "glacier"]


def _sentence(rng: np.random.Generator, n: int) -> str:
    return f"note {n}: " + " ".join(rng.choice(WORDS, 8))


def _seed(memory: Memory, user: str, items: int, text: Callable[[int], str],
          speaker: Callable[[int], str] = lambda n: "user" if n % 2 else "assistant"
          ) -> float:
    """``items`` turns for ``user`` (sessions of 100; turn ``n`` is ``speaker(n)`` saying
    ``text(n)``), written through the facade; the seconds it took."""
    started = time.perf_counter()
    per_conv = 10_000
    with tqdm(total=items, unit="turn", desc=f"seed {user}") as bar:
        for c in range(0, items, per_conv):
            sessions = [SessionRecord(id=f"s{s}", messages=[
                Message(speaker=speaker(n), content=text(n))
                for n in range(c + s * 100, c + s * 100 + 100)])
                for s in range(min(per_conv, items - c) // 100)]
            memory.import_conversations([ConversationRecord(id=f"c{c}", sessions=sessions)],
                                        user_id=user, progress=bar.update)
    return time.perf_counter() - started


def _latency(memory: Memory, user: str, calls: int, rng: np.random.Generator) -> dict[str, float]:
    times = []
    for n in range(calls):
        text = _sentence(rng, n)
        started = time.perf_counter()
        memory.add(text, user_id=user, conversation_id="live", infer=False)
        times.append((time.perf_counter() - started) * 1000)
    return _summary(times)


def _summary(times: list[float]) -> dict[str, float]:
    arr = np.array(times)
    return {"p50_ms": round(float(np.percentile(arr, 50)), 3),
            "p95_ms": round(float(np.percentile(arr, 95)), 3),
            "max_ms": round(float(arr.max()), 3)}


def _search_after_add(memory: Memory, user: str, queries: list[str], baseline: list[str],
                      messages: list[str]) -> dict[str, Any]:
    """One ``search`` timed right after an ``add`` (what an agent does with each message),
    each followed by the baseline: a search of another query of the same kind
    (``baseline``, in step), with no write between the two.

    Paired so that both meet their query for the first time at the same tenant state: a
    baseline that re-ran the timed queries would find their term lists already read, and
    one run apart would meet the one-off first reads of the tenant's lists on its own.
    One untimed search first pays what only a tenant's first search pays (reading its
    vectors in full)."""
    memory.search("warm-up", user_id=user)
    after: list[float] = []
    alone: list[float] = []
    for query, other, message in zip(queries, baseline, messages, strict=True):
        memory.add(message, user_id=user, conversation_id="live", infer=False)
        for timed, times in ((query, after), (other, alone)):
            started = time.perf_counter()
            memory.search(timed, user_id=user)
            times.append((time.perf_counter() - started) * 1000)
    first, second = _summary(after), _summary(alone)
    return {"after_add": first, "no_write_between": second,
            "p95_ratio": round(first["p95_ms"] / second["p95_ms"], 2)}


def chat_search(path: Path, data: Path, items: int, calls: int) -> dict[str, Any]:
    """A search right after an add, as :func:`add_latency` times it, on a tenant of real
    chat: ``items`` turns of a LoCoMo-format file's conversations (repeated to that size),
    queried with its questions. Each turn keeps its speaker, so the questions that name one
    run the speaker channels as they would on the conversation itself. The synthetic
    tenant's few words each stand in ~40% of its turns, so its posting lists are far
    longer than chat's; this is the other end."""
    conversations = parse_locomo(data)
    turns = [t for c in conversations for _, _, ts in c.sessions for t in ts]
    texts = [t["text"] for t in turns]
    questions = list(dict.fromkeys(
        q.question for c in conversations for q in c.questions if q.question))
    if not texts or len(questions) < 2:
        raise ValueError(f"{data}: no turns, or fewer than two distinct questions (one is "
                         "timed after an add, another with no write) to measure with")
    rng = np.random.default_rng(0)
    memory = Memory.open(path)
    seed_s = _seed(memory, "chat", items, lambda n: texts[n % len(texts)],
                   lambda n: turns[n % len(turns)]["speaker"])
    picked = [questions[i] for i in
              rng.choice(len(questions), min(2 * calls, len(questions)), replace=False)]
    half = len(picked) // 2
    search = _search_after_add(memory, "chat", picked[:half], picked[half:2 * half],
                               [texts[int(i)] for i in rng.integers(len(texts), size=half)])
    memory.close()
    return {"items": items, "calls": half, "data": str(data),
            "seed_seconds": round(seed_s, 1), **search}


def add_latency(path: Path, items: int, calls: int) -> dict[str, Any]:
    """p50/p95 of one ``add`` (no inference) on an empty tenant and at ``items`` items, and
    of a ``search`` right after an ``add`` at ``items`` items."""
    rng = np.random.default_rng(0)
    memory = Memory.open(path)
    empty = _latency(memory, "empty", calls, rng)
    seed_s = _seed(memory, "big", items, lambda n: _sentence(rng, n))
    big = _latency(memory, "big", calls, rng)
    queries = [" ".join(rng.choice(WORDS, 3)) for _ in range(2 * calls)]
    search = _search_after_add(memory, "big", queries[:calls], queries[calls:],
                               [_sentence(rng, n) for n in range(calls)])
    memory.close()
    return {"items": items, "calls": calls, "seed_seconds": round(seed_s, 1),
            "empty_tenant": empty, "at_items": big,
            "p95_ratio": round(big["p95_ms"] / empty["p95_ms"], 2),
            "search_at_items": search}


def threads(path: Path, n_threads: int, ops: int) -> dict[str, Any]:
    """``n_threads`` threads sharing one ``Memory``, each ``ops`` mixed add/search/update."""
    memory = Memory.open(path)
    errors: list[str] = []
    added: list[list[str]] = [[] for _ in range(n_threads)]
    updates = [0] * n_threads

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        for i in range(ops):
            try:
                if i % 3 == 0:
                    memory.search(_sentence(rng, i), user_id=f"t{t % 4}", k=5)
                elif i % 3 == 1 or not added[t]:
                    added[t].append(memory.add(_sentence(rng, i), user_id=f"t{t % 4}",
                                               infer=False)[0]["id"])
                else:
                    memory.update(added[t][-1], f"edited {t} {i}")
                    updates[t] += 1
            except Exception as exc:  # counted and reported, not raised
                errors.append(f"{type(exc).__name__}: {exc}"[:200])

    started = time.perf_counter()
    pool = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    wall = time.perf_counter() - started
    ids = [i for a in added for i in a]
    stored = sum(memory.store.counts(f"t{u}")["turns"] for u in range(4))
    missing = sum(memory.get(i) is None for i in ids)
    assert isinstance(memory.store, Store)  # an SQLite file (opened from a path above)
    check = memory.store.conn.execute("PRAGMA integrity_check").fetchone()[0]
    memory.close()
    return {"threads": n_threads, "ops_per_thread": ops, "adds": len(ids),
            "updates": sum(updates), "stored_turns": stored, "lost_writes": missing,
            "duplicates": stored - len(ids), "errors": len(errors),
            "first_error": errors[0] if errors else None, "integrity": check,
            "ops_per_s": round(n_threads * ops / wall, 1), "wall_s": round(wall, 2)}


def _process_adds(path: str, n: int, adds: int, out: Any) -> None:
    memory = Memory.open(path)
    ids, errors = [], 0
    for i in range(adds):
        try:
            ids.append(memory.add(f"process {n} message {i}", user_id="shared",
                                  conversation_id=f"c{n % 2}", infer=False)[0]["id"])
        except Exception:
            errors += 1
    memory.close()
    out.put((n, ids, errors))


def processes(path: Path, n_procs: int, adds: int) -> dict[str, Any]:
    """``n_procs`` processes adding ``adds`` messages each to one file."""
    Memory.open(path).close()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    started = time.perf_counter()
    pool = [ctx.Process(target=_process_adds, args=(str(path), n, adds, out))
            for n in range(n_procs)]
    for p in pool:
        p.start()
    results = [out.get(timeout=600) for _ in pool]
    for p in pool:
        p.join()
    wall = time.perf_counter() - started
    conn = sqlite3.connect(path)
    ids = {i for _, got, _ in results for i in got}
    stored = {r[0] for r in conn.execute("SELECT id FROM turns WHERE user_id = 'shared'")}
    reused = conn.execute("SELECT count(*) - count(DISTINCT conversation_id || '/' || seq)"
                          " FROM turns").fetchone()[0]
    check = conn.execute("PRAGMA integrity_check").fetchone()[0]
    conn.close()
    return {"processes": n_procs, "adds_per_process": adds, "reported": len(ids),
            "stored": len(stored), "lost_writes": len(ids - stored),
            "errors": sum(e for _, _, e in results), "seq_reused": reused,
            "integrity": check, "adds_per_s": round(n_procs * adds / wall, 1),
            "wall_s": round(wall, 2), "exit_codes": [p.exitcode for p in pool]}


def llm_calls(lm: str, data: Path, turns: int) -> dict[str, Any]:
    """LLM calls per ten turns when every message is added with extraction on."""
    from memstrata.formats import read_locomo

    record = read_locomo(data)[0]
    messages = [m for s in record.sessions for m in s.messages][:turns]
    memory = Memory.open(":memory:", lm=lm, extraction="sync")  # facts counted from add
    started = time.perf_counter()
    events = []
    for message in tqdm(messages, unit="turn", desc="add+infer"):
        events += memory.add(message.model_dump(), user_id="u", conversation_id=record.id)
    events += memory.flush("u")
    assert memory.lm is not None  # opened with one
    usage = memory.lm.meter.since()
    facts = [e for e in events if e.get("kind") == "fact"]
    return {"lm": lm, "turns": len(messages), "llm_calls": usage.calls,
            "calls_per_10_turns": round(usage.calls * 10 / max(len(messages), 1), 2),
            "facts": {k: sum(e["event"] == k for e in facts) for k in ("ADD", "UPDATE", "NONE")},
            "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    """Run the facade benchmarks and write ``memory_api.json``."""
    parser = argparse.ArgumentParser(prog="python -m memstrata.bench.memory_api",
                                     description=__doc__)
    parser.add_argument("--items", type=int, default=100_000, help="tenant size for add p95")
    parser.add_argument("--calls", type=int, default=300, help="timed adds per tenant")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--ops", type=int, default=500, help="calls per thread")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--adds", type=int, default=500, help="adds per process")
    parser.add_argument("--lm", help="also count LLM calls per 10 turns with this model")
    parser.add_argument("--turns", type=int, default=60, help="turns added with --lm")
    parser.add_argument("--data", default="../shared/data/locomo/locomo_dev.json",
                        help="LoCoMo-format file: the chat tenant's turns and queries, and "
                        "the turns added with --lm")
    parser.add_argument("--chat-items", type=int, default=100_000,
                        help="turns of real chat (from --data) for a search after an add "
                        "there (0: skip)")
    parser.add_argument("--out", default="out")
    args = parser.parse_args(argv)
    if (args.chat_items > 0 or args.lm) and not Path(args.data).is_file():
        parser.error(f"--data {args.data}: no such file (--chat-items 0 skips the chat "
                     "tenant)")
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        report["add_latency"] = add_latency(Path(tmp) / "latency.db", args.items, args.calls)
        report["threads"] = threads(Path(tmp) / "threads.db", args.threads, args.ops)
        report["processes"] = processes(Path(tmp) / "procs.db", args.processes, args.adds)
        if args.chat_items > 0:
            report["chat_search"] = chat_search(Path(tmp) / "chat.db", Path(args.data),
                                                args.chat_items, args.calls)
    if args.lm:
        report["llm_calls"] = llm_calls(args.lm, Path(args.data), args.turns)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory_api.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
