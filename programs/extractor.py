"""``Extractor``: a chunk of turns -> structured facts with resolved times and evidence."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import dspy
from memstrata.memory.query import time_range
from pydantic import BaseModel, Field, StringConstraints

from .structured import StructuredPredict

MAX_FACTS = 8


Short = Annotated[str, StringConstraints(max_length=40)]


class ExtractedFact(BaseModel):
    """One fact as the model states it.

    Every string and list is bounded: the bounds go into the JSON schema, so a
    constrained small model cannot ramble one field until ``max_tokens`` cuts the JSON.
    """

    subject: str = Field(max_length=60, description="who or what the fact is about")
    predicate: str = Field(max_length=40, description="the relation, e.g. 'lives in'")
    object: str = Field(max_length=100, description="the value, e.g. 'Oslo', 'a puppy'")
    time: str = Field(default="", max_length=40,
                      description="when it happened, as said, e.g. 'last week'")
    speaker: str = Field(max_length=40, description="who said it")
    evidence: list[Short] = Field(default_factory=list, max_length=4,
                                  description="turn ids, e.g. D3:7")
    tags: list[Short] = Field(default_factory=list, max_length=5, description="1-5 topic words")


class Fact(ExtractedFact):
    """An extracted fact with its time resolved against the session date."""

    resolved_time: datetime | None = None


class ExtractFacts(dspy.Signature):
    """Extract the facts stated in these conversation turns.

    Each turn line is "[id] speaker: text". Return one fact per statement worth
    remembering about a person (events, plans, preferences, relations, possessions),
    with the ids of the turns that state it. Keep the time as said ("yesterday",
    "in 2022"); leave it empty when none is given. Skip greetings and small talk.
    """

    session_date: str = dspy.InputField(desc="the date the turns were spoken")
    turns: str = dspy.InputField()
    facts: Annotated[list[ExtractedFact], Field(max_length=MAX_FACTS)] = dspy.OutputField()


class Extractor(dspy.Module):
    """Turns -> ``Fact`` list; evidence ids are kept only if they name a turn in the chunk.

    Example:
        >>> Extractor()(turns="[D1:1] Ana: I moved to Oslo last month.",
        ...             session_date=datetime(2023, 5, 8), turn_ids=["D1:1"])  # doctest: +SKIP
    """

    def __init__(self) -> None:
        super().__init__()
        self.extract = StructuredPredict(ExtractFacts, "Extractor")

    def forward(self, turns: str, session_date: datetime, turn_ids: list[str]) -> dspy.Prediction:
        """Extract facts from ``turns`` (formatted lines) spoken on ``session_date``."""
        out = self.extract(session_date=f"{session_date.day} {session_date:%B %Y}", turns=turns)
        known = set(turn_ids)
        facts = []
        for raw in out.facts or []:
            fact = raw if isinstance(raw, ExtractedFact) else ExtractedFact.model_validate(raw)
            span = time_range(fact.time, now=session_date) if fact.time.strip() else None
            facts.append(Fact(**fact.model_dump(exclude={"evidence", "tags"}),
                              evidence=[e for e in fact.evidence if e in known],
                              tags=[t.strip().lower() for t in fact.tags if t.strip()][:5],
                              resolved_time=span[0] if span else None))
        return dspy.Prediction(facts=facts)
