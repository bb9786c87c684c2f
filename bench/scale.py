"""``memstrata bench scale``: search latency and ingest rate at 10k to 1M items, vs rank-bm25.

For each corpus size N the benchmark builds one store holding N synthetic memory items of
a single tenant (plus a few small tenants, so the tenant filter does real work), times
ingestion through :meth:`Store.add_many`, then times :meth:`Retriever.search` (lexical,
tag, prior and graph channels; no embedder) and rank-bm25 over the same texts and queries.

The corpus is synthetic but shaped like real memories: 8-25 word sentences drawn from a
Zipf-distributed vocabulary (common English words and made-up ones), a speaker, an event
time within three years, 1-3 tags from a Zipf-distributed tag vocabulary of 2,000. Every
random draw comes from one ``numpy`` generator seeded with ``seed``: a run is repeatable.

With ``--db URL`` (PostgreSQL, issue 22) every size is measured twice: the SQLite store as
above (one writer, one reader: the baseline) and the PostgreSQL store at the URL with
concurrent client processes (``bench/scale_clients.py``): N writers ingesting contiguous
shares of the same corpus, then one and M readers running the same queries. Each size's
``pg_ingest_ratio`` (PostgreSQL's ingest rate over SQLite's) and ``pg_search_p95_ms`` are
checked against the issue's targets (>= 3x; <= 50 ms).

Memory figures: ``ru_maxrss`` is the process-wide high-water mark since the process began
(all earlier sizes and phases included); ``*_peak_delta_mb`` is how much a phase raised it
(0 when the phase stayed below an earlier peak); ``*_rss_delta_mb`` is the change of the
current resident set across the phase (``/proc/self/statm``; None where unavailable).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import platform
import resource
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from memstrata.memory import (
    Edge,
    EpisodicItem,
    FactItem,
    Item,
    MemoryStore,
    PersonaItem,
    ProspectiveItem,
    Retriever,
    SemanticItem,
    Store,
)
from memstrata.memory.extras import require

from .baselines import TOKENIZERS, BM25Index
from .metrics import percentiles

MAIN_USER = "scale-user"
OTHER_USERS = ("other-a", "other-b", "other-c", "other-d")
OTHER_SHARE = 0.01  # each other tenant holds this share of N items (at least 200)
SPEAKERS = ("Alice", "Bob", "Carmen", "Dmitri", "Esther", "Farid")
KINDS: tuple[tuple[str, type[Item], float], ...] = (
    ("fact", FactItem, 0.40),
    ("semantic", SemanticItem, 0.28),
    ("episodic", EpisodicItem, 0.26),
    ("prospective", ProspectiveItem, 0.03),
    ("persona", PersonaItem, 0.03),
)
VOCAB_SIZE = 4_000
TAG_VOCAB_SIZE = 2_000
ZIPF_S = 1.0
TIME_START = datetime(2022, 1, 1, tzinfo=UTC)
TIME_SPAN_S = 3 * 365 * 24 * 3600
BATCH = 5_000
EDGE_SHARE = 0.1  # edges per item ("related" links to an earlier item of the same tenant)

# High-frequency function words take the first Zipf ranks, as in real text.
_FUNCTION_TEXT = """
the i to and a of it in that my was you is for with on we so but me at have had this be
just about they from our when all like she he out her his what were been really up then
some there too one an do if not by them more got get going went
"""
_FUNCTION_WORDS: list[str] = list(dict.fromkeys(_FUNCTION_TEXT.split()))

_COMMON_TEXT = """
time day week year today yesterday weekend morning evening night dinner lunch breakfast
coffee tea family friend friends mom dad sister brother kids kid son daughter husband wife
partner dog cat puppy home house apartment city town trip travel vacation beach mountain
hike hiking camping park garden school class teacher college job work office boss project
meeting team client book books reading novel story painting art music guitar piano song
concert band movie film show game games soccer basketball running race marathon yoga gym
doctor hospital health surgery therapy support group community church volunteer charity
shelter adoption wedding birthday party gift present card letter photo picture camera
phone laptop car bike bus train flight airport hotel museum library store market shop
recipe cake bread pasta pizza salad garden flowers plants tree lake river ocean sunset
rain snow summer winter spring autumn holiday festival parade conference workshop course
degree exam interview career promotion salary rent moving move new old first last favorite
love loved enjoy enjoyed started finished learned taught visited bought made cooked baked
painted wrote played watched planning planned decided tried hoped excited happy proud
nervous tired busy calm grateful
"""
_COMMON_WORDS: list[str] = list(dict.fromkeys(_COMMON_TEXT.split()))

_ONSETS = ("b", "br", "c", "ch", "d", "dr", "f", "fl", "g", "gr", "h", "j", "k", "l", "m",
           "n", "p", "pl", "r", "s", "sh", "st", "t", "tr", "v", "w", "z", "qu", "sk", "th")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "io", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "nd", "st", "x", "k")


@dataclass
class Corpus:
    """A synthetic corpus held as index arrays; texts are rendered on demand."""

    vocab: list[str]
    tags: list[str]
    word_ids: np.ndarray  # all items' word indices, concatenated
    word_offsets: np.ndarray  # item i's words: word_ids[word_offsets[i]:word_offsets[i+1]]
    tag_ids: np.ndarray
    tag_offsets: np.ndarray
    tenant: np.ndarray  # index into (MAIN_USER, *OTHER_USERS)
    speaker: np.ndarray
    kind: np.ndarray
    event_s: np.ndarray  # seconds after TIME_START
    ids: list[str]

    def __len__(self) -> int:
        return len(self.ids)

    def text(self, i: int) -> str:
        """Item ``i``'s sentence."""
        span = self.word_ids[self.word_offsets[i]:self.word_offsets[i + 1]]
        words = [self.vocab[w] for w in span]
        return words[0].capitalize() + " " + " ".join(words[1:]) + "."

    def item_tags(self, i: int) -> list[str]:
        """Item ``i``'s tags (distinct)."""
        span = self.tag_ids[self.tag_offsets[i]:self.tag_offsets[i + 1]]
        return list(dict.fromkeys(self.tags[t] for t in span))

    def share(self, start: int, stop: int) -> Corpus:
        """Items ``start`` to ``stop - 1`` as a corpus of their own (same vocabularies)."""
        w0, w1 = int(self.word_offsets[start]), int(self.word_offsets[stop])
        t0, t1 = int(self.tag_offsets[start]), int(self.tag_offsets[stop])
        return Corpus(
            vocab=self.vocab, tags=self.tags, word_ids=self.word_ids[w0:w1],
            word_offsets=self.word_offsets[start:stop + 1] - w0, tag_ids=self.tag_ids[t0:t1],
            tag_offsets=self.tag_offsets[start:stop + 1] - t0,
            tenant=self.tenant[start:stop], speaker=self.speaker[start:stop],
            kind=self.kind[start:stop], event_s=self.event_s[start:stop],
            ids=self.ids[start:stop],
        )

    def item(self, i: int) -> Item:
        """Item ``i`` as the pydantic model of its kind."""
        _, model, _ = KINDS[int(self.kind[i])]
        users = (MAIN_USER, *OTHER_USERS)
        # Each model's own ``kind`` default applies (``Item`` itself has none).
        return model.model_validate(dict(
            id=self.ids[i], user_id=users[int(self.tenant[i])], text=self.text(i),
            tags=self.item_tags(i), speaker=SPEAKERS[int(self.speaker[i])],
            event_time=datetime.fromtimestamp(TIME_START.timestamp() + float(self.event_s[i]),
                                              tz=UTC),
            source="scale-bench",
        ))


