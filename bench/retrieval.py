"""``memstrata bench retrieval``: LoCoMo evidence recall for four retrievers in one run.

For every question of category 1-4 with evidence, each system ranks the conversation's
turns; recall@k is the share of the evidence turns among its first k, averaged per
category and overall, on the original evidence and on the audit-corrected evidence.
No LLM is used, except by the optional ``memstrata+rerank`` system (``rerank_lm``).
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from memstrata.memory import Embedder, Retriever, SearchWeights, Store
from memstrata.memory.store.opener import describe, is_url, open_store
from tqdm import tqdm

from .baselines import TOKENIZERS, BM25Index
from .locomo import LoCoMoConversation, Question, apply_audit, load_locomo, read_locomo
from .metrics import percentiles, recall_at_k
from .retrieval_cv import KNOBS, Evaluate, cross_validate

KS = (5, 10, 25)
CATEGORIES = (1, 2, 3, 4)
SYSTEMS = ("memstrata", "bm25_whitespace", "bm25_tokens", "dense")
# Cosine alone: every lexical channel (feedback and expansion ride on lexical), prior and
# expansion over the graph or the session is off.
DENSE_ONLY = SearchWeights(lexical=0, speaker_channels=0, tags=0, speaker_boost=0, time_boost=0,
                           when_boost=0, asking=0, graph=0, session=0)

Ranker = Callable[[Question], list[str]]


def _scoreable(q: Question, corrected: bool) -> list[str]:
    if corrected and q.corrected_evidence is not None:
        return q.corrected_evidence
    return q.evidence


def _summarise(per_q: list[tuple[Question, list[str]]], corrected: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in KS:
        by_cat: dict[str, list[float]] = defaultdict(list)
        for q, ranked in per_q:
            relevant = _scoreable(q, corrected)
            if not relevant:
                continue
            r = recall_at_k(ranked, relevant, k)
            by_cat[str(q.category)].append(r)
            by_cat["overall"].append(r)
        out[f"recall@{k}"] = {
            c: round(sum(v) / len(v), 4) if (v := by_cat.get(c)) else None
            for c in ("overall", *map(str, CATEGORIES))
        }
    return out


def _ranked_turns(retriever: Any, q: Question) -> list[str]:
    return [h.turn_id or "" for h in retriever.search(q.sample_id, q.question, k=max(KS),
                                                      nodes=("turn",))]


def _memoised(retriever: Retriever, progress: bool) -> Evaluate:
    """An evaluator for the cross-validation: each (weights, question) searched once."""
    cache: dict[tuple[str, str], list[str]] = {}
    bar = tqdm(desc="cv", unit="search", disable=not progress)

    def evaluate(weights: SearchWeights, questions: Sequence[Question]) -> dict[str, list[str]]:
        key = weights.model_dump_json()
        retriever.weights = weights
        out = {}
        for q in questions:
            if (key, q.qid) not in cache:
                cache[key, q.qid] = _ranked_turns(retriever, q)
                bar.update()
            out[q.qid] = cache[key, q.qid]
        return out

    return evaluate


def _rankers(store: Store, convs: list[LoCoMoConversation], embedder: Embedder | None,
             weights: SearchWeights | None) -> dict[str, Ranker]:
    by_turn: dict[str, dict[str, str]] = {}
    indexes: dict[str, dict[str, BM25Index]] = {name: {} for name in TOKENIZERS}
    for conv in convs:
        turns = store.turns(conv.sample_id, conversation_id=conv.sample_id)
        by_turn[conv.sample_id] = {t.id: t.turn_id for t in turns}
        for name, tokenizer in TOKENIZERS.items():
            indexes[name][conv.sample_id] = BM25Index(
                [t.turn_id for t in turns], [t.search_text() for t in turns], tokenizer
            )
    hybrid = Retriever(store, embedder, weights)
    dense = Retriever(store, embedder, DENSE_ONLY)

    def via(retriever: Retriever) -> Ranker:
        return lambda q: _ranked_turns(retriever, q)

    rankers: dict[str, Ranker] = {"memstrata": via(hybrid)}
    for name in TOKENIZERS:
        rankers[name] = (lambda idx: lambda q: idx[q.sample_id].search(q.question, max(KS)))(
            indexes[name]
        )
    if embedder is not None:
        rankers["dense"] = via(dense)
    return rankers


def _score(rankers: Mapping[str, Ranker], questions: Sequence[Question], progress: bool
           ) -> dict[str, Any]:
    """Each ranker's recall (original and corrected evidence) and latency over ``questions``."""
    results: dict[str, Any] = {}
    for name, rank in rankers.items():
        rank(questions[0]) if questions else None  # warm caches outside the timings
        per_q, lat = [], []
        for q in tqdm(questions, desc=name, unit="q", disable=not progress):
            started = time.perf_counter()
            ranked = rank(q)
            lat.append((time.perf_counter() - started) * 1000)
            per_q.append((q, ranked))
        results[name] = {
            **_summarise(per_q, corrected=False),
            "latency_ms": percentiles(lat),
            "corrected": _summarise(per_q, corrected=True),
        }
    return results


