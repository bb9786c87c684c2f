"""The judging policy: deterministic checks first, then an LLM judge with a versioned rubric.

ReasoningBank labels each run success or failure with an LLM judge and learns from both.
A judge must not see the gold answer (the closed loop would then learn from labels it
will not have in use), so this policy works from what the agent itself could check:

1. **Checks** the task suite supplies (for SPARQL: the query parses, runs, returns rows,
   shows no anti-pattern). Any failed check decides *failure* with confidence 1 and no
   LLM call: a query that does not run is not a success, whatever a judge says.
2. **The LLM judge** (``Judge``, rubric ``JudgeRun``) decides between the rest. Its
   ``rubric_version`` is the rubric's text hashed, so editing the rubric changes the
   version recorded with every verdict and runs under different rubrics are told apart.
3. Without an LLM (``use_llm=False``, or no judge model) the checks decide alone: passing
   them is a *success* at ``checks_confidence``.

A judge that returns unparseable output twice is not silent: the verdict falls back to
the checks, its ``source`` says ``checks (judge failed)`` and the rationale quotes the
error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import dspy
from pydantic import BaseModel, Field

from .errors import ProgramParseError
from .judge import Judge, JudgeRun
from .lm import ModelHandle

RUBRIC_VERSION = "judge-run/1+" + hashlib.sha256(
    JudgeRun.instructions.encode()).hexdigest()[:8]
"""The rubric's name and a hash of its text: recorded with every verdict."""


class Check(BaseModel):
    """One deterministic check of an attempt, as a task suite reports it."""

    name: str
    passed: bool
    message: str = ""


class Verdict(BaseModel):
    """The judging policy's verdict on one attempt (the agent's own view, not gold)."""

    success: bool
    confidence: float = Field(ge=0.0, le=1.0)
    source: str = Field(description="'checks', 'llm', or 'checks (judge failed)'")
    rationale: str = ""
    rubric_version: str = ""
    failed_checks: list[str] = Field(default_factory=list)


class JudgingPolicy(BaseModel):
    """Success or failure of an attempt: deterministic checks first, then the LLM judge.

    Attributes:
        use_llm: ask the LLM judge when every check passed.
        checks_confidence: the confidence of a success decided by checks alone.
        llm_confidence: the confidence recorded for an LLM verdict (the judge states none).
        trajectory_chars: the trajectory shown to the judge is cut to this.
    """

    use_llm: bool = True
    checks_confidence: float = Field(0.6, ge=0.0, le=1.0)
    llm_confidence: float = Field(0.8, ge=0.0, le=1.0)
    trajectory_chars: int = Field(3000, ge=200)

    def judge(self, *, task: str, trajectory: str, output: str, checks: Sequence[Check],
              handle: ModelHandle | None = None) -> Verdict:
        """The verdict on one attempt; makes at most one LLM call (two on a parse retry)."""
        failed = [c for c in checks if not c.passed]
        if failed:
            why = "; ".join(f"{c.name}: {c.message}" if c.message else c.name for c in failed)
            return Verdict(success=False, confidence=1.0, source="checks",
                           rationale=f"failed checks: {why}"[:500],
                           rubric_version=RUBRIC_VERSION,
                           failed_checks=[c.name for c in failed])
        passed = ", ".join(c.name for c in checks) or "no checks"
        if not self.use_llm or handle is None:
            return Verdict(success=True, confidence=self.checks_confidence, source="checks",
                           rationale=f"passed: {passed}", rubric_version=RUBRIC_VERSION)
        try:
            with dspy.context(lm=handle.lm):
                out = Judge()(task=task, trajectory=trajectory[:self.trajectory_chars] or
                              "(no steps)", output=output or "(no output)")
        except ProgramParseError as exc:
            return Verdict(success=True, confidence=self.checks_confidence,
                           source="checks (judge failed)",
                           rationale=f"passed: {passed}; judge failed: {exc}"[:500],
                           rubric_version=RUBRIC_VERSION)
        return Verdict(success=bool(out.success), confidence=self.llm_confidence, source="llm",
                       rationale=str(out.rationale)[:500], rubric_version=RUBRIC_VERSION)