def _zipf_p(n: int, s: float = ZIPF_S) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1, dtype=float) ** s
    return p / p.sum()


def _made_up_words(rng: np.random.Generator, count: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    seen = set(taken)
    while len(out) < count:
        n_syl = 2 if rng.random() < 0.8 else 3
        word = "".join(
            _ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))]
            for _ in range(n_syl)
        ) + _CODAS[rng.integers(len(_CODAS))]
        if word not in seen and 4 <= len(word) <= 10:
            seen.add(word)
            out.append(word)
    return out


def make_vocabularies(rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """The word vocabulary (Zipf rank order) and the tag vocabulary (Zipf rank order).

    Function words take the top ranks; common English and made-up words are shuffled
    into the rest. Half of the tags are content words of the vocabulary, half are new.
    """
    function = _FUNCTION_WORDS
    common = [w for w in _COMMON_WORDS if w not in function]
    made_up = _made_up_words(rng, VOCAB_SIZE - len(function) - len(common), set(function + common))
    content = common + made_up
    content = [content[i] for i in rng.permutation(len(content))]
    vocab = function + content
    from_vocab = [content[i] for i in rng.choice(len(content), TAG_VOCAB_SIZE // 2, replace=False)]
    new_tags = _made_up_words(rng, TAG_VOCAB_SIZE - len(from_vocab), set(vocab))
    tags = from_vocab + new_tags
    tags = [tags[i] for i in rng.permutation(len(tags))]
    return vocab, tags


def make_corpus(n: int, seed: int = 0) -> Corpus:
    """N main-tenant items plus the small tenants' items, interleaved in a seeded order."""
    rng = np.random.default_rng(seed)
    vocab, tags = make_vocabularies(rng)
    n_other = max(200, int(n * OTHER_SHARE))
    tenant = np.concatenate([np.zeros(n, dtype=np.int8)] + [
        np.full(n_other, t, dtype=np.int8) for t in range(1, len(OTHER_USERS) + 1)
    ])
    tenant = tenant[rng.permutation(len(tenant))]
    total = len(tenant)
    lengths = rng.integers(8, 26, size=total)
    word_offsets = np.concatenate([[0], np.cumsum(lengths)])
    word_ids = rng.choice(len(vocab), size=int(word_offsets[-1]), p=_zipf_p(len(vocab))
                          ).astype(np.int32)
    n_tags = rng.integers(1, 4, size=total)
    tag_offsets = np.concatenate([[0], np.cumsum(n_tags)])
    tag_ids = rng.choice(len(tags), size=int(tag_offsets[-1]), p=_zipf_p(len(tags))
                         ).astype(np.int32)
    kind_p = np.array([p for _, _, p in KINDS])
    counters = [0] * (len(OTHER_USERS) + 1)
    ids = []
    for t in tenant.tolist():
        ids.append(f"i_s{t}_{counters[t]:010d}")
        counters[t] += 1
    return Corpus(
        vocab=vocab, tags=tags, word_ids=word_ids, word_offsets=word_offsets, tag_ids=tag_ids,
        tag_offsets=tag_offsets, tenant=tenant,
        speaker=rng.integers(0, len(SPEAKERS), size=total, dtype=np.int8),
        kind=rng.choice(len(KINDS), size=total, p=kind_p / kind_p.sum()).astype(np.int8),
        event_s=rng.integers(0, TIME_SPAN_S, size=total), ids=ids,
    )


def make_queries(corpus: Corpus, count: int, seed: int = 0) -> list[str]:
    """``count`` queries of 3-6 content words with the corpus's Zipf word frequencies.

    About half add a tag-like word (a tag, Zipf-drawn), a fifth name a speaker and a
    seventh name a year, so the tag channel and the speaker and time priors get work.
    """
    rng = np.random.default_rng([seed, 1])
    first_content = len(_FUNCTION_WORDS)
    content = corpus.vocab[first_content:]
    p_words = _zipf_p(len(corpus.vocab))[first_content:]  # the corpus's own word frequencies
    p_words /= p_words.sum()
    p_tags = _zipf_p(len(corpus.tags))
    out = []
    for _ in range(count):
        words = [content[i] for i in rng.choice(len(content), int(rng.integers(3, 7)),
                                                p=p_words)]
        if rng.random() < 0.5:
            words[int(rng.integers(len(words)))] = corpus.tags[rng.choice(len(corpus.tags),
                                                                         p=p_tags)]
        if rng.random() < 0.2:
            words.insert(0, SPEAKERS[int(rng.integers(len(SPEAKERS)))] + "'s")
        if rng.random() < 1 / 7:
            words.append(f"in {2022 + int(rng.integers(3))}")
        out.append(" ".join(words))
    return out


# -- measurement helpers ---------------------------------------------------------------------


def _maxrss_mb() -> float:
    """The process's peak resident set so far (``ru_maxrss``), in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _rss_mb() -> float | None:
    """The current resident set in MiB (Linux ``/proc/self/statm``), else None."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


@contextmanager
def _memory(into: dict[str, Any], prefix: str) -> Iterator[None]:
    """Record a phase's memory figures under ``{prefix}_...`` keys of ``into``."""
    gc.collect()
    peak0, rss0 = _maxrss_mb(), _rss_mb()
    yield
    peak1, rss1 = _maxrss_mb(), _rss_mb()
    into[f"{prefix}_peak_rss_mb"] = round(peak1, 1)
    into[f"{prefix}_peak_delta_mb"] = round(peak1 - peak0, 1)
    into[f"{prefix}_rss_delta_mb"] = (
        round(rss1 - rss0, 1) if rss0 is not None and rss1 is not None else None
    )


def _file_mb(path: Path) -> float:
    return round(path.stat().st_size / (1024 * 1024), 2) if path.exists() else 0.0


def _time_queries(search: Callable[[str], list[Any]], queries: list[str], desc: str,
                  progress: bool) -> tuple[list[float], list[int]]:
    lat, sizes = [], []
    for q in tqdm(queries, desc=desc, unit="q", disable=not progress, file=sys.stderr):
        started = time.perf_counter()
        hits = search(q)
        lat.append((time.perf_counter() - started) * 1000)
        sizes.append(len(hits))
    return lat, sizes


def _latency(lat: list[float]) -> dict[str, float]:
    pct = percentiles(lat)
    return {"p50_ms": pct["p50"], "p95_ms": pct["p95"],
            "mean_ms": round(float(np.mean(lat)), 3), "max_ms": round(float(np.max(lat)), 3)}


# -- phases ----------------------------------------------------------------------------------


def _ingest(store: MemoryStore, corpus: Corpus, rng: np.random.Generator, progress: bool,
            desc: str) -> dict[str, Any]:
    """Add every item in batches, then the edges; returns the ingest figures."""
    out: dict[str, Any] = {}
    build_s = store_s = 0.0
    with _memory(out, "ingest"), tqdm(total=len(corpus), desc=desc, unit="item",
                                      disable=not progress, file=sys.stderr) as bar:
        for start in range(0, len(corpus), BATCH):
            stop = min(start + BATCH, len(corpus))
            t0 = time.perf_counter()
            batch = [corpus.item(i) for i in range(start, stop)]
            t1 = time.perf_counter()
            with store.transaction():
                store.add_many(batch)
            store_s += time.perf_counter() - t1
            build_s += t1 - t0
            bar.update(stop - start)
    n = len(corpus)
    out.update({
        "items": n,
        "ingest_s": round(build_s + store_s, 3),
        "ingest_per_s": round(n / max(build_s + store_s, 1e-9), 1),
        "store_s": round(store_s, 3),
        "store_per_s": round(n / max(store_s, 1e-9), 1),
        "model_build_s": round(build_s, 3),
    })

    edges = make_edges(corpus, rng)
    started = time.perf_counter()
    store.add_edges(edges)
    edge_s = time.perf_counter() - started
    out.update({"edges": len(edges), "edges_s": round(edge_s, 3),
                "edges_per_s": round(len(edges) / max(edge_s, 1e-9), 1)})
    return out


def make_edges(corpus: Corpus, rng: np.random.Generator) -> list[Edge]:
    """Each tenant links ``EDGE_SHARE`` of its items to an earlier item of its own."""
    by_tenant: dict[int, list[str]] = {}
    for i, t in enumerate(corpus.tenant.tolist()):
        by_tenant.setdefault(t, []).append(corpus.ids[i])
    users = (MAIN_USER, *OTHER_USERS)
    edges = []
    for t, ids in by_tenant.items():
        picks = rng.choice(np.arange(1, len(ids)), size=int(len(ids) * EDGE_SHARE), replace=False)
        for j in picks.tolist():
            edges.append(Edge(user_id=users[t], src=ids[j], dst=ids[int(rng.integers(j))],
                              relation="related", weight=round(float(rng.uniform(0.3, 1.0)), 3)))
    return edges


def _bench_memstrata(store: MemoryStore, queries: list[str], warmup: str, progress: bool,
                     desc: str) -> dict[str, Any]:
    retriever = Retriever(store, embedder=None)
    out: dict[str, Any] = {}

    def search(q: str) -> list[Any]:
        return retriever.search(MAIN_USER, q, k=10)

    with _memory(out, "search"):
        warm_started = time.perf_counter()
        search(warmup)
        out["warmup_ms"] = round((time.perf_counter() - warm_started) * 1000, 3)
        lat, sizes = _time_queries(search, queries, desc, progress)
    foreign = [h.id for q in queries[:5] for h in search(q) if not h.id.startswith("i_s0_")]
    out.update(_latency(lat))
    out.update({"queries": len(queries), "mean_hits": round(float(np.mean(sizes)), 2),
                "empty_results": sum(1 for s in sizes if s == 0),
                "foreign_tenant_hits": len(foreign)})
    return out


def _bench_bm25(corpus: Corpus, main_idx: np.ndarray, sample: int, queries: list[str],
                warmup: str, rng: np.random.Generator, progress: bool, desc: str
                ) -> dict[str, Any]:
    sampled = len(main_idx) > sample
    chosen = np.sort(rng.choice(main_idx, size=sample, replace=False)) if sampled else main_idx
    texts = [corpus.text(int(i)) + " " + " ".join(corpus.item_tags(int(i))) for i in chosen]
    ids = [corpus.ids[int(i)] for i in chosen]
    out: dict[str, Any] = {"sampled": sampled, "sample_size": len(chosen),
                           "tokenizer": "bm25_tokens"}
    with _memory(out, "build"):
        started = time.perf_counter()
        index = BM25Index(ids, texts, TOKENIZERS["bm25_tokens"])
        build_s = time.perf_counter() - started
    del texts
    out.update({"build_s": round(build_s, 3),
                "ingest_per_s": round(len(ids) / max(build_s, 1e-9), 1)})
    with _memory(out, "search"):
        index.search(warmup, 10)
        lat, _ = _time_queries(partial(index.search, k=10), queries, desc, progress)
    out.update(_latency(lat))
    out["queries"] = len(queries)
    return out


@dataclass(frozen=True)
class PgPlan:
    """What to measure on PostgreSQL besides the SQLite baseline (``--db URL``)."""

    url: str
    writers: int
    readers: int
    own_tenants: bool


SEARCH_P95_TARGET_MS = 50.0
"""Issue 22's target: search p95 at most this with ``readers`` concurrent readers."""
INGEST_RATIO_TARGET = 3.0
"""Issue 22's target: concurrent PostgreSQL ingest at least this times one SQLite writer."""


def _measure_postgres(plan: PgPlan, n: int, corpus: Corpus, queries: list[str], warmup: str,
                      seed: int, progress: bool) -> dict[str, Any]:
    """The PostgreSQL figures of one size: concurrent ingest (the main tenant shared by
    every writer), search with one and with ``plan.readers`` readers, and optionally the
    ingest with one tenant per writer; each in a fresh schema, dropped afterwards."""
    from memstrata.memory.store.opener import open_store

    from . import scale_clients as clients

    def say(what: str) -> None:
        if progress:
            print(f"postgres {n:,}: {what}", file=sys.stderr, flush=True)

    # The same edges as the SQLite store's: the same generator, drawn right after the items.
    edges = make_edges(corpus, np.random.default_rng([seed, 2, n]))
    schema = f"{clients.SCHEMA_PREFIX}{n}"
    out: dict[str, Any] = {"schema": schema}
    url = clients.create_schema(plan.url, schema)
    try:
        store = open_store(url, embedder=None)  # migrates once, before the writers start
        try:
            say(f"ingest, {plan.writers} writers")
            ingest = clients.ingest_concurrently(url, corpus, edges, plan.writers, batch=BATCH)
            ingest["stored_items"] = store.counts(MAIN_USER)["items"]
            every = store.counts()
            ingest["stored_items_all_tenants"] = every["items"]
            ingest["stored_edges"] = every["edges"]
        finally:
            store.close()
        ingest["db_mb"] = clients.schema_mb(plan.url, schema)
        ingest["vacuum_analyze_s"] = clients.vacuum_analyze(plan.url, schema)
        out["ingest"] = ingest
        say("search, 1 reader")
        single = clients.search_concurrently(url, MAIN_USER, queries, warmup, 1,
                                             id_prefix="i_s0_")  # the main tenant's ids
        out["search_1_reader"] = single
        if plan.readers > 1:
            say(f"search, {plan.readers} readers")
            out["search_readers"] = clients.search_concurrently(
                url, MAIN_USER, queries, warmup, plan.readers, id_prefix="i_s0_")
        else:
            out["search_readers"] = single
    finally:
        clients.drop_schema(plan.url, schema)
    if plan.own_tenants:
        own = f"{schema}_own"
        url = clients.create_schema(plan.url, own)
        try:
            store = open_store(url, embedder=None)
            try:
                say(f"ingest, {plan.writers} writers, one tenant each")
                ingest = clients.ingest_concurrently(url, corpus, edges, plan.writers,
                                                     batch=BATCH, own_tenants=True)
                ingest["stored_items_all_tenants"] = store.counts()["items"]
            finally:
                store.close()
            out["ingest_own_tenants"] = ingest
        finally:
            clients.drop_schema(plan.url, own)
    return out


def _run_size(n: int, *, queries: int, bm25_queries: int, bm25_sample: int, seed: int,
              db_path: Path, keep_db: bool, progress: bool, postgres: PgPlan | None = None
              ) -> dict[str, Any]:
    t0 = time.perf_counter()
    corpus = make_corpus(n, seed)
    gen_s = time.perf_counter() - t0
    qs = make_queries(corpus, queries + 1, seed)
    warmup, qs = qs[0], qs[1:]
    rng = np.random.default_rng([seed, 2, n])
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)

    # Items only, no vectors: encoding 1M texts is out of this benchmark's scope.
    store = Store.open(db_path, embedder=None)
    try:
        mem = _ingest(store, corpus, rng, progress, f"ingest {n:,}")
        mem["stored_items"] = store.counts(MAIN_USER)["items"]
        mem["stored_items_all_tenants"] = store.counts()["items"]
        mem["db_mb_after_ingest"] = _file_mb(db_path)
        mem["wal_mb_after_ingest"] = _file_mb(Path(f"{db_path}-wal"))
        mem.update(_bench_memstrata(store, qs, warmup, progress, f"memstrata {n:,}"))
    finally:
        store.close()
    mem["db_mb"] = _file_mb(db_path)
    if not keep_db:
        db_path.unlink(missing_ok=True)

    main_idx = np.flatnonzero(corpus.tenant == 0)
    bm = _bench_bm25(corpus, main_idx, bm25_sample, qs[:bm25_queries], warmup, rng, progress,
                     f"rank-bm25 {n:,}")
    if bm["sampled"]:
        bm["note"] = (f"rank-bm25 indexed a random sample of {bm['sample_size']:,} of the "
                      f"{len(main_idx):,} items: its query time grows linearly with the corpus, "
                      "so these latencies understate the full-corpus cost")
    speedup = bm["p50_ms"] / mem["p50_ms"] if mem["p50_ms"] > 0 else float("nan")
    out: dict[str, Any] = {
        "n_items": n,
        "other_tenants": {u: int((corpus.tenant == t).sum())
                          for t, u in enumerate(OTHER_USERS, start=1)},
        "corpus_generation_s": round(gen_s, 3),
        "memstrata": mem,
        "rank_bm25": bm,
        "speedup_p50": round(speedup, 2),
    }
    if bm["sampled"]:
        # rank-bm25 scores every document per query term: latency scales with corpus size.
        full = bm["p50_ms"] * len(main_idx) / bm["sample_size"]
        out["speedup_p50_full_corpus_estimate"] = round(full / mem["p50_ms"], 2)
    if postgres is not None:
        pg = _measure_postgres(postgres, n, corpus, qs, warmup, seed, progress)
        out["postgres"] = pg
        out["pg_ingest_ratio"] = round(pg["ingest"]["ingest_per_s"] / mem["ingest_per_s"], 2)
        if "ingest_own_tenants" in pg:
            out["pg_own_tenants_ingest_ratio"] = round(
                pg["ingest_own_tenants"]["ingest_per_s"] / mem["ingest_per_s"], 2)
        p95 = pg["search_readers"]["p95_ms"]
        out["pg_search_p95_ms"] = p95
        out["pg_search_p95_within_target"] = bool(p95 <= SEARCH_P95_TARGET_MS)
    return out


def run_scale_bench(
    sizes: list[int],
    *,
    queries: int = 200,
    bm25_sample: int = 100_000,
    seed: int = 0,
    db_dir: Path | None = None,
    progress: bool = True,
    bm25_queries: int | None = None,
    db: str | Path | None = None,
    writers: int | None = None,
    readers: int | None = None,
    fresh: bool = False,
    own_tenants: bool = True,
) -> dict[str, Any]:
    """Run the scale benchmark and return the ``scale.json`` document.

    Args:
        sizes: corpus sizes N (items of the measured tenant), e.g. ``[10_000, 100_000]``.
        queries: synthetic queries timed per size (after one warm-up query).
        bm25_sample: above this many items rank-bm25 indexes a random sample of this size.
        seed: seeds every random draw (corpus, queries, edges, sample).
        db_dir: where the store files go (a temporary directory by default); each size
            writes and then deletes ``scale_{N}.db`` there.
        progress: show progress bars on stderr.
        bm25_queries: how many of the queries rank-bm25 answers (default: all of them).
        db: a PostgreSQL URL: besides the SQLite baseline (a temporary file, as without
            ``db``), every size is also measured on PostgreSQL with concurrent writer and
            reader processes (``bench/scale_clients.py``), each measurement in a fresh
            schema ``memstrata_scale_<N>`` of that database, dropped afterwards. A path:
            the SQLite store goes to that file (each size replaces the previous one; the
            last size's store is kept).
        writers: writer processes on PostgreSQL (default 8); SQLite has one writer.
        readers: concurrent reader processes on PostgreSQL (default 4); a single reader is
            always measured too.
        fresh: drop what an earlier run left (``memstrata_scale_*`` schemas, or the file
            at ``db``); without it such leftovers are an error and nothing is touched.
        own_tenants: with a URL, also time the ingest with one tenant per writer.

    Returns:
        ``{"meta": {...}, "<N>": {"memstrata": {...}, "rank_bm25": {...},
        "speedup_p50": ...}, ...}``; with a URL each size adds ``postgres`` (``ingest``,
        ``search_1_reader``, ``search_readers``, ``ingest_own_tenants``),
        ``pg_ingest_ratio`` (PostgreSQL's concurrent ingest rate over SQLite's), and
        ``pg_search_p95_ms`` with ``pg_search_p95_within_target``.

    Raises:
        ValueError: bad sizes or counts; ``writers``/``readers`` without a URL; leftovers
            of an earlier run without ``fresh``.
    """
    if not sizes or any(n <= 0 for n in sizes):
        raise ValueError("sizes must be positive integers")
    if queries <= 0 or bm25_sample <= 0:
        raise ValueError("queries and bm25_sample must be positive")
    n_bm25 = queries if bm25_queries is None else max(1, min(bm25_queries, queries))
    from memstrata.memory.store.opener import describe, is_url

    plan: PgPlan | None = None
    db_file: Path | None = None
    if db is not None and is_url(db):
        plan = PgPlan(url=str(db), writers=8 if writers is None else writers,
                      readers=4 if readers is None else readers, own_tenants=own_tenants)
        if plan.writers <= 0 or plan.readers <= 0:
            raise ValueError("writers and readers must be positive")
    else:
        if (writers is not None and writers != 1) or readers is not None:
            raise ValueError("--writers and --readers need a PostgreSQL --db URL: the SQLite "
                             "store has one writer, and its search is timed single-threaded")
        if db is not None:
            db_file = Path(db)
            if db_file.exists() and not fresh:
                raise ValueError(f"{db_file} exists: pass --fresh to replace it")
    doc: dict[str, Any] = {"meta": {
        "benchmark": "scale",
        "sizes": list(sizes),
        "queries": queries,
        "bm25_queries": n_bm25,
        "bm25_sample": bm25_sample,
        "seed": seed,
        "k": 10,
        "tenant": MAIN_USER,
        "other_tenants": list(OTHER_USERS),
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
        },
        "code_sha256": _code_versions(),
        "notes": [
            "Items only: no embeddings are stored (encoding 1M texts is out of scope), so "
            "memstrata's dense channel is off; search runs the lexical (FTS5 bm25), tag, "
            "speaker/time prior and graph channels.",
            "Ingest rate ingest_per_s counts building the pydantic items and Store.add_many "
            f"in batches of {BATCH:,} inside store.transaction(); store_per_s counts "
            "add_many alone. Items of every tenant are counted. Edges are added afterwards "
            "and timed separately.",
            "Latency is wall time of Retriever(store, embedder=None).search(user, q, k=10) "
            "per query, after one warm-up query, single-threaded, SQLite file in WAL mode.",
            "From 20,000 indexed rows, query terms in more than 2% of the rows, or past "
            "20,000 matched rows counting the rarest terms first, only add their bm25 to "
            "rows that hold a rarer query term (SearchWeights.common_share / common_budget; "
            "see Store.lexical); pseudo-relevance feedback terms are treated the same way.",
            "rank_bm25 is rank-bm25 BM25Okapi over the same main-tenant texts (text plus "
            "tags) with memstrata's tokenizer; its ingest_per_s is documents indexed per "
            "second (tokenizing included). Above bm25_sample items it indexes a random "
            "sample (sampled: true), which understates its full-corpus query latency; "
            "speedup_p50_full_corpus_estimate scales its p50 linearly to the full corpus.",
            "Memory: *_peak_rss_mb is ru_maxrss (process-wide high-water mark since start); "
            "*_peak_delta_mb is how much the phase raised it; *_rss_delta_mb is the change "
            "of the current resident set across the phase (/proc/self/statm).",
            "db_mb is the database file after close (WAL checkpointed).",
        ],
    }}
    if db_file is not None:
        doc["meta"]["db"] = str(db_file)
    if plan is not None:
        from . import scale_clients as clients

        dropped = clients.prepare_database(plan.url, fresh=fresh)
        doc["meta"]["postgres"] = _postgres_meta(plan, describe(plan.url), dropped)
        doc["meta"]["notes"] += _postgres_notes(plan)
    with tempfile.TemporaryDirectory(prefix="memstrata-scale-") as tmp:
        where = Path(db_dir) if db_dir is not None else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            doc[str(n)] = _run_size(n, queries=queries, bm25_queries=n_bm25,
                                    bm25_sample=bm25_sample, seed=seed,
                                    db_path=db_file or where / f"scale_{n}.db",
                                    keep_db=db_file is not None, progress=progress,
                                    postgres=plan)
            gc.collect()
    doc["meta"]["peak_rss_mb"] = round(_maxrss_mb(), 1)
    return doc


def _postgres_meta(plan: PgPlan, where: str, dropped: list[str]) -> dict[str, Any]:
    from . import scale_clients as clients

    return {
        "url": where,  # without its password
        "server_version": clients.server_version(plan.url),
        "server_on_this_machine": clients.server_is_local(plan.url),
        "writers": plan.writers,
        "readers": plan.readers,
        "own_tenants": plan.own_tenants,
        "schemas": f"{clients.SCHEMA_PREFIX}<N> (dropped after each size)",
        "dropped_at_start": dropped,
        "ingest_ratio_target": INGEST_RATIO_TARGET,
        "search_p95_target_ms": SEARCH_P95_TARGET_MS,
    }


def _postgres_notes(plan: PgPlan) -> list[str]:
    from . import scale_clients as clients

    cores = os.cpu_count()
    notes = [
        "memstrata (each size's 'memstrata' entry) is the SQLite store, the single-writer, "
        "single-reader baseline; 'postgres' is the PostgreSQL store at --db, in a fresh "
        f"schema {clients.SCHEMA_PREFIX}<N> per size.",
        f"PostgreSQL ingest: the items are cut into {plan.writers} contiguous shares, one per "
        "writer process (spawned; each opens its own store), each added in the same batches "
        f"of {BATCH:,} items as SQLite's (add_many inside store.transaction()). ingest_per_s "
        "= all items / (last writer's end - first writer's start), building the items "
        "included as for SQLite; pg_ingest_ratio = that / SQLite's ingest_per_s (target "
        f">= {INGEST_RATIO_TARGET:g}). Edges are added afterwards, split the same way.",
        "Every writer writes the main tenant's items (every batch holds all tenants), and "
        "PgStore.add_many takes each tenant's advisory lock (pg_advisory_xact_lock, "
        "_lock_writers) for its whole transaction: writers of one tenant run one batch at a "
        "time. lock_wait_s is the time each writer spent waiting for those locks. "
        "ingest_own_tenants gives each writer tenants of its own (names suffixed .w<i>; no "
        "edges), the case where the locks never meet.",
        f"PostgreSQL search: search_1_reader is one reader process; search_readers is "
        f"{plan.readers} reader processes running the whole query list at once, p50/p95 over "
        "all their queries (Retriever(store, embedder=None).search, k=10); "
        f"pg_search_p95_ms is that p95 (target <= {SEARCH_P95_TARGET_MS:g} ms). Searches "
        "start after VACUUM (ANALYZE) of the schema's tables (vacuum_analyze_s, untimed in "
        "the ingest rate): the planner's statistics as autovacuum leaves them, not the "
        "statistics-less plans right after a bulk load.",
    ]
    if clients.server_is_local(plan.url):
        notes.append(
            f"The PostgreSQL server runs on this machine ({cores} cores): the client "
            "processes and the server share these cores, so concurrent figures are bounded "
            "by them, not by the clients alone.")
    return notes


def _code_versions() -> dict[str, str]:
    """Short sha256 of the store and retrieval sources measured (figures go stale with them):
    one for ``retrieval.py`` and one over every module of the ``store`` package."""
    from memstrata.memory import retrieval as retrieval_mod
    from memstrata.memory import store as store_mod

    def digest(paths: list[Path]) -> str:
        h = hashlib.sha256()
        for path in paths:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        return h.hexdigest()[:12]

    store_dir = Path(str(store_mod.__file__)).parent
    return {"store": digest(sorted(store_dir.glob("*.py"))),
            "retrieval.py": digest([Path(str(retrieval_mod.__file__))])}


def _size_keys(doc: dict[str, Any]) -> list[str]:
    return sorted((k for k in doc if k.isdigit()), key=int)


def format_scale_table(doc: dict[str, Any]) -> str:
    """A plain-text table of a scale document, one row per size."""
    head = (f"{'N':>10} | {'memstrata p50':>13} {'p95':>8} {'ingest/s':>9} {'db MB':>8} | "
            f"{'rank-bm25 p50':>13} {'p95':>8} {'docs/s':>8} {'indexed':>9} | {'speedup':>7}")
    lines = [head, "-" * len(head)]
    for key in _size_keys(doc):
        row = doc[key]
        m, b = row["memstrata"], row["rank_bm25"]
        indexed = f"{b['sample_size']:,}{'*' if b['sampled'] else ''}"
        lines.append(
            f"{int(key):>10,} | {m['p50_ms']:>10.2f} ms {m['p95_ms']:>8.2f} "
            f"{m['ingest_per_s']:>9,.0f} {m['db_mb']:>8.1f} | {b['p50_ms']:>10.2f} ms "
            f"{b['p95_ms']:>8.2f} {b['ingest_per_s']:>8,.0f} {indexed:>9} | "
            f"{row['speedup_p50']:>6.1f}x"
        )
    if any(doc[k]["rank_bm25"]["sampled"] for k in _size_keys(doc)):
        lines.append("* rank-bm25 indexed a random sample: its latency understates the full cost")
    if "postgres" in doc["meta"]:
        lines += ["", *_postgres_table(doc)]
    return "\n".join(lines)


def _postgres_table(doc: dict[str, Any]) -> list[str]:
    """The PostgreSQL rows (markdown): concurrent ingest and search vs SQLite's baseline."""
    pg_meta = doc["meta"]["postgres"]
    w, r = pg_meta["writers"], pg_meta["readers"]
    ratio_t, p95_t = pg_meta["ingest_ratio_target"], pg_meta["search_p95_target_ms"]
    lines = [
        f"PostgreSQL ({w} writer processes, {r} reader processes) vs SQLite (1 writer, "
        f"1 reader); {doc['meta']['machine']['cpu_count']} cores"
        + (", shared with the server" if pg_meta["server_on_this_machine"] else ""),
        "",
        f"| N | SQLite ingest/s | PG ingest/s | ratio (>= {ratio_t:g}x) | PG lock wait "
        f"| PG own-tenants ingest/s | ratio | SQLite p50 / p95 ms | PG 1 reader p50 / p95 ms "
        f"| PG {r} readers p50 / p95 ms | p95 <= {p95_t:g} ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for key in _size_keys(doc):
        row = doc[key]
        m, pg = row["memstrata"], row["postgres"]
        ing, one, many = pg["ingest"], pg["search_1_reader"], pg["search_readers"]
        own = pg.get("ingest_own_tenants")
        wait = ing["lock_wait_share"]
        own_rate = "-" if own is None else f"{own['ingest_per_s']:,.0f}"
        own_ratio = "-" if own is None else f"{row['pg_own_tenants_ingest_ratio']:.2f}x"
        lines.append(
            f"| {int(key):,} | {m['ingest_per_s']:,.0f} | {ing['ingest_per_s']:,.0f} "
            f"| {row['pg_ingest_ratio']:.2f}x "
            f"| {'-' if wait is None else f'{wait:.0%}'} | {own_rate} | {own_ratio} "
            f"| {m['p50_ms']:.2f} / {m['p95_ms']:.2f} | {one['p50_ms']:.2f} / {one['p95_ms']:.2f} "
            f"| {many['p50_ms']:.2f} / {many['p95_ms']:.2f} "
            f"| {'yes' if row['pg_search_p95_within_target'] else 'no'} |")
    lines.append("PG lock wait: the writers' time waiting for the tenants' advisory write locks, "
                 "as a share of writers x wall time.")
    return lines


def write_scale_outputs(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``scale.json`` and ``scale.png`` (p50/p95 vs size, log-log; with PostgreSQL
    figures, its concurrent readers' p50/p95 and the p95 target too) into ``out_dir``.

    Returns the two paths written.
    """
    matplotlib = require("matplotlib", "bench", "the benchmark charts")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / "scale.json", out / "scale.png"
    json_path.write_text(json.dumps(doc, indent=2) + "\n")

    keys = _size_keys(doc)
    xs = [int(k) for k in keys]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for system, label, color in (("memstrata", "memstrata", "tab:blue"),
                                 ("rank_bm25", "rank-bm25", "tab:orange")):
        for stat, style in (("p50_ms", "-o"), ("p95_ms", "--s")):
            ys = [doc[k][system][stat] for k in keys]
            ax.plot(xs, ys, style, color=color, label=f"{label} {stat[:3]}")
        if system == "rank_bm25":
            for x, k in zip(xs, keys, strict=True):
                if doc[k][system]["sampled"]:
                    ax.annotate(f"sample of {doc[k][system]['sample_size']:,}",
                                (x, doc[k][system]["p50_ms"]), textcoords="offset points",
                                xytext=(-10, 8), ha="right", fontsize=8, color=color)
    if "postgres" in doc["meta"]:
        pg_meta = doc["meta"]["postgres"]
        for stat, style in (("p50_ms", "-^"), ("p95_ms", "--v")):
            ys = [doc[k]["postgres"]["search_readers"][stat] for k in keys]
            ax.plot(xs, ys, style, color="tab:green",
                    label=f"PostgreSQL, {pg_meta['readers']} readers {stat[:3]}")
        ax.axhline(pg_meta["search_p95_target_ms"], color="tab:red", lw=0.8, ls=":",
                   label="PostgreSQL p95 target")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("items in the tenant (N)")
    ax.set_ylabel("search latency (ms)")
    ax.set_title("memstrata vs rank-bm25: search latency by corpus size (k=10)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return [json_path, png_path]
