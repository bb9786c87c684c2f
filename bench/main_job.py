"""The main job (``memstrata demo``): what memstrata is for, in figures that are not noise.

Three parts, each beside its baseline in the same run:

1. retrieval without a model on every question of LoCoMo dev and of the shipped
   assistant corpus: memstrata against rank-bm25, recall@10 with 95% bootstrap intervals
   and the paired ratio;
2. a few answers by ``Memory.answer`` with their evidence turns (who said what, when) and
   the model calls each took;
3. LoCoMo question answering on a spread of dev questions: memstrata, naive RAG and no
   memory on the same model, F1 with intervals and memstrata's paired difference to
   naive RAG, so a reader sees how much a figure of this size can say.

Writes ``main.json`` and ``main.md`` into the output folder, beside the retrieval and QA
reports of parts 1 and 3.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memstrata.memory import Embedder, Store
from memstrata.programs.lm import ModelHandle

from .corpora import ASSISTANT
from .intervals import mean_interval
from .locomo import read_subset
from .qa import Question, select_questions

QA_SYSTEMS = ("memstrata", "naive_rag", "no_memory")
EXAMPLE_CATEGORIES = (4, 2, 1)  # single-hop, temporal, multi-hop: one answer of each


def _retrieval(locomo: Path, others: Sequence[Path], audit: Path | None,
               embedder: Embedder | None, out: Path, progress: bool) -> dict[str, Any]:
    from .report import write_retrieval_outputs
    from .retrieval import run_retrieval_bench
    from .retrieval_md import write_retrieval_markdown

    doc = run_retrieval_bench([locomo, *others], audit={str(locomo): audit},
                              embedder=embedder, progress=progress)
    write_retrieval_outputs(doc, out)
    write_retrieval_markdown(doc, out)
    summary: dict[str, Any] = {}
    for corpus, section in doc["corpora"].items():
        systems = section["systems"]
        mine, bm25 = systems["memstrata"], systems["bm25_tokens"]
        summary[corpus] = {
            "questions": section["questions"]["overall"],
            "memstrata": {"recall@10": mine["recall@10"]["overall"],
                          "interval": mine["interval"]["recall@10"]},
            "bm25_tokens": {"recall@10": bm25["recall@10"]["overall"],
                            "interval": bm25["interval"]["recall@10"]},
            "ratio": mine["vs"]["bm25_tokens"]["recall@10"],
            "latency_ms": mine["latency_ms"],
        }
    return summary


def _qa(locomo: Path, audit: Path | None, handle: ModelHandle, embedder: Embedder | None,
        out: Path, questions: int, progress: bool) -> dict[str, Any]:
    from .qa import QASettings, run_locomo_bench
    from .qa_report import write_locomo_outputs

    doc = run_locomo_bench(locomo, handle, out, audit=audit, systems=QA_SYSTEMS,
                           settings=QASettings.for_model(handle.name), embedder=embedder,
                           limit=questions, progress=progress)
    write_locomo_outputs(doc, out)
    systems = doc["systems"]
    scores = {s: systems[s]["f1_by_question"] for s in QA_SYSTEMS}
    qids = sorted(set.intersection(*(set(v) for v in scores.values())))
    per = {s: [scores[s][q] for q in qids] for s in QA_SYSTEMS}
    paired = doc["against"]["naive_rag"]["memstrata"]
    return {
        "model": doc["model"],
        "questions": len(qids),
        "asked": systems["memstrata"]["questions"],
        "systems": {s: {"f1": systems[s]["f1"]["overall"], "interval": mean_interval(per[s]),
                        "tokens_per_question": systems[s]["tokens_per_question"]}
                    for s in QA_SYSTEMS},
        "memstrata_minus_naive_rag": {"f1": paired["f1_difference"],
                                      "interval": paired["difference_ci"]},
    }


def _examples(locomo: Path, handle: ModelHandle, db: Path, count: int,
              embedder: Embedder | None) -> list[dict[str, Any]]:
    """``count`` answers through ``Memory.answer`` over the QA run's store, one question
    per category of ``EXAMPLE_CATEGORIES`` in turn (the first of each, not the best)."""
    from memstrata.api import Memory

    convs = read_subset(locomo)
    picked: list[Question] = []
    for category in EXAMPLE_CATEGORIES * count:
        chosen = {q.qid for q in picked}
        found = next((q for q in select_questions(convs, categories={category}, limit=None)
                      if q.qid not in chosen), None)
        if found is not None:
            picked.append(found)
        if len(picked) == count:
            break
    out = []
    memory = Memory(Store.open(db, embedder=embedder), lm=handle)
    try:
        for q in picked:
            mark = handle.meter.mark()
            got = memory.answer(q.question, user_id=q.sample_id)
            usage = handle.meter.since(mark)
            evidence = []
            for ref in got.evidence[:3]:  # store ids: a turn is shown by its own id (D3:7)
                row = memory.get(ref, user_id=q.sample_id)
                if row is not None:
                    evidence.append({"id": row.get("turn_id") or ref,
                                     "speaker": row.get("speaker"),
                                     "when": str(row.get("event_time") or ""),
                                     "text": str(row.get("text") or row.get("memory") or "")})
            out.append({"question": q.question, "key": q.answer, "category": q.category,
                        "answer": got.answer, "abstained": got.abstained,
                        "evidence": evidence, "llm_calls": usage.calls,
                        "input_tokens": usage.input_tokens, "seconds": usage.seconds})
    finally:
        memory.close()
    return out


def run_main_job(locomo: str | Path, handle: ModelHandle, out_dir: str | Path, *,
                 audit: str | Path | None = None, embedder: Embedder | None = None,
                 questions: int = 20, examples: int = 3,
                 corpora: Sequence[str | Path] = (ASSISTANT,), progress: bool = True
                 ) -> dict[str, Any]:
    """Run the three parts and return the ``main.json`` document (also written, with
    ``main.md``, into ``out_dir``; part 1's reports go to ``out_dir/retrieval``, part 3's
    to ``out_dir/qa``). ``questions`` LoCoMo questions are answered by each QA system,
    spread over conversations and categories; ``examples`` answers are shown with their
    evidence. Retrieval is scored on ``locomo`` and on each file of ``corpora`` (any
    format ``bench retrieval`` reads; by default the shipped assistant corpus).

    Raises:
        ValueError: ``questions`` or ``examples`` below 1.
    """
    if questions < 1 or examples < 1:
        raise ValueError("the main job needs at least one question and one example")
    out = Path(out_dir)
    locomo, audit_path = Path(locomo), Path(audit) if audit else None
    doc: dict[str, Any] = {"benchmark": "main", "data": str(locomo)}
    doc["retrieval"] = _retrieval(locomo, [Path(c) for c in corpora], audit_path, embedder,
                                  out / "retrieval", progress)
    doc["qa"] = _qa(locomo, audit_path, handle, embedder, out / "qa", questions, progress)
    doc["examples"] = _examples(locomo, handle, out / "qa" / "locomo.db", examples, embedder)
    out.mkdir(parents=True, exist_ok=True)
    import json

    (out / "main.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    (out / "main.md").write_text(main_markdown(doc), encoding="utf-8")
    return doc


def _span(interval: Sequence[float] | None) -> str:
    return "" if not interval else f" [{interval[0]:.3f}, {interval[1]:.3f}]"


def main_markdown(doc: dict[str, Any]) -> str:
    """The main job's report as markdown: the three parts' tables and the answers."""
    lines = ["# memstrata: the main job", "",
             "## 1. Retrieval without a model (evidence recall@10, 95% intervals)", "",
             "| corpus | questions | memstrata | bm25 (rank-bm25) | memstrata / bm25 "
             "(paired) | search p95 ms |", "|---|---:|---|---|---|---:|"]
    for corpus, row in doc["retrieval"].items():
        ratio = row["ratio"]
        shown = "-" if ratio["ratio"] is None else f"{ratio['ratio']:.2f}x"
        if ratio.get("interval"):
            shown += f" [{ratio['interval'][0]:.2f}x, {ratio['interval'][1]:.2f}x]"
        lines.append(
            f"| {corpus} | {row['questions']} | {row['memstrata']['recall@10']:.3f}"
            f"{_span(row['memstrata']['interval'])} | {row['bm25_tokens']['recall@10']:.3f}"
            f"{_span(row['bm25_tokens']['interval'])} | {shown} | "
            f"{row['latency_ms']['p95']:.1f} |")
    lines += ["", "## 2. Answers with their evidence", ""]
    for ex in doc["examples"]:
        lines += [f"**Q:** {ex['question']}  ", f"**memstrata:** {ex['answer']}  ",
                  f"**answer key:** {ex['key']}  ",
                  f"({ex['llm_calls']} model call(s), {ex['input_tokens']} prompt tokens, "
                  f"{ex['seconds']:.1f} s)", ""]
        lines += [f"- `{e['id']}` {e['speaker']}, {e['when']}: {e['text'][:200]}"
                  for e in ex["evidence"]] + [""]
    qa = doc["qa"]
    lines += [f"## 3. LoCoMo question answering ({qa['asked']} questions, F1 on the "
              f"{qa['questions']} of categories 1-4; {qa['model']}; 95% intervals)", "",
              "| system | F1 | prompt tokens / question |", "|---|---|---:|"]
    for name, row in qa["systems"].items():
        lines.append(f"| {name} | {row['f1']:.3f}{_span(row['interval'])} | "
                     f"{row['tokens_per_question']} |")
    gap = qa["memstrata_minus_naive_rag"]
    verdict = ("the interval excludes 0" if gap["interval"] and
               (gap["interval"][0] > 0 or gap["interval"][1] < 0)
               else "the interval includes 0: this many questions cannot tell them apart")
    lines += ["", f"memstrata - naive RAG on the same questions: {gap['f1']:+.3f}"
              f"{_span(gap['interval'])} ({verdict}).", ""]
    return "\n".join(lines)
