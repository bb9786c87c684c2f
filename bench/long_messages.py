"""``memstrata bench long``: ingest rate and search latency on one tenant of long messages.

The tenant holds N messages of a technical assistant's history: user messages short to
medium (a question, a request, sometimes a pasted error), assistant answers long (1-6 KB
of paragraphs, bullet lists, code blocks and tables). Every word is drawn from a seeded
vocabulary (function words, technical words, made-up words; Zipf over ranks, so posting
lists look like real text's) and rare CamelCase identifiers name a few messages each; one
``numpy`` generator seeded with ``seed`` makes every draw, so a run is repeatable.

Measured through the application's door, ``memstrata.Memory`` with the default embedder:
``add(..., infer=False)`` of ``batch`` messages a call (a session's new messages, as an
app sends them), then ``search(q, k=10)`` over ~200 queries of four shapes (short
keyword, first-person question, long pasted error, a rare identifier), then ``add`` of one
message a call at that size. rank-bm25 (``bench/baselines.py``) over the same messages and
queries is the baseline (latency only). Writes ``long.json``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from memstrata import Memory

from .baselines import TOKENIZERS, BM25Index
from .scale import _FUNCTION_WORDS, _code_versions, _made_up_words, _zipf_p

USER = "long-user"
SHAPES = ("keyword", "first_person", "error", "identifier")
SEARCH_P95_TARGET_MS = 30.0
INGEST_TARGET_PER_S = 500.0
MADE_UP = 3_000
IDENTIFIERS = 30_000  # CamelCase names; with Zipf draws most appear in a message or two
_TECH = """
api server client request response timeout retry cache database query index table column
schema migration transaction commit rollback lock thread process worker queue job task
scheduler cron container docker image kubernetes pod deployment service ingress cluster
node replica volume config file path directory environment variable secret token auth
login session cookie header payload json yaml xml csv parser serializer model field
validator error exception traceback stack frame log logger level debug warning metric
trace span latency throughput memory cpu disk network socket port host proxy gateway
route handler middleware endpoint router controller view template component state hook
prop render build bundle webpack compiler linter formatter test fixture mock assert
coverage pipeline ci deploy release version branch merge rebase tag commit diff patch
package dependency module import export function method class object instance interface
type generic enum struct array list dict map set tuple string integer float boolean
null pointer reference callback promise async await event loop stream buffer chunk batch
offset limit page cursor filter sort group join key value hash encrypt decrypt certificate
tls ssl dns domain bucket storage upload download backup restore snapshot replica shard
partition topic producer consumer broker kafka redis postgres sqlite mysql mongo elastic
python javascript typescript rust golang java bash shell terminal script command flag
argument option default fallback timeout threshold limit quota rate budget alert dashboard
"""
_TECH_WORDS = list(dict.fromkeys(_TECH.split()))
_EXCEPTIONS = ("ValueError", "KeyError", "TypeError", "TimeoutError", "ConnectionError",
               "RuntimeError", "PermissionError", "IntegrityError", "OperationalError")
_IDENT = re.compile(r"\b(?:[A-Z][a-z]+){3}\b")
_ASK = ("what did I say about the {a} {b}?", "how did I set up the {a} for {b}?",
        "which {a} was I using with my {b}?", "when did I change the {a} {b}?",
        "what was my {a} problem with the {b}?", "did I ever fix the {a} in {b}?")


@dataclass
class _Draw:
    """Seeded draws of words, identifiers and lengths (see the module)."""

    rng: np.random.Generator
    vocab: list[str]
    cdf: np.ndarray
    idents: list[str]
    ident_cdf: np.ndarray

    @classmethod
    def make(cls, seed: int) -> _Draw:
        rng = np.random.default_rng(seed)
        made_up = _made_up_words(rng, MADE_UP, set(_FUNCTION_WORDS) | set(_TECH_WORDS))
        # Technical words take the ranks after the function words, made-up ones the tail.
        vocab = (_FUNCTION_WORDS + [_TECH_WORDS[i] for i in rng.permutation(len(_TECH_WORDS))]
                 + made_up)
        parts = _made_up_words(rng, 600, set(vocab))
        picks = rng.integers(len(parts), size=(IDENTIFIERS, 3))
        idents = list(dict.fromkeys("".join(parts[j].capitalize() for j in row)
                                    for row in picks.tolist()))
        return cls(rng, vocab, np.cumsum(_zipf_p(len(vocab))), idents,
                   np.cumsum(_zipf_p(len(idents), 0.8)))

    def words(self, n: int) -> list[str]:
        at = np.searchsorted(self.cdf, self.rng.random(n) * self.cdf[-1])
        return [self.vocab[i] for i in at.tolist()]

    def ident(self) -> str:
        return self.idents[int(np.searchsorted(self.ident_cdf, self.rng.random()
                                               * self.ident_cdf[-1]))]

    def content(self, n: int) -> list[str]:
        """``n`` words past the function words (what a query names)."""
        out: list[str] = []
        while len(out) < n:
            out += [w for w in self.words(4 * n) if w not in _FUNCTION_WORDS]
        return out[:n]

    def sentence(self, lo: int = 8, hi: int = 24) -> str:
        ws = self.words(int(self.rng.integers(lo, hi)))
        if self.rng.random() < 0.3:
            ws[int(self.rng.integers(len(ws)))] = self.ident()
        return ws[0].capitalize() + " " + " ".join(ws[1:]) + "."

    def error(self) -> str:
        """A pasted traceback: frames naming files and functions, then the exception."""
        lines = ["Traceback (most recent call last):"]
        for _ in range(int(self.rng.integers(2, 7))):
            a, b = self.content(2)
            lines += [f'  File "/srv/app/{a}/{b}.py", line {int(self.rng.integers(10, 900))},'
                      f" in {self.ident()}", "    " + " ".join(self.words(6))]
        kind = _EXCEPTIONS[int(self.rng.integers(len(_EXCEPTIONS)))]
        return "\n".join([*lines, f"{kind}: {' '.join(self.words(10))}"])

    def code(self) -> str:
        lines = [f"def {self.ident()}({', '.join(self.content(2))}):"]
        for _ in range(int(self.rng.integers(4, 22))):
            a, b, c = self.content(3)
            lines.append(f"    {a}_{b} = {self.ident()}({c}, retries={self.rng.integers(9)})")
        return "```python\n" + "\n".join(lines) + "\n```"

    def table(self) -> str:
        cols = self.content(int(self.rng.integers(3, 5)))
        rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        rows += ["| " + " | ".join(" ".join(self.words(2)) for _ in cols) + " |"
                 for _ in range(int(self.rng.integers(3, 7)))]
        return "\n".join(rows)

    def user(self) -> str:
        text = " ".join(self.sentence(6, 20) for _ in range(int(self.rng.integers(1, 4))))
        return text + "\n\n" + self.error() if self.rng.random() < 0.15 else text

    def assistant(self) -> str:
        target, blocks, size = int(self.rng.integers(1000, 6000)), [], 0
        while size < target:
            pick = self.rng.random()
            if pick < 0.45:
                block = " ".join(self.sentence() for _ in range(int(self.rng.integers(2, 6))))
            elif pick < 0.7:
                block = "\n".join("- " + self.sentence(5, 14)
                                  for _ in range(int(self.rng.integers(3, 8))))
            elif pick < 0.9:
                block = self.code()
            else:
                block = self.table()
            blocks.append(block)
            size += len(block) + 2
        return "\n\n".join(blocks)


def make_history(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` messages, user and assistant in turn, as ``Memory.add`` reads them (``role``,
    ``content``, ``timestamp``, and ``conversation``: a project of 200 messages), with
    sessions of 20 messages a day apart."""
    draw = _Draw.make(seed)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        when = start + timedelta(days=i // 20, minutes=i % 20)
        out.append({"role": "user" if i % 2 == 0 else "assistant",
                    "content": draw.user() if i % 2 == 0 else draw.assistant(),
                    "timestamp": when.isoformat(), "conversation": f"project-{i // 200}"})
    return out


def make_queries(count: int, history: list[dict[str, Any]], seed: int = 0
                 ) -> list[tuple[str, str]]:
    """``count`` ``(shape, query)`` pairs, the shapes in turn (see :data:`SHAPES`), drawn
    from the same vocabulary as :func:`make_history` of the same seed; an identifier
    query names a CamelCase identifier of a random message of ``history``."""
    draw = _Draw.make(seed)
    draw.rng = np.random.default_rng([seed, 1])
    named = [m for m in history if _IDENT.search(m["content"])]
    out = []
    for n in range(count):
        shape = SHAPES[n % len(SHAPES)]
        if shape == "keyword":
            query = " ".join(draw.content(int(draw.rng.integers(2, 4))))
        elif shape == "first_person":
            a, b = draw.content(2)
            query = _ASK[int(draw.rng.integers(len(_ASK)))].format(a=a, b=b)
        elif shape == "error":
            query = "I get this now:\n" + draw.error()
        else:
            found = _IDENT.findall(named[int(draw.rng.integers(len(named)))]["content"])
            query = f"where did we use {found[int(draw.rng.integers(len(found)))]}?"
        out.append((shape, query))
    return out


def _pct(ms: list[float]) -> dict[str, float]:
    arr = np.asarray(ms, dtype=float)
    return {f"p{p}_ms": round(float(np.percentile(arr, p)), 3) for p in (50, 95, 99)} | {
        "mean_ms": round(float(arr.mean()), 3), "max_ms": round(float(arr.max()), 3)}


def _batches(history: list[dict[str, Any]], batch: int) -> Iterator[list[dict[str, Any]]]:
    """Runs of at most ``batch`` messages of one conversation, in order."""
    run: list[dict[str, Any]] = []
    for message in history:
        if run and (len(run) == batch or run[0]["conversation"] != message["conversation"]):
            yield run
            run = []
        run.append(message)
    if run:
        yield run


def _add(memory: Memory, messages: list[dict[str, Any]]) -> None:
    memory.add([{k: m[k] for k in ("role", "content", "timestamp")} for m in messages],
               user_id=USER, conversation_id=messages[0]["conversation"], infer=False)


def _search(memory: Memory, queries: list[tuple[str, str]], k: int, progress: bool
            ) -> dict[str, Any]:
    # The first search of a process reads what later ones keep (row lengths, the
    # expansion vocabulary): timed apart, not among the queries.
    started = time.perf_counter()
    memory.search("warm up the caches", user_id=USER, k=k)
    first_ms = (time.perf_counter() - started) * 1000
    times: dict[str, list[float]] = {s: [] for s in SHAPES}
    hits = 0
    for shape, query in tqdm(queries, desc="memstrata search", unit="q", disable=not progress,
                             file=sys.stderr):
        started = time.perf_counter()
        hits += len(memory.search(query, user_id=USER, k=k))
        times[shape].append((time.perf_counter() - started) * 1000)
    every = [t for s in SHAPES for t in times[s]]
    return {**_pct(every), "by_shape": {s: _pct(t) for s, t in times.items() if t},
            "mean_hits": round(hits / len(queries), 2), "first_ms": round(first_ms, 1)}


def _bm25(texts: list[str], queries: list[tuple[str, str]], k: int,
          progress: bool) -> dict[str, Any]:
    started = time.perf_counter()
    index = BM25Index([str(i) for i in range(len(texts))], texts, TOKENIZERS["bm25_tokens"])
    build_s = time.perf_counter() - started
    index.search("warm up the caches", k)
    times: dict[str, list[float]] = {s: [] for s in SHAPES}
    for shape, query in tqdm(queries, desc="rank-bm25 search", unit="q", disable=not progress,
                             file=sys.stderr):
        started = time.perf_counter()
        index.search(query, k)
        times[shape].append((time.perf_counter() - started) * 1000)
    every = [t for s in SHAPES for t in times[s]]
    return {**_pct(every), "by_shape": {s: _pct(t) for s, t in times.items() if t},
            "build_s": round(build_s, 2), "tokenizer": "bm25_tokens"}


def run_long_bench(messages: int = 40_000, *, queries: int = 200, batch: int = 20,
                   singles: int = 200, k: int = 10, seed: int = 0, db: Path | None = None,
                   bm25: bool = True, progress: bool = True) -> dict[str, Any]:
    """Run the benchmark and return the ``long.json`` document (see the module).

    ``db``: where the store goes (kept; it must not exist); a temporary file by default.
    ``singles``: messages added one a call after the search phase (a new conversation).
    """
    if messages < 2 or queries < 1 or batch < 1 or singles < 1 or k < 1:
        raise ValueError("messages >= 2, and queries, batch, singles and k >= 1")
    if db is not None and db.exists():
        raise ValueError(f"{db} exists: the benchmark builds a new store")
    started = time.perf_counter()
    history = make_history(messages + singles, seed)
    history, extra = history[:messages], history[messages:]
    qs = make_queries(queries, history, seed)
    gen_s = time.perf_counter() - started
    doc: dict[str, Any] = {"meta": _meta(messages, queries, batch, singles, k, seed)}
    lengths = {r: [len(m["content"]) for m in history if m["role"] == r]
               for r in ("user", "assistant")}
    doc["corpus"] = {"messages": messages, "generation_s": round(gen_s, 2),
                     "text_mb": round(sum(map(sum, lengths.values())) / 2**20, 2),
                     **{f"{r}_mean_chars": round(float(np.mean(v)), 1)
                        for r, v in lengths.items() if v}}
    with tempfile.TemporaryDirectory(prefix="memstrata-long-") as tmp:
        path = db or Path(tmp) / "long.db"
        memory = Memory.open(path)
        try:
            t0 = time.perf_counter()
            with tqdm(total=messages, desc="ingest", unit="msg", disable=not progress,
                      file=sys.stderr) as bar:
                for run in _batches(history, batch):
                    _add(memory, run)
                    bar.update(len(run))
            batched_s = time.perf_counter() - t0
            # The messages' dicts go before searches are timed: each full collection of
            # Python's garbage collector walked all 40,000 of them (a p99 of the
            # benchmark's own making); the baseline needs their text only.
            texts = [m["content"] for m in history]
            del history, run
            search = _search(memory, qs, k, progress)
            single_ms = []
            for message in tqdm(extra, desc="single adds", unit="msg", disable=not progress,
                                file=sys.stderr):
                t0 = time.perf_counter()
                _add(memory, [{**message, "conversation": "live"}])
                single_ms.append((time.perf_counter() - t0) * 1000)
        finally:
            memory.close()
        doc["db_mb"] = round(path.stat().st_size / 2**20, 1)
    single_rate = len(single_ms) / (sum(single_ms) / 1000)
    doc["ingest"] = {
        "batched": {"messages": messages, "batch": batch, "seconds": round(batched_s, 2),
                    "messages_per_s": round(messages / batched_s, 1)},
        "single": {"messages": len(single_ms), "messages_per_s": round(single_rate, 1),
                   **_pct(single_ms)}}
    doc["search"] = {"memstrata": search}
    if bm25:
        base = _bm25(texts, qs, k, progress)
        doc["search"]["rank_bm25"] = base
        doc["search"]["p95_ratio_memstrata_over_bm25"] = round(
            search["p95_ms"] / base["p95_ms"], 3)
        doc["search"]["p50_ratio_memstrata_over_bm25"] = round(
            search["p50_ms"] / base["p50_ms"], 3)
    doc["targets"] = {
        "search_p95_ms": SEARCH_P95_TARGET_MS, "ingest_per_s": INGEST_TARGET_PER_S,
        "search_p95_met": search["p95_ms"] <= SEARCH_P95_TARGET_MS,
        "ingest_batched_met": messages / batched_s >= INGEST_TARGET_PER_S}
    return doc


def _meta(messages: int, queries: int, batch: int, singles: int, k: int, seed: int
          ) -> dict[str, Any]:
    return {
        "benchmark": "long", "tenant": USER, "messages": messages, "queries": queries,
        "shapes": list(SHAPES), "batch": batch, "singles": singles, "k": k, "seed": seed,
        "embedder": "default",
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "sqlite": sqlite3.sqlite_version},
        "code_sha256": _code_versions(),
        "notes": [
            "Ingest: Memory.add(infer=False) of `batch` messages of one conversation a call "
            "(batched), then of one message a call into a new conversation at full size "
            "(single, after the search phase); the default embedder encodes every message.",
            "Search: wall time of Memory.search(q, user_id, k) after one warm-up query "
            "(its time is first_ms), single-threaded; rank_bm25 is rank-bm25 BM25Okapi "
            "over the same messages "
            "with memstrata's tokenizer (latency only; build_s is its index build).",
        ],
    }


