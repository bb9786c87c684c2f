"""Query understanding without an LLM: who is asked about, when, and which words matter.

Dates are read with a few regular expressions rather than a general date parser: the
query path has a budget of a few milliseconds, and questions name dates in a handful of
shapes ("in May 2023", "on 8 May, 2023", "in 2022", "last week"). Relative expressions
resolve against ``now`` (the question's reference time), never the wall clock implicitly.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from . import text as textmod
from .dates import DEFAULT_DATE_STYLE, DateStyle, render_day, render_month

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS |= {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ORD = r"(\d{1,2})(?:st|nd|rd|th)?"
_DAY_MONTH_YEAR = re.compile(rf"\b{_ORD}\s+({_MONTH_RE})\.?,?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH_RE})\.?\s+{_ORD},?\s+(\d{{4}})\b", re.I)
_MONTH_YEAR = re.compile(rf"\b({_MONTH_RE})\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I)
_YEAR = re.compile(r"\b(19\d{2}|20\d{2})\b")
# A bare year only after a preposition: "in 2021" and "since 2019" are times, "Cyberpunk
# 2077" and "2000 followers" are not.
_PREPOSED_YEAR = re.compile(
    r"\b(?:in|during|since|until|till|by|from|around|circa|of|early|mid|late)"
    r"\s+((?:19|20)\d{2})\b(?!\s*[-/:])", re.I)
# Two times joined as a span: "between August 11 and August 15 2023", "from 2021 to 2022".
_BETWEEN = re.compile(
    r"\b(?:between|from)\s+(.{3,40}?)\s+(?:and|to|until|till|through)\s+"
    r"(.{0,40}?\b(?:19|20)\d{2})\b", re.I)
_RELATIVE = re.compile(
    r"\b(yesterday|today|last\s+(?:week|month|year|weekend)|this\s+(?:week|month|year)|"
    r"(\d+|a|an|one|two|three|four|five|six)\s+(day|week|month|year)s?\s+ago)\b",
    re.I,
)
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


# A question whose answer is a time or a length of time (answered by a turn that says when).
_ASKS_WHEN = re.compile(
    r"^\W*when\b|\b(?:what|which)\s+(?:year|month|day|date|time|week)\b|\bhow\s+long\b"
    r"|\bhow\s+many\s+(?:years|months|weeks|days)\b|\bsince\s+when\b", re.I)


# A question whose answer is a place (answered by a turn that names one).
_ASKS_WHERE = re.compile(
    r"^\W*where\b|\b(?:what|which)\s+(?:city|country|town|state|place|region|neighbou?rhood)\b",
    re.I)


@dataclass
class QueryAnalysis:
    """What the retriever needs to know about a question."""

    text: str
    tokens: list[str]
    speakers: list[str] = field(default_factory=list)
    start: datetime | None = None
    end: datetime | None = None
    asks_when: bool = False
    asks_where: bool = False
    addressed: list[str] = field(default_factory=list)
    bounded: bool = False
    """The query was cut to its rarest words (``Retriever``: a long query)."""

    @property
    def content_tokens(self) -> list[str]:
        """Tokens without the names of the speakers asked about (they match every turn)."""
        names = {t for s in self.speakers for t in textmod.tokens(s)}
        return [t for t in self.tokens if t not in names] or self.tokens


def _month_range(year: int, month: int) -> tuple[datetime, datetime]:
    last = calendar.monthrange(year, month)[1]
    return (datetime(year, month, 1, tzinfo=UTC),
            datetime(year, month, last, 23, 59, 59, tzinfo=UTC))


def _day_range(day: datetime) -> tuple[datetime, datetime]:
    start = day.replace(hour=0, minute=0, second=0, microsecond=0)
    return start, start + timedelta(days=1, seconds=-1)


def time_range(question: str, now: datetime | None = None) -> tuple[datetime, datetime] | None:
    """The time span a question names, or None. Example: "in May 2023" -> all of May 2023.

    Two times joined by "between ... and ..." or "from ... to ..." name the span from the
    first's start to the second's end; the first may leave out the year they share.
    """
    if (m := _BETWEEN.search(question)) and (last := time_range(m[2], now)):
        first = time_range(m[1], now) or time_range(f"{m[1]} {last[0].year}", now)
        if first and first[0] <= last[1]:
            return first[0], last[1]
    try:
        if m := _DAY_MONTH_YEAR.search(question):
            return _day_range(datetime(int(m[3]), _MONTHS[m[2].lower()], int(m[1]), tzinfo=UTC))
        if m := _MONTH_DAY_YEAR.search(question):
            return _day_range(datetime(int(m[3]), _MONTHS[m[1].lower()], int(m[2]), tzinfo=UTC))
    except ValueError:  # "31 February 2023": not a date, so no range
        return None
    if m := _MONTH_YEAR.search(question):
        return _month_range(int(m[2]), _MONTHS[m[1].lower()])
    if m := _YEAR.fullmatch(question.strip()) or _PREPOSED_YEAR.search(question):
        year = int(m[1])
        return datetime(year, 1, 1, tzinfo=UTC), datetime(year, 12, 31, 23, 59, 59, tzinfo=UTC)
    if now is not None and (m := _RELATIVE.search(question)):
        return _relative_range(m, now)
    return None


def _relative_range(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    phrase = m[1].lower()
    if phrase == "today":
        return _day_range(now)
    if phrase == "yesterday":
        return _day_range(now - timedelta(days=1))
    if m[2]:  # "three weeks ago": a window around that point
        n = int(m[2]) if m[2].isdigit() else _NUMBER_WORDS[m[2].lower()]
        days = {"day": 1, "week": 7, "month": 30, "year": 365}[m[3].lower()] * n
        centre = now - timedelta(days=days)
        half = timedelta(days=max(1, days // 4))
        return centre - half, centre + half
    span = phrase.split()[-1]
    back = phrase.startswith("last")
    if span in ("week", "weekend"):
        start = now - timedelta(days=now.weekday() + (7 if back else 0))
        return _day_range(start)[0], _day_range(start + timedelta(days=6))[1]
    if span == "month":
        year, month = now.year, now.month
        if back:
            year, month = (year - 1, 12) if month == 1 else (year, month - 1)
        return _month_range(year, month)
    year = now.year - 1 if back else now.year
    return datetime(year, 1, 1, tzinfo=UTC), datetime(year, 12, 31, 23, 59, 59, tzinfo=UTC)


def named_speakers(question: str, known: list[str]) -> list[str]:
    """Known speakers named in the question (whole word, case-insensitive, possessives too)."""
    lowered = question.lower()
    found = []
    for name in known:
        first = name.split()[0].lower() if name.split() else ""
        for candidate in {name.lower(), first}:
            if candidate and re.search(rf"(?<!\w){re.escape(candidate)}(?:'s|’s|s')?(?!\w)",
                                       lowered):
                found.append(name)
                break
    return found


# A chat's roles, as OpenAI-style messages name them: the person is ``user``, the model
# ``assistant``. A question to the assistant says "I"/"my" for the user and "you" for it.
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll)\b", re.I)
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|you've|you'd|you'll)\b", re.I)
ROLE_SPEAKERS = {"user": _FIRST_PERSON, "assistant": _SECOND_PERSON}
"""Role speakers a question refers to by pronoun rather than by name."""


def addressed_speakers(question: str, known: list[str]) -> list[str]:
    """The role speakers (``user``, ``assistant``) the question refers to by pronoun:
    "my" and "I" mean the ``user`` of a user/assistant chat, "you" the ``assistant``.
    Only roles the tenant's memory holds as speakers count (a LoCoMo-style conversation
    between named people has none, and is read as before)."""
    by_name = {name.lower(): name for name in known}
    said = question.replace("’", "'")
    return [by_name[role] for role, pattern in ROLE_SPEAKERS.items()
            if role in by_name and pattern.search(said)]


def analyse(question: str, known_speakers: list[str], now: datetime | None = None
            ) -> QueryAnalysis:
    """Read a question: its tokens, the speakers it names (by name, or by pronoun for a
    chat's ``user`` and ``assistant``), the time span, whether it asks when."""
    span = time_range(question, now)
    named = named_speakers(question, known_speakers)
    addressed = [s for s in addressed_speakers(question, known_speakers) if s not in named]
    return QueryAnalysis(
        text=question,
        tokens=textmod.tokens(question),
        speakers=named + addressed,
        addressed=addressed,
        start=span[0] if span else None,
        end=span[1] if span else None,
        asks_when=bool(_ASKS_WHEN.search(question)),
        asks_where=bool(_ASKS_WHERE.search(question)),
    )


_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_SPOKEN_TIME = re.compile(
    rf"\b(yesterday|tomorrow|today|tonight|last\s+(?:night|week|weekend|month|year|{_WEEKDAYS})|"
    rf"this\s+(?:week|weekend|month|year)|next\s+(?:week|weekend|month|year|{_WEEKDAYS})|"
    r"(\d+|a|an|one|two|three|four|five|six)\s+(day|week|weekend|month|year)s?\s+ago)\b",
    re.I,
)


def _day(when: datetime, style: DateStyle) -> str:
    return render_day(when, style)


def _spoken_time(m: re.Match[str], when: datetime, style: DateStyle) -> str | None:
    phrase = " ".join(m[1].lower().split())
    anchor = _day(when, style)
    if phrase in ("today", "tonight", "last night"):
        return _day(when - timedelta(days=1), style) if phrase == "last night" else anchor
    if phrase in ("yesterday", "tomorrow"):
        return _day(when + timedelta(days=-1 if phrase == "yesterday" else 1), style)
    if m[2]:
        plural = "" if m[2].lower() in ("a", "an", "one", "1") else "s"
        return f"{m[2]} {m[3].lower()}{plural} before {anchor}"
    which, unit = phrase.split()
    if unit == "month":
        year, month0 = divmod(when.year * 12 + when.month - 1
                              + {"last": -1, "this": 0, "next": 1}[which], 12)
        return render_month(year, month0 + 1, style)
    if unit == "year":
        return str(when.year + {"last": -1, "this": 0, "next": 1}[which])
    if which == "this":
        return f"the {unit} of {anchor}"
    return f"the {unit} {'before' if which == 'last' else 'after'} {anchor}"


def annotate_times(text: str, when: datetime | None,
                   date_style: DateStyle = DEFAULT_DATE_STYLE) -> str:
    """``text`` with each relative time phrase followed by what it meant on ``when``.

    Relative phrases ("yesterday", "last week", "two days ago", "next month") are read
    against the date the words were said; absolute dates pass through unchanged. The
    resolution restates the phrase against that date, as a person would ("the week
    before 2023-06-09"), its dates written in ``date_style`` (see ``memory.dates``).

    Example:
        >>> annotate_times("I ran a race last Saturday.", datetime(2023, 5, 8))
        'I ran a race last Saturday [the saturday before 2023-05-08].'
        >>> annotate_times("I ran yesterday.", datetime(2023, 5, 8), "long")
        'I ran yesterday [7 May 2023].'
    """
    if when is None:
        return text

    def note(m: re.Match[str]) -> str:
        resolved = _spoken_time(m, when, date_style)
        return f"{m[0]} [{resolved}]" if resolved else m[0]

    return _SPOKEN_TIME.sub(note, text)