def _on_postgres(url: str, convs: list[LoCoMoConversation], questions: Sequence[Question],
                 embedder: Embedder | None, weights: SearchWeights | None, progress: bool
                 ) -> dict[str, Any]:
    """The same conversations loaded into the PostgreSQL database at ``url`` and searched
    by memstrata's hybrid (and dense alone, with an embedder): systems
    ``memstrata@postgres`` (``dense@postgres``), plus ``ingest`` (seconds, turns a second).

    Raises:
        ValueError: the database already holds one of these conversations' tenants (a
            score on mixed data would mean nothing); nothing is written then.
    """
    store = open_store(url, embedder=embedder)
    try:
        held = [c.sample_id for c in convs if store.counts(c.sample_id)["turns"]]
        if held:
            raise ValueError(f"--db {describe(url)} already holds conversation {held[0]}: "
                             "give an empty database")
        total = sum(c.turn_count for c in convs)
        with tqdm(total=total, desc="ingest postgres", unit="turn",
                  disable=not progress) as bar:
            started = time.perf_counter()
            load_locomo(store, convs, embedder=embedder, progress=bar.update)
            seconds = time.perf_counter() - started
        systems = {"memstrata@postgres": weights}
        if embedder is not None:
            systems["dense@postgres"] = DENSE_ONLY
        rankers: dict[str, Ranker] = {
            name: (lambda r: lambda q: _ranked_turns(r, q))(Retriever(store, embedder, knobs))
            for name, knobs in systems.items()}
        out = _score(rankers, questions, progress)
        out["ingest"] = {"database": describe(url), "seconds": round(seconds, 3),
                         "turns_per_s": round(total / max(seconds, 1e-9), 1)}
        return out
    finally:
        store.close()


def _embed_all(store: Store, convs: list[LoCoMoConversation], encoder: Embedder,
               progress: bool) -> dict[str, Any]:
    """Store ``encoder``'s vectors for every turn beside the default's; its encode rate."""
    seconds, total = 0.0, 0
    with tqdm(total=sum(c.turn_count for c in convs), desc=f"embed {encoder.name}",
              unit="turn", disable=not progress) as bar:
        for conv in convs:
            turns = store.turns(conv.sample_id, conversation_id=conv.sample_id)
            for start in range(0, len(turns), 256):
                part = turns[start:start + 256]
                texts = store.contextual_texts(part)
                started = time.perf_counter()
                vectors = encoder.encode(texts)
                seconds += time.perf_counter() - started
                store.set_embeddings(conv.sample_id, [str(t.id) for t in part], vectors,
                                     encoder.name)
                total += len(part)
                bar.update(len(part))
    return {"turns": total, "dim": encoder.dim,
            "encode_turns_per_s": round(total / max(seconds, 1e-9), 1)}


def _cv_section(retriever: Retriever, questions: list[Question], start: SearchWeights,
                rounds: int, knobs: Mapping[str, Sequence[float]], progress: bool
                ) -> dict[str, Any]:
    started = time.perf_counter()
    found = cross_validate(_memoised(retriever, progress), questions, start, knobs, rounds)
    held_out = _summarise([(q, found["rankings"][q.qid]) for q in questions], corrected=False)
    tuned = found["tuned"]
    return {
        **held_out,
        "folds": found["folds"],
        "tuned_in_sample": {"changed": tuned["changed"], **_summarise(
            [(q, tuned["rankings"][q.qid]) for q in questions], corrected=False)},
        "rounds": rounds,
        "knobs": {name: list(values) for name, values in knobs.items()},
        "seconds": round(time.perf_counter() - started, 1),
    }


