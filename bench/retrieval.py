"""``memstrata bench retrieval``: evidence recall of several retrievers on several corpora,
in one run.

Each corpus (a LoCoMo, LongMemEval or labelled-messages file: ``bench.corpus``) is loaded
into its own store, one tenant per conversation, and every system ranks each question's
tenant's turns; recall@k is the share of the evidence turns among its first k, averaged per
category and overall (LoCoMo also on the audit-corrected evidence). The systems: memstrata's
hybrid, rank-bm25 on white-space and on memstrata's tokens, and memstrata's lexical and
dense channels each alone (the "single channels"). No LLM is used, except by the optional
``memstrata+rerank`` system (``rerank_lm``).
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from memstrata.memory import Embedder, MemoryStore, Retriever, SearchWeights, Store
from memstrata.memory.store.opener import describe, is_url, open_store

from .baselines import TOKENIZERS, BM25Index
from .corpus import EvalCorpus, EvalQuestion, load_corpus
from .intervals import mean_interval, paired_ratio
from .locomo import LoCoMoConversation, load_locomo
from .metrics import percentiles, recall_at_k
from .retrieval_ablation import ablate as ablate_pieces
from .retrieval_cv import KNOBS, Evaluate, cross_validate

KS = (5, 10, 25)
SYSTEMS = ("memstrata", "bm25_whitespace", "bm25_tokens", "dense", "lexical")
CATEGORIES = (1, 2, 3, 4)
LOCOMO_COLUMNS = tuple(map(str, CATEGORIES))
SINGLE_CHANNELS = ("lexical", "dense")
"""memstrata's channels measured alone; the best of them is the "best single channel"."""
# Every channel and prior SearchWeights may have; a system keeps some and zeroes the rest
# (only those the current SearchWeights defines, so a retired knob does not break it).
_CHANNELS = ("lexical", "dense", "speaker_channels", "tags", "context", "expansion", "session",
             "speaker_boost", "time_boost", "when_boost", "asking", "recency", "graph")


def _zeroed(names: Sequence[str]) -> SearchWeights:
    return SearchWeights(**{n: 0 for n in names if n in SearchWeights.model_fields})


# Cosine alone: every lexical channel (feedback and expansion ride on lexical), prior and
# expansion over the graph or the session is off.
DENSE_ONLY = _zeroed(("lexical", "speaker_channels", "tags", "speaker_boost", "time_boost",
                      "when_boost", "asking", "graph", "session"))
# bm25 over the turn's own text alone: no neighbours' text, feedback, expansion, speaker,
# tag or dense channel, and no prior.
LEXICAL_ONLY = _zeroed([c for c in _CHANNELS if c != "lexical"])

Ranker = Callable[[EvalQuestion], list[str]]


def _scoreable(q: EvalQuestion, corrected: bool) -> list[str]:
    if corrected and q.corrected_evidence is not None:
        return q.corrected_evidence
    return q.evidence


def _summarise(per_q: Sequence[tuple[Any, list[str]]], corrected: bool,
               categories: Sequence[str] = LOCOMO_COLUMNS) -> dict[str, Any]:
    """Recall@k per category and overall; a question's category is read as text (LoCoMo's
    numbers included), ``categories`` naming the columns reported."""
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
            for c in ("overall", *categories)
        }
    return out


def _ranked_turns(retriever: Any, q: EvalQuestion) -> list[str]:
    return [h.turn_id or "" for h in retriever.search(q.sample_id, q.question, k=max(KS),
                                                      nodes=("turn",))]


def _memoised(retriever: Retriever, progress: bool) -> Evaluate[EvalQuestion]:
    """An evaluator for the cross-validation: each (weights, question) searched once."""
    cache: dict[tuple[str, str], list[str]] = {}
    bar = tqdm(desc="cv", unit="search", disable=not progress)

    def evaluate(weights: SearchWeights, questions: Sequence[EvalQuestion]
                 ) -> dict[str, list[str]]:
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


