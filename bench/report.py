"""Reports for the retrieval benchmark (a plain-text table, the JSON file, a PNG chart),
and the chart helpers the benchmarks share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memstrata.memory.extras import require

COLUMNS = ("overall", "1", "2", "3", "4")
CATEGORY_NAMES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop",
                  "5": "adversarial"}


def _fmt(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def retrieval_table(doc: dict[str, Any]) -> str:
    """The recall table (original and corrected evidence) with latency, as text."""
    lines = []
    for key_set, title in ((None, "original evidence"), ("corrected", "audit-corrected evidence")):
        lines.append(f"LoCoMo evidence recall — {title} ({doc['questions']['overall']} questions)")
        header = f"{'system':<16} {'k':>3} " + " ".join(f"{c:>8}" for c in COLUMNS)
        if key_set is None:
            header += f" {'p50 ms':>8} {'p95 ms':>8}"
        lines += [header, "-" * len(header)]
        for name, result in doc["systems"].items():
            block = result if key_set is None else result[key_set]
            for k in (5, 10, 25):
                row = block[f"recall@{k}"]
                line = f"{name:<16} {k:>3} " + " ".join(f"{_fmt(row[c]):>8}" for c in COLUMNS)
                if key_set is None and k == 5:
                    lat = result["latency_ms"]
                    line += f" {lat['p50']:>8.2f} {lat['p95']:>8.2f}"
                lines.append(line)
            if key_set is None and name == "memstrata":
                lines += _cv_lines(result.get("cv"))
        lines.append("")
    ingest = doc["ingest"]
    lines.append(
        f"ingest: {ingest['turns']} turns in {ingest['seconds']} s = {ingest['turns_per_s']} "
        f"turns/s (writes alone {ingest['write_turns_per_s']}/s"
        + (f", embedding {ingest['embed_turns_per_s']}/s with {ingest['embedder']})"
           if "embedder" in ingest else ", no embeddings)")
    )
    lines.append("categories: " + ", ".join(f"{k} {CATEGORY_NAMES[k]}" for k in COLUMNS[1:]))
    return "\n".join(lines)


def _cv_lines(cv: dict[str, Any] | None) -> list[str]:
    """memstrata's cross-validated and tuned in-sample rows, and each fold's choice."""
    if not cv:
        return []
    lines = []
    for name, block in (("cv (held out)", cv), ("tuned in-sample", cv["tuned_in_sample"])):
        for k in (5, 10):
            row = block[f"recall@{k}"]
            lines.append(f"{name:<16} {k:>3} " + " ".join(f"{_fmt(row[c]):>8}" for c in COLUMNS))
    for fold in cv["folds"]:
        lines.append(f"  fold {fold['held_out']}: recall@10 {fold['held_out_recall@10']:.3f} "
                     f"held out, {fold['train_recall@10']:.3f} on the others; knobs "
                     f"{json.dumps(fold['changed']) if fold['changed'] else 'unchanged'}")
    lines.append(f"  in-sample knobs: {json.dumps(cv['tuned_in_sample']['changed'])}")
    return lines


def category_bars(ax: Any, rows: dict[str, dict[str, float | None]],
                  columns: tuple[str, ...], title: str) -> None:
    """Grouped bars on ``ax``: one group per category column, one bar per system (0-1)."""
    width = 0.8 / max(len(rows), 1)
    for n, (name, row) in enumerate(rows.items()):
        ax.bar([x + n * width for x in range(len(columns))],
               [row.get(c) or 0.0 for c in columns], width, label=name)
    ax.set_xticks([x + width * (len(rows) - 1) / 2 for x in range(len(columns))])
    ax.set_xticklabels([f"{c}\n{CATEGORY_NAMES.get(c, '')}" for c in columns])
    ax.set_title(title)
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)


def retrieval_chart(doc: dict[str, Any], path: Path) -> None:
    """Grouped bars of recall@5/@10 per category for each system, saved as PNG."""
    matplotlib = require("matplotlib", "bench", "the benchmark charts")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, k in zip(axes, (5, 10), strict=True):
        rows = {name: res[f"recall@{k}"] for name, res in doc["systems"].items()}
        category_bars(ax, rows, COLUMNS, f"evidence recall@{k}")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle("LoCoMo retrieval (original evidence)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_retrieval_outputs(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``retrieval.json`` and ``retrieval.png`` into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / "retrieval.json", out / "retrieval.png"
    json_path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    retrieval_chart(doc, png_path)
    return [json_path, png_path]
