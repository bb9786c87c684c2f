"""The baseline of the cognitive evaluation: a plain retrieve-then-answer.

The same sentences the cognitive memory learns, each after its article's title, stored
as dated passages (turns of one conversation, the speaker being the source); one search
over them, one answer call on the same model. No intent, no working memory, no edges, no
calculator.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time
from typing import Annotated

import dspy
from pydantic import StringConstraints

from memstrata.memory import MemoryStore, Retriever
from memstrata.memory.cognitive.reading import sentences
from memstrata.programs.structured import StructuredPredict

from .scenarios import Article, Scenario

K = 10


def article_time(article: Article) -> datetime:
    """An article's date as the event time of what it says (midnight UTC)."""
    return datetime.combine(article.date, time(), tzinfo=UTC)


def passages(scenario: Scenario) -> Iterator[tuple[Article, str]]:
    """Every sentence of the scenario's articles, articles in date order, each after its
    article's title (what the cognitive side shows beside each fact)."""
    for article in sorted(scenario.articles, key=lambda a: a.date):
        for sentence in sentences(article.text):
            yield article, f"{article.title}: {sentence}"


class AnswerPlain(dspy.Signature):
    """Answer the question in a few words from the numbered passages. Copy names,
    numbers and commands exactly."""

    passages: str = dspy.InputField()
    question: str = dspy.InputField()
    answer: Annotated[str, StringConstraints(max_length=200)] = dspy.OutputField()


class PlainAnswerer(dspy.Module):
    """One search (``K`` passages), one answer; the store is passed to each call."""

    def __init__(self) -> None:
        super().__init__()
        self.respond = StructuredPredict(AnswerPlain, "baseline.answer")

    def forward(self, question: str, store: MemoryStore, retriever: Retriever, user_id: str
                ) -> dspy.Prediction:
        """``answer`` and ``shown`` (the ids of the passages it was given)."""
        hits = retriever.search(user_id, question, k=K, nodes=("turn",))
        lines = [f"[{n}] {h.event_time.date().isoformat() if h.event_time else ''} · "
                 f"{h.speaker or ''}: {h.text}" for n, h in enumerate(hits, 1)]
        out = self.respond(passages="\n".join(lines), question=question)
        return dspy.Prediction(answer=str(out.answer).strip(), shown=[h.id for h in hits])
