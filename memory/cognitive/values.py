"""The numeric values a text states, normalised, so two claims can be compared by value.

Rules (deliberately few, each tested):

* Digits with thousands separators and decimals: "1,200" -> 1200, "3.5" -> 3.5, ".5" ->
  0.5; a leading minus counts ("-5"); an ordinal suffix is dropped ("5th" -> 5).
* Scale words multiply: "1.2 million" -> 1.2e6 (hundred, thousand, million, billion,
  trillion; "40k" and "3bn" when the suffix is attached).
* Percent is a unit, not a scale: "12%" and "12 percent" -> 12.
* Number words "two" .. "twenty" and the tens ("thirty" .. "ninety", hyphenated
  compounds like "twenty-five"), with scale words too ("nine hundred thousand"). "one"
  and "zero" alone are left out: "one" is mostly a pronoun ("the one who", "one of them").
* Not values: a year, i.e. a bare 4-digit number 1900-2100 with no separator, decimal,
  unit, scale or currency sign ("in 2024"; "$2000" and "2000%" stay values, "2000
  people" is read as a year); and whole dates: ISO "2024-03-05", "05/03/2024", and a
  day of month next to a month name ("March 5", "5th of March", "Mar. 5th"). "May"
  names a month only when capitalised ("12 may come" keeps 12).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

_SMALL = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
          "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
          "nineteen"]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_WORD_VALUE = {w: float(i) for i, w in enumerate(_SMALL, start=2)} | {
    w: float(10 * i) for i, w in enumerate(_TENS, start=2)} | {"one": 1.0}
_SCALE = {"hundred": 1e2, "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12,
          "k": 1e3, "bn": 1e9}

_MONTH = (r"(?:(?i:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|june?|july?|aug(?:ust)?"
          r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)|May)\b\.?")
_DAY = r"\d{1,2}(?:st|nd|rd|th)?\b"
_DATES = re.compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}\b"  # ISO 2024-03-05
    r"|\b\d{1,2}/\d{1,2}/\d{2,4}\b"  # 05/03/2024
    rf"|\b{_MONTH}\s+{_DAY}(?!\s*%|[.,]\d)"  # March 5, March 5th
    rf"|\b{_DAY}\s+(?:of\s+)?{_MONTH}"  # 5 March, 5th of March
)
_SCALE_WORD = "(?:hundred|thousand|million|billion|trillion)"
_AFTER = (rf"(?i:\s*(?P<pct>%|percent\b|per\s+cent\b)"
          rf"|\s+(?P<scale>{_SCALE_WORD}(?:\s+{_SCALE_WORD})*)\b)?")
_DIGITS = re.compile(
    r"(?<![\w.])(?P<neg>-)?(?:(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?P<dec>\.\d+)?|(?P<bare>\.\d+))"
    r"(?:(?P<suffix>(?i:k|bn))|(?i:st|nd|rd|th))?\b" + _AFTER)
_WORDS = re.compile(
    rf"(?i:\b(?:(?P<tens>{'|'.join(_TENS)})-(?P<unit>one|{'|'.join(_SMALL[:8])})"
    rf"|(?P<word>{'|'.join(_SMALL + _TENS)}))\b)" + _AFTER)
_CURRENCY = "$€£¥"


class Quantity(NamedTuple):
    """One stated value: the number and the words that state it ("1.2 million")."""

    value: float
    span: str


def quantities(text: str) -> list[Quantity]:
    """The values ``text`` states, in order of appearance (see the module's rules)."""
    return list(_quantities(text))


@lru_cache(maxsize=4096)
def _quantities(text: str) -> tuple[Quantity, ...]:
    """:func:`quantities`, kept: a fact being learned is compared with each of its
    candidates, and a document's facts are each other's candidates, so the same texts
    come back many times."""
    blanked = _DATES.sub(lambda m: " " * len(m.group()), text)
    found: list[tuple[int, Quantity]] = []
    for m in _DIGITS.finditer(blanked):
        raw = m.group("int") or "0"
        value = float(raw.replace(",", "") + (m.group("dec") or m.group("bare") or ""))
        plain = not any(m.group(g) for g in ("dec", "bare", "pct", "scale", "suffix")) and (
            "," not in raw)
        money = m.start() > 0 and text[m.start() - 1] in _CURRENCY
        if plain and len(raw) == 4 and 1900 <= value <= 2100 and not money:
            continue  # a year
        found.append((m.start(), _quantity(m, -value if m.group("neg") else value)))
    for m in _WORDS.finditer(blanked):
        word = (m.group("word") or m.group("tens")).lower()
        unit = (m.group("unit") or "").lower()
        found.append((m.start(), _quantity(m, _WORD_VALUE[word] + _WORD_VALUE.get(unit, 0.0))))
    return tuple(q for _, q in sorted(found))


def _quantity(m: re.Match[str], value: float) -> Quantity:
    scale = 1.0
    words = (m.group("scale") or "").lower().split()
    for word in [*words, (m.groupdict().get("suffix") or "").lower()]:
        scale *= _SCALE.get(word, 1.0)
    return Quantity(value * scale, m.group().strip())


def numbers(text: str) -> list[float]:
    """The numeric values ``text`` states, normalised ("1.2 million" -> 1.2e6, "12%" -> 12).

    Years and day-of-month in dates are not values (see the module's rules).

    Example:
        >>> numbers("Sales rose 12% to 1.2 million on March 5, 2024, from nine hundred thousand")
        [12.0, 1200000.0, 900000.0]
    """
    return [q.value for q in quantities(text)]
