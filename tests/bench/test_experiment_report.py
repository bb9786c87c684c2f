"""Run summaries: every figure against hand-computed values, the markdown, the files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memstrata.bench.experiments.records import (
    MemoryHealth,
    RunSummary,
    TaskResult,
)
from memstrata.bench.experiments.report import (
    cell,
    curve_points,
    render_markdown,
    summarise,
    write_summary,
)
from memstrata.programs.judging import Verdict

INTERFACE = ["experiment", "tasks", "success_rate", "steps_per_task", "llm_calls",
             "budget_violations"]
SECTIONS = ["## Configuration", "## Convergence", "## Quality", "## Efficiency",
            "## Leakage", "## Memory health", "## Learning curve", "## Budget", "## Errors"]
CONFIG: dict[str, Any] = {"experiment": "E9", "layers": ["L0", "L1", "L2"], "mode": "auto",
                          "executor": "rlm", "policies": {"extraction": {"max_items": 3}}}


def verdict(success: bool) -> Verdict:
    """A judge verdict saying ``success``."""
    return Verdict(success=success, confidence=0.9, source="llm")


def make(index: int, **fields: Any) -> TaskResult:
    """A task result with the given fields, the rest at their defaults."""
    fields.setdefault("converged", True)
    return TaskResult(index=index, task_id=f"t{index}", question=f"question {index}",
                      **fields)


RESULTS = [
    make(0, level="L1", success=True, score=1.0, steps=3, llm_calls=4, prompt_tokens=100,
         completion_tokens=10, tool_calls=2, wall_s=1.5, context_chars=300,
         max_prompt_chars=1000, stdout_chars=50, findings=["select_star"],
         verdict=verdict(True)),
    make(1, level="L2", success=False, score=0.5, steps=5, llm_calls=6, prompt_tokens=200,
         completion_tokens=20, tool_calls=4, wall_s=2.25, context_chars=500,
         max_prompt_chars=3000, stdout_chars=150, large_returns=1,
         findings=["select_star", "no_limit"], verdict=verdict(True),
         budget_violations=["L2: 1200 > 1000 chars"]),
    make(2, level="L1", success=False, converged=False, steps=1, llm_calls=1,
         prompt_tokens=50, wall_s=0.25, max_prompt_chars=500, error="RuntimeError: boom",
         budget_violations=["L3: 1100 > 1000 chars", "prompt: 9000 > 8000 chars"]),
    make(3, level="L1", success=True, score=1.0, steps=2, llm_calls=3, prompt_tokens=70,
         completion_tokens=7, tool_calls=1, wall_s=1.0, context_chars=200,
         max_prompt_chars=800, stdout_chars=100, large_returns=2, findings=["no_limit"],
         verdict=verdict(True)),
]


def summary(results: list[TaskResult] = RESULTS, **kw: Any) -> RunSummary:
    """``summarise`` with fixed identity fields."""
    return summarise(experiment="E9", title="closed loop", suite="ontology", model="dummy",
                     results=results, health=kw.get("health"), meta=kw.get("meta", {}))


def test_summary_figures() -> None:
    s = summary(meta={"commit": "abc123"})
    assert (s.experiment, s.title, s.suite, s.model, s.tasks) == (
        "E9", "closed loop", "ontology", "dummy", 4)
    assert s.success_rate == 0.5
    assert s.steps_per_task == 2.75          # (3 + 5 + 1 + 2) / 4
    assert s.llm_calls == 14
    assert s.budget_violations == 3
    assert s.convergence_rate == 0.75
    assert s.mean_score == 0.625             # 2.5 / 4
    assert (s.prompt_tokens, s.completion_tokens) == (420, 37)
    assert s.tool_calls_per_task == 1.75
    assert s.wall_s == 5.0
    assert s.mean_context_chars == 250.0
    assert s.max_prompt_chars == 3000
    assert s.stdout_chars_per_task == 75.0
    assert s.large_returns == 3
    assert s.judge_agreement == 0.6667       # 3 judged, task 1's verdict disagrees
    assert list(s.anti_patterns.items()) == [("no_limit", 2), ("select_star", 2)]
    assert s.by_level == {"L1": 0.6667, "L2": 0.0}
    assert s.curve == [1.0, 0.5, 0.3333, 0.5]
    assert s.errors == 1
    assert s.meta == {"commit": "abc123"} and s.health is None


def test_unlevelled_tasks_and_no_verdicts() -> None:
    s = summary([make(0, success=True), make(1, success=False)])
    assert s.by_level == {"-": 0.5}
    assert s.judge_agreement is None


def test_zero_tasks_give_a_valid_summary() -> None:
    s = summary([])
    assert s.tasks == 0 and s.llm_calls == 0 and s.budget_violations == 0
    assert (s.success_rate, s.steps_per_task, s.convergence_rate, s.mean_score) == (0, 0, 0, 0)
    assert (s.tool_calls_per_task, s.mean_context_chars, s.stdout_chars_per_task) == (0, 0, 0)
    assert s.max_prompt_chars == 0 and s.judge_agreement is None
    assert s.curve == [] and s.by_level == {} and s.anti_patterns == {}
    text = render_markdown(s, [], {})
    assert all(header in text for header in SECTIONS)


def test_markdown_sections_and_content() -> None:
    health = MemoryHealth(active=3, total=4, extracted=7, duplicate_rate=0.2857,
                          win_rate_first_half=0.5, win_rate_second_half=0.75,
                          win_rate_drift=0.25)
    s = summary(health=health, meta={"commit": "abc123", "db": "runs/e9/memory.db"})
    text = render_markdown(s, RESULTS, CONFIG)
    assert text.startswith("# E9: closed loop\n")
    assert all(header in text for header in SECTIONS)
    assert "- commit: abc123" in text and "- db: runs/e9/memory.db" in text
    assert "| layers | [\"L0\",\"L1\",\"L2\"] |" in text
    assert "| policies | {\"extraction\":{\"max_items\":3}} |" in text
    assert "| L1 | 0.6667 |" in text and "| no_limit | 2 |" in text
    assert "| judge agreement with gold | 0.6667 |" in text
    assert "| duplicate rate | 0.2857 |" in text and "0.5 / 0.75 / 0.25" in text
    assert "| after task | cumulative success |" in text and "| 4 | 0.5 |" in text
    assert "Violations: 3" in text and "- t1: L2: 1200 > 1000 chars" in text
    assert "- t2: RuntimeError: boom" in text
    assert "<" not in text.replace("< ", "")  # no HTML tags


def test_markdown_without_health_and_long_lists() -> None:
    results = [make(i, success=False, error=f"error {i}") for i in range(7)]
    text = render_markdown(summary(results), results, CONFIG)
    assert "No strategy bank in this run." in text
    assert "- t4: error 4" in text and "- t5: error 5" not in text
    assert "- … and 2 more" in text


def test_curve_points() -> None:
    assert curve_points([]) == []
    assert [k for k, _ in curve_points([0.5] * 3)] == [1, 2, 3]
    picks = curve_points([n / 25 for n in range(1, 26)])
    assert [k for k, _ in picks] == [2, 5, 8, 10, 12, 15, 18, 20, 22, 25]
    assert picks[-1] == (25, 1.0)


def test_cell_formatting() -> None:
    assert cell(None) == "-" and cell(0.5) == "0.5" and cell(1.0) == "1" and cell(3) == "3"
    assert cell(0.123456) == "0.1235"
    assert cell("a|b\nc") == "a\\|b c"


def test_write_summary(tmp_path: Path) -> None:
    s = summary()
    write_summary(tmp_path / "run", s, RESULTS, CONFIG)
    raw = (tmp_path / "run" / "summary.json").read_text(encoding="utf-8")
    doc = json.loads(raw)
    assert list(doc)[:6] == INTERFACE
    assert doc["experiment"] == "E9" and doc["tasks"] == 4 and doc["llm_calls"] == 14
    assert RunSummary.model_validate_json(raw) == s
    assert "## Learning curve" in (tmp_path / "run" / "summary.md").read_text(encoding="utf-8")
