"""Hostile-input fuzzing: the detectors count what they must, and the quick slice is clean."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memstrata.bench.reliability import fuzz
from memstrata.bench.reliability.common import Context
from memstrata.bench.reliability.fuzz import Outcome, call_capped, judge_api, judge_cli, judge_tool
from memstrata.tools import ToolError

SECRETS = ["zebramark0000q", "t_" + "a" * 24]


def _tool(outcome: Outcome, given: list[str] | None = None) -> tuple[str, str, str] | None:
    return judge_tool(outcome, secrets=SECRETS, given=given or [], max_chars=1000,
                      max_error_chars=100)


def test_tool_judge_counts_each_broken_promise() -> None:
    assert _tool(Outcome(value={"ok": 1})) is None
    assert _tool(Outcome(error=ToolError("k must be a whole number"))) is None
    assert _tool(Outcome(error=TypeError("boom")))[:2] == ("crashes", "exception")
    assert _tool(Outcome(error=ToolError("x" * 101)))[1] == "unbounded refusal"
    assert _tool(Outcome(value={"text": "y" * 2000}))[1] == "unbounded result"
    assert _tool(Outcome(value={"f": object()}))[1] == "result not JSON"
    assert _tool(Outcome(timed_out=True, seconds=9))[1] == "hang"
    leak = Outcome(value={"text": "bob said zebramark0000q"})
    assert _tool(leak)[:2] == ("breaches", "other tenant in a result")
    assert _tool(leak, given=["find zebramark0000q"]) is None  # the caller's own words
    refusal = Outcome(error=ToolError("no memory t_" + "a" * 24))
    assert _tool(refusal)[0] == "breaches"


def test_api_judge_allows_documented_errors_and_ill_typed_type_errors() -> None:
    def judge(error: BaseException, well_typed: bool = True) -> tuple[str, str, str] | None:
        return judge_api(Outcome(error=error), secrets=SECRETS, given=[],
                         allowed=(ValueError,), well_typed=well_typed)

    assert judge(ValueError("bad id")) is None
    assert judge(TypeError("int given"), well_typed=False) is None
    assert judge(TypeError("internal"))[0] == "crashes"
    assert judge(KeyError("x"))[0] == "crashes"
    assert fuzz.conforms("a", str | None) and not fuzz.conforms(5, str | None)


def test_cli_judge() -> None:
    ok = Outcome(value=0)
    assert judge_cli(ok, "{}", "", secrets=SECRETS, argv=[], tenant_bound=True) is None
    refused = Outcome(value=2)
    assert judge_cli(refused, "", "memstrata: no store\n", secrets=SECRETS, argv=[],
                     tenant_bound=True) is None
    usage = Outcome(error=SystemExit(2))
    assert judge_cli(usage, "", "usage: memstrata add\nmemstrata add: error: bad\n",
                     secrets=SECRETS, argv=[], tenant_bound=True) is None
    assert judge_cli(Outcome(error=SystemExit("memstrata: one line")), "", "",
                     secrets=SECRETS, argv=[], tenant_bound=True) is None
    crash = Outcome(error=KeyError("k"))
    assert judge_cli(crash, "", "", secrets=SECRETS, argv=[], tenant_bound=True)[1] == (
        "uncaught exception")
    trace = "Traceback (most recent call last):\n  File x\nValueError: y\n"
    assert judge_cli(refused, "", trace, secrets=SECRETS, argv=[], tenant_bound=True)[1] == (
        "traceback on stderr")
    assert judge_cli(refused, "", "memstrata: a\nmore\n", secrets=SECRETS, argv=[],
                     tenant_bound=True)[1] == "error not one line"
    assert judge_cli(ok, "zebramark0000q", "", secrets=SECRETS, argv=["search"],
                     tenant_bound=True)[0] == "breaches"
    assert judge_cli(ok, "zebramark0000q", "", secrets=SECRETS, argv=["get"],
                     tenant_bound=False) is None


def test_call_cap_interrupts_a_hang() -> None:
    def spin() -> None:
        end = time.monotonic() + 5
        while time.monotonic() < end:
            pass

    outcome = call_capped(spin, 0.2)
    assert outcome.timed_out and outcome.seconds < 2
    assert call_capped(lambda: 1, 1).value == 1


def test_strings_in_survives_deep_nesting() -> None:
    deep = fuzz._nested(100_000, as_dict=True)
    assert "bottom" in fuzz.strings_in(deep, limit=300_000)
    assert fuzz.leaked("x zebramark0000q", SECRETS, []) == ["zebramark0000q"]


def test_scenario_counts_a_tool_that_leaks_and_one_that_crashes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole loop can fail: a broken tool is caught by the scenario itself."""
    from memstrata.tools import session

    def ctx_stats(b, ref):  # type: ignore[no-untyped-def]
        raise TypeError("a bug inside the tool")

    def ctx_peek(b, ref, n=None):  # type: ignore[no-untyped-def]
        return {"keys": b.store.blobs.keys("bob")}  # another tenant's blob names

    # One tool that always crashes and one that always leaks: however the examples are
    # drawn, each is called at least once.
    monkeypatch.setattr(session, "HANDLE_TOOLS",
                        (ctx_stats, ctx_peek, *session.HANDLE_TOOLS[2:]))
    # A budget far above the quick slice's need: a loaded machine must not end it early.
    result = fuzz.hostile_tools(Context(work=tmp_path, quick=True, budget_s=600))
    assert result.crashes > 0 and result.breaches > 0


def test_quick_slices_are_clean(tmp_path: Path) -> None:
    for name, run in fuzz.SCENARIOS.items():
        (tmp_path / name).mkdir()
        result = run(Context(work=tmp_path / name, quick=True, budget_s=60))
        assert result.attempts >= 150, name
        assert result.failures == 0, result.details[:5]
        assert result.figures["peak_rss_mb"] > 0
