"""``bench cognitive`` end to end on a scripted LM and a small scenario file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memstrata.bench.cognitive.metacognition import calibrated, metacognition
from memstrata.bench.cognitive.run import run_cognitive_bench
from memstrata.bench.cognitive.scenarios import ScenarioFileError
from memstrata.cli import main
from memstrata.memory import Store

SCENARIOS = {
    "name": "tiny",
    "scenarios": [
        {"level": "L1", "title": "Standings",
         "articles": [{"id": "a1", "title": "Day 5", "date": "2026-02-07", "source": "Wire",
                       "text": "Brennmark had 6 gold medals after day 5."}],
         "questions": [{"id": "q1", "question": "How many gold medals did Brennmark have?",
                        "answer": "6", "score": {"all": ["6"]}, "needs": ["6"],
                        "intent": "simple_recall"}]},
        {"level": "L3", "title": "Changes",
         "articles": [
             {"id": "b1", "title": "Day 7", "date": "2026-02-09", "source": "Wire",
              "text": "Aldervik had 7 gold medals after day 7."},
             {"id": "b2", "title": "Day 10", "date": "2026-02-12", "source": "Wire",
              "text": "Aldervik had 11 gold medals after day 10."}],
         "questions": [{"id": "q2", "question": "How many gold medals did Aldervik gain "
                        "between day 7 and day 10?", "answer": "4", "score": {"all": ["4"]},
                        "needs": ["7", "11"], "intent": "temporal_comparison"}]},
    ],
}


def _reply(system: str, user: str, schema: Any) -> dict[str, Any]:
    if system.startswith("Classify"):
        return {"intent": "temporal_comparison" if "gain" in user else "simple_recall"}
    if system.startswith("Write short keyword"):
        return {"queries": ["Aldervik gold medals"]}
    if system.startswith("Break the question"):
        return {"subquestions": ["Aldervik golds after day 7?", "Aldervik golds after day 10?"],
                "operation": "difference"}
    if system.startswith("Answer with the one number"):
        return {"value": "7" if "day 7" in user.split("Question:")[-1] else "11"}
    if system.startswith("Decide whether"):
        return {"sufficient": True, "missing": "", "queries": []}
    if system.startswith("Answer the question from the numbered facts"):
        if "gain" in user:  # the model's arithmetic is wrong; the calculator fixes it
            return {"operands": ["Aldervik golds day 7 = 7 [1]", "day 10 = 11 [2]"],
                    "expression": "11 - 7", "answer": "Aldervik gained 5", "used": [1, 2]}
        return {"answer": "6", "used": [1]}
    if system.startswith("Answer the question in a few words from the numbered passages"):
        return {"answer": "5" if "gain" in user else "6"}
    raise AssertionError(system[:50])


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(SCENARIOS))
    return path


def test_bench_writes_the_documented_shape(scripted: Callable[..., Any], tmp_path: Path,
                                           scenario_file: Path) -> None:
    out = tmp_path / "out"
    doc = run_cognitive_bench(scripted(_reply), out, scenarios=scenario_file, runs=2,
                              progress=False)
    saved = json.loads((out / "cognitive.json").read_text())
    assert saved["runs"] == 2 and set(saved["levels"]) == {"L1", "L3"}
    l3 = saved["levels"]["L3"]
    assert (l3["score"], l3["baseline"]) == (1.0, 0.0)  # the calculator's correction
    # intent, decompose, evaluate, two values, answer
    assert l3["llm_calls"] == 6 and l3["baseline_llm_calls"] == 1
    assert saved["levels"]["L1"]["steps_per_question"] == 1.0
    meta = saved["metacognition"]
    assert set(meta) >= {"effort_calibration", "sufficiency_accuracy", "search_quality",
                         "self_corrections"}
    assert meta["effort_calibration"] == 1.0 and meta["self_corrections"] == 1
    assert meta["sufficiency_accuracy"] == 1.0  # "sufficient", and both values were there
    assert doc["levels"] == saved["levels"]
    rows = [json.loads(line) for line in (out / "cognitive_answers.jsonl").open()]
    assert len(rows) == 2 * 2 * 2  # runs x questions x systems
    assert (out / "cognitive.md").read_text().startswith("# Cognitive memory")
    assert (out / "cognitive.png").stat().st_size > 0
    with Store.open(out / "cognitive_run2.db", embedder=None) as store:
        recorded = store.runs.list("cognitive:L3")
        assert [r.program for r in recorded] == ["cognitive.cognitive"]
        assert recorded[0].usage["calls"] == 6 and recorded[0].verdict["score"] == 1.0


def test_unknown_level_and_bad_runs_are_refused(scripted: Callable[..., Any], tmp_path: Path,
                                                scenario_file: Path) -> None:
    with pytest.raises(ValueError, match="no scenario of level"):
        run_cognitive_bench(scripted(_reply), tmp_path, scenarios=scenario_file,
                            levels={"L9"}, progress=False)
    with pytest.raises(ValueError, match="runs"):
        run_cognitive_bench(scripted(_reply), tmp_path, scenarios=scenario_file, runs=0)


def test_cli_rejects_a_malformed_file_before_loading_a_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "scenarios": [{"level": "L1"}]}')
    with pytest.raises(SystemExit) as exc:
        main(["bench", "cognitive", "--scenarios", str(bad), "--lm", "local/nonexistent",
              "--out", str(tmp_path)])
    assert "bad.json" in str(exc.value) and exc.value.code == 2
    with pytest.raises(ScenarioFileError):
        run_cognitive_bench(None, tmp_path, scenarios=bad)  # type: ignore[arg-type]


def test_calibration_rules() -> None:
    base = {"premature": False, "allowance": 3, "decisions": [], "used": 0, "shown": 0,
            "refined_queries": 0, "recomputed": 0, "run": 1, "level": "L1"}
    assert calibrated({**base, "gold_intent": "simple_recall", "steps": 1})
    assert not calibrated({**base, "gold_intent": "simple_recall", "steps": 2})
    assert not calibrated({**base, "gold_intent": "temporal_comparison", "steps": 1,
                           "premature": True})
    meta = metacognition([{**base, "gold_intent": "simple_recall", "steps": 2,
                           "decisions": [[True, False], [True, True]]}], 1)
    assert meta["effort_calibration"] == 0 and meta["sufficiency_accuracy"] == 0.5


def test_maintain_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "m.db"
    with pytest.raises(SystemExit, match="no store"):
        main(["maintain", "--user", "u", "--db", str(db)])
    Store.open(db, embedder=None).close()
    assert main(["maintain", "--user", "u", "--db", str(db)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["user_id"] == "u" and report["llm_calls"] == 0
