"""Pruning old runs: which runs go, which stay, and the command line around it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memstrata.cli import main
from memstrata.memory import FactItem, Store
from memstrata.memory.runs import RunRecord, StepRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _run(store: Store, user: str, day: int, *, status: str = "ok", steps: int = 2) -> str:
    run_id = f"run_{user}_{day}"
    store.runs.start(RunRecord(id=run_id, user_id=user, program="demo", status=status,
                               started_at=T0 + timedelta(days=day)))
    store.runs.add_steps(run_id, [StepRecord(idx=i, kind="tool") for i in range(steps)])
    return run_id


def _ids(store: Store, user: str) -> set[str]:
    return {r.id for r in store.runs.list(user, limit=1000)}


def test_before_prunes_older_runs_with_their_steps_of_one_tenant_only(store: Store) -> None:
    for day in range(5):
        _run(store, "u1", day)
        _run(store, "u2", day)
    report = store.runs.prune("u1", before=T0 + timedelta(days=2, hours=1))
    assert (report.runs, report.steps) == (3, 6)
    assert _ids(store, "u1") == {"run_u1_3", "run_u1_4"}
    assert len(_ids(store, "u2")) == 5  # another tenant's runs are never touched
    assert store.runs.steps("u1", "run_u1_0") == []
    left = store.conn.execute("SELECT COUNT(*) FROM run_steps").fetchone()[0]
    assert left == 2 * 2 + 5 * 2


def test_keep_spares_the_newest_and_combines_with_before(store: Store) -> None:
    for day in range(6):
        _run(store, "u1", day)
    assert store.runs.prune("u1", keep=4).runs == 2
    assert _ids(store, "u1") == {f"run_u1_{d}" for d in (2, 3, 4, 5)}
    # Both rules: older than day 5 AND not among the 3 newest -> only day 2 goes.
    assert store.runs.prune("u1", before=T0 + timedelta(days=5), keep=3).runs == 1
    assert _ids(store, "u1") == {"run_u1_3", "run_u1_4", "run_u1_5"}
    assert store.runs.prune("u1", keep=0).runs == 3


def test_running_runs_and_cited_runs_stay_and_are_counted(store: Store) -> None:
    _run(store, "u1", 0, status="running")
    cited = _run(store, "u1", 1)
    _run(store, "u1", 2)
    store.add(FactItem(user_id="u1", text="learned from run one", evidence=[cited, "turn_9"]))
    late = T0 + timedelta(days=30)
    report = store.runs.prune("u1", before=late)
    assert (report.runs, report.kept_running, report.kept_evidence) == (1, 1, 1)
    assert _ids(store, "u1") == {"run_u1_0", cited}
    # keep_evidence=False (--drop-evidence) lets it go.
    assert store.runs.prune("u1", before=late, keep_evidence=False).runs == 1
    assert _ids(store, "u1") == {"run_u1_0"}


def test_a_retired_item_or_another_tenant_does_not_protect_runs(store: Store) -> None:
    cited = _run(store, "u1", 1)
    fid = store.add(FactItem(user_id="u1", text="old lesson", evidence=[cited]))
    store.update("u1", fid, valid_to=T0 + timedelta(days=2))
    store.add(FactItem(user_id="u2", text="same id, other tenant", evidence=[cited]))
    assert store.runs.prune("u1", keep=0).runs == 1


def test_dry_run_counts_and_deletes_nothing(store: Store) -> None:
    for day in range(3):
        _run(store, "u1", day)
    report = store.runs.prune("u1", keep=1, dry_run=True)
    assert report.dry_run and (report.runs, report.steps) == (2, 4)
    assert len(_ids(store, "u1")) == 3


def test_prune_refuses_without_a_rule(store: Store) -> None:
    with pytest.raises(ValueError, match="needs a rule"):
        store.runs.prune("u1")
    with pytest.raises(ValueError, match="keep must be"):
        store.runs.prune("u1", keep=-1)


def test_runs_prune_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "m.db"
    with Store.open(db) as store:
        for day in range(4):
            _run(store, "u1", day)
        _run(store, "u1", 9999)  # far in the future: --older-than keeps it
    base = ["runs", "prune", "--db", str(db), "--user", "u1"]
    assert main([*base, "--before", "2026-01-03", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "runs": 2, "steps": 4, "kept_running": 0, "kept_evidence": 0, "dry_run": True}
    assert main([*base, "--older-than", "1", "--keep", "2", "--vacuum"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["runs"] == 3 and out["vacuumed"] is True
    with Store.open(db) as store:
        assert _ids(store, "u1") == {"run_u1_3", "run_u1_9999"}


@pytest.mark.parametrize(("extra", "message"), [
    ([], "needs a rule"),
    (["--keep", "x"], "not a whole number"),
    (["--before", "the blue moon"], "not a date"),
    (["--older-than", "-3"], "not a number of days"),
])
def test_runs_prune_command_refuses_bad_input(tmp_path: Path, extra: list[str], message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "m.db"
    Store.open(db).close()
    with pytest.raises(SystemExit) as exc:
        main(["runs", "prune", "--db", str(db), "--user", "u1", *extra])
    # argparse reports a bad value on stderr; a missing rule is the exit's message.
    assert message in capsys.readouterr().err + str(exc.value)


def test_runs_prune_command_needs_a_user(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    Store.open(db).close()
    with pytest.raises(SystemExit, match="needs --user"):
        main(["runs", "prune", "--db", str(db), "--keep", "1"])


def test_runs_commands_take_enormous_numbers(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the reliability fuzzer: these raised OverflowError with a traceback."""
    db = tmp_path / "m.db"
    with Store.open(db) as store:
        _run(store, "u1", 1)
    huge = str(10**30)
    assert main(["runs", "list", "--db", str(db), "--user", "u1", "-n", huge]) == 0
    assert main(["runs", "prune", "--db", str(db), "--user", "u1", "--keep", huge]) == 0
    for days in ("inf", "1e300"):
        with pytest.raises(SystemExit, match="not a usable number of days"):
            main(["runs", "prune", "--db", str(db), "--user", "u1", "--older-than", days])
    with Store.open(db) as store:
        assert _ids(store, "u1") == {"run_u1_1"}
