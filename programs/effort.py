"""How much effort a question gets: its intent, and the effort table (seed 003, 2.1).

The adaptive reasoner first classifies a question's intent, then spends the effort the
table allows: one pass for a simple recall; plan -> search -> evaluate rounds, up to
``max_steps``, for the rest. ``k`` is how many memories one search returns and ``hops``
how far the search follows ``similar_to``/``contradicts`` edges from what it found.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

import dspy
from pydantic import BaseModel, ConfigDict, Field

Intent = Literal["simple_recall", "mathematical_computation", "temporal_comparison",
                 "multi_source_synthesis", "contradiction_resolution", "incremental_update"]
INTENTS: tuple[str, ...] = get_args(Intent)


class Effort(BaseModel):
    """The allowance of one intent: search rounds, memories per search, graph hops."""

    model_config = ConfigDict(frozen=True)

    max_steps: int = Field(ge=1, le=10)
    k: int = Field(ge=1, le=50)
    hops: int = Field(ge=0, le=2)
    calculator: bool = False
    chronological: bool = False


#: The seed's table, with hops where a question needs neighbouring facts: synthesis walks
#: two ``similar_to`` hops; conflicts and updates one, to bring the other side along.
EFFORT: dict[str, Effort] = {
    "simple_recall": Effort(max_steps=1, k=10, hops=0),
    "mathematical_computation": Effort(max_steps=3, k=10, hops=0, calculator=True),
    "temporal_comparison": Effort(max_steps=3, k=12, hops=1, calculator=True,
                                  chronological=True),
    "multi_source_synthesis": Effort(max_steps=2, k=15, hops=2, calculator=True),
    "contradiction_resolution": Effort(max_steps=2, k=10, hops=1),
    "incremental_update": Effort(max_steps=2, k=10, hops=1, chronological=True),
}

#: What the answer step is told, per intent (seed 003, 2.2 step 4).
GUIDANCE: dict[str, str] = {
    "simple_recall": "Answer from the facts in a few words.",
    "mathematical_computation": (
        "Find the numbers in the facts. Put the arithmetic that gives the answer in "
        "expression (for example 14 - 9), using only numbers from the facts."),
    "temporal_comparison": (
        "The facts are in date order. Compare the values at the dates asked; when the "
        "question asks for a change or difference, put the arithmetic in expression "
        "(later value minus earlier value)."),
    "multi_source_synthesis": (
        "Combine facts from the different sources. When the question asks for a total "
        "or difference, put the arithmetic in expression."),
    "contradiction_resolution": (
        "The sources disagree. Give each value with its source and date, and say which "
        "report is newer."),
    "incremental_update": (
        "Facts changed over time; the facts are in date order. Answer with the newest "
        "value (the latest date)."),
}


class ClassifyIntent(dspy.Signature):
    """Classify what answering the question takes.

    simple_recall: one fact answers it (who, what, which, how many, as stated).
    mathematical_computation: numbers must be added, subtracted, multiplied or compared.
    temporal_comparison: values at different dates or days must be compared (changes,
    gains, before/after).
    multi_source_synthesis: facts from several reports must be combined.
    contradiction_resolution: reports disagree and the question asks what the sources say.
    incremental_update: a fact was updated; the question asks for the current or latest
    value or what changed."""

    question: str = dspy.InputField()
    intent: Intent = dspy.OutputField()


# Words that ask for a change, a comparison or arithmetic, in any domain.
_CHANGE = re.compile(
    r"\b(?:between|gain(?:ed|s)?|gr[eo]w(?:n|th)?|rose|rise|fell|fall|drop(?:ped)?|"
    r"chang(?:e|ed|es)|differ(?:ence|ent)?|more than|fewer than|less than|compar(?:e|ed)|"
    r"increase[ds]?|decrease[ds]?|overt(?:ook|ake|aken)|total|together|combined|sum|"
    r"average|how many more|how much more|by how (?:much|many)|since)\b", re.I)
_TIME_ANCHOR = re.compile(r"\b([a-z]+)\s+\d+\b", re.I)
# A value then and a value now: two times, one of them the present ("What was the
# record before May 3, and what is it now?").
_THEN_NOW = re.compile(r"\b(?:before|previous(?:ly)?|earlier|used to|originally|at first)\b"
                       r".*\b(?:now|currently|today)\b", re.I | re.S)


def checked_intent(question: str, intent: str) -> str:
    """The model's intent, checked against the question's surface: a temporal or
    mathematical intent without a word of change, comparison or arithmetic ("after day
    5" alone is not one) is a simple recall; a simple recall with one is upgraded
    (temporal when two values of one kind of time are named, "day 7 ... day 10", or a
    value then and now, "before May 3 ... now").

    A small model over-reads dates as comparisons and misses "gained"; the words decide
    only between these three intents, whose effort differs most.
    """
    then_now = bool(_THEN_NOW.search(question))
    cue = then_now or bool(_CHANGE.search(question))
    heads = [m.group(1).casefold() for m in _TIME_ANCHOR.finditer(question)]
    two_times = then_now or any(heads.count(h) >= 2 for h in set(heads))
    if intent in ("temporal_comparison", "mathematical_computation") and not cue:
        return "simple_recall"
    if intent == "simple_recall" and cue:
        return "temporal_comparison" if two_times else "mathematical_computation"
    return intent
