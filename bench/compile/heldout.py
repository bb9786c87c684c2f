"""The compile benchmark (``memstrata bench compile``): one program compiled by each
optimizer (``programs.compiler``), the uncompiled and every compiled program scored side by
side on held-out units in one run, with its table, chart and files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memstrata.memory import Store
from memstrata.programs.compiler import (
    BUDGETS,
    DEFAULT_LIMIT,
    OPTIMIZERS,
    Budget,
    CompileJob,
    CompileResult,
    Optimizer,
    ProgramTask,
    Split,
    compile_program,
    reusable,
)


def run_compile_bench(
    task: ProgramTask, data: str | Path, out_dir: str | Path, *, split: Split,
    optimizers: Sequence[Optimizer] = OPTIMIZERS, budgets: dict[Optimizer, Budget] | None = None,
    limit: int | None = DEFAULT_LIMIT, heldout_limit: int | None = None, progress: bool = True,
) -> dict[str, Any]:
    """Compile ``task``'s program with each optimizer, then score the uncompiled and every
    compiled program on the held-out units in one run; returns ``compile.json``.

    Programs go to ``DIR/programs/``; one whose recipe matches is reused (an interrupted
    bench resumes), the compiles are recorded in ``DIR/compile.db``, and each system's
    held-out work is cached under ``DIR/heldout/SYSTEM`` by the task.

    Raises:
        ValueError: no held-out unit, or the split does not fit ``data``.
    """
    if not split.heldout:
        raise ValueError("bench compile needs --heldout units to score on")
    budgets = {**BUDGETS, **(budgets or {})}
    split_data = task.read(data, split)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    compiles: dict[str, CompileResult] = {}
    jobs = {name: CompileJob(task=task, optimizer=name, data=split_data,
                             out=out / "programs" / f"{name}.json", budget=budgets[name],
                             limit=limit) for name in optimizers}
    with Store.open(out / "compile.db") as store:
        for optimizer, job in jobs.items():
            compiles[optimizer] = (reusable(job)
                                   or compile_program(job, store, progress=progress))
    systems: dict[str, Any] = {}
    for name in ("uncompiled", *optimizers):
        done = compiles.get(name)
        scored = task.score(split_data, done.program if done else None, out / "heldout" / name,
                            limit=heldout_limit, progress=progress)
        systems[name] = {
            task.headline: scored.score, **scored.metrics,
            "llm_calls": done.llm_calls if done else 0, "compile_s": done.wall_s if done else 0,
            "heldout_llm_calls": scored.llm_calls, "items": scored.items,
            "program": done.program.model_dump() if done else None,
            "reused": done.reused if done else False}
    base = systems["uncompiled"][task.headline]
    for row in systems.values():
        value = row[task.headline]
        row["gain"] = round(value / base, 3) if base and value is not None else None
    models = task.models
    return {"program": task.program, "unit": task.unit, "headline": task.headline,
            "model": models.student.name,
            **{k: v for k, v in models.names().items() if k != "lm"},
            "data": str(data), "train": list(split.train), "val": list(split.val),
            "heldout": list(split.heldout), "limit": limit, "heldout_limit": heldout_limit,
            "budgets": {n: jobs[n].budget.model_dump() for n in optimizers},
            **task.options(), "columns": list(task.columns), "systems": systems}


def compile_table(doc: dict[str, Any]) -> str:
    """The held-out comparison as a markdown table, compile cost beside the gain."""
    head, extra = doc["headline"], doc.get("columns", [])
    lines = [f"# Compiling `{doc['program']}` — {doc['model']}", "",
             f"train {', '.join(doc['train'])} · validation {', '.join(doc['val'])} · "
             f"held-out {', '.join(doc['heldout'])} (leave-{doc['unit']}s-out: nothing of a "
             f"held-out {doc['unit']} is seen by a compile)", "",
             f"| system | {head} held-out | × uncompiled | "
             + "".join(f"{c} | " for c in extra)
             + "compile s | compile LLM calls | held-out LLM calls |",
             "|---|---|---|" + "---|" * len(extra) + "---|---|---|"]

    def fmt(value: Any, spec: str = ".3f") -> str:
        if value is None:
            return "-"
        return format(value, spec) if isinstance(value, int | float) else str(value)

    for name, row in doc["systems"].items():
        lines.append(f"| {name} | {fmt(row[head])} | {fmt(row['gain'], '.2f')} | "
                     + "".join(f"{fmt(row.get(c))} | " for c in extra)
                     + f"{fmt(row['compile_s'], '.0f')} | {row['llm_calls']} | "
                     f"{row['heldout_llm_calls']} |")
    return "\n".join(lines) + "\n"


def compile_chart(doc: dict[str, Any], path: Path) -> None:
    """Each system's held-out headline score beside its compile time and calls, as PNG."""
    from memstrata.memory.extras import require

    matplotlib = require("matplotlib", "bench", "the benchmark charts")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(doc["systems"])
    rows = [doc["systems"][n] for n in names]
    colours = [f"C{i}" for i in range(len(names))]
    fig, (ax, cost) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax.bar(names, [r[doc["headline"]] or 0.0 for r in rows], color=colours)
    ax.set_title(f"held-out {doc['headline']}")
    ax.grid(axis="y", alpha=0.3)
    cost.bar(names, [r["compile_s"] / 60 for r in rows], color=colours)
    for n, r in enumerate(rows):
        cost.annotate(f"{r['llm_calls']} calls", (n, r["compile_s"] / 60), ha="center",
                      va="bottom", fontsize=8)
    cost.set_title("compile time (min) and LLM calls")
    for a in (ax, cost):
        a.tick_params(axis="x", rotation=20)
    fig.suptitle(f"Compiling {doc['program']} — {doc['model']}, held-out "
                 f"{', '.join(doc['heldout'])}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_compile_outputs(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``compile.json``, ``compile.md`` and ``compile.png``; returns the paths."""
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "compile.json", out / "compile.md", out / "compile.png"]
    paths[0].write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    paths[1].write_text(compile_table(doc), encoding="utf-8")
    compile_chart(doc, paths[2])
    return paths


__all__ = ["compile_chart", "compile_table", "run_compile_bench", "write_compile_outputs"]
