"""``Consolidator``: episodes -> one summary (episodic consolidation, seed 003, 1.3).

The only LLM step of the cognitive lifecycles. ``summariser(handle)`` gives the callable
``Episodic.consolidate`` and ``maintain`` take: one call per batch, on the handle's LM,
counted by its meter like every other call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import dspy
from pydantic import StringConstraints

from .lm import ModelHandle
from .structured import StructuredPredict

MAX_EPISODE_CHARS = 400


class SummariseEpisodes(dspy.Signature):
    """Summarise the numbered episodes in a few sentences: keep every name, number and
    date; say what happened in order."""

    episodes: str = dspy.InputField()
    summary: Annotated[str, StringConstraints(min_length=1, max_length=800)] = (
        dspy.OutputField())


class Consolidator(dspy.Module):
    """One summary of a batch of episode texts."""

    def __init__(self) -> None:
        super().__init__()
        self.summarise = StructuredPredict(SummariseEpisodes, "consolidate", max_tokens=320)

    def forward(self, texts: list[str]) -> dspy.Prediction:
        """``summary`` of ``texts`` (each cut to 400 characters), in order."""
        lines = "\n".join(f"{n}. {t[:MAX_EPISODE_CHARS]}" for n, t in enumerate(texts, 1))
        return dspy.Prediction(summary=str(self.summarise(episodes=lines).summary).strip())


def summariser(handle: ModelHandle) -> Callable[[list[str]], str]:
    """The ``summarise`` callable for ``maintain``: a ``Consolidator`` on ``handle``."""
    program = Consolidator()

    def summarise(texts: list[str]) -> str:
        with dspy.context(lm=handle.lm):
            return str(program(texts=texts).summary)

    return summarise
