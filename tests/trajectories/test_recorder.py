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


# Issue 21 (secrets): found by ``memstrata bench reliability --only secrets``.


def test_any_value_under_a_secret_named_key_is_masked() -> None:
    out = redact({"credentials": ["plainvalue1", "plainvalue2"], "pin_password": 123456,
                  "token_count": 7, "auth": {"api_key": {"id": "x"}}, "api_key": None,
                  "sk-" + "k" * 30: "a key used as a key"})
    assert out["credentials"] == MASK and out["pin_password"] == MASK
    assert out["token_count"] == 7 and out["auth"]["api_key"] == MASK and out["api_key"] is None
    assert not any(k.startswith("sk-") for k in out)


@pytest.mark.parametrize("text", [
    "{'api_key': 'plainvalue99', 'n': 1}", '{"client_secret": "plainvalue99"}',
    'password=plainvalue99 then', '{\\"api_key\\": \\"plainvalue99\\"}',
    "Authorization: plainvalue99",
])
def test_a_secret_named_key_inside_text_is_masked(text: str) -> None:
    from memstrata.trajectories import redact_text

    assert "plainvalue99" not in redact_text(text)
    assert redact_text("max_tokens: 256, input_tokens=12") == "max_tokens: 256, input_tokens=12"


def test_the_event_log_is_stored_redacted_whoever_writes_it(store: Store) -> None:
    # tools.event_log and the reconciler write events straight to the store.
    key = "ghp_" + "E" * 36
    store.runs.log_event("u1", {"note": f"use {key}", "api_key": "plainvalue77",
                                "deep": [[{"password": "plainvalue77"}]]})
    raw = store.conn.execute("SELECT payload FROM events").fetchone()[0]
    assert key not in raw and "plainvalue77" not in raw and MASK in raw


def test_run_rows_are_redacted_by_the_store_itself(store: Store) -> None:
    # A caller that bypasses the Recorder still cannot store a key.
    from datetime import UTC, datetime

    from memstrata.memory.runs import RunRecord, StepRecord

    key = "sk-proj-" + "R" * 40
    run = RunRecord(id="r1", user_id="u1", program="p", task=key, config={"token": "abcdefgh"},
                    started_at=datetime.now(UTC))
    store.runs.start(run)
    store.runs.add_steps("r1", [StepRecord(kind="tool", name="t", input=key, data={"k": key})])
    store.runs.set_verdict("u1", "r1", {"why": key})
    dumped = json.dumps([r for r in store.conn.execute("SELECT * FROM runs").fetchall()]
                        + [r for r in store.conn.execute("SELECT * FROM run_steps").fetchall()])
    assert key not in dumped and "abcdefgh" not in dumped
    assert store.runs.get("u1", "r1") is not None  # ids and tenants are left alone


def test_a_key_is_masked_before_a_preview_cuts_it(store: Store) -> None:
    # The tool log cuts an argument to 200 chars and a refusal to 600: cut first, a key
    # that straddles the cut would be kept in part, no longer looking like a key.
    from memstrata.tools import ToolError, ToolSession

    key = "gho_" + "Q" * 36
    session = ToolSession(store, "u1")
    tools = {t.__name__: t for t in session.handle_tools()}
    with pytest.raises(ToolError) as refused:  # the key straddles the refusal's cut
        tools["mem_search"]("x" * 185 + " " + key, role="x" * 266 + f" {key} " + "y" * 400)
    assert "gho_QQQQ" not in str(refused.value)
    logged = json.dumps([c.model_dump() for c in session.log.calls])
    assert "QQQQQQQQQQQQQQQQ" not in logged


def test_log_records_are_redacted_once_a_model_is_set_up(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    import logging

    from memstrata.trajectories import redact_logs

    redact_logs()
    redact_logs()  # idempotent
    key = "hf_" + "L" * 30
    with caplog.at_level(logging.DEBUG, logger="some.library"):
        logging.getLogger("some.library").debug("sending %s with %s", key, {"api_key": "pv1234567"})
        try:
            raise RuntimeError(f"refused {key}")
        except RuntimeError:
            logging.getLogger("some.library").exception("failed")
    text = caplog.text
    assert key not in text and "pv1234567" not in text and "refused [REDACTED]" in text


def test_redaction_takes_linear_time_on_hostile_text() -> None:
    """Found by the reliability fuzzer: a key name unbounded on both sides made a run of
    10,000 letters take 15 s (every tool call redacts its arguments)."""
    import time

    from memstrata.memory.runs import redact_text

    started = time.perf_counter()
    for text in ("a" * 1_000_000, "token" * 200_000, "x_" * 500_000):
        redact_text(text)
    assert time.perf_counter() - started < 5
    assert redact_text("my_api_key=abc123") == "my_api_key=[REDACTED]"
