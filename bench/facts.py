"""``memstrata bench facts``: extraction at ingest, and evidence recall through facts.

One run loads the LoCoMo conversations, extracts facts from every one (``ingest``; the
extractions are cached in the output folder, so a re-run makes no repeated call), then
ranks each question's evidence three ways on the same store:

* ``turns``: the raw-turn hybrid of ``bench retrieval`` (the baseline);
* ``facts``: fact and QA-pair hits only, each replaced by its evidence turns;
* ``facts+turns``: one hybrid search over turns and facts; a turn counts as itself, a
  fact as its evidence turns (what memstrata's answer path retrieves).

Recall@k is the share of a question's evidence turns among the first k distinct turns.
The ingest's LLM calls, tokens, time and grounding counts are reported beside it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from memstrata.memory import Embedder, Filters, MemoryStore, Retriever, SearchWeights, Store
from memstrata.memory.models import Hit
from memstrata.programs import ModelHandle
from memstrata.programs.ingest import IngestReport, IngestSettings, ingest_conversation

from .locomo import (
    LOCOMO_DATE_STYLE,
    LoCoMoConversation,
    Question,
    apply_audit,
    load_locomo,
    read_subset,
)
from .retrieval import CATEGORIES, KS, _summarise

SYSTEMS = ("turns", "facts", "facts+turns")
FACT_KINDS = ("fact", "qa")


def _evidence_order(hits: list[Hit], evidence: dict[str, list[str]]) -> list[str]:
    """Distinct turn ids in hit order; an item stands for its evidence turns."""
    out: list[str] = []
    for hit in hits:
        ids = [hit.turn_id] if hit.node == "turn" and hit.turn_id else evidence.get(hit.id, [])
        out += [i for i in ids if i not in out]
    return out


class _Evidence(dict[str, dict[str, list[str]]]):
    """Per tenant: fact and QA-pair id -> its evidence turn ids (read once per tenant)."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__()
        self.store = store

    def __missing__(self, user: str) -> dict[str, list[str]]:
        self[user] = {i.id: i.evidence for kind in FACT_KINDS
                      for i in self.store.items(user, kind=kind, limit=1_000_000)}
        return self[user]


def _rankers(retriever: Retriever, evidence: _Evidence
             ) -> dict[str, Callable[[Question], list[str]]]:
    depth = max(KS) * 2

    def turns(q: Question) -> list[str]:
        return [h.turn_id or "" for h in retriever.search(q.sample_id, q.question, k=max(KS),
                                                          nodes=("turn",))]

    def facts(q: Question) -> list[str]:
        hits = retriever.search(q.sample_id, q.question, k=depth, nodes=("item",),
                                filters=Filters(kinds=FACT_KINDS))
        return _evidence_order(hits, evidence[q.sample_id])

    def fused(q: Question) -> list[str]:
        hits = retriever.search(q.sample_id, q.question, k=depth, nodes=("turn", "item"),
                                filters=Filters(kinds=("turn", *FACT_KINDS)))
        return _evidence_order(hits, evidence[q.sample_id])

    return {"turns": turns, "facts": facts, "facts+turns": fused}


def locomo_ingest_settings(settings: IngestSettings | None = None) -> IngestSettings:
    """``settings`` (default ``IngestSettings()``) with facts written in LoCoMo's date style
    (``LOCOMO_DATE_STYLE``), as every LoCoMo extraction bench ingests."""
    return (settings or IngestSettings()).model_copy(update={"date_style": LOCOMO_DATE_STYLE})


def scored_questions(convs: list[LoCoMoConversation]) -> list[Question]:
    """The questions recall is scored on: categories 1-4 with (original or corrected)
    evidence."""
    return [q for c in convs for q in c.questions
            if q.category in CATEGORIES and (q.evidence or q.corrected_evidence)]


def recall_through_facts(
    store: MemoryStore, questions: list[Question], *, embedder: Embedder | None = None,
    weights: SearchWeights | None = None, systems: tuple[str, ...] = SYSTEMS,
    progress: bool = True,
) -> dict[str, Any]:
    """Each of ``systems`` (:data:`SYSTEMS`) ranking the evidence of ``questions`` on
    ``store`` (their conversations loaded and ingested, each its own tenant): recall@k per
    category and overall, on the original evidence and (``corrected``) the audit's."""
    rankers = _rankers(Retriever(store, embedder, weights), _Evidence(store))
    results: dict[str, Any] = {}
    for name in systems:
        per_q = [(q, rankers[name](q)) for q in tqdm(questions, desc=name, unit="q",
                                                      disable=not progress)]
        results[name] = {**_summarise(per_q, corrected=False),
                         "corrected": _summarise(per_q, corrected=True)}
    return results


