"""Suite (b): one LoCoMo conversation's questions, through the executor's memory tools."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dspy

from memstrata.memory.store.protocol import MemoryStore
from memstrata.packers.context import Mode
from memstrata.programs.answer_scores import score_answer
from memstrata.programs.executors import AnswerWithTools, ExecutorRun, ExecutorSettings
from memstrata.programs.judging import Check
from memstrata.tools import ToolSession

from ..locomo import load_locomo, read_locomo
from .suites import Grade, Suite, SuiteTask


class AnswerFromMemory(AnswerWithTools):
    """Answer the question about this user's conversations. Find the evidence with the
    tools: mem_search(query) returns ids and one-line descriptions, mem_get(ids) the full
    records of a few of them. Answer in a short phrase. If nothing you found answers it,
    say it is not mentioned. The memory input holds strategies from past questions."""

    memory: str = dspy.InputField(desc="strategies and guardrails from past questions")


class LocomoSuite(Suite):
    """Suite (b): one LoCoMo conversation's questions, answered by the executor's tools.

    Args:
        data: a LoCoMo-format JSON file.
        conversation: the conversation to use (default: the file's first).
        categories: the question categories to ask (1-4 by default; 5 is adversarial).
    """

    name = "locomo"
    scope = "locomo"

    def __init__(self, data: Path, conversation: str | None = None,
                 categories: Sequence[int] = (1, 2, 3, 4)) -> None:
        convs = read_locomo(data)
        if not convs:
            raise ValueError(f"{data}: no conversations")
        chosen = [c for c in convs if conversation in (None, c.sample_id)]
        if not chosen:
            raise ValueError(f"{data}: no conversation {conversation!r}; it has "
                             f"{', '.join(c.sample_id for c in convs)}")
        self.conv = chosen[0]
        self.user_id = self.conv.sample_id
        self._questions = {q.qid: q for q in self.conv.questions if q.category in categories}

    def tasks(self) -> list[SuiteTask]:
        """The conversation's questions of the chosen categories, in file order."""
        return [SuiteTask(id=q.qid, level=f"cat{q.category}", question=q.question)
                for q in self._questions.values()]

    def prepare(self, store: MemoryStore) -> None:
        """Load the conversation (its turns are what the tools search)."""
        if not store.counts(self.user_id).get("turns"):
            load_locomo(store, [self.conv])

    def signature(self) -> type[dspy.Signature]:
        """``AnswerWithTools`` with the ``memory`` input."""
        return AnswerFromMemory

    def tools(self, session: ToolSession, settings: ExecutorSettings, mode: Mode
              ) -> list[Callable[..., Any]]:
        """The memory tools (the bounded ones, or the naive ones for E7)."""
        return session.handle_tools() if settings.tools == "handles" \
            else session.naive_tools()

    def checks(self, task: SuiteTask, run: ExecutorRun) -> list[Check]:
        """An answer was given, and the agent looked something up before giving it."""
        looked = sum(len(s.get("tools", [])) for s in run.steps)
        return [Check(name="answered", passed=bool(run.answer.strip()),
                      message="" if run.answer.strip() else "empty answer"),
                Check(name="searched", passed=looked > 0,
                      message="" if looked else "answered without any tool call")]

    def grade(self, task: SuiteTask, run: ExecutorRun) -> Grade:
        """LoCoMo's official F1 (adversarial score for category 5); success at F1 >= 0.5."""
        q = self._questions[task.id]
        f1 = score_answer(run.answer, q.answer, q.category)["f1"]
        return Grade(success=f1 >= 0.5, score=round(f1, 4), status="answered"
                     if run.answer.strip() else "empty")
