"""``cognitive.md`` and ``cognitive.png``: the per-level table and chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memstrata.memory.extras import require


def table(doc: dict[str, Any]) -> str:
    """The markdown report: one row per level, then the metacognition figures."""
    lines = [f"# Cognitive memory L1-L6 ({doc['model']}, median of {doc['runs']} run(s), "
             f"scored by {doc['scoring']})", "",
             "| level | score | baseline | target | LLM calls | baseline calls | "
             "steps/question | run scores | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for level, row in doc["levels"].items():
        target = "-" if row["target"] is None else f"{row['target']:.2f}"
        lines.append(f"| {level} | {row['score']:.3f} | {row['baseline']:.3f} | {target} | "
                     f"{row['llm_calls']:g} | {row['baseline_llm_calls']:g} | "
                     f"{row['steps_per_question']:.2f} | "
                     f"{', '.join(f'{s:.3f}' for s in row['run_scores'])} | {row['errors']} |")
    meta = doc["metacognition"]
    lines += ["", "| metacognition | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in meta.items()]
    if "seconds" in doc:
        lines += ["", f"wall time: {doc['seconds']} s"]
    return "\n".join(lines) + "\n"


def chart(doc: dict[str, Any], path: Path) -> None:
    """Grouped bars per level: the reasoner, the baseline and the target."""
    matplotlib = require("matplotlib", "bench", "the benchmark charts")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = list(doc["levels"])
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    xs = range(len(levels))
    ax.bar([x - width / 2 for x in xs], [doc["levels"][lv]["score"] for lv in levels], width,
           label="adaptive reasoner + cognitive memory")
    ax.bar([x + width / 2 for x in xs], [doc["levels"][lv]["baseline"] for lv in levels],
           width, label="plain retrieve-then-answer")
    for x, lv in zip(xs, levels, strict=True):
        target = doc["levels"][lv]["target"]
        if target is not None:
            ax.hlines(target, x - 0.45, x + 0.45, colors="black", linestyles="dashed")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(levels)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score (dashed: target)")
    ax.set_title(f"L1-L6, {doc['model']}, median of {doc['runs']} run(s)")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_reports(doc: dict[str, Any], out: Path) -> None:
    """Write ``cognitive.md`` and ``cognitive.png`` into ``out``."""
    (out / "cognitive.md").write_text(table(doc))
    chart(doc, out / "cognitive.png")
