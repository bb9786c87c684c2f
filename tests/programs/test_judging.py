"""The judging policy: deterministic checks first, then the LLM judge, a versioned rubric,
and a judge that fails to parse falling back loudly to the checks."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from memstrata.programs.judge import JudgeRun
from memstrata.programs.judging import RUBRIC_VERSION, Check, JudgingPolicy, Verdict
from tests.conftest import field

TASK = "List every AHU that feeds a VAV in building 1"
TRAJECTORY = "step 1: SELECT ?ahu WHERE { ?ahu brick:feeds ?vav } -> 3 rows"
OUTPUT = "AHU-1, AHU-2, AHU-3"


def _never(system: str, user: str, schema: dict[str, Any] | None) -> Any:
    raise AssertionError("the LLM judge must not be called")


def _judge(success: bool, rationale: str):
    seen: list[dict[str, str]] = []

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        assert set((schema or {}).get("properties", {})) == {"success", "rationale"}
        seen.append({name: field(user, name) for name in ("task", "trajectory", "output")})
        return {"success": success, "rationale": rationale}

    return reply, seen


def test_failed_check_decides_failure_without_a_call(scripted: Any) -> None:
    handle = scripted(_never)
    checks = [Check(name="parses", passed=True),
              Check(name="runs", passed=False, message="syntax error at line 2"),
              Check(name="non_empty", passed=False)]
    v = JudgingPolicy().judge(task=TASK, trajectory=TRAJECTORY, output=OUTPUT,
                              checks=checks, handle=handle)
    assert (v.success, v.confidence, v.source) == (False, 1.0, "checks")
    assert v.failed_checks == ["runs", "non_empty"]
    assert "runs: syntax error at line 2" in v.rationale and "non_empty" in v.rationale
    assert v.rubric_version == RUBRIC_VERSION
    assert handle.meter.since(0).calls == 0


def test_passing_checks_without_llm_are_a_success_at_checks_confidence(scripted: Any) -> None:
    handle = scripted(_never)
    policy = JudgingPolicy(use_llm=False, checks_confidence=0.55)
    checks = [Check(name="parses", passed=True), Check(name="runs", passed=True)]
    v = policy.judge(task=TASK, trajectory=TRAJECTORY, output=OUTPUT, checks=checks,
                     handle=handle)
    assert (v.success, v.confidence, v.source) == (True, 0.55, "checks")
    assert "parses" in v.rationale and "runs" in v.rationale
    assert v.failed_checks == [] and v.rubric_version == RUBRIC_VERSION
    assert handle.meter.since(0).calls == 0


def test_no_model_means_checks_decide_alone() -> None:
    v = JudgingPolicy().judge(task=TASK, trajectory="", output="", checks=[], handle=None)
    assert (v.success, v.confidence, v.source) == (True, 0.6, "checks")
    assert "no checks" in v.rationale


@pytest.mark.parametrize("success", [True, False])
def test_llm_judge_decides_after_passing_checks(scripted: Any, success: bool) -> None:
    reply, seen = _judge(success, "the output lists the three AHUs the query returned")
    handle = scripted(reply)
    v = JudgingPolicy(llm_confidence=0.75).judge(
        task=TASK, trajectory=TRAJECTORY, output=OUTPUT,
        checks=[Check(name="runs", passed=True)], handle=handle)
    assert (v.success, v.confidence, v.source) == (success, 0.75, "llm")
    assert v.rationale == "the output lists the three AHUs the query returned"
    assert v.rubric_version == RUBRIC_VERSION and v.failed_checks == []
    assert handle.meter.since(0).calls == 1
    assert seen == [{"task": TASK, "trajectory": TRAJECTORY, "output": OUTPUT}]


def test_judge_sees_a_cut_trajectory_and_stand_ins_for_empty_fields(scripted: Any) -> None:
    reply, seen = _judge(True, "fine")
    handle = scripted(reply)
    policy = JudgingPolicy(trajectory_chars=200)
    policy.judge(task=TASK, trajectory="x" * 1000, output=OUTPUT, checks=[], handle=handle)
    policy.judge(task=TASK, trajectory="", output="", checks=[], handle=handle)
    assert seen[0]["trajectory"] == "x" * 200
    assert seen[1]["trajectory"] == "(no steps)" and seen[1]["output"] == "(no output)"
    assert handle.meter.since(0).calls == 2


def test_unparseable_judge_falls_back_to_checks_loudly(scripted: Any) -> None:
    handle = scripted(lambda system, user, schema: "it looks right to me")  # never JSON
    v = JudgingPolicy(checks_confidence=0.6).judge(
        task=TASK, trajectory=TRAJECTORY, output=OUTPUT,
        checks=[Check(name="runs", passed=True)], handle=handle)
    assert (v.success, v.confidence, v.source) == (True, 0.6, "checks (judge failed)")
    assert "judge failed" in v.rationale and "could not be parsed" in v.rationale
    assert "passed: runs" in v.rationale
    assert v.rubric_version == RUBRIC_VERSION
    assert handle.meter.since(0).calls == 2  # the first try and its one retry


def test_rubric_version_is_derived_from_the_rubric_text() -> None:
    digest = hashlib.sha256(JudgeRun.instructions.encode()).hexdigest()[:8]
    assert f"judge-run/1+{digest}" == RUBRIC_VERSION
    edited = JudgeRun.instructions + " Be strict."
    other = "judge-run/1+" + hashlib.sha256(edited.encode()).hexdigest()[:8]
    assert other != RUBRIC_VERSION  # editing the rubric changes the recorded version


def test_verdict_bounds_confidence() -> None:
    with pytest.raises(ValueError):
        Verdict(success=True, confidence=1.5, source="llm")


def test_judge_runs_on_a_wrapped_dummy_lm() -> None:
    import dspy

    from memstrata.programs import wrap_lm

    handle = wrap_lm(dspy.utils.DummyLM([{"success": "false", "rationale": "empty result"}],
                                        adapter=dspy.JSONAdapter()), "dummy")
    v = JudgingPolicy().judge(task=TASK, trajectory=TRAJECTORY, output="",
                              checks=[Check(name="parses", passed=True)], handle=handle)
    assert (v.success, v.source, v.rationale) == (False, "llm", "empty result")
    assert handle.meter.since(0).calls == 1
