"""The reliability suite's runner: the document's shape, the verdict, the exit code."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from memstrata.bench.reliability import suite
from memstrata.bench.reliability.common import HEADLINE, Context, Scenario
from memstrata.cli import main


def _clean(ctx: Context) -> Scenario:
    result = Scenario(name="clean", attempts=3)
    (ctx.work / "wrote.txt").write_text("x")
    return result


def _broken(ctx: Context) -> Scenario:
    result = Scenario(name="broken", attempts=2)
    result.fail("lost_writes", "a write vanished", id="t1")
    result.fail(None, "slow but harmless")
    return result


@pytest.fixture
def fake_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, scenarios in (("fake_ok", {"clean": _clean}), ("fake_bad", {"broken": _broken})):
        module = types.ModuleType(f"memstrata.bench.reliability.{name}")
        module.SCENARIOS = scenarios  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(suite, "MODULES", ("fake_ok", "fake_bad"))
    monkeypatch.setattr(suite, "BUDGET_S", {"fake_ok": 5.0, "fake_bad": 5.0})


def test_document_shape_and_headline_sums(fake_modules: None, tmp_path: Path) -> None:
    doc = suite.run_suite(tmp_path / "out", quick=True)
    written = json.loads((tmp_path / "out" / "reliability.json").read_text())
    assert set(written["scenarios"]) == {"clean", "broken"}
    for counter in HEADLINE:
        assert isinstance(written[counter], int)
    broken = written["scenarios"]["broken"]
    assert (broken["attempts"], broken["failures"]) == (2, 2)
    assert broken["details"][0]["failure"] == "a write vanished"
    assert written["lost_writes"] == 1 and written["failures"] == 2
    assert doc["ok"] is False
    assert (tmp_path / "out" / "reliability.png").stat().st_size > 0
    assert "broken | 2 | 2" in (tmp_path / "out" / "reliability.md").read_text()


def test_only_selects_and_unknown_names_are_refused(fake_modules: None, tmp_path: Path) -> None:
    doc = suite.run_suite(tmp_path / "out", quick=True, only={"clean"})
    assert list(doc["scenarios"]) == ["clean"] and doc["ok"] is True
    with pytest.raises(ValueError, match="unknown scenarios"):
        suite.run_suite(tmp_path / "out", only={"nope"})


def test_work_folder_is_kept_only_when_named(fake_modules: None, tmp_path: Path) -> None:
    suite.run_suite(tmp_path / "out", quick=True, only={"clean"}, work=tmp_path / "w", keep=True)
    assert (tmp_path / "w" / "clean" / "wrote.txt").exists()


def test_command_exits_non_zero_on_a_headline_failure(
        fake_modules: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "reliability", "--quick", "--only", "clean",
                 "--out", str(tmp_path / "a")]) == 0
    assert main(["bench", "reliability", "--quick", "--out", str(tmp_path / "b")]) == 1
    assert "lost_writes 1" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="unknown scenarios"):
        main(["bench", "reliability", "--only", "zzz", "--out", str(tmp_path / "c")])


def test_fail_refuses_an_unknown_counter() -> None:
    with pytest.raises(ValueError, match="unknown counter"):
        Scenario(name="x").fail("typo", "what")


def test_context_deadline_and_sizes(tmp_path: Path) -> None:
    ctx = Context(work=tmp_path, quick=True, budget_s=0.0)
    assert ctx.expired() and ctx.sized(3, 300) == 3
    assert not Context(work=tmp_path, budget_s=60).expired()
    assert Context(work=tmp_path).sized(3, 300) == 300


def test_a_scenario_that_could_not_run_is_named(tmp_path: Path) -> None:
    skipped = Scenario(name="sandbox_escape")
    skipped.fail(None, "the sandbox is not installed")
    skipped.figures["skipped"] = True
    doc = suite.summarise({"sandbox_escape": skipped, "clean": Scenario(name="clean")})
    assert doc["skipped"] == ["sandbox_escape"]
    assert "NOT RUN (see their details): sandbox_escape" in suite.table(doc)


def test_a_scenario_that_checked_nothing_fails_the_run(tmp_path: Path) -> None:
    idle = Scenario(name="tenancy_under_load")  # ran, and made no call before its deadline
    skipped = Scenario(name="sandbox_escape", figures={"skipped": True})
    doc = suite.summarise({"tenancy_under_load": idle, "sandbox_escape": skipped,
                           "clean": Scenario(name="clean", attempts=3)})
    assert doc["checked_nothing"] == ["tenancy_under_load"] and doc["ok"] is False
    assert not any(doc[c] for c in HEADLINE)  # no counter says why: the list does
    assert "CHECKED NOTHING (no attempt made): tenancy_under_load" in suite.table(doc)
    ran = suite.summarise({"clean": Scenario(name="clean", attempts=1), "sandbox_escape": skipped})
    assert ran["checked_nothing"] == [] and ran["ok"] is True
