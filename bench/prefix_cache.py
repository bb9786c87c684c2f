"""What llama.cpp's prefix cache saves on memstrata's own calls, measured in one run.

``python -m memstrata.bench.prefix_cache --lm local/qwen2.5-coder-1.5b --questions 8``

The same LoCoMo questions are answered with the engine's three ``prefix_cache`` modes,
one after the other on one model: ``off`` (every prompt evaluated whole: the baseline),
``last`` (llama-cpp-python reuses the previous call's prefix) and ``ram`` (the states of
recent prompts are kept, so programs that take turns keep theirs). Two workloads:

* ``qa``: one ``QA`` call per question, its memories the question's naive-RAG turns
  (the instructions and worked examples are the shared prefix);
* ``qa+judge``: ``QA`` then ``AnswerJudge`` per question, two programs in turn (what
  ``bench locomo --judge`` does with a local judge).

Writes ``prefix_cache.json`` and prints seconds per call and the share saved against off.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import dspy
from tqdm import tqdm

from memstrata.memory import Store
from memstrata.programs import QA, AnswerJudge, setup_lm
from memstrata.programs.llama_engine import LlamaCppEngine, PrefixCache
from memstrata.programs.lm import local_model_path

from .locomo import load_locomo, read_subset
from .qa import QASettings, _contexts, select_questions

MODES: tuple[PrefixCache, ...] = ("off", "last", "ram")
WORKLOADS = ("qa", "qa+judge")


def run_prefix_bench(data: str | Path, lm: str, *, questions: int = 8,
                     threads: int | None = None) -> dict[str, Any]:
    """Seconds per call of each workload under each mode; see the module docstring."""
    convs = read_subset(data, None)
    asked = select_questions(convs, categories={1, 2, 3, 4}, limit=questions)
    path = local_model_path(lm)
    results: dict[str, Any] = {}
    bar = tqdm(total=len(WORKLOADS) * len(MODES) * len(asked), unit="question",
               desc="prefix cache", leave=False)
    with Store.open(":memory:") as store, bar:
        load_locomo(store, convs)
        for workload in WORKLOADS:
            for mode in MODES:
                engine = LlamaCppEngine(path, n_threads=threads, prefix_cache=mode)
                handle = setup_lm(lm, engine=engine)
                settings = QASettings()  # LoCoMo's answer style, as the QA bench's
                builders, _ = _contexts(store, convs, asked, handle, settings)
                contexts = [builders["naive_rag"](q).text for q in asked]
                _ = engine.llama  # load before the clock starts
                qa, judge = QA(settings.style), AnswerJudge()
                started = time.perf_counter()
                with dspy.context(lm=handle.lm):
                    for q, memories in zip(asked, contexts, strict=True):
                        answer = qa(question=q.question, memories=memories).answer
                        if workload == "qa+judge":
                            judge(question=q.question, gold_answer=str(q.answer),
                                  generated_answer=answer)
                        bar.update()
                seconds = time.perf_counter() - started
                usage = handle.meter.since(0)
                results[f"{workload}/{mode}"] = {
                    "calls": usage.calls, "prompt_tokens": usage.input_tokens,
                    "seconds": round(seconds, 2),
                    "seconds_per_call": round(seconds / max(usage.calls, 1), 2)}
                engine.close()
    for workload in WORKLOADS:
        base = results[f"{workload}/off"]["seconds"]
        for mode in MODES:
            row = results[f"{workload}/{mode}"]
            row["saved_vs_off"] = round(1 - row["seconds"] / base, 3) if base else None
    return {"benchmark": "prefix-cache", "model": lm, "questions": len(asked),
            "threads": threads, "results": results}


def table(doc: dict[str, Any]) -> str:
    """Markdown: one row per workload and mode."""
    rows = ["| workload | mode | calls | prompt tokens | s / call | saved vs off |",
            "|---|---|---|---|---|---|"]
    for key, r in doc["results"].items():
        workload, mode = key.split("/")
        rows.append(f"| {workload} | {mode} | {r['calls']} | {r['prompt_tokens']:,} | "
                    f"{r['seconds_per_call']} | {r['saved_vs_off']:.0%} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Command line: run, print the table, write ``prefix_cache.json``."""
    parser = argparse.ArgumentParser(prog="python -m memstrata.bench.prefix_cache",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", default="local/qwen2.5-coder-1.5b",
                        help="a local model (local/NAME or local/PATH.gguf)")
    parser.add_argument("--data", default="../shared/data/locomo/locomo_dev.json")
    parser.add_argument("--questions", type=int, default=8, help="questions per run (8)")
    parser.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    parser.add_argument("--out", default="out", help="output folder (default ./out)")
    args = parser.parse_args(argv)
    if not args.lm.startswith("local/"):
        parser.error("--lm must be a local model: the cache is llama.cpp's")
    doc = run_prefix_bench(args.data, args.lm, questions=args.questions, threads=args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "prefix_cache.json").write_text(json.dumps(doc, indent=2))
    print(table(doc))
    print(f"wrote {out / 'prefix_cache.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
