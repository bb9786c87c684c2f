"""The extraction policy: distil at most N strategies and guardrails from judged attempts.

ReasoningBank (google-research) extracts up to 3 items (title, description, content) per
run, from successes as strategies and from failures as lessons. This policy does the
same and goes further in three ways:

- **Two methods.** ``llm`` asks the model (``DistillRun``); ``trace`` distils without
  one: a success keeps the answer that worked for that question, a failure keeps the
  checks it failed and the answer that failed them. ``trace`` is the AWM-style "keep the
  workflow" baseline and what a model too weak to generalise can still learn from.
- **Contrastive extraction** (MaTTS v1): with several rollouts of one task of which some
  succeeded and some failed, ``ContrastRuns`` reads both sides and names what the
  successes did that the failures did not. When every rollout had the same outcome
  (the usual case, on a weak model or an easy task), ``ConsistentRuns`` reads them all
  and keeps what they share: steps every success took are the reliable ones, mistakes
  every failure made the real lessons (ReasoningBank's self-contrast).
- **No generic noise.** Every draft passes the bank's own noise rule
  (``ConsolidationPolicy.noise``: too short, no content words, a repetition loop, or
  near "be careful"), must not merely restate the question, and must not repeat another
  draft of the same run, before it counts towards N; dropped drafts are reported with
  the reason.

Polarity follows the judge's verdict (never gold): a successful attempt gives
``success`` items, a failed one ``failure`` guardrails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

import dspy
from pydantic import BaseModel, Field, StringConstraints
from rapidfuzz import fuzz

from memstrata.memory.bank import ConsolidationPolicy, fold
from memstrata.memory.models import StrategyItem
from memstrata.packers.fit import flatten

from .judging import Verdict
from .lm import ModelHandle
from .structured import StructuredPredict

Title = Annotated[str, StringConstraints(max_length=80)]
Sentence = Annotated[str, StringConstraints(max_length=200)]
Content = Annotated[str, StringConstraints(max_length=500)]


class StrategyDraft(BaseModel):
    """One proposed memory item, as the model writes it."""

    title: Title
    description: Sentence = Field(description="one sentence: when this applies")
    content: Content = Field(description="what to do, or what to avoid and do instead")


class DistillRun(dspy.Signature):
    """Distil reusable lessons from one attempt at a task, for future, different tasks.

    If the outcome is success, write strategies that made it work; if failure, write
    guardrails: what went wrong and what to do instead. Be specific to the domain: name
    the classes, properties, functions or query shapes involved. Never write generic
    advice such as "be careful" or "check your work". Write at most three items.
    """

    task: str = dspy.InputField()
    trajectory: str = dspy.InputField(desc="the steps taken, possibly truncated")
    outcome: Literal["success", "failure"] = dspy.InputField()
    judge_rationale: str = dspy.InputField()
    lessons: Annotated[list[StrategyDraft], Field(max_length=3)] = dspy.OutputField()


class ContrastRuns(dspy.Signature):
    """Compare successful and failed attempts at the same task and distil what differed.

    ``do`` are strategies the successes followed and the failures did not; ``avoid`` are
    the failures' mistakes, each with what to do instead. Be specific to the domain;
    never generic advice. At most three items in all.
    """

    task: str = dspy.InputField()
    successes: str = dspy.InputField(desc="successful attempts, possibly truncated")
    failures: str = dspy.InputField(desc="failed attempts, possibly truncated")
    do: Annotated[list[StrategyDraft], Field(max_length=3)] = dspy.OutputField()
    avoid: Annotated[list[StrategyDraft], Field(max_length=3)] = dspy.OutputField()


class ConsistentRuns(dspy.Signature):
    """Several attempts at the same task had the same outcome; distil what they share.

    If the outcome is success, write the strategies every attempt followed (steps they
    agree on are the reliable ones; what only one did may be luck); if failure, write
    the mistakes they share, each with what to do instead. Be specific to the domain;
    never generic advice. Write at most three items.
    """

    task: str = dspy.InputField()
    attempts: str = dspy.InputField(desc="the attempts, separated by ---, possibly truncated")
    outcome: Literal["success", "failure"] = dspy.InputField()
    lessons: Annotated[list[StrategyDraft], Field(max_length=3)] = dspy.OutputField()


class Attempt(BaseModel):
    """One judged attempt at a task, as the extraction policy reads it."""

    task: str
    trajectory: str = ""
    answer: str = ""
    verdict: Verdict
    run_id: str = ""


class Extraction(BaseModel):
    """The policy's output: the candidate items (not yet consolidated) and what it dropped."""

    items: list[StrategyItem] = Field(default_factory=list)
    dropped: list[str] = Field(default_factory=list, description="'title: reason' per draft")
    method: str = ""


