"""E7, the prompt-leakage ablation (``memstrata bench leakage``).

The same LoCoMo questions, the same model and the same budgets, run twice through one
executor (RLM by default): once with naive tools (full payloads, no caps) and once with
the handle tools (BlobRef, bounded ``ctx_*``, two-phase ``mem_search``/``mem_get``). In
both arms the whole conversation is one blob the executor must search, and the store's
turns are reachable through ``mem_search``. Per arm: prompt characters per iteration,
iterations, LLM calls, tokens, convergence (the agent submitted an answer itself), answer
F1, and the leakage counters; every run is a recorded trajectory in ``DIR/leakage.db``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from memstrata.memory import Store
from memstrata.memory.extras import require
from memstrata.programs import ExecutorSettings, ModelHandle, run_executor
from memstrata.programs.answer_scores import score_answer
from memstrata.programs.executors import AnswerWithTools, ExecutorRun
from memstrata.tools import ToolCaps, ToolSession
from memstrata.trajectories import code_version

from .locomo import Question, load_conversation, read_subset
from .qa import select_questions

ARMS = ("naive", "handles")


class AnswerWithToolsLoCoMo(AnswerWithTools):
    """Answer the question about this user's conversations. Find the evidence with the
    tools: mem_search(query) returns ids and one-line descriptions, mem_get(ids) the full
    records of a few of them; a BlobRef is read with ctx_find(ref, pattern) and
    ctx_slice(ref, start, end). Answer in a short phrase. If nothing you found answers
    it, say it is not mentioned."""
    # ``AnswerWithTools`` in LoCoMo's abstention wording, which its scorer looks for.


def _row(q: Question, arm: str, run: ExecutorRun) -> dict[str, Any]:
    f1 = score_answer(run.answer, q.answer, q.category)["f1"]
    lk = run.leakage
    return {"qid": f"{q.sample_id}#{q.index}", "category": q.category, "arm": arm,
            "question": q.question, "gold": q.answer, "answer": run.answer, "f1": f1,
            "converged": run.converged, "error": run.error, "run_id": run.run_id,
            "iterations": lk.iterations, "context_chars": lk.context_chars_per_iteration,
            "llm_calls": run.usage.calls, "input_tokens": run.usage.input_tokens,
            "output_tokens": run.usage.output_tokens, "stdout_chars": lk.stdout_chars,
            "variables_info_chars": lk.variables_info_chars, "tool_calls": lk.tool_calls,
            "tool_return_chars": lk.tool_return_chars, "large_returns": lk.large_returns,
            "sub_calls": lk.sub_calls, "wall_s": run.wall_s}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's figures. ``context_chars_per_iteration`` pools every iteration of every
    question; ``iterations`` and ``f1`` are means per question; counts are totals."""
    contexts = [c for r in rows for c in r["context_chars"]]
    # What the environment added to the prompt: each iteration's prompt less the run's
    # first one (the instructions, tool docs and variables summary, fixed per run).
    leaked = [c - r["context_chars"][0] for r in rows for c in r["context_chars"]]
    n = len(rows) or 1
    return {
        "questions": len(rows),
        "context_chars_per_iteration": round(sum(contexts) / len(contexts), 1)
        if contexts else 0.0,
        "leaked_chars_per_iteration": round(sum(leaked) / len(leaked), 1) if leaked else 0.0,
        "max_context_chars": max(contexts, default=0),
        "iterations": round(sum(r["iterations"] for r in rows) / n, 2),
        "llm_calls": sum(r["llm_calls"] for r in rows),
        "input_tokens": sum(r["input_tokens"] for r in rows),
        "output_tokens": sum(r["output_tokens"] for r in rows),
        "f1": round(sum(r["f1"] for r in rows) / n, 4),
        "convergence": round(sum(r["converged"] for r in rows) / n, 4),
        "failures": sum(1 for r in rows if r["error"]),
        "stdout_chars": round(sum(r["stdout_chars"] for r in rows) / n, 1),
        "variables_info_chars": round(sum(r["variables_info_chars"] for r in rows) / n, 1),
        "tool_calls": sum(r["tool_calls"] for r in rows),
        "tool_return_chars": sum(r["tool_return_chars"] for r in rows),
        "large_returns": sum(r["large_returns"] for r in rows),
        "sub_calls": sum(r["sub_calls"] for r in rows),
        "wall_s": round(sum(r["wall_s"] for r in rows), 1),
    }


