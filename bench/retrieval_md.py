"""``retrieval.md``: the multi-corpus retrieval figures as short markdown tables.

Rows are systems, columns corpora (recall@5 and @10, cross-validated rows where ``--cv``
ran); then memstrata's ratios to ``bm25_tokens`` and to the best single channel (the
better of memstrata's ``lexical`` and ``dense`` channels alone), latency and ingest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .retrieval_ablation import ablation_markdown

SINGLE = ("lexical", "dense")


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def _rows(corpora: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """system (and ``memstrata (cv)``) -> corpus -> its recall block."""
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for corpus, doc in corpora.items():
        for name, block in doc["systems"].items():
            rows.setdefault(name, {})[corpus] = block
            if block.get("cv"):
                rows.setdefault(f"{name} (cv)", {})[corpus] = block["cv"]
    return rows


def _at(block: dict[str, Any] | None, k: int) -> float | None:
    return None if block is None else block[f"recall@{k}"]["overall"]


def _span(interval: list[float] | tuple[float, float] | None, fmt: str = "{:.3f}") -> str:
    return "" if not interval else f" [{fmt.format(interval[0])}, {fmt.format(interval[1])}]"


def intervals_table(corpora: dict[str, Any], k: int = 10) -> list[str]:
    """memstrata and ``bm25_tokens`` recall@k per corpus with their 95% intervals, and the
    ratio of the two on the same questions with its paired interval (markdown lines)."""
    lines = ["", f"## recall@{k} with 95% intervals (bootstrap over questions)", "",
             "| corpus | questions | memstrata | bm25_tokens | ratio (paired) |",
             "|---|---:|---|---|---|"]
    for corpus, doc in corpora.items():
        systems = doc["systems"]
        mine, bm25 = systems.get("memstrata"), systems.get("bm25_tokens")
        if mine is None or bm25 is None or "interval" not in mine:
            continue
        key = f"recall@{k}"
        vs = mine.get("vs", {}).get("bm25_tokens", {}).get(key, {})
        ratio = vs.get("ratio")
        lines.append(
            f"| {corpus} | {doc['questions']['overall']} | {_f(_at(mine, k))}"
            f"{_span(mine['interval'].get(key))} | {_f(_at(bm25, k))}"
            f"{_span(bm25.get('interval', {}).get(key))} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'}"
            f"{_span(vs.get('interval'), '{:.2f}x')} |")
    return lines


def retrieval_markdown(doc: dict[str, Any]) -> str:
    """The tables of a ``retrieval.json`` document (one corpus or several)."""
    corpora = doc["corpora"]
    names = list(corpora)
    lines = ["# Retrieval: evidence recall per corpus", "",
             "| system | " + " | ".join(f"{c} @5 | {c} @10" for c in names) + " |",
             "|---|" + "---:|" * (2 * len(names))]
    for system, by_corpus in _rows(corpora).items():
        cells = [f"{_f(_at(by_corpus.get(c), 5))} | {_f(_at(by_corpus.get(c), 10))}"
                 for c in names]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += ["", "## memstrata against the baselines", "",
              "| corpus | k | memstrata | x bm25_tokens | best single channel | x best single |"
              " cv | cv x bm25_tokens | cv x best single |",
              "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for corpus in names:
        systems = corpora[corpus]["systems"]
        if "memstrata" not in systems:
            continue
        mine = systems["memstrata"]
        for k in (5, 10):
            singles = {s: _at(systems.get(s), k) for s in SINGLE if s in systems}
            best = max(singles, key=lambda s: singles[s] or 0.0) if singles else None
            bm25 = _at(systems.get("bm25_tokens"), k)
            best_v = singles.get(best) if best else None
            cv = _at(mine.get("cv"), k)
            lines.append(
                f"| {corpus} | {k} | {_f(_at(mine, k))} | {_ratio(_at(mine, k), bm25)} | "
                f"{best or '-'} {_f(best_v)} | {_ratio(_at(mine, k), best_v)} | {_f(cv)} | "
                f"{_ratio(cv, bm25)} | {_ratio(cv, best_v)} |")
    lines += intervals_table(corpora)
    lines += ablation_markdown(corpora)
    lines += ["", "## Search latency (ms, p50 / p95)", "",
              "| system | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for system in dict.fromkeys(s for c in names for s in corpora[c]["systems"]):
        cells = []
        for c in names:
            lat = corpora[c]["systems"].get(system, {}).get("latency_ms")
            cells.append("-" if not lat else f"{lat['p50']:.1f} / {lat['p95']:.1f}")
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += ["", "## Corpora", "",
              "| corpus | format | conversations | messages | questions | ingest s | "
              "messages/s |", "|---|---|---:|---:|---:|---:|---:|"]
    for c in names:
        sec = corpora[c]
        ingest = sec["ingest"]
        lines.append(f"| {c} | {sec['benchmark'].removesuffix('-retrieval')} | "
                     f"{sec.get('conversations', '-')} | {ingest['turns']} | "
                     f"{sec['questions']['overall']} | {ingest['seconds']} | "
                     f"{ingest['messages_per_s']} |")
    lines += ["", "Questions per category: " + "; ".join(
        f"{c}: " + ", ".join(f"{k} {v}" for k, v in corpora[c]["questions"].items()
                             if k != "overall") for c in names), ""]
    return "\n".join(lines)


def write_retrieval_markdown(doc: dict[str, Any], out_dir: str | Path) -> Path:
    """Write ``retrieval.md`` into ``out_dir``; returns its path."""
    path = Path(out_dir) / "retrieval.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(retrieval_markdown(doc), encoding="utf-8")
    return path
