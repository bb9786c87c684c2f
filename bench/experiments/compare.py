"""``memstrata experiment compare RUN RUN ...``: runs side by side, with a chart.

:func:`compare_runs` loads two or more run directories, takes the first as the baseline
and writes ``compare.json`` (headline metrics, deltas against the baseline, a paired
per-task comparison), ``compare.md`` (the same as tables) and ``compare.png`` (learning
curves and bars). Paired counts use only the task ids both runs hold, so a comparison
of runs over different task lists still says something true; a warning says they differ.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .chart import write_chart
from .records import RunSummary, TaskResult, read_results
from .report import cell, table

METRICS = (
    "tasks", "success_rate", "steps_per_task", "llm_calls", "budget_violations",
    "convergence_rate", "mean_score", "prompt_tokens", "completion_tokens",
    "tool_calls_per_task", "wall_s", "mean_context_chars", "max_prompt_chars",
    "stdout_chars_per_task", "large_returns", "judge_agreement", "errors",
)
"""The summary fields compared, in the order the table shows them."""

HEALTH_METRICS = ("active", "duplicate_rate", "novelty_rate", "win_rate_drift")
"""Memory-health fields compared as ``bank_<name>`` (None for a run without a bank)."""


@dataclass(frozen=True)
class LoadedRun:
    """One run directory as read back: its summary, task results and config."""

    path: Path
    summary: RunSummary
    results: list[TaskResult]
    config: dict[str, Any] = field(default_factory=dict)


def _read_json(path: Path, required: bool) -> Any:
    if not path.is_file():
        if required:
            raise ValueError(f"{path}: missing (is this a run directory?)")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc


def load_run(path: Path) -> LoadedRun:
    """Read a run directory written by the experiment runner.

    Args:
        path: The run directory (``summary.json`` and ``results.jsonl`` are required,
            ``config.json`` is optional).

    Returns:
        The run's summary, results in task order, and config (``{}`` when absent).

    Raises:
        ValueError: The directory is missing, or a file is missing or malformed; the
            message names the file, and the line number for a bad ``results.jsonl`` line.
    """
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: no such run directory")
    summary_path = path / "summary.json"
    try:
        summary = RunSummary.model_validate(_read_json(summary_path, required=True))
    except ValidationError as exc:
        raise ValueError(f"{summary_path}: not a run summary ({exc.errors()[0]['msg']})"
                         ) from exc
    config = _read_json(path / "config.json", required=False)
    if config is not None and not isinstance(config, dict):
        raise ValueError(f"{path / 'config.json'}: expected a JSON object")
    return LoadedRun(path, summary, read_results(path / "results.jsonl"), config or {})


class RunEntry(BaseModel):
    """One run's headline metrics and their change against the first run."""

    label: str
    path: str
    experiment: str
    suite: str
    model: str
    metrics: dict[str, int | float | None]
    deltas: dict[str, int | float | None]


class PairedTasks(BaseModel):
    """Task-by-task outcome of one run against the first, on the task ids both hold.

    ``steps_*`` cover the shared tasks where neither attempt ended in an error (an
    errored attempt's step count says how far it got, not what the task cost).
    """

    first: str
    other: str
    shared: int
    both: int
    only_first: int
    only_other: int
    neither: int
    steps_tasks: int
    steps_first: float | None
    steps_other: float | None
    steps_diff: float | None


class Comparison(BaseModel):
    """What ``compare.json`` holds."""

    runs: list[RunEntry]
    paired: list[PairedTasks]
    warnings: list[str]
    files: dict[str, str]
    chart_error: str | None = None


def label(run: LoadedRun) -> str:
    """How a run is named in tables and charts: its experiment id and directory name."""
    return f"{run.summary.experiment} ({run.path.name})"


def headline(summary: RunSummary) -> dict[str, int | float | None]:
    """The compared metrics of one summary (health ones None when there is no bank)."""
    values: dict[str, int | float | None] = {m: getattr(summary, m) for m in METRICS}
    for name in HEALTH_METRICS:
        values[f"bank_{name}"] = None if summary.health is None else getattr(
            summary.health, name)
    return values


def _avg(values: Sequence[float]) -> float | None:
    # None, not 0: "no task to average" must not read as "took no steps".
    return round(sum(values) / len(values), 4) if values else None


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 4)