def run_leakage_bench(data: str | Path, handle: ModelHandle, out_dir: str | Path, *,
                      settings: ExecutorSettings | None = None, caps: ToolCaps | None = None,
                      limit: int | None = 10, categories: set[int] | None = None,
                      conversations: set[str] | None = None, progress: bool = True,
                      factory: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Run both arms over the selected questions; returns the ``leakage.json`` document.

    ``factory`` replaces the executor's interpreter (tests pass a mock; by default the
    settings pick the offline sandbox).

    Rows are appended to ``DIR/leakage_runs.jsonl`` as they finish, so an interrupted run
    keeps what it did.
    """
    settings = settings or ExecutorSettings()
    caps = caps or ToolCaps()
    convs = read_subset(data, conversations)
    questions = select_questions(convs, categories=categories or {1, 2, 3, 4}, limit=limit)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    db = out / "leakage.db"
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with Store.open(db) as store, (out / "leakage_runs.jsonl").open("w") as log:
        for conv in convs:
            if any(q.sample_id == conv.sample_id for q in questions):
                load_conversation(store, conv)
        bar = tqdm(total=len(questions) * len(ARMS), unit="run", desc="leakage",
                   disable=not progress)
        for q in questions:
            for arm in ARMS:
                session = ToolSession(store, q.sample_id, caps=caps, agent_id=f"e7-{arm}")
                ref = session.ref(q.sample_id)
                # Both arms hold the same reference; only the tools' contract differs.
                context = {"conversation": ref if arm == "handles" else ref.key}
                run = run_executor(q.question, session, handle,
                                   settings.model_copy(update={"tools": arm}), context=context,
                                   factory=factory, signature=AnswerWithToolsLoCoMo)
                row = _row(q, arm, run)
                store.runs.set_verdict(q.sample_id, run.run_id,
                                       {"f1": row["f1"], "gold": q.answer})
                rows.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                bar.update(1)
        bar.close()
    arms = {arm: summarise([r for r in rows if r["arm"] == arm]) for arm in ARMS}
    naive, handles = arms["naive"], arms["handles"]
    def ratio(key: str) -> float | None:
        return round(naive[key] / handles[key], 2) if handles[key] else None

    return {
        "benchmark": "E7 prompt-leakage ablation", "data": str(data), "model": handle.name,
        "executor": settings.executor, "settings": settings.model_dump(exclude={"tools"}),
        "caps": caps.model_dump(), "questions": len(questions), "db": str(db.resolve()),
        "code": code_version(), "wall_s": round(time.perf_counter() - started, 1),
        **arms,
        "context_ratio": ratio("context_chars_per_iteration"),
        "leaked_ratio": ratio("leaked_chars_per_iteration"),
        "tool_return_ratio": ratio("tool_return_chars"),
        "f1_delta": round(handles["f1"] - naive["f1"], 4),
    }


def leakage_table(doc: dict[str, Any]) -> str:
    """The two arms side by side, as a markdown table."""
    keys = [("context_chars_per_iteration", "prompt chars / iteration"),
            ("leaked_chars_per_iteration", "of which leaked from the environment"),
            ("max_context_chars", "largest prompt (chars)"), ("iterations", "iterations / q"),
            ("llm_calls", "LLM calls"), ("input_tokens", "input tokens"),
            ("output_tokens", "output tokens"), ("convergence", "converged"),
            ("failures", "failures"), ("f1", "F1"), ("stdout_chars", "stdout chars / q"),
            ("tool_calls", "tool calls"), ("tool_return_chars", "tool return chars"),
            ("large_returns", "returns >= X chars"), ("sub_calls", "sub-LLM calls"),
            ("wall_s", "wall s")]
    lines = [f"E7 leakage ablation: {doc['model']}, {doc['executor']}, "
             f"{doc['questions']} questions", "", "| | naive | handles |", "|---|---|---|"]
    lines += [f"| {label} | {doc['naive'][k]} | {doc['handles'][k]} |" for k, label in keys]
    def ratio(key: str) -> str:
        return "n/a (nothing on the handle side)" if doc[key] is None else f"{doc[key]}x"

    lines += ["", f"naive / handles: prompt chars per iteration {ratio('context_ratio')}, "
              f"leaked chars per iteration {ratio('leaked_ratio')}, tool return chars "
              f"{ratio('tool_return_ratio')}; F1 handles - naive: {doc['f1_delta']:+.4f}"]
    return "\n".join(lines)


def write_leakage_outputs(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """``leakage.json``, ``leakage.md`` and ``leakage.png`` (per-arm bars)."""
    matplotlib = require("matplotlib", "bench", "the benchmark charts")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    paths = [out / "leakage.json", out / "leakage.md", out / "leakage.png"]
    paths[0].write_text(json.dumps(doc, indent=2))
    paths[1].write_text(leakage_table(doc) + "\n")
    metrics = [("context_chars_per_iteration", "prompt chars / iteration"),
               ("iterations", "iterations / question"), ("llm_calls", "LLM calls"),
               ("f1", "F1")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(13, 3.6))
    for ax, (key, title) in zip(axes, metrics, strict=True):
        ax.bar(list(ARMS), [doc[a][key] for a in ARMS], color=["#c44e52", "#4c72b0"])
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"E7: naive vs handle tools ({doc['model']}, {doc['executor']}, "
                 f"{doc['questions']} questions)")
    fig.tight_layout()
    fig.savefig(paths[2], dpi=110)
    plt.close(fig)
    return paths