def _rankers(store: MemoryStore, tenants: Sequence[str], embedder: Embedder | None,
             weights: SearchWeights | None) -> dict[str, Ranker]:
    by_turn: dict[str, dict[str, str]] = {}
    indexes: dict[str, dict[str, BM25Index]] = {name: {} for name in TOKENIZERS}
    for tenant in tenants:
        turns = store.turns(tenant, conversation_id=tenant)
        by_turn[tenant] = {t.id: t.turn_id for t in turns}
        for name, tokenizer in TOKENIZERS.items():
            indexes[name][tenant] = BM25Index(
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
    rankers["lexical"] = via(Retriever(store, None, LEXICAL_ONLY))
    return rankers


def _score(rankers: Mapping[str, Ranker], questions: Sequence[EvalQuestion], progress: bool,
           categories: Sequence[str] = (), corrected: bool = True) -> dict[str, Any]:
    """Each ranker's recall (and, with ``corrected``, on the corrected evidence) and
    latency over ``questions``."""
    results: dict[str, Any] = {}
    recalls: dict[str, dict[int, list[float]]] = {}
    for name, rank in rankers.items():
        rank(questions[0]) if questions else None  # warm caches outside the timings
        per_q, lat = [], []
        for q in tqdm(questions, desc=name, unit="q", disable=not progress):
            started = time.perf_counter()
            ranked = rank(q)
            lat.append((time.perf_counter() - started) * 1000)
            per_q.append((q, ranked))
        results[name] = {**_summarise(per_q, False, categories), "latency_ms": percentiles(lat)}
        if corrected:
            results[name]["corrected"] = _summarise(per_q, True, categories)
        recalls[name] = {k: [recall_at_k(ranked, rel, k) for q, ranked in per_q
                             if (rel := _scoreable(q, False))] for k in KS}
        results[name]["interval"] = {f"recall@{k}": mean_interval(v)
                                     for k, v in recalls[name].items()}
    if "memstrata" in recalls:  # each baseline against memstrata on the same questions
        results["memstrata"]["vs"] = {
            other: {f"recall@{k}": dict(zip(("ratio", "interval"), paired_ratio(
                recalls["memstrata"][k], recalls[other][k]), strict=True)) for k in KS}
            for other in recalls if other != "memstrata"}
    return results


def _on_postgres(url: str, convs: list[LoCoMoConversation], questions: Sequence[EvalQuestion],
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
        out = _score(rankers, questions, progress, LOCOMO_COLUMNS)
        out["ingest"] = {"database": describe(url), "seconds": round(seconds, 3),
                         "turns_per_s": round(total / max(seconds, 1e-9), 1)}
        return out
    finally:
        store.close()


def _embed_all(store: MemoryStore, tenants: Sequence[str], encoder: Embedder, progress: bool
               ) -> dict[str, Any]:
    """Store ``encoder``'s vectors for every turn beside the default's; its encode rate."""
    seconds, total = 0.0, 0
    with tqdm(desc=f"embed {encoder.name}", unit="turn", disable=not progress) as bar:
        for tenant in tenants:
            turns = store.turns(tenant, conversation_id=tenant)
            for start in range(0, len(turns), 256):
                part = turns[start:start + 256]
                texts = store.contextual_texts(part)
                started = time.perf_counter()
                vectors = encoder.encode(texts)
                seconds += time.perf_counter() - started
                store.set_embeddings(tenant, [str(t.id) for t in part], vectors, encoder.name)
                total += len(part)
                bar.update(len(part))
    return {"turns": total, "dim": encoder.dim,
            "encode_turns_per_s": round(total / max(seconds, 1e-9), 1)}


def _cv_section(retriever: Retriever, questions: list[EvalQuestion], start: SearchWeights,
                rounds: int, knobs: Mapping[str, Sequence[float]], progress: bool,
                categories: Sequence[str]) -> dict[str, Any]:
    started = time.perf_counter()
    found = cross_validate(_memoised(retriever, progress), questions, start, knobs, rounds)
    held_out = _summarise([(q, found["rankings"][q.qid]) for q in questions], False, categories)
    tuned = found["tuned"]
    return {
        **held_out,
        "folds": found["folds"],
        "tuned_in_sample": {"changed": tuned["changed"], **_summarise(
            [(q, tuned["rankings"][q.qid]) for q in questions], False, categories)},
        "rounds": rounds,
        "knobs": {name: list(values) for name, values in knobs.items()},
        "seconds": round(time.perf_counter() - started, 1),
    }


def _ingest(store: MemoryStore, corpus: EvalCorpus, embedder: Embedder | None, progress: bool
            ) -> dict[str, Any]:
    """Load ``corpus`` into ``store``, one tenant per conversation: LoCoMo through its
    loader, the others through ``Memory.import_conversations``. Returns the ingest figures."""
    total = corpus.messages
    ingest: dict[str, Any] = {"turns": total}
    with tqdm(total=total, desc=f"ingest {corpus.name}", unit="turn",
              disable=not progress) as bar:
        started = time.perf_counter()
        if corpus.kind == "locomo":
            stats = load_locomo(store, corpus.locomo, embedder=embedder, progress=bar.update)
        else:
            from memstrata.api import Memory

            memory = Memory(store)
            for record in corpus.records:
                memory.import_conversations([record], user_id=record.id, progress=bar.update)
        ingest["seconds"] = round(time.perf_counter() - started, 3)
    ingest["turns_per_s"] = round(total / max(ingest["seconds"], 1e-9), 1)
    ingest["messages_per_s"] = ingest["turns_per_s"]
    if corpus.kind == "locomo":
        ingest["write_turns_per_s"] = round(total / max(stats.write_seconds, 1e-9), 1)
        if embedder is not None:
            ingest["embed_turns_per_s"] = round(stats.embedded / max(stats.embed_seconds, 1e-9),
                                                1)
    if embedder is not None:
        ingest["embedder"] = embedder.name
    return ingest


def _run_corpus(corpus: EvalCorpus, store_path: Path, url: str | None, *,
                embedder: Embedder | None, weights: SearchWeights | None, cv: bool,
                cv_rounds: int, cv_knobs: Mapping[str, Sequence[float]] | None,
                encoders: Sequence[Embedder], rerank_lm: Any, rerank_depth: int,
                progress: bool, ablate: bool = False) -> dict[str, Any]:
    """One corpus's section of ``retrieval.json``."""
    locomo = corpus.kind == "locomo"
    categories = LOCOMO_COLUMNS if locomo else corpus.categories
    questions = corpus.questions
    # LoCoMo keeps the store opened as it always was; the others embed on write with the
    # bench's embedder (or store no vectors without one).
    store = Store.open(store_path) if locomo else Store.open(store_path, embedder=embedder)
    try:
        ingest = _ingest(store, corpus, embedder, progress)
        tenants = corpus.tenants
        rankers = _rankers(store, tenants, embedder, weights)
        if encoders:
            ingest["encoders"] = {}
        for encoder in encoders:
            ingest["encoders"][encoder.name] = _embed_all(store, tenants, encoder, progress)
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
        results = _score(rankers, questions, progress, categories, corrected=locomo)
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
                cv_rounds, KNOBS if cv_knobs is None else cv_knobs, progress, categories)
        if ablate:
            results["memstrata"]["ablation"] = ablate_pieces(
                _memoised(Retriever(store, embedder, weights), progress), questions,
                weights or SearchWeights())
    finally:
        store.close()
    if url is not None:
        postgres = _on_postgres(url, corpus.locomo, questions, embedder, weights, progress)
        ingest["postgres"] = postgres.pop("ingest")
        results.update(postgres)
    counts: dict[str, int] = defaultdict(int)
    for q in questions:
        counts[q.category] += 1
    section: dict[str, Any] = {
        "benchmark": f"{corpus.kind}-retrieval", "data": corpus.path,
    }
    if locomo:
        section |= {"audit": corpus.audit, "audit_entries_applied": corpus.audit_entries_applied}
    return section | {
        "conversations": len(corpus.tenants),
        "questions": {"overall": len(questions), **{c: counts[c] for c in categories}},
        "ingest": ingest,
        "weights": (weights or SearchWeights()).model_dump(),
        "systems": results,
    }


def _macro(corpora: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Each system's recall@k overall (and cross-validated, where run) averaged over the
    corpora it was scored on, each corpus counting once."""
    names = dict.fromkeys(n for doc in corpora.values() for n in doc["systems"])
    out: dict[str, Any] = {}
    for name in names:
        blocks = [doc["systems"][name] for doc in corpora.values() if name in doc["systems"]]
        system: dict[str, Any] = {"corpora": [c for c, doc in corpora.items()
                                              if name in doc["systems"]]}
        for label, pick in (("", lambda b: b), ("cv", lambda b: b.get("cv"))):
            picked = [p for b in blocks if (p := pick(b))]
            if len(picked) < len(blocks) or not picked:
                continue
            figures = {f"recall@{k}": {"overall": round(
                sum(p[f"recall@{k}"]["overall"] or 0.0 for p in picked) / len(picked), 4)}
                for k in KS}
            if label:
                system[label] = figures
            else:
                system.update(figures)
        out[name] = system
    return out


def _unique_name(name: str, taken: Mapping[str, Any]) -> str:
    n, out = 1, name
    while out in taken:
        n += 1
        out = f"{name}-{n}"
    return out


def run_retrieval_bench(
    data: str | Path | Sequence[str | Path],
    *,
    audit: str | Path | Mapping[str, str | Path | None] | None = None,
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
    ablate: bool = False,
) -> dict[str, Any]:
    """Run the benchmark on one corpus or several and return the ``retrieval.json`` document.

    Every corpus gets its own store and its section under ``corpora.<name>`` (the name is
    the labelled file's ``name`` or the file stem): ``questions`` (counts per category),
    ``ingest`` (``turns``, ``seconds``, ``messages_per_s``) and ``systems.<system>`` with
    ``recall@{5,10,25}`` (``overall`` and per category), ``latency_ms`` (p50, p95) and, for
    LoCoMo, ``corrected``. With one corpus the top level is that corpus's section (the
    document earlier versions wrote); with several, the top level's ``systems.<system>.
    recall@k.overall`` is the macro mean over the corpora (each counting once).

    Args:
        data: one file or several: LoCoMo, LongMemEval or labelled messages
            (``bench.corpus``).
        audit: LoCoMo's audit corrections: one file for every LoCoMo corpus, or a mapping
            from data path (as given) to its audit file.
        embedder: enables the dense channel and the ``dense`` system.
        weights: fusion knobs for memstrata's hybrid.
        db_path: where to build the store (a temporary file by default; with several
            corpora each gets ``<stem>.<corpus>.db`` beside it). A PostgreSQL URL (an
            empty database; LoCoMo corpora only) builds the SQLite store in a temporary file
            as usual and the same store in that database, and adds ``memstrata@postgres``
            (and ``dense@postgres`` with an embedder) scored on the same questions in this
            run, with the database's ingest time under ``ingest.postgres``.
        limit: score only the first N eligible questions per conversation (quick runs).
        cv: also cross-validate memstrata's knobs on each corpus, leaving one conversation
            out at a time (see ``retrieval_cv``); adds ``systems.memstrata.cv``.
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
        ablate: also switch each channel and prior off alone on each corpus (see
            ``retrieval_ablation``); adds ``systems.memstrata.ablation``.

    Raises:
        ValueError: bad settings (``--cv`` on a corpus of one conversation, an encoder named
            as the embedder, ``cv_rounds`` < 1, a PostgreSQL URL with a non-LoCoMo corpus).
        ImportFormatError: a file that is no supported format, or malformed.
    """
    paths = [data] if isinstance(data, str | Path) else list(data)
    if not paths:
        raise ValueError("no corpus to score: give one --data file or more")
    clash = [e.name for e in encoders if embedder is not None and e.name == embedder.name]
    if clash:
        raise ValueError(f"encoder {clash[0]!r} is already the bench's embedder")
    if cv_rounds < 1:
        raise ValueError(f"--cv-rounds must be 1 or more, not {cv_rounds}")
    corpora: dict[str, EvalCorpus] = {}
    for path in paths:
        found = audit.get(str(path)) if isinstance(audit, Mapping) else audit
        corpus = load_corpus(path, audit=found, limit=limit)
        if cv and len(corpus.tenants) < 2:
            raise ValueError(f"--cv leaves one conversation out at a time: {path} holds "
                             f"{len(corpus.tenants)}, it needs two or more")
        corpora[_unique_name(corpus.name, corpora)] = corpus
    url = str(db_path) if db_path is not None and is_url(db_path) else None
    if url is not None and any(c.kind != "locomo" for c in corpora.values()):
        raise ValueError("--db with a PostgreSQL URL scores LoCoMo files only")
    sections: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, corpus in corpora.items():
            if db_path is None or url is not None:
                store_path = Path(tmp) / f"{name}.db"
            elif len(corpora) == 1:
                store_path = Path(db_path)
            else:
                store_path = Path(db_path).with_suffix(f".{name}.db")
            started = time.perf_counter()
            sections[name] = _run_corpus(
                corpus, store_path, url, embedder=embedder, weights=weights, cv=cv,
                cv_rounds=cv_rounds, cv_knobs=cv_knobs, encoders=encoders,
                rerank_lm=rerank_lm, rerank_depth=rerank_depth, progress=progress,
                ablate=ablate)
            sections[name]["seconds"] = round(time.perf_counter() - started, 1)
    if len(sections) == 1:
        (only,) = sections.values()
        return {**only, "corpora": sections}
    return {
        "benchmark": "retrieval",
        "data": [str(p) for p in paths],
        "questions": {"overall": sum(s["questions"]["overall"] for s in sections.values()),
                      **{n: s["questions"]["overall"] for n, s in sections.items()}},
        "weights": (weights or SearchWeights()).model_dump(),
        "systems": _macro(sections),
        "corpora": sections,
    }
