"""``memstrata rlm``, ``runs`` and ``sandbox`` from the command line, on a scripted model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstrata.cli import main
from tests.conftest import field, locomo_record


def plan(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    if "code" in (schema or {}).get("properties", {}):
        if field(user, "iteration").startswith("1/"):
            return {"reasoning": "look", "code":
                    "r = mem_search('guinea pig')\nprint(r['results'][0]['description'])"}
        return {"reasoning": "done", "code": "SUBMIT(answer='Oscar')"}
    return {"reasoning": "", "answer": "fallback"}


@pytest.fixture
def db(write_json, tmp_path: Path) -> Path:
    data = write_json("l.json", [locomo_record("conv-1")])
    path = tmp_path / "m.db"
    assert main(["load", str(data), "--db", str(path), "--no-embed"]) == 0
    return path


def test_rlm_command_shows_steps_and_records_the_run(db: Path, scripted: Any,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    import memstrata.programs as programs

    monkeypatch.setattr(programs, "setup_lm", lambda *a, **k: scripted(plan))
    code = main(["rlm", "What is the guinea pig called?", "--user", "conv-1", "--db", str(db),
                 "--interpreter", "local"])
    captured = capsys.readouterr()
    assert code == 0 and "NOT a sandbox" in captured.err
    assert "── iteration 1" in captured.out and "→ mem_search(" in captured.out
    assert "answer: Oscar" in captured.out and "guinea pig named Oscar" in captured.out
    run_id = captured.out.split("recorded as run ")[1].split()[0]

    assert main(["runs", "list", "--db", str(db)]) == 0
    listed = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert listed[0]["id"] == run_id and listed[0]["status"] == "ok"
    assert main(["runs", "list", "--db", str(db), "--user", "nobody"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "no runs recorded for user 'nobody'" in err
    assert main(["runs", "show", run_id, "--user", "conv-1", "--db", str(db)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [s["kind"] for s in shown["steps"]] == ["iteration", "tool", "iteration"]
    assert shown["config"]["context"] == {"conv_1": "BlobRef(key='conv-1', n=" +
                                          shown["config"]["context"]["conv_1"].split("n=")[1]}
    out = tmp_path / "runs.jsonl"
    assert main(["runs", "export", "--db", str(db), "--out", str(out)]) == 0
    assert json.loads(out.read_text().splitlines()[0])["id"] == run_id


def test_rlm_command_refuses_bad_input_clearly(db: Path) -> None:
    with pytest.raises(SystemExit, match="empty"):
        main(["rlm", "  ", "--user", "conv-1", "--db", str(db)])
    with pytest.raises(SystemExit, match="nothing stored"):
        main(["rlm", "q?", "--user", "nobody", "--db", str(db), "--lm", "local/x"])
    with pytest.raises(SystemExit, match="no blob 'nope'"):
        main(["rlm", "q?", "--user", "conv-1", "--db", str(db), "--blob", "nope"])
    with pytest.raises(SystemExit, match="no store"):
        main(["rlm", "q?", "--user", "conv-1", "--db", str(db.with_name("absent.db"))])
    with pytest.raises(SystemExit, match="runs show needs --user"):
        main(["runs", "show", "x", "--db", str(db)])


def test_caps_flag_is_validated(db: Path) -> None:
    with pytest.raises(SystemExit, match="--caps must be a JSON object"):
        main(["rlm", "q?", "--user", "conv-1", "--db", str(db), "--caps", "{bad"])
    with pytest.raises(SystemExit, match="--caps must be a JSON object"):
        main(["rlm", "q?", "--user", "conv-1", "--db", str(db), "--caps", '{"max_get": 0}'])


def test_sandbox_limit_flags_reach_the_settings_and_are_validated(db: Path) -> None:
    from memstrata.agent_commands import executor_settings_from_args
    from memstrata.cli import build_parser

    args = build_parser().parse_args(["rlm", "q?", "--user", "conv-1", "--sandbox-time-s", "5",
                                      "--sandbox-memory-mb", "512"])
    limits = executor_settings_from_args(args).sandbox_limits()
    assert (limits.time_s, limits.memory_mb) == (5.0, 512)
    with pytest.raises(SystemExit, match="--sandbox-memory-mb"):
        main(["rlm", "q?", "--user", "conv-1", "--db", str(db), "--sandbox-memory-mb", "100"])


def test_search_takes_iso_dates_and_refuses_others_clearly(
        db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "guinea pig", "--user", "conv-1", "--db", str(db), "--no-dense",
                 "--since", "2000-01-01", "--until", "2100-01-01T00:00"]) == 0
    assert "guinea pig" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["search", "guinea pig", "--user", "conv-1", "--db", str(db), "--since",
              "the blue moon"])
    assert "not a date: 'the blue moon'" in capsys.readouterr().err