def run_facts_bench(
    data: str | Path, handle: ModelHandle, out_dir: str | Path, *,
    audit: str | Path | None = None, embedder: Embedder | None = None,
    weights: SearchWeights | None = None, settings: IngestSettings | None = None,
    conversations: set[str] | None = None, progress: bool = True,
) -> dict[str, Any]:
    """Ingest with extraction, then score recall through facts; returns ``facts.json``.

    Args:
        data: a LoCoMo-format JSON file.
        handle: the extractor's model.
        out_dir: holds ``facts.db`` (the store, with every ingest run recorded) and
            ``extractions.jsonl`` (the cache).
        audit: the audit corrections (recall is reported on both evidence keys).
        embedder, weights: retrieval's dense channel and fusion knobs.
        settings: chunking, call cap and reconciliation; facts are written in LoCoMo's
            date style (``LOCOMO_DATE_STYLE``), whatever ``settings`` says.
        conversations: a subset of sample ids.
        progress: progress bars on stderr.
    """
    settings = locomo_ingest_settings(settings)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    convs = read_subset(data, conversations)
    audited = apply_audit(convs, audit) if audit else 0
    reports: list[IngestReport] = []
    with Store.open(out / "facts.db") as store:
        load_locomo(store, convs, embedder=embedder)
        total = sum(c.turn_count for c in convs)
        with tqdm(total=total, desc="extract", unit="turn", disable=not progress) as bar:
            for conv in convs:
                reports.append(ingest_conversation(
                    store, conv.sample_id, conv.sample_id, handle, settings=settings,
                    cache_path=out / "extractions.jsonl", embedder=embedder,
                    progress=bar.update))
        questions = scored_questions(convs)
        results = recall_through_facts(store, questions, embedder=embedder, weights=weights,
                                       progress=progress)
        covered = _coverage(questions, _Evidence(store))
    turns = sum(r.turns for r in reports)
    calls = sum(r.llm_calls for r in reports)
    return {
        "benchmark": "locomo-facts",
        "model": handle.name,
        "data": str(data),
        "audit_entries_applied": audited,
        "questions": len(questions),
        "ingest": {
            "turns": turns, "chunks": sum(r.chunks for r in reports), "llm_calls": calls,
            "calls_per_10_turns": round(10 * calls / max(turns, 1), 3),
            "cached_chunks": sum(r.cached_chunks for r in reports),
            "failed_chunks": sum(len(r.failed_chunks) for r in reports),
            "empty_chunks": sum(r.empty_chunks for r in reports),
            "seconds": round(sum(r.seconds for r in reports), 1),
            "input_tokens": sum(r.input_tokens for r in reports),
            "output_tokens": sum(r.output_tokens for r in reports),
            "facts": sum(r.kept.get("facts", 0) for r in reports),
            "qa": sum(r.kept.get("qa", 0) for r in reports),
            "entities": sum(r.kept.get("entities", 0) for r in reports),
            "proposed": dict(sum((Counter(r.proposed) for r in reports), Counter())),
            "rejected": dict(sum((Counter(r.rejected) for r in reports), Counter())),
            "cleared": dict(sum((Counter(r.cleared) for r in reports), Counter())),
            "superseded": sum(r.hierarchy.superseded for r in reports),
            "evidence_turns_covered": covered,
        },
        "conversations": [r.model_dump() for r in reports],
        "systems": results,
    }


def _coverage(questions: list[Question], evidence: _Evidence) -> float | None:
    """Share of the questions' evidence turns that some fact or QA pair cites."""
    cited = {user: {e for ids in items.values() for e in ids}
             for user, items in ((u, evidence[u]) for u in {q.sample_id for q in questions})}
    pairs = [(q.sample_id, e) for q in questions for e in q.evidence]
    return round(sum(e in cited[u] for u, e in pairs) / len(pairs), 4) if pairs else None


def facts_table(doc: dict[str, Any]) -> str:
    """The markdown summary: recall per system, then the ingest's cost."""
    rows = ["| system | recall@5 | recall@10 | recall@25 |", "|---|---|---|---|"]
    for name, res in doc["systems"].items():
        rows.append(f"| {name} | " + " | ".join(
            f"{res[f'recall@{k}']['overall']}" for k in KS) + " |")
    ing = doc["ingest"]
    rows += ["", f"ingest ({doc['model']}): {ing['turns']} turns, {ing['chunks']} chunks, "
             f"{ing['llm_calls']} LLM calls ({ing['calls_per_10_turns']} per 10 turns), "
             f"{ing['seconds']} s, {ing['failed_chunks']} failed and {ing['empty_chunks']} empty "
             f"chunks; kept {ing['facts']} "
             f"facts, {ing['qa']} QA pairs, {ing['entities']} entities of {ing['proposed']}; "
             f"rejected {ing['rejected']}; fields cleared {ing.get('cleared', {})}; "
             "evidence turns cited by a fact: "
             f"{ing['evidence_turns_covered']}"]
    return "\n".join(rows)

