"""``bench leakage`` (E7) and ``bench tools`` on scripted inputs: interface, arms, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstrata.bench.leakage import run_leakage_bench, write_leakage_outputs
from memstrata.bench.policy import NAME, SearchReadPolicy
from memstrata.bench.tool_latency import run_tool_bench
from memstrata.cli import main
from memstrata.programs import ExecutorSettings, setup_lm
from tests.conftest import InProcessInterpreter, locomo_record

QA = [{"question": "What pet did Alice adopt?", "answer": "a guinea pig", "evidence": ["D1:1"],
       "category": 4},
      {"question": "Where did Bob go hiking?", "answer": "the Alps", "evidence": ["D2:1"],
       "category": 1}]


@pytest.fixture
def data(write_json) -> Path:
    return write_json("locomo.json", [locomo_record("conv-1", qa=QA),
                                      locomo_record("conv-2", qa=QA[:1])])


def test_both_arms_run_the_same_plan_and_differ_by_the_tool_contract(data: Path,
                                                                      tmp_path: Path) -> None:
    handle = setup_lm(NAME, engine=SearchReadPolicy())
    doc = run_leakage_bench(data, handle, tmp_path, settings=ExecutorSettings(max_iters=5),
                            limit=3, progress=False, factory=InProcessInterpreter)
    naive, handles = doc["naive"], doc["handles"]
    for arm in (naive, handles):  # the interface outside checks read
        assert {"context_chars_per_iteration", "iterations", "llm_calls", "f1"} <= set(arm)
        assert arm["questions"] == 3 and arm["convergence"] == 1.0 and arm["failures"] == 0
    assert naive["iterations"] == handles["iterations"] == 4.0
    assert naive["llm_calls"] == handles["llm_calls"] == 12
    # Handles return a line per hit where naive tools return each hit whole (~1.9-2.1x
    # here: fewer hits, as when a name matches no word, leave the handles' fixed text more).
    assert naive["tool_return_chars"] > 1.5 * handles["tool_return_chars"]
    assert naive["context_chars_per_iteration"] > handles["context_chars_per_iteration"]
    assert doc["context_ratio"] > 1 and doc["f1_delta"] == 0.0
    rows = [json.loads(x) for x in (tmp_path / "leakage_runs.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and {r["arm"] for r in rows} == {"naive", "handles"}
    paths = write_leakage_outputs(doc, tmp_path)
    assert json.loads(paths[0].read_text())["handles"]["iterations"] == 4.0
    assert "naive / handles" in paths[1].read_text() and paths[2].stat().st_size > 0


def test_cli_leakage_and_tools(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    import memstrata.programs.executors as executors

    real = executors.interpreter_factory
    monkeypatch.setattr(executors, "interpreter_factory",
                        lambda kind="sandbox", home=None, **_: InProcessInterpreter
                        if kind == "sandbox" else real(kind))
    out = tmp_path / "e7"
    assert main(["bench", "leakage", "--data", str(data), "--lm", NAME, "--limit", "2",
                 "--out", str(out)]) == 0
    doc = json.loads((out / "leakage.json").read_text())
    assert doc["model"] == NAME and doc["questions"] == 2
    assert "prompt chars / iteration" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--max-iters"):
        main(["bench", "leakage", "--data", str(data), "--lm", NAME, "--max-iters", "0",
              "--out", str(out)])
    assert main(["bench", "tools", "--items", "1000", "--calls", "3",
                 "--out", str(tmp_path / "t")]) == 0
    tools = json.loads((tmp_path / "t" / "tools.json").read_text())
    assert set(tools["tools"]) >= {"mem_search", "mem_get", "ctx_find", "ctx_slice",
                                   "mem_add", "event_log", "store.get (floor)"}


def test_tool_bench_times_every_tool() -> None:
    doc = run_tool_bench(items=1000, calls=5, progress=False)
    assert all(v["p50_ms"] >= 0 and v["max_ms"] >= v["p50_ms"] for v in doc["tools"].values())
    assert doc["worst_p95"]["tool"] in doc["tools"] and doc["blob_chars"] > 100_000