class ExtractionPolicy(BaseModel):
    """At most ``max_items`` strategies or guardrails per task, from its judged attempts.

    Attributes:
        max_items: the most items one task may add (ReasoningBank's 3 by default).
        method: ``llm`` (the model distils) or ``trace`` (no model: see the module doc).
        contrastive: with several rollouts, read them together (MaTTS v1): mixed
            outcomes are contrasted, one shared outcome is distilled to what the
            rollouts agree on; off, only the selected attempt is distilled (MaTTS v0).
        trajectory_chars: each attempt's trajectory is cut to this for the model.
        restates_task: a draft whose text is this similar (rapidfuzz ``ratio``) to the
            task's question restates it and is dropped; weak models do this often.
    """

    max_items: int = Field(3, ge=0, le=10)
    method: Literal["llm", "trace"] = "llm"
    restates_task: float = Field(75.0, ge=0, le=100)
    contrastive: bool = False
    trajectory_chars: int = Field(2500, ge=200)

    def extract(self, *, user_id: str, attempts: Sequence[Attempt], selected: int = 0,
                handle: ModelHandle | None = None, tags: Sequence[str] = ()) -> Extraction:
        """Candidate items from ``attempts`` (``selected`` is the one kept by rollouts).

        Raises:
            ValueError: ``method`` is ``llm`` and no model was given, or no attempts.
            ProgramParseError: the model's output did not parse after the retry.
        """
        if not attempts:
            raise ValueError("extraction needs at least one attempt")
        if self.max_items == 0:
            return Extraction(method=self.method)
        if self.method == "llm" and handle is None:
            raise ValueError("the llm extraction method needs a model")
        wins = [a for a in attempts if a.verdict.success]
        losses = [a for a in attempts if not a.verdict.success]
        if self.method == "trace":
            drafts = [*self._trace(attempts[selected])]
        elif self.contrastive and wins and losses:
            drafts = self._contrast(wins, losses, handle)
        elif self.contrastive and len(attempts) > 1:
            drafts = self._consistent(attempts, handle)
        else:
            drafts = self._distil(attempts[selected], handle)
        return self._keep(drafts, user_id, attempts[selected], tags)

    def _distil(self, attempt: Attempt, handle: ModelHandle | None
                ) -> list[tuple[StrategyDraft, str]]:
        polarity = "success" if attempt.verdict.success else "failure"
        with dspy.context(lm=handle.lm if handle else None):
            out = StructuredPredict(DistillRun, "ExtractionPolicy")(
                task=attempt.task, trajectory=self._render(attempt),
                outcome=polarity, judge_rationale=attempt.verdict.rationale or "(none)")
        return [(d, polarity) for d in out.lessons]

    def _contrast(self, wins: Sequence[Attempt], losses: Sequence[Attempt],
                  handle: ModelHandle | None) -> list[tuple[StrategyDraft, str]]:
        share = max(self.trajectory_chars // max(len(wins), len(losses)), 200)
        with dspy.context(lm=handle.lm if handle else None):
            out = StructuredPredict(ContrastRuns, "ExtractionPolicy.contrast")(
                task=wins[0].task,
                successes="\n---\n".join(self._render(a)[-share:] for a in wins),
                failures="\n---\n".join(self._render(a)[-share:] for a in losses))
        return [*((d, "success") for d in out.do), *((d, "failure") for d in out.avoid)]

    def _consistent(self, attempts: Sequence[Attempt], handle: ModelHandle | None
                    ) -> list[tuple[StrategyDraft, str]]:
        polarity = "success" if attempts[0].verdict.success else "failure"
        share = max(self.trajectory_chars // len(attempts), 200)
        with dspy.context(lm=handle.lm if handle else None):
            out = StructuredPredict(ConsistentRuns, "ExtractionPolicy.consistent")(
                task=attempts[0].task, outcome=polarity,
                attempts="\n---\n".join(self._render(a)[-share:] for a in attempts))
        return [(d, polarity) for d in out.lessons]

    def _trace(self, attempt: Attempt) -> list[tuple[StrategyDraft, str]]:
        # Deterministic distillation: the question, and the answer that worked or the
        # checks that the answer failed. Titles name the question, so two tasks' items
        # never share a title (consolidation would read that as newer guidance).
        question = flatten(attempt.task)
        answer = flatten(attempt.answer) or "(no answer)"
        if attempt.verdict.success:
            draft = StrategyDraft(title=f"Worked for: {question}"[:80],
                                  description=f"For a question like: {question}"[:200],
                                  content=f"An answer that passed the checks: {answer}"[:500])
            return [(draft, "success")]
        failed = ", ".join(attempt.verdict.failed_checks) or "judged wrong"
        draft = StrategyDraft(
            title=f"Failed ({failed}): {question}"[:80],
            description=f"For a question like: {question}"[:200],
            content=(f"Avoid: {flatten(attempt.verdict.rationale)}. The failing answer was: "
                     f"{answer}")[:500])
        return [(draft, "failure")]

    def _render(self, attempt: Attempt) -> str:
        text = f"{attempt.trajectory.rstrip()}\nFinal answer: {attempt.answer}"
        return text[-self.trajectory_chars:]  # the end holds the outcome; keep it

    def _keep(self, drafts: Sequence[tuple[StrategyDraft, str]], user_id: str,
              source: Attempt, tags: Sequence[str]) -> Extraction:
        noise = ConsolidationPolicy()
        out = Extraction(method=self.method)
        seen: set[str] = set()
        for draft, polarity in drafts:
            item = StrategyItem(
                user_id=user_id, title=flatten(draft.title) or flatten(draft.description)[:80],
                description=flatten(draft.description), polarity=polarity,
                text=flatten(draft.content) or flatten(draft.description) or "-",
                tags=list(dict.fromkeys(["extracted", *tags])), source=f"extract.{self.method}",
                evidence=[source.run_id] if source.run_id else [],
                confidence=source.verdict.confidence)
            why = noise.noise(item)
            if why is not None:
                out.dropped.append(f"{item.title or item.text[:40]}: {why[1]}")
            elif fuzz.ratio(fold(item.text), fold(source.task)) >= self.restates_task:
                out.dropped.append(f"{item.title}: restates the task, teaches nothing")
            elif fold(item.text) in seen:  # one lesson said twice takes one slot
                out.dropped.append(f"{item.title}: repeats another item of this run")
            elif len(out.items) < self.max_items:
                seen.add(fold(item.text))
                out.items.append(item)
            else:
                out.dropped.append(f"{item.title}: over the limit of {self.max_items}")
        return out
