"""Run every reliability scenario, each bounded, and write ``reliability.json``.

The document's shape is an interface outside checks rely on::

    {"scenarios": {NAME: {"attempts": n, "failures": n, "details": [...], ...}},
     "lost_writes": n, "integrity_failures": n, "crashes": n, "breaches": n,
     "escapes": n, "secrets_found": n, "deleted_bytes_found": n, "parity_mismatches": n,
     "imports_losing_rows": n, "imports_duplicating": n, ...}

The headline counters (``common.HEADLINE``) are sums over the scenarios; the run fails
(``ok`` false, the command exits non-zero) when any of them is non-zero, or when a scenario
that ran made no attempt (``checked_nothing``: it checked nothing, so it shows nothing).
``secrets`` runs last because it greps every byte the other scenarios wrote under the same
work folder.
"""

from __future__ import annotations

import importlib
import json
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from memstrata.memory.extras import require

from .common import HEADLINE, Context, Scenario

MODULES = ("crash", "concurrency", "faults", "fuzz", "poisoning", "sandbox_escape", "deleted",
           "parity", "imports", "http_fuzz", "worker_kills", "secrets")
"""Scenario modules, in the order they run (``secrets`` last: it scans the others' files)."""

BUDGET_S: dict[str, float] = {
    "crash": 330.0, "concurrency": 150.0, "faults": 60.0, "fuzz": 240.0,
    "poisoning": 60.0, "sandbox_escape": 180.0, "deleted": 480.0, "parity": 300.0,
    "imports": 150.0, "secrets": 60.0, "http_fuzz": 120.0, "worker_kills": 180.0,
}
"""Wall-clock caps per module for the full run (split among its scenarios); 38.5 minutes in
all. Most scenarios finish their counts sooner (11 minutes in all on a 2-core machine for the
first seven modules, 3.5-5 more for ``deleted``, ``parity`` and ``imports``); the fuzzers run
until their cap."""

QUICK_BUDGET_S = 180.0
"""Per-scenario cap of the fast slice (it takes 5-50 s each at normal load)."""


def scenarios(only: set[str] | None = None) -> list[tuple[str, str, Callable[[Context], Scenario]]]:
    """``(module, name, run)`` of every scenario (those named in ``only``, when given)."""
    found = []
    for module in MODULES:
        mod = importlib.import_module(f"{__package__}.{module}")
        for name, run in mod.SCENARIOS.items():
            if only is None or name in only or module in only:
                found.append((module, name, run))
    if only:
        known = {n for _, n, _ in found} | {m for m, _, _ in found}
        unknown = only - known
        if unknown:
            raise ValueError(f"unknown scenarios {sorted(unknown)}; see --help for the names")
    return found


def run_suite(out: str | Path, *, quick: bool = False, seed: int = 0,
              only: set[str] | None = None, work: str | Path | None = None,
              keep: bool = False) -> dict[str, Any]:
    """Run the scenarios and write ``out/reliability.json`` (and ``reliability.md``).

    Args:
        out: the output folder.
        quick: the fast slice (a few of everything) instead of the full counts.
        seed: seeds every random choice.
        only: run only these scenarios or modules.
        work: where the scenarios write (a temporary folder, removed after, by default).
        keep: keep ``work`` afterwards (to inspect the stores a failure left).
    """
    chosen = scenarios(only)
    per_module: dict[str, int] = {}
    for module, _, _ in chosen:
        per_module[module] = per_module.get(module, 0) + 1
    root = Path(work) if work else Path(tempfile.mkdtemp(prefix="memstrata-reliability-"))
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, Scenario] = {}
    started = time.perf_counter()
    try:
        for module, name, run in tqdm(chosen, unit="scenario", desc="reliability"):
            budget = QUICK_BUDGET_S if quick else BUDGET_S[module] / per_module[module]
            ctx = Context(work=root / name, quick=quick, seed=seed, budget_s=budget)
            ctx.work.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            result = run(ctx)
            result.seconds = round(time.perf_counter() - t0, 2)
            results[name] = result
    finally:
        if not keep and work is None:
            shutil.rmtree(root, ignore_errors=True)
    doc = summarise(results, quick=quick, seed=seed,
                    seconds=round(time.perf_counter() - started, 1))
    doc["files"] = [str(p) for p in write_outputs(doc, out)]
    return doc


