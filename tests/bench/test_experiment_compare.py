"""Comparing runs end to end: loading, deltas, paired outcomes, the three files, errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from memstrata.bench.experiments.compare import Comparison, compare_runs, load_run
from memstrata.bench.experiments.records import MemoryHealth, TaskResult
from memstrata.bench.experiments.report import summarise, write_summary


def make(index: int, success: bool, steps: int, error: str | None = None) -> TaskResult:
    """A task result with an outcome, a step count and maybe an error."""
    return TaskResult(index=index, task_id=f"t{index + 1}", question="q", success=success,
                      converged=error is None, steps=steps, llm_calls=steps, error=error)


def write_run(path: Path, experiment: str, results: list[TaskResult], *,
              model: str = "dummy", health: MemoryHealth | None = None) -> Path:
    """A run directory as the runner leaves it: config, results, summary."""
    config: dict[str, Any] = {"experiment": experiment, "layers": ["L2"]}
    summary = summarise(experiment=experiment, title="t", suite="ontology", model=model,
                        results=results, health=health, meta={})
    write_summary(path, summary, results, config)
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (path / "results.jsonl").write_text(
        "".join(r.model_dump_json() + "\n" for r in results), encoding="utf-8")
    return path


# Baseline: t1..t4 succeed T F F T in 4 4 6 2 steps (success 0.5, steps 4.0).
BASE = [make(0, True, 4), make(1, False, 4), make(2, False, 6), make(3, True, 2)]
# Other: T T F(error) F over the same tasks, plus t5 (success 0.6, steps 2.6).
OTHER = [make(0, True, 3), make(1, True, 2), make(2, False, 5, error="boom"),
         make(3, False, 2), make(4, True, 1)]


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    """The baseline (E1, memory off) and the closed loop (E9, with a bank)."""
    return (write_run(tmp_path / "a", "E1", BASE),
            write_run(tmp_path / "b", "E9", OTHER, health=MemoryHealth(active=3)))


def test_compare_end_to_end(runs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    c = compare_runs(list(runs), out)
    first, other = c.runs
    assert (first.label, other.label) == ("E1 (a)", "E9 (b)")
    assert first.metrics["success_rate"] == 0.5 and other.metrics["success_rate"] == 0.6
    assert other.deltas["success_rate"] == 0.1
    assert other.deltas["steps_per_task"] == -1.4       # 2.6 - 4.0
    assert other.deltas["tasks"] == 1 and other.deltas["errors"] == 1
    assert first.deltas["success_rate"] == 0
    assert first.metrics["bank_active"] is None and other.metrics["bank_active"] == 3
    assert other.deltas["bank_active"] is None          # the baseline had no bank
    (p,) = c.paired
    assert (p.shared, p.both, p.only_first, p.only_other, p.neither) == (4, 1, 1, 1, 1)
    # Steps over t1, t2, t4 (t3 errored in the other run): 10/3 against 7/3.
    assert (p.steps_tasks, p.steps_first, p.steps_other, p.steps_diff) == (
        3, 3.3333, 2.3333, -1.0)
    assert c.warnings == ["task list differs: E1 (a) has 4, E9 (b) has 5, 4 shared"]
    assert c.chart_error is None

    assert Comparison.model_validate_json((out / "compare.json").read_text()) == c
    md = (out / "compare.md").read_text(encoding="utf-8")
    assert "| metric | E1 (a) | E9 (b) | Δ E9 (b) |" in md
    assert "| success_rate | 0.5 | 0.6 | 0.1 |" in md
    assert "> Warning: task list differs" in md and "## Paired tasks" in md
    assert "| E9 (b) | 4 | 1 | 1 | 1 | 1 | 3.3333 | 2.3333 | -1 |" in md
    png = (out / "compare.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 1000


def test_model_and_order_warnings(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", "E1", BASE)
    b = write_run(tmp_path / "b", "E1", list(reversed(BASE)), model="other-lm")
    c = compare_runs([a, b], tmp_path / "cmp")
    assert c.warnings == ["runs differ in model: dummy, other-lm",
                          "task order differs: E1 (a) has 4, E1 (b) has 4, 4 shared"]
    assert c.paired[0].both == 2 and c.paired[0].neither == 2


def test_same_run_twice_gets_distinct_labels(runs: tuple[Path, Path], tmp_path: Path) -> None:
    c = compare_runs([runs[0], runs[0]], tmp_path / "cmp")
    assert [r.label for r in c.runs] == ["E1 (a) #1", "E1 (a) #2"]
    assert c.warnings == [] and c.paired[0].steps_diff == 0


def test_three_runs_compare_against_the_first(runs: tuple[Path, Path], tmp_path: Path) -> None:
    c = compare_runs([*runs, runs[1]], tmp_path / "cmp")
    assert len(c.paired) == 2 and c.runs[2].deltas["success_rate"] == 0.1
    assert "Δ E9 (b) #2" in (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")


def test_chart_skipped_without_matplotlib(runs: tuple[Path, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # makes the import raise ImportError
    c = compare_runs(list(runs), tmp_path / "cmp")
    assert c.chart_error and "matplotlib" in c.chart_error and "png" not in c.files
    assert not (tmp_path / "cmp" / "compare.png").exists()
    assert "No chart:" in (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")


def test_load_run_round_trip(runs: tuple[Path, Path]) -> None:
    run = load_run(runs[1])
    assert run.results == OTHER and run.summary.tasks == 5
    assert run.config == {"experiment": "E9", "layers": ["L2"]}


def test_fewer_than_two_runs(runs: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least two runs"):
        compare_runs([runs[0]], tmp_path / "cmp")


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such run directory"):
        load_run(tmp_path / "nowhere")


@pytest.mark.parametrize("name", ["summary.json", "results.jsonl"])
def test_missing_file_is_named(runs: tuple[Path, Path], name: str) -> None:
    (runs[0] / name).unlink()
    with pytest.raises(ValueError, match=rf"{name}: missing"):
        load_run(runs[0])


def test_malformed_summary(runs: tuple[Path, Path]) -> None:
    (runs[0] / "summary.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"summary\.json: not valid JSON"):
        load_run(runs[0])
    (runs[0] / "summary.json").write_text('{"experiment": "E1"}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"summary\.json: not a run summary"):
        load_run(runs[0])


@pytest.mark.parametrize("bad", ["{truncated", '{"index": 1}'])
def test_malformed_results_line_is_numbered(runs: tuple[Path, Path], bad: str) -> None:
    path = runs[0] / "results.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join([lines[0], "", bad, *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"results\.jsonl:3: not a task result"):
        load_run(runs[0])
