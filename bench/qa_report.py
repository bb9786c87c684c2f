"""Reports for ``memstrata bench locomo``: a text table, JSON, markdown and a PNG chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memstrata.memory.extras import require

from .qa_scores import CELLS, COLUMNS
from .report import category_bars


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _rows(doc: dict[str, Any], metric: str, corrected: bool = False) -> list[list[str]]:
    rows = []
    for name, res in doc["systems"].items():
        block = res["corrected"] if corrected else res
        values = block.get(metric)
        if values is None:
            continue
        rows.append([name, *(_fmt(values.get(c)) for c in COLUMNS if c in values)])
    return rows


def _whole(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _cost_rows(doc: dict[str, Any]) -> list[list[str]]:
    return [[name, str(r["questions"]), _fmt(r["abstention_cat5"]),
             f"{r['tokens_per_question'] or 0:.0f}",
             _whole(r["context_tokens_per_question"]),
             str(r["llm_calls"]), str(r["failures"]),
             f"{r['latency_s']['p50']:.2f}", f"{r['latency_s']['p95']:.2f}"]
            for name, r in doc["systems"].items()]


COST_HEADER = ["system", "questions", "abstain cat5", "prompt tok/q", "memory tok/q", "LLM calls",
               "failures", "p50 s", "p95 s"]


BASELINE_NAMES = {"naive_rag": "naive RAG", "memstrata": "memstrata (the answerer)"}


def _cell(cell: dict[str, Any] | None) -> str:
    return "-" if cell is None else (
        f"{cell['questions']}: {_fmt(cell['f1'])} / {_fmt(cell['baseline_f1'])}")


def _ci(ci: list[float] | None, fmt: str = "+.3f") -> str:
    return "" if ci is None else f" [{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def _evidence_tables(doc: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    # (title, header, rows) of the evidence figures; empty for a run without them.
    tables = []
    shown = [[name, str(e["questions"]), *(_fmt(e["all_shown"].get(c)) for c in COLUMNS[:-1]),
              _fmt(e["f1_when_shown"]), _fmt(e["f1_when_not"])]
             for name, r in doc["systems"].items() if (e := r.get("evidence"))]
    if shown:
        tables.append(("Every evidence turn shown to the model (share of questions), and F1",
                       ["system", "questions", *(f"shown {c}" for c in COLUMNS[:-1]),
                        "F1 shown", "F1 not"], shown))
    for baseline, against in (doc.get("against") or {}).items():
        if not against:
            continue
        label = BASELINE_NAMES.get(baseline, baseline)
        tables.append((f"Against {label} on the same questions (F1, paired 95% intervals)",
                       ["system", "questions", "F1 difference", "F1 ratio"],
                       [[name, str(c["questions"]),
                         f"{c['f1_difference']:+.3f}{_ci(c['difference_ci'])}",
                         ("-" if c["f1_ratio"] is None else f"{c['f1_ratio']:.2f}")
                         + _ci(c["ratio_ci"], ".2f")]
                        for name, c in against.items()]))
        tables.append((f"By which of the two showed every evidence turn: F1 of the system / "
                       f"{label}", ["system", *CELLS.values()],
                       [[name, *(_cell(c["evidence_shown"].get(k)) for k in CELLS.values())]
                        for name, c in against.items()]))
        routed = {name: c["by_path"] for name, c in against.items() if c.get("by_path")}
        if routed:
            names = sorted({p for paths in routed.values() for p in paths})
            tables.append((f"By the path each question took: F1 of the system / {label}",
                           ["system", *names],
                           [[name, *(_cell(paths.get(p)) for p in names)]
                            for name, paths in routed.items()]))
    return tables


def _header(metric: str, judge: bool = False) -> list[str]:
    cols = COLUMNS[:-1] if judge else COLUMNS
    return [metric, *cols]


def _notes(doc: dict[str, Any]) -> list[str]:
    notes = [f"model: {doc['model']} (tokens counted by: {doc['tokenizer']}); "
             f"judge: {doc['judge_model'] or 'none (pass --judge MODEL)'}",
             "overall = mean over categories 1-4; category 5 (adversarial) scores 1 for an "
             "abstention."]
    cut = {sid: v for sid, v in doc["full_context"].items()
           if v["turns_kept"] < v["turns_total"]}
    if cut:
        kept = ", ".join(f"{sid} {v['turns_kept']}/{v['turns_total']}" for sid, v in cut.items())
        notes.append(f"full_context is truncated to the model's {doc['window']}-token window "
                     f"(most recent turns kept): {kept}")
    if ing := doc.get("ingest"):
        notes.append(f"memstrata read facts extracted first: {ing['llm_calls']} LLM calls for "
                     f"{ing['turns']} turns ({ing['cached_chunks']} chunks cached, "
                     f"{ing['empty_chunks']} empty, {ing['failed_chunks']} failed), "
                     f"{ing['facts']} facts and {ing['qa']} QA pairs kept, {ing['seconds']} s")
    return notes


def _text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths,
                                                                                  strict=True)))
           for r in [header, *rows]]
    out.insert(1, "-" * len(out[0]))
    return out


def locomo_table(doc: dict[str, Any]) -> str:
    """F1 by category, judge accuracy if run, and cost, as plain text."""
    lines = [f"LoCoMo QA — {doc['model']} — {len(doc['conversations'])} conversations"]
    lines += [*_text_table(_header("F1"), _rows(doc, "f1")), ""]
    lines += [*_text_table(_header("F1 corrected"), _rows(doc, "f1", corrected=True)), ""]
    if doc["judge_model"]:
        lines += [*_text_table(_header("judge", True), _rows(doc, "judge")), ""]
    lines += [*_text_table(COST_HEADER, _cost_rows(doc)), ""]
    for title, header, rows in _evidence_tables(doc):
        lines += [title, *_text_table(header, rows), ""]
    return "\n".join(lines + _notes(doc))


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def locomo_markdown(doc: dict[str, Any]) -> str:
    """The report as markdown: every metric on both answer keys, cost, and the notes."""
    out = [f"# LoCoMo question answering: {doc['model']}", "",
           f"Data: `{doc['data']}`; conversations: {', '.join(doc['conversations'])}; "
           f"audit corrections applied: {doc['audit_entries_applied']}.", ""]
    for corrected, title in ((False, "original answer key"), (True, "audit-corrected key")):
        out += [f"## Quality, {title}", ""]
        for metric in ("f1", "em", "bleu1", "judge"):
            rows = _rows(doc, metric, corrected)
            if rows:
                out += _md_table(_header(metric, metric == "judge"), rows)
    out += ["## Cost", "", *_md_table(COST_HEADER, _cost_rows(doc))]
    for title, header, rows in _evidence_tables(doc):
        out += [f"## {title}", "", *_md_table(header, rows)]
    out += ["## Notes", ""]
    out += [f"- {n}" for n in _notes(doc)]
    out += ["", f"Settings: `{json.dumps(doc['settings'])}`", ""]
    return "\n".join(out)


def locomo_chart(doc: dict[str, Any], path: Path) -> None:
    """F1 per category for each system (and prompt tokens per question), as PNG."""
    matplotlib = require("matplotlib", "bench", "the benchmark charts")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = list(doc["systems"])
    fig, (ax, cost) = plt.subplots(1, 2, figsize=(13, 4.5), width_ratios=[3, 1])
    category_bars(ax, {s: doc["systems"][s]["f1"] for s in systems}, COLUMNS,
                  "F1 by category (5: abstention)")
    ax.legend(fontsize=8)
    cost.bar(systems, [doc["systems"][s]["tokens_per_question"] or 0 for s in systems],
             color=[f"C{i}" for i in range(len(systems))])
    cost.set_title("prompt tokens per question")
    cost.tick_params(axis="x", rotation=30)
    fig.suptitle(f"LoCoMo QA — {doc['model']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_locomo_outputs(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``locomo.json``, ``locomo.md`` and ``locomo.png``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "locomo.json", out / "locomo.md", out / "locomo.png"]
    paths[0].write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    paths[1].write_text(locomo_markdown(doc), encoding="utf-8")
    locomo_chart(doc, paths[2])
    return paths