def summarise(results: dict[str, Scenario], **meta: Any) -> dict[str, Any]:
    """The ``reliability.json`` document for these results."""
    doc: dict[str, Any] = {
        "scenarios": {name: r.model_dump(exclude={"name"}) for name, r in results.items()}}
    for counter in HEADLINE:
        doc[counter] = sum(getattr(r, counter) for r in results.values())
    doc["attempts"] = sum(r.attempts for r in results.values())
    doc["failures"] = sum(r.failures for r in results.values())
    # A scenario that could not run (the sandbox not installed) proves nothing: named here
    # and in the table, so a clean verdict never hides it.
    doc["skipped"] = [n for n, r in results.items() if r.figures.get("skipped")]
    # One that ran but checked nothing (on a loaded machine its calls all came after its
    # deadline, say) proves nothing either, and would pass silently: it fails the run.
    doc["checked_nothing"] = [n for n, r in results.items()
                              if r.attempts == 0 and not r.figures.get("skipped")]
    doc["ok"] = not any(doc[c] for c in HEADLINE) and not doc["checked_nothing"]
    doc["machine"] = {"cpus": _cpus(), "platform": platform.platform(),
                      "python": platform.python_version()}
    doc.update(meta)
    return doc


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def table(doc: dict[str, Any]) -> str:
    """The per-scenario table and the headline counters, as markdown."""
    lines = ["| scenario | attempts | failures | seconds | figures |", "|---|---:|---:|---:|---|"]
    for name, s in doc["scenarios"].items():
        figures = ", ".join(f"{k} {v}" for k, v in s["figures"].items()
                            if isinstance(v, int | float | str))
        early = " (stopped at the deadline)" if s.get("stopped_early") else ""
        lines.append(f"| {name} | {s['attempts']} | {s['failures']} | {s['seconds']}{early} "
                     f"| {figures} |")
    lines.append("")
    lines.append(", ".join(f"{c} {doc[c]}" for c in HEADLINE)
                 + f" — {'ok' if doc['ok'] else 'FAILED'} in {doc.get('seconds', '?')} s")
    if doc.get("skipped"):
        lines.append(f"NOT RUN (see their details): {', '.join(doc['skipped'])}")
    if doc.get("checked_nothing"):
        lines.append(f"CHECKED NOTHING (no attempt made): {', '.join(doc['checked_nothing'])}")
    return "\n".join(lines)


def chart(doc: dict[str, Any], path: Path) -> None:
    """Attempts per scenario (log scale), failures in red beside them, saved as PNG."""
    matplotlib = require("matplotlib", "bench", "the benchmark charts")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(doc["scenarios"])
    attempts = [max(doc["scenarios"][n]["attempts"], 1) for n in names]
    failures = [doc["scenarios"][n]["failures"] for n in names]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], attempts, 0.4, label="attempts", color="tab:blue")
    ax.bar([x + 0.2 for x in xs], [max(f, 0) for f in failures], 0.4, label="failures",
           color="tab:red")
    for x, f in zip(xs, failures, strict=True):
        ax.annotate(str(f), (x + 0.2, 1), ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.5)  # the failure counts (often 0) are written at 1
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    verdict = "ok" if doc["ok"] else "FAILED"
    ax.set_title(f"memstrata reliability ({'quick' if doc.get('quick') else 'full'}): {verdict}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(doc: dict[str, Any], out: str | Path) -> list[Path]:
    """Write ``reliability.json``, ``reliability.md`` and ``reliability.png`` into ``out``;
    returns the paths."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "reliability.json", folder / "reliability.md", folder / "reliability.png"]
    paths[0].write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    paths[1].write_text(table(doc) + "\n", encoding="utf-8")
    chart(doc, paths[2])
    return paths
