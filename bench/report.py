"""Reports for the retrieval benchmark: a plain-text table, the JSON file, a PNG chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS = ("overall", "1", "2", "3", "4")
CATEGORY_NAMES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop"}


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
        lines.append("")
    ingest = doc["ingest"]
    lines.append(
        f"ingest: {ingest['turns']} turns in {ingest['seconds']} s = {ingest['turns_per_s']} "
        f"turns/s (writes alone {ingest['write_turns_per_s']}/s"
        + (f", embedding {ingest['embed_turns_per_s']}/s with {ingest['embedder']})"
           if "embedder" in ingest else ", no embeddings)")
    )
    lines.append("categories: " + ", ".join(f"{k} {v}" for k, v in CATEGORY_NAMES.items()))
    return "\n".join(lines)


def retrieval_chart(doc: dict[str, Any], path: Path) -> None:
    """Grouped bars of recall@5/@10 per category for each system, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = list(doc["systems"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    width = 0.8 / max(len(systems), 1)
    for ax, k in zip(axes, (5, 10), strict=True):
        for n, name in enumerate(systems):
            row = doc["systems"][name][f"recall@{k}"]
            values = [row[c] or 0.0 for c in COLUMNS]
            ax.bar([x + n * width for x in range(len(COLUMNS))], values, width, label=name)
        ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(COLUMNS))])
        ax.set_xticklabels([f"{c}\n{CATEGORY_NAMES.get(c, '')}" for c in COLUMNS])
        ax.set_title(f"evidence recall@{k}")
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
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
