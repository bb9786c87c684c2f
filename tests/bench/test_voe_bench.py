"""``bench voe``: the chi-squared decision, session picking, and a scripted A/B run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memstrata.bench.locomo import read_locomo
from memstrata.bench.voe import decide, pick_sessions, run_voe_bench, write_voe_outputs
from memstrata.cli import main
from tests.conftest import FakeEmbedder, field, locomo_record


def test_chi_squared_decision_on_constructed_tables() -> None:
    strong = decide([[60, 40], [30, 70]])  # 60% vs 30%: +100%, p ~ 2e-5
    assert strong["passed"] and strong["p_value"] < 0.001 and strong["improvement"] == 1.0
    small = decide([[33, 67], [30, 70]])  # +10%, not significant
    assert not small["passed"] and small["p_value"] > 0.05
    lucky = decide([[6, 4], [3, 7]])  # +100% but only 20 turns: p > 0.05
    assert not lucky["passed"] and lucky["improvement"] == 1.0
    assert decide([[0, 5], [0, 5]]) == {"table": [[0, 5], [0, 5]], "voe_rate": 0.0,
                                        "baseline_rate": 0.0, "p_value": 1.0,
                                        "improvement": 0.0, "passed": False}
    assert decide([[4, 1], [0, 5]])["improvement"] is None  # from zero: no finite ratio


def test_sessions_are_spread_then_kept_in_order(write_json) -> None:
    convs = read_locomo(write_json("d.json", [locomo_record("a"), locomo_record("b")]))
    picked = pick_sessions(convs, 3)
    assert [(c.sample_id, i) for c, i, _ in picked] == [("a", 1), ("a", 2), ("b", 1)]


def _replayer(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    """Predicts well only once a fact about the user is in its prompt."""
    props = (schema or {}).get("properties", {})
    if "fact" in props:
        return {"fact": "Alice talks about her pets", "tags": ["pets"], "prediction": "pets",
                "needed_info": ["pets"]}
    if "prediction" in props:
        return {"prediction": "pets", "needed_info": ["pets"]}
    knows = "pets" in field(user, "facts")
    return {"reply": "ok", "next_prediction": "I adopted a guinea pig named Oscar last week."
            if knows else "Tell me about the weather"}


def _sessions() -> dict[int, list[dict[str, Any]]]:
    out = {}
    for n in (1, 2, 3):
        turns = []
        for i in range(6):
            text = "I adopted a guinea pig named Oscar last week." if i % 2 else "Nice day"
            turns += [{"speaker": "Alice", "dia_id": f"D{n}:{2 * i + 1}", "text": text},
                      {"speaker": "Bob", "dia_id": f"D{n}:{2 * i + 2}", "text": "Cool"}]
        out[n] = turns
    return out


def test_scripted_ab_run_writes_the_interface(write_json, tmp_path, scripted) -> None:
    data = write_json("d.json", [locomo_record("c1", sessions=_sessions())])
    doc = run_voe_bench(data, scripted(_replayer), tmp_path, embedder=FakeEmbedder(),
                        limit=3, progress=False)
    arms = doc["arms"]
    assert set(arms) == {"baseline", "voe"} and {"hits", "turns"} <= set(arms["voe"])
    # Two calls a turn, but a session's last turn closes the chat with none here (the VoE
    # arm predicted it, the baseline distils nothing): 3 sessions x 2 arms x 5 x 2 / 36.
    assert doc["llm_calls_per_turn"] == round(60 / 36, 3) and doc["failures"] == 0
    assert arms["voe"]["hits"] > arms["baseline"]["hits"] == 0
    assert arms["voe"]["facts_stored"] >= 1
    assert doc["cosine"] is not None and "hits_cosine" in arms["voe"]
    assert set(doc) >= {"p_value", "improvement", "passed", "llm_calls_per_turn"}
    # Each session starts with no cached prediction: 6 user turns, 5 of them scored.
    assert arms["voe"]["user_turns"] == 18 and arms["voe"]["turns"] == 15
    paths = write_voe_outputs(doc, tmp_path)
    assert json.loads(paths[0].read_text())["arms"]["voe"]["turns"] == 15
    assert len((tmp_path / "voe_turns.jsonl").read_text().splitlines()) == 36


def test_cli_bench_voe(write_json, tmp_path, scripted, monkeypatch) -> None:
    import memstrata.programs as programs

    monkeypatch.setattr(programs, "setup_lm", lambda *a, **k: scripted(_replayer))
    data = write_json("d.json", [locomo_record("c1")])
    assert main(["bench", "voe", "--data", str(data), "--limit", "2", "--no-dense",
                 "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "voe.json").read_text())["sessions"] == 2
    with pytest.raises(SystemExit, match="--limit"):
        main(["bench", "voe", "--data", str(data), "--limit", "0", "--out", str(tmp_path)])
