"""``Extractor``: one LLM call per chunk -> proposed facts, entities and QA pairs.

The call only proposes; ``memory.facts.ground`` decides what is kept (evidence, speaker,
about-whom and time are checked against the turns, deterministically). The output
schema lives in ``memory.facts`` so the grounding code and the prompt share one shape.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any

import dspy
from pydantic import BaseModel, Field

from memstrata.memory.chunking import Chunk
from memstrata.memory.dates import DEFAULT_DATE_STYLE, DateStyle, render_day
from memstrata.memory.facts import (
    MAX_ENTITIES,
    MAX_FACTS,
    MAX_QA,
    ExtractedEntity,
    ExtractedFact,
    ExtractedQA,
    Extraction,
    chunk_text,
)

from .structured import StructuredPredict


class ExtractMemories(dspy.Signature):
    """Extract what is worth remembering about the people in these conversation turns.

    Each turn line is "speaker: text"; "-- date --" lines give the day the turns below
    were said. Facts: events, plans, preferences, relations, jobs, places, possessions;
    subject is the person it is about (a name, not "I"); object copies the turn's words;
    time as said ("yesterday", "in 2022") or empty. Entities: people, pets or groups
    named, with a role or state if said. QA: questions these turns answer, with short
    answers copied from the turns. Skip small talk.
    """

    turns: str = dspy.InputField()
    # The list bounds go into the JSON schema, so a constrained decoder stops in time.
    facts: Annotated[list[ExtractedFact], Field(max_length=MAX_FACTS)] = dspy.OutputField()
    entities: Annotated[list[ExtractedEntity],
                        Field(max_length=MAX_ENTITIES)] = dspy.OutputField()
    qa: Annotated[list[ExtractedQA], Field(max_length=MAX_QA)] = dspy.OutputField()


def format_demo(date_style: DateStyle = DEFAULT_DATE_STYLE) -> dspy.Example:
    """One worked example, shown before every chunk: the format, names instead of "I", the
    turn's own words, times as said. Its date line is written in ``date_style``, as
    ``chunk_text`` writes the chunks. (SmolLM2-135M without it filled fields with junk;
    with it, it mostly proposes nothing, which the ingest report flags.)"""
    return dspy.Example(
        turns=f"-- {render_day(date(2021, 3, 3), date_style)} --\n"
              "Ana: We adopted a beagle named Rex yesterday!\n"
              "Tom: Congrats! I love dogs. I have two cats though.\n"
              "Ana: Rex loves the park near my flat in Lyon.\n"
              "Tom: I start my new job as a nurse next month.",
        facts=[ExtractedFact(subject="Ana", predicate="adopted", object="a beagle named Rex",
                             time="yesterday"),
               ExtractedFact(subject="Tom", predicate="has", object="two cats"),
               ExtractedFact(subject="Ana", predicate="lives in", object="a flat",
                             location="Lyon"),
               ExtractedFact(subject="Tom", predicate="starts a new job as", object="a nurse",
                             time="next month")],
        entities=[ExtractedEntity(name="Rex", role="Ana's dog"),
                  ExtractedEntity(name="Tom", state="nurse from next month")],
        qa=[ExtractedQA(question="What pet did Ana adopt?", answer="a beagle named Rex"),
            ExtractedQA(question="What is Tom's new job?", answer="a nurse")],
    )


class Extractor(dspy.Module):
    """A chunk of turns -> an ``Extraction`` (unverified; ground it before storing).

    ``date_style`` is how the chunk's date lines (and the worked example's) are written.

    Example:
        >>> with dspy.context(lm=handle.lm):                           # doctest: +SKIP
        ...     extraction = Extractor()(chunk=chunk)
    """

    def __init__(self, max_tokens: int | None = 1024,
                 date_style: DateStyle = DEFAULT_DATE_STYLE) -> None:
        super().__init__()
        self.date_style = date_style
        self.extract = StructuredPredict(ExtractMemories, "Extractor", max_tokens=max_tokens)
        self.extract.predict.demos = [format_demo(date_style)]

    def forward(self, chunk: Chunk) -> dspy.Prediction:
        """Propose facts, entities and QA pairs for ``chunk`` (one LLM call, one retry).

        The prediction's ``extraction`` is an ``Extraction``.
        """
        out = self.extract(turns=chunk_text(chunk, self.date_style))
        return dspy.Prediction(extraction=Extraction(
            facts=[_as(ExtractedFact, f) for f in out.facts or []][:MAX_FACTS],
            entities=[_as(ExtractedEntity, e) for e in out.entities or []][:MAX_ENTITIES],
            qa=[_as(ExtractedQA, q) for q in out.qa or []][:MAX_QA],
        ))


def _as(model: type[BaseModel], value: Any) -> Any:
    return value if isinstance(value, model) else model.model_validate(value)
