"""Deterministic scoring of a free-text answer against a question's ``Rule``.

An item is matched in one of three ways, tried in this order:

- a number (``"6"``, ``"4.1 million"``, ``"11,400"``, ``"12%"``): some number stated in the
  text equals it within the rule's relative ``tolerance`` (exact when 0, up to float
  noise); both sides are read by ``memstrata.memory.cognitive.values.numbers``, so
  ``"4,100,000"`` matches ``"4.1 million"``;
- a command or flag (an item containing ``-`` or ``/``): the item appears verbatim,
  case-sensitively, after runs of whitespace collapse to one space, and not as part of a
  longer word or flag (``--confirm`` does not match ``--confirm-all``);
- anything else (a name, a phrase, a time such as ``41:08.3``): its tokens (casefolded,
  accents and punctuation stripped, digits split from letters, not stemmed) appear in the
  text's tokens as one contiguous run, so ``"Ann"`` does not match ``"Anna"``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from statistics import fmean
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from memstrata.memory.cognitive.values import numbers

_Text = Annotated[str, StringConstraints(min_length=1)]

FLOAT_SLACK = 1e-9
"""The relative difference still counted as equal at tolerance 0 (float noise only)."""

_NUMBER_ITEM = re.compile(
    r"[$€£]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)\s*(?:%|percent|thousand|million|billion|trillion)?",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"\d+|[^\W\d_]+")
_COMMAND_CHAR = re.compile(r"[\w-]")


def tokens(text: str) -> list[str]:
    """Casefolded word and digit runs with accents removed (``"Klæbo's 50km"`` ->
    ``["klæbo", "s", "50", "km"]``; ``æ`` is a letter, not an accented one)."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    return _TOKEN.findall("".join(c for c in folded if not unicodedata.combining(c)))


def _item_number(item: str) -> float | None:
    """The value of an item that is a plain number (with commas, ``%`` or a scale word),
    else None. A year standing alone is not a number (``values.numbers`` skips it)."""
    if not _NUMBER_ITEM.fullmatch(item.strip()):
        return None
    found = numbers(item)
    return found[0] if len(found) == 1 else None


def _is_command(item: str) -> bool:
    """Whether an item is matched as a command or flag (it contains ``-`` or ``/``)."""
    return "-" in item or "/" in item


def _has_number(target: float, text: str, tolerance: float) -> bool:
    rel = max(tolerance, FLOAT_SLACK)
    return any(math.isclose(value, target, rel_tol=rel) for value in numbers(text))


def _has_command(item: str, text: str) -> bool:
    needle, hay = " ".join(item.split()), " ".join(text.split())
    start = hay.find(needle)
    while start != -1:
        end = start + len(needle)
        before = hay[start - 1] if start else " "
        after = hay[end] if end < len(hay) else " "
        if not _COMMAND_CHAR.match(before) and not _COMMAND_CHAR.match(after):
            return True
        start = hay.find(needle, start + 1)
    return False


def _has_tokens(item: str, text: str) -> bool:
    needle, hay = tokens(item), tokens(text)
    if not needle:
        return False
    width = len(needle)
    return any(hay[i : i + width] == needle for i in range(len(hay) - width + 1))


def matches(item: str, text: str, tolerance: float = 0.0) -> bool:
    """Whether ``text`` states ``item`` (rules in the module docstring).

    Args:
        item: one rule item: a number, a command/flag, or a name/phrase.
        text: the answer (or an article, when a scenario file is validated).
        tolerance: relative tolerance for a number item; 0 means exact.
    """
    target = _item_number(item)
    if target is not None:
        return _has_number(target, text, tolerance)
    if _is_command(item):
        return _has_command(item, text)
    return _has_tokens(item, text)


class Rule(BaseModel):
    """How an answer is scored: every ``all`` item, at least one ``any`` item, no ``none``
    item (a wrong value a correct answer never states); ``tolerance`` is relative."""

    model_config = ConfigDict(extra="forbid")

    all: list[_Text] = []
    any: list[_Text] = []
    none: list[_Text] = []
    tolerance: float = Field(0.0, ge=0.0, le=1.0)

    @field_validator("all", "any", "none")
    @classmethod
    def _items_have_content(cls, items: list[str]) -> list[str]:
        for item in items:
            if not tokens(item):
                raise ValueError(f"item {item!r} has no letters or digits")
        return items

    @model_validator(mode="after")
    def _something_to_match(self) -> Rule:
        if not self.all and not self.any:
            raise ValueError("give at least one of all/any")
        return self


def score(answer: str, rule: Rule) -> float:
    """Score an answer in [0, 1] against a rule.

    ``(matched all items + (1 if any any-item matched, when any is given)) /
    (len(all) + (1 if any else 0))``, and 0 when any ``none`` item matches.
    """
    if any(matches(item, answer, rule.tolerance) for item in rule.none):
        return 0.0
    hits = sum(matches(item, answer, rule.tolerance) for item in rule.all)
    total = len(rule.all)
    if rule.any:
        total += 1
        hits += any(matches(item, answer, rule.tolerance) for item in rule.any)
    return hits / total if total else 0.0


def level_summary(scores: list[float]) -> float:
    """The mean score of one level's questions (0.0 for no questions)."""
    return fmean(scores) if scores else 0.0
