"""The background-extraction benchmark on a small store, with the scripted slow model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstrata.bench.background import SCRIPTED, run_background_bench, table


def test_the_bench_reports_each_measure_beside_its_baseline(tmp_path: Path) -> None:
    doc = run_background_bench(tmp_path, lm=SCRIPTED, delay_s=0.05, turns=300, calls=40,
                               queries=20, fact_turns=40)
    assert json.loads((tmp_path / "background.json").read_text()) == doc
    add, search, facts = doc["add"], doc["search"], doc["facts"]
    assert add["turns"] == 300 and add["calls"] == 40
    assert add["sync"]["jobs"] == 2 and add["background"]["jobs"] == 4  # both modes' jobs
    for side in (add["sync"], add["background"], search["alone"],
                 search["during_background"], search["during_sync"]):
        assert 0 < side["p50_ms"] <= side["p95_ms"] <= side["max_ms"]
    assert search["during_background"]["searches"] >= 20
    assert search["during_background"]["jobs_run"] >= 1
    assert search["p95_ratio"] == round(search["during_background"]["p95_ms"]
                                        / search["alone"]["p95_ms"], 3)
    assert search["worker_nice"] == 10
    # The scripted model proposes one fact per chunk: 40 turns are two chunks.
    assert facts["fact_events"] == facts["facts"] == 2
    assert facts["events_equal"] and facts["facts_equal"]
    assert doc["targets"]["facts_equal"] is True
    assert set(doc["targets"]) == {"add_p95_ms<=10", "search_p95_ratio<=1.2", "facts_equal"}
    text = table(doc)
    assert "each extraction call sleeps 0.05 s" in text
    assert f"({search['p95_ratio']}x)" in text


def test_only_runs_the_named_parts(tmp_path: Path) -> None:
    doc = run_background_bench(tmp_path, lm=SCRIPTED, delay_s=0.01, turns=100, calls=20,
                               fact_turns=20, only=("add",))
    assert "add" in doc and "search" not in doc and "facts" not in doc
    assert set(doc["targets"]) == {"add_p95_ms<=10"}
    text = table(doc)
    assert "add p95 at 100 turns" in text and "search" not in text


def test_an_unknown_part_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown part"):
        run_background_bench(tmp_path / "x", lm=SCRIPTED, only=("add", "serch"))
    assert not (tmp_path / "x").exists()


def test_cli_refuses_a_misspelt_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    from memstrata.cli import main

    assert main(["bench", "background", "--only", "ad", "--out", str(tmp_path)]) == 2
    assert "choose one or more of add, search, facts" in capsys.readouterr().err