def format_long_table(doc: dict[str, Any]) -> str:
    """A short plain-text summary of a ``long.json`` document."""
    s, ing = doc["search"], doc["ingest"]
    m = s["memstrata"]
    lines = [f"{doc['meta']['messages']:,} messages, {doc['corpus']['text_mb']} MB of text, "
             f"file {doc['db_mb']} MB; {doc['meta']['machine']['cpu_count']} cores",
             f"ingest: batched ({ing['batched']['batch']}/call) "
             f"{ing['batched']['messages_per_s']:,.0f} msg/s, single "
             f"{ing['single']['messages_per_s']:,.0f} msg/s (target >= "
             f"{INGEST_TARGET_PER_S:g})",
             f"{'search ms':<22} {'p50':>8} {'p95':>8} {'p99':>8}"]
    rows = [("memstrata", m)] + [(f"  {k}", v) for k, v in m["by_shape"].items()]
    if "rank_bm25" in s:
        rows.append(("rank-bm25", s["rank_bm25"]))
    lines += [f"{name:<22} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} {r['p99_ms']:>8.2f}"
              for name, r in rows]
    if "rank_bm25" in s:
        lines.append(f"p95 memstrata / rank-bm25: {s['p95_ratio_memstrata_over_bm25']:.3f}")
    if "first_ms" in m:
        lines.append(f"first search of the process: {m['first_ms']:,.0f} ms")
    lines.append(f"target p95 <= {SEARCH_P95_TARGET_MS:g} ms: "
                 f"{'met' if doc['targets']['search_p95_met'] else 'missed'}")
    return "\n".join(lines)


def write_long_outputs(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``long.json`` into ``out_dir``; returns its path in a list."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "long.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return [path]
