"""Disk and resource faults: the detectors count what they must, and the quick slice is
clean."""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from memstrata.bench.reliability import faults
from memstrata.bench.reliability.common import Context, Scenario
from memstrata.bench.reliability.fuzz import Outcome
from memstrata.memory import StoreError


def test_api_error_judge() -> None:
    full = StoreError("/x.db", sqlite3.SQLITE_FULL, "database or disk is full")
    assert faults.judge_api_error(Outcome(error=full)) is None
    assert faults.judge_api_error(Outcome(value=1)) is None
    raw = sqlite3.OperationalError("database or disk is full")
    assert faults.judge_api_error(Outcome(error=raw))[:2] == ("crashes", "not a StoreError")
    assert faults.judge_api_error(Outcome(timed_out=True))[1] == "hang"


def test_missing_rows_finds_a_lost_or_changed_write(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    committed = faults._seed(path, 3, random.Random(0))
    assert faults.missing_rows(path, committed) == []
    some = next(iter(committed))
    assert faults.missing_rows(path, {**committed, some: "other"}) == [some]
    assert faults.missing_rows(path, {"t_nope": "x"}) == ["t_nope"]


def test_check_file_counts_lost_writes_and_a_failed_integrity_check(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    committed = faults._seed(path, 3, random.Random(0))
    result = Scenario(name="x")
    faults._check_file(result, path, {**committed, "t_gone": "never written"})
    assert result.lost_writes == 1
    faults.corrupt(path, "zero_page", random.Random(0), {"turns": [3]})
    faults._check_file(result, path, committed)
    assert result.integrity_failures == 1


def test_read_only_trial_counts_a_store_that_is_not_read_only(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    committed = faults._seed(path, 2, random.Random(0))
    found = faults.read_only_trial(path, committed, tmp_path, real=False)
    assert [f["what"] for f in found] == ["read-only fault not in force"]


def test_disk_full_counts_an_error_that_is_not_a_store_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Undo the translation: the scenario sees a bare sqlite3 error and counts a crash."""
    from memstrata.memory import locking

    monkeypatch.setattr(locking, "store_error", lambda exc, path: None)
    result = Scenario(name="disk_full")
    faults._fill_api(result, tmp_path / "a.db", random.Random(0), Counter())
    assert result.crashes >= 1


def test_corrupt_trial_counts_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.memory import locking

    path = tmp_path / "s.db"
    committed = faults._seed(path, 3, random.Random(0))
    faults.corrupt(path, "header", random.Random(0), {})
    path.write_bytes(b"garbage header, not SQLite." + path.read_bytes()[27:])
    monkeypatch.setattr(locking, "store_error", lambda exc, path: None)
    result = Scenario(name="corrupt_file")
    faults.corrupt_trial(result, path, committed, "header", "header", Counter(), cli=True)
    assert result.crashes >= 1


def test_quick_slices_are_clean(tmp_path: Path) -> None:
    for name, run in faults.SCENARIOS.items():
        (tmp_path / name).mkdir()
        result = run(Context(work=tmp_path / name, quick=True, budget_s=60))
        assert result.attempts >= 4, name
        assert result.failures == 0, (name, result.details[:5])
