"""Run records: what is written, how secrets are masked, how failures and exports look."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memstrata.memory import FactItem, Store
from memstrata.trajectories import MASK, Recorder, export_jsonl, measure, redact


def test_a_run_records_config_steps_outcome_and_provenance(store: Store) -> None:
    store.add(FactItem(user_id="u1", text="Alice likes tea"))
    with Recorder(store, "u1", "qa", task="What does Alice like?", config={"k": 5},
                  layers=["items"]) as run:
        run.step("retrieve", "hybrid", input="Alice like", output=["i_1", "i_2"],
                 data={"ids": ["i_1", "i_2"]})
        run.step("pack", "lines", output="x" * 5000, data={"tokens": 120})
        run.finish(output={"answer": "tea"}, verdict={"success": True},
                   usage={"calls": 1, "input_tokens": 300})
    rec = store.runs.get("u1", run.run_id)
    assert rec.status == "ok" and rec.output == {"answer": "tea"} and rec.layers == ["items"]
    assert rec.verdict == {"success": True} and rec.usage["input_tokens"] == 300
    assert rec.git_commit and rec.db_state["rows"]["items"] == 1 and rec.wall_s >= 0
    steps = store.runs.steps("u1", run.run_id)
    assert [s.kind for s in steps] == ["retrieve", "pack"]
    assert steps[1].output_chars == 5000 and len(steps[1].output) == 2000  # preview bounded
    assert store.runs.get("u2", run.run_id) is None  # runs are tenant-scoped


def test_an_exception_marks_the_run_failed_and_keeps_its_steps(store: Store) -> None:
    with pytest.raises(ZeroDivisionError), Recorder(store, "u1", "demo") as run:
        run.step("code", input="1/0")
        _ = 1 / 0
    rec = store.runs.get("u1", run.run_id)
    assert rec.status == "error" and "ZeroDivisionError" in rec.error
    assert len(store.runs.steps("u1", run.run_id)) == 1


def test_db_state_pointer_changes_with_the_data(store: Store) -> None:
    before = store.state_pointer("u1")
    fid = store.add(FactItem(user_id="u1", text="one"))
    after = store.state_pointer("u1")
    assert before["digest"] != after["digest"] and after["max_rowid"]["items"] >= 1
    store.update("u1", fid, text="one, edited")
    assert store.state_pointer("u1")["digest"] != after["digest"]
    assert store.state_pointer("u2")["rows"]["items"] == 0


@pytest.mark.parametrize("secret", [
    "sk-" + "a" * 40, "sk-ant-api03-" + "b" * 30, "Bearer abcdefghijklmnop.qrs",
    "AKIA" + "A" * 16, "ghp_" + "c" * 36, "hf_" + "d" * 30, "AIza" + "e" * 35,
])
def test_credential_shapes_are_masked(secret: str) -> None:
    assert secret not in json.dumps(redact({"note": f"token is {secret} ok"}))


def test_passwords_in_urls_are_masked() -> None:
    out = redact({"api_base": "http://admin:s3cr3t-pw@10.0.0.5:11434/v1"})
    assert "s3cr3t-pw" not in out["api_base"] and out["api_base"].endswith("@10.0.0.5:11434/v1")


def test_secret_keys_and_env_values_are_masked(monkeypatch: pytest.MonkeyPatch,
                                               store: Store, tmp_path: Path) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "plain-looking-value-123")
    cfg = {"api_key": "anything", "max_tokens": 256, "nested": {"Authorization": "x y z"},
           "headers": [{"password": "pw"}], "note": "key=plain-looking-value-123"}
    out = redact(cfg)
    assert out["api_key"] == MASK and out["max_tokens"] == 256
    assert out["nested"]["Authorization"] == MASK and out["headers"][0]["password"] == MASK
    assert "plain-looking-value-123" not in out["note"]
    with Recorder(store, "u1", "demo", config=cfg, task="uses plain-looking-value-123") as run:
        run.step("llm", input={"api_key": "k"}, output="plain-looking-value-123")
        run.finish()
    export_jsonl(store, tmp_path / "r.jsonl")
    text = (tmp_path / "r.jsonl").read_text()
    assert "plain-looking-value-123" not in text and '"anything"' not in text


def test_export_writes_one_line_per_run_with_steps(store: Store, tmp_path: Path) -> None:
    for i in range(3):
        with Recorder(store, f"u{i % 2}", "demo", task=f"t{i}") as run:
            run.step("tool", f"s{i}")
    assert export_jsonl(store, tmp_path / "all.jsonl") == 3
    assert export_jsonl(store, tmp_path / "u0.jsonl", user_id="u0") == 2
    rows = [json.loads(x) for x in (tmp_path / "u0.jsonl").read_text().splitlines()]
    assert {r["user_id"] for r in rows} == {"u0"} and all(len(r["steps"]) == 1 for r in rows)


def test_leakage_figures() -> None:
    lk = measure(context_chars=[1000, 3000], stdout_chars=50, variables_info_chars=200,
                 tool_return_sizes=[10, 2500, 4000], large_return_threshold=2000,
                 sub_calls=1, llm_calls=4)
    assert lk.iterations == 2 and lk.context_chars_mean == 2000.0
    assert lk.large_returns == 2 and lk.tool_calls == 3 and lk.tool_return_chars == 6510
    assert measure(context_chars=[], stdout_chars=0, variables_info_chars=0,
                   tool_return_sizes=[], large_return_threshold=1, sub_calls=0,
                   llm_calls=0).context_chars_mean == 0.0
