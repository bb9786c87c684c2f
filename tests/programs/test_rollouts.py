"""The rollout policy: best-of selection by the judge (never gold), and per-rollout
sampling settings that are restored exactly after the block."""

from __future__ import annotations

from typing import Any

import dspy
import pytest

from memstrata.programs.judge import Judge
from memstrata.programs.judging import Verdict
from memstrata.programs.rollouts import RolloutPolicy


def v(success: bool, confidence: float = 0.8) -> Verdict:
    return Verdict(success=success, confidence=confidence, source="llm")


@pytest.mark.parametrize(("verdicts", "steps", "best"), [
    ([v(False, 1.0), v(True, 0.6)], [1, 9], 1),                 # success beats confidence
    ([v(True, 0.6), v(True, 0.8)], [1, 9], 1),                  # then higher confidence
    ([v(True), v(True), v(True)], [5, 3, 4], 1),                # then fewer steps
    ([v(False), v(True), v(True)], [1, 4, 4], 1),               # then the earlier rollout
    ([v(False, 0.6), v(False, 1.0)], [2, 2], 1),                # all failed: most confident
    ([v(True)], [7], 0),
])
def test_select_prefers_success_confidence_fewer_steps_then_earlier(
        verdicts: list[Verdict], steps: list[int], best: int) -> None:
    assert RolloutPolicy(n=len(verdicts)).select(verdicts, steps) == best


@pytest.mark.parametrize(("verdicts", "steps"), [([v(True)], [1, 2]), ([v(True), v(False)],
                                                                        [1]), ([], [])])
def test_select_needs_one_step_count_per_verdict(verdicts: list[Verdict],
                                                 steps: list[int]) -> None:
    with pytest.raises(ValueError):
        RolloutPolicy().select(verdicts, steps)


def _handle(scripted: Any, name: str = "local/scripted") -> Any:
    return scripted(lambda system, user, schema: {"success": True, "rationale": "ok"}, name)


def test_rollout_zero_changes_nothing(scripted: Any) -> None:
    handle = _handle(scripted)
    before = dict(handle.lm.kwargs)
    with RolloutPolicy(temperature=0.9).sampling(handle, 0):
        assert handle.lm.kwargs == before
    assert handle.lm.kwargs == before


def test_later_rollout_samples_inside_the_block_and_restores_after(scripted: Any) -> None:
    handle = _handle(scripted)
    handle.lm.kwargs["seed"] = 11  # a setting of the user's own, restored too
    before = dict(handle.lm.kwargs)
    with RolloutPolicy(temperature=0.9).sampling(handle, 2):
        assert handle.lm.kwargs["temperature"] == 0.9
        assert handle.lm.kwargs["rollout_id"] == 2
        assert handle.lm.kwargs["seed"] == 2  # local/ model: its own seed
        with dspy.context(lm=handle.lm):
            Judge()(task="t", trajectory="s", output="o")
    assert handle.lm.kwargs == before
    config = handle.lm.engine.requests[-1].config  # the call made inside the block
    assert config.temperature == 0.9 and config.seed == 2


def test_api_model_gets_no_seed(scripted: Any) -> None:
    handle = _handle(scripted, "openai/gpt-4o-mini")
    before = dict(handle.lm.kwargs)
    with RolloutPolicy(temperature=0.7).sampling(handle, 3):
        assert handle.lm.kwargs["temperature"] == 0.7
        assert handle.lm.kwargs["rollout_id"] == 3
        assert "seed" not in handle.lm.kwargs
    assert handle.lm.kwargs == before


def test_settings_are_restored_when_the_block_raises(scripted: Any) -> None:
    handle = _handle(scripted)
    before = dict(handle.lm.kwargs)
    kwargs = handle.lm.kwargs
    with pytest.raises(RuntimeError, match="rollout broke"), RolloutPolicy().sampling(handle, 1):
        assert kwargs["rollout_id"] == 1
        raise RuntimeError("rollout broke")
    assert handle.lm.kwargs == before and handle.lm.kwargs is kwargs
    assert "rollout_id" not in handle.lm.kwargs and "seed" not in handle.lm.kwargs