def run_retrieval_bench(
    data: str | Path,
    *,
    audit: str | Path | None = None,
    embedder: Embedder | None = None,
    weights: SearchWeights | None = None,
    db_path: str | Path | None = None,
    limit: int | None = None,
    cv: bool = False,
    cv_rounds: int = 2,
    cv_knobs: Mapping[str, Sequence[float]] | None = None,
    encoders: Sequence[Embedder] = (),
    rerank_lm: Any = None,
    rerank_depth: int = 20,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the benchmark and return the ``retrieval.json`` document.

    Args:
        data: a LoCoMo-format JSON file.
        audit: the audit corrections file (optional; without it "corrected" = original).
        embedder: enables the dense channel and the ``dense`` system.
        weights: fusion knobs for memstrata's hybrid.
        db_path: where to build the store (a temporary file by default). A PostgreSQL
            URL (an empty database) builds the SQLite store in a temporary file as usual
            and the same store in that database, and adds ``memstrata@postgres`` (and
            ``dense@postgres`` with an embedder) scored on the same questions in this run,
            with the database's ingest time under ``ingest.postgres``.
        limit: score only the first N eligible questions per conversation (quick runs).
        cv: also cross-validate memstrata's knobs, leaving one conversation out at a time
            (see ``retrieval_cv``); adds ``systems.memstrata.cv``.
        cv_rounds: coordinate-ascent rounds of each fold's knob search.
        cv_knobs: the knobs searched and their candidate values (default ``KNOBS``).
        encoders: more embedders to measure: each stores its own vectors of every turn and
            adds two systems, ``dense:<name>`` (cosine alone) and ``memstrata:<name>`` (the
            hybrid with that embedder for its dense channel and expansion), with its encode
            rate under ``ingest.encoders``.
        rerank_lm: a ``ModelHandle``: adds ``memstrata+rerank``, memstrata's top
            ``rerank_depth`` reordered by one LLM call per question
            (``programs.rerank``), with its calls, tokens and seconds per question and
            every reply in ``systems["memstrata+rerank"]["llm"]``.
        progress: show progress bars on stderr.
    """
    convs = read_locomo(data)
    if cv and len(convs) < 2:
        raise ValueError(f"--cv leaves one conversation out at a time: {data} holds "
                         f"{len(convs)}, it needs two or more")
    clash = [e.name for e in encoders if embedder is not None and e.name == embedder.name]
    if clash:
        raise ValueError(f"encoder {clash[0]!r} is already the bench's embedder")
    if cv_rounds < 1:
        raise ValueError(f"--cv-rounds must be 1 or more, not {cv_rounds}")
    audited = apply_audit(convs, audit) if audit else 0
    questions = [
        q for c in convs
        for q in [q for q in c.questions
                  if q.category in CATEGORIES and (q.evidence or q.corrected_evidence)][:limit]
    ]
    with tempfile.TemporaryDirectory() as tmp:
        url = db_path if db_path is not None and is_url(db_path) else None
        store = Store.open(Path(tmp) / "bench.db" if url or db_path is None else db_path)
        turns_total = sum(c.turn_count for c in convs)
        ingest: dict[str, Any] = {"turns": turns_total}
        with tqdm(total=turns_total, desc="ingest", unit="turn", disable=not progress) as bar:
            started = time.perf_counter()
            stats = load_locomo(store, convs, embedder=embedder, progress=bar.update)
            ingest["seconds"] = round(time.perf_counter() - started, 3)
        ingest["turns_per_s"] = round(turns_total / max(ingest["seconds"], 1e-9), 1)
        ingest["write_turns_per_s"] = round(turns_total / max(stats.write_seconds, 1e-9), 1)
        if embedder is not None:
            ingest["embed_turns_per_s"] = round(stats.embedded / max(stats.embed_seconds, 1e-9), 1)
            ingest["embedder"] = embedder.name

        rankers = _rankers(store, convs, embedder, weights)
        if encoders:
            ingest["encoders"] = {}
        for encoder in encoders:
            ingest["encoders"][encoder.name] = _embed_all(store, convs, encoder, progress)
            for system, knobs in ((f"dense:{encoder.name}", DENSE_ONLY),
                                  (f"memstrata:{encoder.name}", weights)):
                rankers[system] = (lambda r: lambda q: _ranked_turns(r, q))(
                    Retriever(store, encoder, knobs))
        reranker = None
        if rerank_lm is not None:
            from memstrata.programs.rerank import RerankingRetriever

            reranker = RerankingRetriever(Retriever(store, embedder, weights), rerank_lm,
                                          depth=rerank_depth)
            rankers["memstrata+rerank"] = (lambda r: lambda q: _ranked_turns(r, q))(reranker)
            mark = rerank_lm.meter.mark()
        results = _score(rankers, questions, progress)
        if reranker is not None:
            usage = rerank_lm.meter.since(mark)
            asked = max(len(questions) + 1, 1)  # the warm-up question is a call too
            results["memstrata+rerank"]["llm"] = {
                "model": rerank_lm.name, "depth": rerank_depth, **usage.model_dump(),
                "calls_per_question": round(usage.calls / asked, 3),
                "seconds_per_question": round(usage.seconds / asked, 3),
                "replies": reranker.replies,
            }
        if cv:
            results["memstrata"]["cv"] = _cv_section(
                Retriever(store, embedder, weights), questions, weights or SearchWeights(),
                cv_rounds, KNOBS if cv_knobs is None else cv_knobs, progress)
        store.close()
        if url is not None:
            postgres = _on_postgres(str(url), convs, questions, embedder, weights, progress)
            ingest["postgres"] = postgres.pop("ingest")
            results.update(postgres)
    counts = defaultdict(int)
    for q in questions:
        counts[str(q.category)] += 1
    return {
        "benchmark": "locomo-retrieval",
        "data": str(data),
        "audit": str(audit) if audit else None,
        "audit_entries_applied": audited,
        "questions": {"overall": len(questions), **counts},
        "ingest": ingest,
        "weights": (weights or SearchWeights()).model_dump(),
        "systems": results,
    }