def pair(first: LoadedRun, other: LoadedRun, labels: tuple[str, str]) -> PairedTasks:
    """Compare two runs task by task on their shared task ids (first occurrence wins)."""
    a = {r.task_id: r for r in reversed(first.results)}
    b = {r.task_id: r for r in reversed(other.results)}
    shared = [t for t in a if t in b]
    outcome = [(a[t].success, b[t].success) for t in shared]
    clean = [t for t in shared if not a[t].error and not b[t].error]
    steps_a = [a[t].steps for t in clean]
    steps_b = [b[t].steps for t in clean]
    return PairedTasks(
        first=labels[0], other=labels[1], shared=len(shared),
        both=outcome.count((True, True)), only_first=outcome.count((True, False)),
        only_other=outcome.count((False, True)), neither=outcome.count((False, False)),
        steps_tasks=len(clean), steps_first=_avg(steps_a), steps_other=_avg(steps_b),
        steps_diff=_delta(_avg(steps_a), _avg(steps_b)),
    )


def _warnings(runs: Sequence[LoadedRun]) -> list[str]:
    base, notes = runs[0], []
    for attr in ("suite", "model"):
        values = [getattr(r.summary, attr) for r in runs]
        if len(set(values)) > 1:
            notes.append(f"runs differ in {attr}: " + ", ".join(v or "-" for v in values))
    tasks = [r.task_id for r in base.results]
    for run in runs[1:]:
        other = [r.task_id for r in run.results]
        if other != tasks:
            kind = "order" if sorted(other) == sorted(tasks) else "list"
            notes.append(f"task {kind} differs: {label(base)} has {len(tasks)}, "
                         f"{label(run)} has {len(other)}, {len(set(tasks) & set(other))} shared")
    return notes


def render_compare(comparison: Comparison) -> str:
    """``compare.md``: warnings, metrics side by side with deltas, then paired outcomes.

    Args:
        comparison: The comparison :func:`compare_runs` computed.

    Returns:
        Markdown: one row per metric, one column per run, one delta column per run
        after the first (that run minus the first), then the paired task table.
    """
    runs = comparison.runs
    out = ["# Run comparison", ""]
    out += [f"> Warning: {w}" for w in comparison.warnings]
    out += [""] if comparison.warnings else []
    header = ["metric", *(r.label for r in runs), *(f"Δ {r.label}" for r in runs[1:])]
    rows = [[name, *(r.metrics[name] for r in runs), *(r.deltas[name] for r in runs[1:])]
            for name in runs[0].metrics]
    out += table(header, rows)
    out += ["", "## Paired tasks", "",
            f"Outcomes on the task ids both runs hold, against {runs[0].label}; steps over "
            "the shared tasks neither attempt errored on.", ""]
    out += table(["run", "shared", "both succeeded", "only first", "only this run",
                  "neither", "steps first", "steps this run", "Δ steps"],
                 [[p.other, p.shared, p.both, p.only_first, p.only_other, p.neither,
                   p.steps_first, p.steps_other, p.steps_diff] for p in comparison.paired])
    if comparison.chart_error:
        out += ["", f"No chart: {cell(comparison.chart_error)}"]
    return "\n".join(out) + "\n"


def compare_runs(paths: Sequence[Path], out_dir: Path) -> Comparison:
    """Compare runs against the first and write ``compare.json``, ``.md`` and ``.png``.

    Args:
        paths: Two or more run directories; the first is the baseline.
        out_dir: Where the three files go (created if missing).

    Returns:
        The comparison as written to ``compare.json``. A missing matplotlib leaves no
        chart and says why in ``chart_error`` rather than failing the comparison.

    Raises:
        ValueError: Fewer than two runs, or a run directory that cannot be read.
    """
    if len(paths) < 2:
        raise ValueError(f"compare needs at least two runs, got {len(paths)}")
    runs = [load_run(Path(p)) for p in paths]
    labels = [label(r) for r in runs]
    # Two directories with the same name and experiment would be indistinguishable.
    labels = [f"{name} #{n + 1}" if labels.count(name) > 1 else name
              for n, name in enumerate(labels)]
    base = headline(runs[0].summary)
    entries = []
    for run, name in zip(runs, labels, strict=True):
        values = headline(run.summary)
        entries.append(RunEntry(
            label=name, path=str(run.path), experiment=run.summary.experiment,
            suite=run.summary.suite, model=run.summary.model, metrics=values,
            deltas={m: _delta(base[m], values[m]) for m in values}))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {"json": out_dir / "compare.json", "md": out_dir / "compare.md",
             "png": out_dir / "compare.png"}
    chart_error = None
    try:
        write_chart([r.summary for r in runs], labels, files["png"])
    except ImportError as exc:
        chart_error = f"matplotlib is not installed ({exc})"
        del files["png"]
    comparison = Comparison(
        runs=entries, warnings=_warnings(runs), chart_error=chart_error,
        paired=[pair(runs[0], run, (labels[0], name))
                for run, name in zip(runs[1:], labels[1:], strict=True)],
        files={kind: str(p) for kind, p in files.items()})
    files["json"].write_text(comparison.model_dump_json(indent=2) + "\n", encoding="utf-8")
    files["md"].write_text(render_compare(comparison), encoding="utf-8")
    return comparison
