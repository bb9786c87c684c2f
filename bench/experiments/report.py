"""A run's summary: the figures of ``summary.json`` and the ``summary.md`` report.

:func:`summarise` turns the task results into a :class:`RunSummary` (pure arithmetic, no
I/O); :func:`render_markdown` lays it out for a reader; :func:`write_summary` writes
both files. Every rate is rounded to 4 places, and a run with no tasks yields a valid
summary of zeros, so a crashed or empty run still leaves a readable report.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .records import MemoryHealth, RunSummary, TaskResult

SHOW_FIRST = 5
"""How many budget messages and task errors the report lists before eliding the rest."""


def mean(values: Sequence[float]) -> float:
    """The mean rounded to 4 places; 0.0 for no values (an empty run is not an error)."""
    return round(sum(values) / len(values), 4) if values else 0.0


def cumulative_curve(results: Sequence[TaskResult]) -> list[float]:
    """The gold success rate after each task of the sequential pass.

    Example:
        >>> rows = [dict(index=i, task_id=str(i), question="q", converged=True, success=s)
        ...         for i, s in enumerate([True, False, True])]
        >>> cumulative_curve([TaskResult(**r) for r in rows])
        [1.0, 0.5, 0.6667]
    """
    curve, wins = [], 0
    for n, result in enumerate(results, start=1):
        wins += result.success
        curve.append(round(wins / n, 4))
    return curve


def _by_level(results: Sequence[TaskResult]) -> dict[str, float]:
    # Tasks without a level are grouped under "-" so every task is counted somewhere.
    groups: dict[str, list[float]] = defaultdict(list)
    for r in results:
        groups[r.level or "-"].append(float(r.success))
    return {level: mean(groups[level]) for level in sorted(groups)}


def summarise(*, experiment: str, title: str, suite: str, model: str,
              results: Sequence[TaskResult], health: MemoryHealth | None,
              meta: dict[str, Any]) -> RunSummary:
    """Compute a run's summary from its task results.

    Args:
        experiment: The experiment id (``E1`` .. ``E12``).
        title: The experiment's one-line title.
        suite: The task suite's name.
        model: The LM the agent ran on.
        results: The task results, in the order the tasks ran (the curve follows it).
        health: The strategy bank's health, or None when the run had no bank.
        meta: Commit, database path, times: copied into the summary as is.

    Returns:
        Means per task for steps, tool calls, context and stdout; sums for LLM calls,
        tokens, wall time, budget violations and large returns; the judge's agreement
        with gold over the tasks it judged (None when it judged none).
    """
    judged = [r for r in results if r.verdict is not None]
    agree = sum(r.verdict.success == r.success for r in judged if r.verdict is not None)
    patterns = Counter(f for r in results for f in r.findings)
    return RunSummary(
        experiment=experiment, tasks=len(results), title=title, suite=suite, model=model,
        success_rate=mean([r.success for r in results]),
        steps_per_task=mean([r.steps for r in results]),
        llm_calls=sum(r.llm_calls for r in results),
        budget_violations=sum(len(r.budget_violations) for r in results),
        convergence_rate=mean([r.converged for r in results]),
        mean_score=mean([r.score for r in results]),
        prompt_tokens=sum(r.prompt_tokens for r in results),
        completion_tokens=sum(r.completion_tokens for r in results),
        tool_calls_per_task=mean([r.tool_calls for r in results]),
        selected_steps_per_task=mean([r.selected_steps for r in results]),
        wall_s=round(sum(r.wall_s for r in results), 4),
        mean_context_chars=mean([r.context_chars for r in results]),
        max_prompt_chars=max((r.max_prompt_chars for r in results), default=0),
        stdout_chars_per_task=mean([r.stdout_chars for r in results]),
        large_returns=sum(r.large_returns for r in results),
        judge_agreement=round(agree / len(judged), 4) if judged else None,
        # Most frequent first, then by name, so the report's order is stable.
        anti_patterns=dict(sorted(patterns.items(), key=lambda kv: (-kv[1], kv[0]))),
        by_level=_by_level(results),
        curve=cumulative_curve(results),
        health=health,
        errors=sum(1 for r in results if r.error),
        meta=dict(meta),
    )


def cell(value: Any) -> str:
    """One markdown table cell: floats to 4 places, None as '-', pipes and newlines escaped."""
    if value is None:
        return "-"
    if isinstance(value, float):
        value = f"{value:.4f}".rstrip("0").rstrip(".") if value == value else "nan"
    return compact(value).replace("|", "\\|").replace("\n", " ")


def compact(value: Any) -> str:
    """A value as one short string: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """A markdown table as lines (header, rule, one line per row)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]


def curve_points(curve: Sequence[float], points: int = 10) -> list[tuple[int, float]]:
    """About ``points`` evenly spaced ``(task number, cumulative rate)`` pairs, last included."""
    n = len(curve)
    picks = sorted({max(1, round(i * n / points)) for i in range(1, points + 1)}) if n else []
    return [(k, curve[k - 1]) for k in picks]


def _short(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _pairs(figures: dict[str, Any]) -> str:
    # "success 2, failure 1" reads better in a cell than JSON with sorted keys.
    return ", ".join(f"{key} {cell(value)}" for key, value in figures.items())


def _health_lines(health: MemoryHealth | None) -> list[str]:
    if health is None:
        return ["No strategy bank in this run."]
    drift = (health.win_rate_first_half, health.win_rate_second_half, health.win_rate_drift)
    return table(["figure", "value"], [
        ("active strategies", health.active), ("rows (retired included)", health.total),
        ("active by polarity", _pairs(health.by_polarity)), ("extracted", health.extracted),
        ("drafts dropped as noise", health.dropped),
        ("duplicate rate", health.duplicate_rate), ("novelty rate", health.novelty_rate),
        ("supersede rate", health.supersede_rate), ("discard rate", health.discard_rate),
        ("retired", health.retired),
        ("win rate shown strategies: first half / second half / drift",
         " / ".join(cell(v) for v in drift)),
        (f"uses per active item ({health.usage_source})", _pairs(health.usage)),
    ])


def _listed(items: Sequence[str], total: int) -> list[str]:
    lines = [f"- {_short(item)}" for item in items[:SHOW_FIRST]]
    return lines + ([f"- … and {total - SHOW_FIRST} more"] if total > SHOW_FIRST else [])


def render_markdown(summary: RunSummary, results: Sequence[TaskResult],
                    config: dict[str, Any]) -> str:
    """The human-readable report of one run (``summary.md``).

    Args:
        summary: The run's summary (from :func:`summarise`).
        results: The task results, for the budget messages and errors it lists.
        config: The experiment config as saved in ``config.json``.

    Returns:
        Markdown with the sections Configuration, Convergence, Quality, Efficiency,
        Leakage, Memory health, Learning curve, Budget and Errors (tables, no HTML).
    """
    s, meta = summary, summary.meta
    out = [f"# {s.experiment}: {s.title}" if s.title else f"# {s.experiment}", "",
           f"- suite: {s.suite or '-'}", f"- model: {s.model or '-'}", f"- tasks: {s.tasks}"]
    out += [f"- {key}: {meta[key]}" for key in ("commit", "db") if key in meta]
    if program := meta.get("program"):  # the compiled agent (experiment --program)
        out.append(f"- program: {program['name']} {program['path']} (sha256 "
                   f"{program['sha256']})")

    def section(name: str, body: list[str]) -> None:
        out.extend(["", f"## {name}", "", *body])

    # One row per top-level key, nested values as compact JSON cut to one readable line.
    section("Configuration", table(["key", "value"], [(k, _short(compact(v))) for k, v in
                                                      config.items()])
            if config else ["(empty config)"])
    section("Convergence", table(["figure", "value"], [
        ("converged (answer ran / parsed)", s.convergence_rate), ("errors", s.errors)]))
    quality = table(["figure", "value"], [
        ("success rate (gold)", s.success_rate), ("mean score (F1)", s.mean_score),
        ("judge agreement with gold", s.judge_agreement)])
    quality += ["", *table(["level", "success rate"], list(s.by_level.items()))]
    if s.anti_patterns:
        quality += ["", *table(["anti-pattern", "count"], list(s.anti_patterns.items()))]
    section("Quality", quality)
    section("Efficiency", table(["figure", "value"], [
        ("wall time (s)", s.wall_s), ("prompt tokens", s.prompt_tokens),
        ("completion tokens", s.completion_tokens), ("LLM calls", s.llm_calls),
        ("LLM calls per task", round(s.llm_calls / s.tasks, 4) if s.tasks else 0.0),
        ("steps per task (every rollout)", s.steps_per_task),
        ("steps per task (rollout kept)", s.selected_steps_per_task),
        ("tool calls per task", s.tool_calls_per_task)]))
    section("Leakage", table(["figure", "value"], [
        ("mean injected context chars", s.mean_context_chars),
        ("max prompt chars", s.max_prompt_chars),
        ("stdout chars per task", s.stdout_chars_per_task),
        ("large returns", s.large_returns)]))
    section("Memory health", _health_lines(s.health))
    section("Learning curve", table(["after task", "cumulative success"],
                                    curve_points(s.curve)) if s.curve else ["(no tasks)"])
    messages = [f"{r.task_id}: {m}" for r in results for m in r.budget_violations]
    section("Budget", [f"Violations: {s.budget_violations}", *(
        ["", *_listed(messages, len(messages))] if messages else [])])
    errors = [f"{r.task_id}: {r.error}" for r in results if r.error]
    section("Errors", [f"Tasks with errors: {s.errors}", *(
        ["", *_listed(errors, len(errors))] if errors else [])])
    return "\n".join(out) + "\n"


def write_summary(out_dir: Path, summary: RunSummary, results: Sequence[TaskResult],
                  config: dict[str, Any]) -> None:
    """Write ``summary.json`` (the interface keys first) and ``summary.md`` into ``out_dir``.

    Args:
        out_dir: The run directory (created if missing).
        summary: The run's summary.
        results: The task results the markdown lists budget messages and errors from.
        config: The experiment config, shown in the report's Configuration section.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    # pydantic dumps fields in declaration order: experiment, tasks, success_rate,
    # steps_per_task, llm_calls, budget_violations come first, as outside checks expect.
    (out_dir / "summary.json").write_text(summary.model_dump_json(indent=2) + "\n",
                                          encoding="utf-8")
    (out_dir / "summary.md").write_text(render_markdown(summary, results, config),
                                        encoding="utf-8")
