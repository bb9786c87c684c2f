"""``Judge``: did a run succeed? And ``AnswerJudge``: is an answer right against a gold one?"""

from __future__ import annotations

from typing import Literal

import dspy

from .structured import StructuredPredict


class JudgeRun(dspy.Signature):
    """Decide whether the output accomplishes the task.

    Read the task, the steps taken (the trajectory) and the final output. Success means
    the output does what the task asked, correctly and completely; give a one-sentence
    rationale naming what decided it.
    """

    task: str = dspy.InputField()
    trajectory: str = dspy.InputField(desc="the steps taken, possibly truncated")
    output: str = dspy.InputField()
    success: bool = dspy.OutputField()
    rationale: str = dspy.OutputField(desc="one sentence")


class JudgeAnswer(dspy.Signature):
    """Label a generated answer to a question as CORRECT or WRONG against the gold answer.

    The question was posed by one user about another, based on their past conversations.
    Be generous: if the generated answer touches the same topic as the gold answer, it is
    CORRECT, even if longer. For time questions, if it refers to the same date or period
    as the gold answer it is CORRECT, whatever the format ("May 7th" vs "7 May") or
    relative phrasing. Otherwise it is WRONG.
    """

    question: str = dspy.InputField()
    gold_answer: str = dspy.InputField()
    generated_answer: str = dspy.InputField()
    rationale: str = dspy.OutputField(desc="one short sentence")
    label: Literal["CORRECT", "WRONG"] = dspy.OutputField()


class Judge(dspy.Module):
    """Success or failure of a task's run, with a short rationale."""

    def __init__(self) -> None:
        super().__init__()
        self.judge = StructuredPredict(JudgeRun, "Judge")

    def forward(self, task: str, trajectory: str, output: str) -> dspy.Prediction:
        """Judge one run; ``success`` is a bool."""
        out = self.judge(task=task, trajectory=trajectory, output=output)
        return dspy.Prediction(success=bool(out.success), rationale=(out.rationale or "").strip())


class AnswerJudge(dspy.Module):
    """LLM-as-judge accuracy for question answering, after mem0's CORRECT/WRONG prompt."""

    def __init__(self) -> None:
        super().__init__()
        self.judge = StructuredPredict(JudgeAnswer, "AnswerJudge")

    def forward(self, question: str, gold_answer: str, generated_answer: str) -> dspy.Prediction:
        """``correct`` is True when the judge labels the answer CORRECT."""
        out = self.judge(question=question, gold_answer=gold_answer,
                         generated_answer=generated_answer)
        return dspy.Prediction(correct=out.label == "CORRECT",
                               rationale=(out.rationale or "").strip())
