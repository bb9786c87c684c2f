"""Deterministic time normaliser: a time phrase as said + the session date -> a span.

At ingest the extractor reports a fact's time as it was said ("last week", "in 2019",
"two weekends ago"), and each turn's raw text is scanned for time phrases. Both go
through :func:`normalise_time`, which reads a phrase against the date the words were said
(the *base*) and returns a :class:`TimeSpan`, or None when the phrase is not a time.

Two readers, one authority. The regex resolver of :mod:`memstrata.memory.query`
(``time_range``, ``_SPOKEN_TIME``, ``_spoken_time``) encodes the conventions below, so it
decides every shape it knows; this module extends it, with the same conventions, to the
shapes it names but gives no span for (``next ...``, weekends, weekdays, "tomorrow").
``dateparser`` (session date as ``RELATIVE_BASE``) reads the shapes no regex knows
("on 5 June", "in May", "the day before yesterday") and cross-checks every relative
phrase the regexes resolved. Measured disagreements, all won by the regex resolver:

- "n days/weeks/months/years ago": dateparser gives the calendar unit n units back
  ("a month ago" on 2023-05-08 = all of April); a person restating it says "a month
  before 2023-05-08", a point with slack, so the resolver's window centred n units back
  wins.
- "last/this/next weekend", "n weekends ago": dateparser reads nothing.

Conventions: weeks run Monday to Sunday; "last weekend" is the weekend of the previous
week; "last Saturday" is the latest Saturday strictly before the base; a day named
without its year ("on 5 June") is the last one, or the next one when that is at most a
quarter ahead and nearer; seasons are northern-hemisphere meteorological (winter Y =
December Y to February Y+1). Spans are whole days, in UTC, ``end`` inclusive (23:59:59
of the last day). The restatement (``TimeSpan.resolved``) writes its dates in a date
style (``memory.dates``): ISO by default ("the week before 2023-06-09", "2022-12"), or
"long" ("the week before 9 June 2023", "December 2022"); a restatement in either style
reads back to its own span.
"""

from __future__ import annotations

import calendar
import logging
import re
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, cast

from pydantic import BaseModel, ConfigDict

from .dates import DEFAULT_DATE_STYLE, DateStyle, render_month
from .query import (
    _DAY_MONTH_YEAR,
    _MONTH_DAY_YEAR,
    _MONTH_RE,
    _MONTH_YEAR,
    _MONTHS,
    _NUMBER_WORDS,
    _ORD,
    _PREPOSED_YEAR,
    _SPOKEN_TIME,
    _WEEKDAYS,
    _YEAR,
    _day,
    _day_range,
    _month_range,
    _spoken_time,
    time_range,
)

if TYPE_CHECKING:
    from dateparser.date import DateDataParser

logger = logging.getLogger(__name__)

Granularity = Literal["day", "week", "weekend", "month", "season", "year"]
_Span = tuple[datetime, datetime, Granularity]
_Reading = tuple[_Span, str, bool]  # (span, resolved, relative)


class TimeSpan(BaseModel):
    """What a time phrase meant on the day it was said.

    Frozen, because results are cached and shared between callers.

    Example:
        >>> normalise_time("yesterday", datetime(2023, 5, 8)).resolved
        '2023-05-07'
    """

    model_config = ConfigDict(frozen=True)

    text: str
    start: datetime
    end: datetime
    granularity: Granularity
    resolved: str
    relative: bool


_MONTH_NAMES = "|".join(calendar.month_name[1:])
_MONTH_ABBRS = "|".join(calendar.month_abbr[1:])
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}  # first month
_WEEKDAY_NUM = {d: i for i, d in enumerate(_WEEKDAYS.split("|"))}
# Counts the resolver's regex does not know, as a count it does ("a few" is read as three).
_MORE_COUNTS = {"a few": "3", "few": "3", "several": "3", "a couple of": "2", "a couple": "2",
                "couple of": "2", "seven": "7", "eight": "8", "nine": "9", "ten": "10",
                "eleven": "11", "twelve": "12", "fifteen": "15", "twenty": "20"}
_ABBR_DAYS = {d[:3]: d for d in _WEEKDAYS.split("|")} | {
    "tues": "tuesday", "thur": "thursday", "thurs": "thursday"}
_ABBR_RE = "|".join(sorted((a.capitalize() for a in _ABBR_DAYS), key=len, reverse=True))
_MORE = (r"a\s+few|a\s+couple(?:\s+of)?|couple\s+of|several|few|seven|eight|nine|ten|eleven|"
         r"twelve|fifteen|twenty")
_COUNT = rf"\d+|an?|one|two|three|four|five|six|{_MORE}"
# Colloquial shapes the resolver's regex misses, each rewritten to one it reads:
# "a few days ago", "ten years ago", "last Fri", "next Tues", "this past weekend".
# Abbreviated weekdays only capitalised: "the chair I last sat on" is no Saturday.
_COLLOQUIAL = re.compile(
    rf"\b(?:(?P<n>{_MORE})\s+(?P<unit>day|week|weekend|month|year)s?\s+ago|(?P<which>last|next)"
    rf"\s+(?P<abbr>(?-i:{_ABBR_RE}))|this\s+past\s+(?P<past>weekend|week))\b", re.I)
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_ISO_MONTH = re.compile(r"((?:19|20)\d{2})-(0[1-9]|1[0-2])")
# "the week before 2023-06-09", "two weekends before 17 July 2023": restatements, as
# `resolved` writes them in any date style, read so that each normalises back to its span.
_ANCHORED = re.compile(
    rf"\b(?:the\s+)?(?:(?P<unit>day|week|weekend|{_WEEKDAYS})|(?P<n>{_COUNT})\s+"
    rf"(?P<units>day|week|weekend|month|year)s?)\s+(?P<rel>before|after|of)\s+"
    rf"(?P<date>{_DAY_MONTH_YEAR.pattern}|{_MONTH_DAY_YEAR.pattern}|\b{_ISO_DAY.pattern}\b)",
    re.I)
# Month names are case-sensitive here so that "this may be" is not a month.
_NAMED = re.compile(
    rf"\b(?:the\s+)?(?:(?P<which>last|this|next|past)\s+(?P<name>spring|summer|autumn|fall|"
    rf"winter|(?-i:{_MONTH_NAMES}))|(?P<season>spring|summer|autumn|fall|winter)\s+(?:of\s+)?"
    r"(?P<year>(?:19|20)\d{2})(?:[-/]\d{2})?)\b", re.I)
_FIND = (  # (pattern, group): what find_time_phrases looks for, group 0 or the date alone
    (_ANCHORED, 0), (_NAMED, 0), (_COLLOQUIAL, 0), (_SPOKEN_TIME, 0),
    (_DAY_MONTH_YEAR, 0), (_MONTH_DAY_YEAR, 0), (_MONTH_YEAR, 0),
    (re.compile(rf"\b{_ORD}\s+(?:of\s+)?(?-i:{_MONTH_NAMES}|{_MONTH_ABBRS})\b", re.I), 0),
    (re.compile(rf"\b(?-i:{_MONTH_NAMES}|{_MONTH_ABBRS})\.?\s+{_ORD}\b(?!:)", re.I), 0),
    # A bare month or year only after a preposition: "in May" and "since 2019" are times,
    # "I may" and "2000 followers" are not.
    (re.compile(rf"\b(?:in|during|since|until|till|by|from|early|mid|late)\s+"
                rf"((?-i:{_MONTH_NAMES}))\b", re.I), 1),
    (_PREPOSED_YEAR, 1),
)
_PREFIX = re.compile(r"^(?:(?:in|on|at|during|over|since|from|around|about|circa|roughly|"
                     r"approximately|just|only|back|sometime|early|mid|late)\s+|mid-)+", re.I)
_ID = re.compile(r"[A-Za-z]+\d*:\d+")  # source turn ids ("s1:3"), never times
# dateparser reads nearly any word as something ("a" -> January), so it only sees phrases
# that carry a date word or a digit.
_DATEISH = re.compile(
    rf"\d|\b(?:{_MONTH_RE}|{_WEEKDAYS}|mon|tue|wed|thu|fri|sat|sun|day|week|fortnight|month|"
    r"year|yesterday|today|tomorrow|tonight|night|morning|afternoon|evening|ago)s?\b", re.I)
_MONTH_WORD = re.compile(rf"\b(?:{_MONTH_RE})\b", re.I)
_PAST_TENSE = re.compile(r"\b(?:ago|last|yesterday|previous|past|earlier)\b", re.I)
_MAX_DISTANCE = timedelta(days=round(120 * 365.25))
_AHEAD = timedelta(days=92)
"""How far ahead of the day it was said a day named without its year may fall (a
quarter): "on March 3" said on 11 February is this year's March 3."""


def normalise_time(phrase: str, base: datetime,
                   date_style: DateStyle = DEFAULT_DATE_STYLE) -> TimeSpan | None:
    """The span ``phrase`` meant when said on ``base``, or None if it names no time.

    Args:
        phrase: a time expression as said ("last week", "in 2019", "on 5 June").
        base: when it was said (the session date); naive means UTC.
        date_style: how ``resolved`` writes its dates (``memory.dates``).

    Example:
        >>> normalise_time("last year", datetime(2023, 5, 8)).resolved
        '2022'
        >>> normalise_time("last week", datetime(2023, 5, 8), "long").resolved
        'the week before 8 May 2023'
    """
    return _normalise(phrase.strip(), _utc(base), date_style)


def find_time_phrases(text: str) -> list[str]:
    """Time expressions in ``text``, in order, longest first where two overlap.

    Example:
        >>> find_time_phrases("I ran a race last Saturday, and in 2019 too.")
        ['last Saturday', '2019']
    """
    hits = [(m.start(g), m.end(g)) for pattern, g in _FIND for m in pattern.finditer(text)]
    found: list[str] = []
    reached = 0
    for start, end in sorted(hits, key=lambda h: (h[0], -h[1])):
        if start >= reached:
            found.append(text[start:end])
            reached = end
    return found


# A length of time ("for a month", "3 years") or a vague recent time ("recently"): no
# span, but the answer to a "how long" or "when" question all the same.
_MORE_TIMES = re.compile(
    rf"\b(?:{_COUNT})\s+(?:second|minute|hour|day|night|week|weekend|month|year|decade)s?\b"
    r"|\b(?:recently|lately|the\s+other\s+day|these\s+days)\b", re.I)


# Every phrase that says_when accepts holds a digit or one of these words (checked first:
# a set lookup per word costs a fraction of the patterns below).
_TIME_WORDS = frozenset(
    [*_MONTHS, *_WEEKDAYS.split("|"), *_ABBR_DAYS, "yesterday", "today", "tomorrow",
     "tonight", "ago", "spring", "summer", "autumn", "fall", "winter", "recently", "lately",
     "fortnight", "fortnights"]
    + [u + s for u in ("second", "minute", "hour", "day", "night", "week", "weekend", "month",
                       "year", "decade") for s in ("", "s")])
_LETTERS = re.compile(r"[a-z]+")


@lru_cache(maxsize=16384)
def says_when(text: str) -> bool:
    """Whether ``text`` states a time or a length of time: a phrase
    :func:`find_time_phrases` finds, a duration ("for a month", "3 years") or "recently".

    Example:
        >>> says_when("I've been playing for a month now"), says_when("I love bowling")
        (True, False)
    """
    if not any(c.isdigit() for c in text) and _TIME_WORDS.isdisjoint(
            _LETTERS.findall(text.lower())):
        return False
    return bool(_MORE_TIMES.search(text)) or any(p.search(text) for p, _ in _FIND)


def resolve_times(text: str, base: datetime,
                  date_style: DateStyle = DEFAULT_DATE_STYLE) -> list[TimeSpan]:
    """Every time phrase in ``text`` that normalises against ``base``, in order."""
    return [span for p in find_time_phrases(text)
            if (span := normalise_time(p, base, date_style))]


@lru_cache(maxsize=8192)
def _normalise(phrase: str, base: datetime, style: DateStyle) -> TimeSpan | None:
    core = _PREFIX.sub("", " ".join(phrase.split()).strip(" .,;:!?")).strip()
    if not core or len(core) > 100 or _ID.fullmatch(core):
        return None
    if not re.search(r"[A-Za-z]", core) and not (
            _YEAR.fullmatch(core) or _ISO_DAY.fullmatch(core) or _ISO_MONTH.fullmatch(core)):
        return None  # a bare number is a time only as a year (or an ISO day or month)
    reading = (_anchored(core, style) or _named(core, base, style)
               or _relative(core, base, style))
    if reading and reading[2] and logger.isEnabledFor(logging.DEBUG):
        _cross_check(core, base, reading[0])  # a second parse, for the log alone
    reading = (reading or _absolute(core, style) or _dateparser(core, base, style)
               or _partial(core, base, style))
    if reading is None:
        return None
    (start, end, granularity), resolved, relative = reading
    if abs(start - base) > _MAX_DISTANCE or (relative and start > base
                                              and _PAST_TENSE.search(core)):
        return None  # out of any lifetime, or a past-tense phrase read into the future
    return TimeSpan(text=phrase, start=start, end=end, granularity=granularity,
                    resolved=resolved, relative=relative)


def _relative(core: str, base: datetime, style: DateStyle) -> _Reading | None:
    """The regex resolver's reading of a spoken relative phrase ("two weekends ago")."""
    if m := _COLLOQUIAL.fullmatch(core):
        if m["n"]:  # "a few days ago": read as three days, restated as said
            words, unit = " ".join(m["n"].lower().split()), m["unit"].lower()
            reading = _relative(f"{_MORE_COUNTS[words]} {unit}s ago", base, style)
            return reading and (reading[0], f"{words} {unit}s before {_day(base, style)}",
                                True)
        if m["abbr"]:
            return _relative(f"{m['which']} {_ABBR_DAYS[m['abbr'].lower()]}", base, style)
        return _relative(f"last {m['past']}", base, style)  # "this past weekend": the last
    if not (m := _SPOKEN_TIME.fullmatch(core)) or not (span := _spoken_span(m, base)):
        return None
    resolved = _spoken_time(m, base, style) or ""
    for weekday in _WEEKDAY_NUM:  # _spoken_time lower-cases; a restatement capitalises
        resolved = resolved.replace(f"the {weekday} ", f"the {weekday.capitalize()} ")
    return span, resolved, True


def _spoken_span(m: re.Match[str], base: datetime) -> _Span | None:
    phrase = " ".join(m[1].lower().split())
    if m[2]:  # "n units ago"
        n = int(m[2]) if m[2].isdigit() else _NUMBER_WORDS[m[2].lower()]
        unit = m[3].lower()
        if unit == "weekend":
            return (*_weekend(_week(base, -n)), "weekend")
        # The resolver's window centred n units back ("two weeks before <date>"),
        # widened to whole days.
        start, end = time_range(phrase, base) or (base, base)
        return _day_range(start)[0], _day_range(end)[1], cast(Granularity, unit)
    offsets = {"yesterday": -1, "last night": -1, "today": 0, "tonight": 0, "tomorrow": 1}
    if phrase in offsets:
        return (*_day_range(base + timedelta(days=offsets[phrase])), "day")
    which, unit = phrase.split()
    step = {"last": -1, "this": 0, "next": 1}[which]
    if unit in _WEEKDAY_NUM:
        gap = ((base.weekday() - _WEEKDAY_NUM[unit]) * -step) % 7 or 7
        return (*_day_range(base + timedelta(days=gap * step)), "day")
    span = time_range(phrase, base) if step < 1 else None  # last/this week/month/year
    if span is None:
        year, month0 = divmod(base.year * 12 + base.month - 1 + step, 12)
        span = {"week": lambda: _week(base, step), "weekend": lambda: _week(base, step),
                "month": lambda: _month_range(year, month0 + 1),
                "year": lambda: _year_range(base.year + step)}[unit]()
    if unit == "weekend":  # the resolver reads "last weekend" as the whole previous week
        span = _weekend(span)
    return span[0], span[1], cast(Granularity, unit)


def _anchored(core: str, style: DateStyle) -> _Reading | None:
    """Restatements: "the week before 2023-06-09" is "last week" on that day."""
    if not (m := _ANCHORED.fullmatch(core)) or not (anchor := _absolute(m["date"], style)):
        return None
    rel, when = m["rel"].lower(), anchor[0][0]
    if m["n"]:
        if rel != "before":
            return None
        phrase = f"{' '.join(m['n'].lower().split())} {m['units'].lower()}s ago"
    elif (unit := m["unit"].lower()) == "day":
        phrase = {"before": "yesterday", "after": "tomorrow", "of": "today"}[rel]
    elif unit in _WEEKDAY_NUM and rel == "of":
        return None
    else:
        phrase = f"{ {'before': 'last', 'after': 'next', 'of': 'this'}[rel]} {unit}"
    reading = _relative(phrase, when, style)
    return reading and (reading[0], reading[1], False)


def _named(core: str, base: datetime, style: DateStyle) -> _Reading | None:
    """Seasons and named months: "the summer of 2022", "last summer", "next May"."""
    if not (m := _NAMED.fullmatch(core)):
        return None
    if m["year"]:
        season = m["season"].lower()
        year = int(m["year"])
        return (*_season(season, year), "season"), _season_name(season, year), False
    name = m["name"].lower()
    granularity: Granularity = "season" if name in _SEASONS else "month"
    years = range(base.year - 2, base.year + 2)
    spans = [(y, _season(name, y) if name in _SEASONS else
              _month_range(y, list(calendar.month_name).index(m["name"].capitalize())))
             for y in years]
    which = m["which"].lower()
    if which in ("last", "past"):
        year, span = max((s for s in spans if s[1][1] < base), key=lambda s: s[1][0])
    elif which == "next":
        year, span = min((s for s in spans if s[1][0] > base), key=lambda s: s[1][0])
    else:  # the one under way, else the one that falls in the base's year
        year, span = next((s for s in spans if s[1][0] <= base <= s[1][1]),
                          next(s for s in spans if s[0] == base.year))
    resolved = (_season_name(name, year) if granularity == "season"
                else render_month(span[0].year, span[0].month, style))
    return (*span, granularity), resolved, True


def _absolute(core: str, style: DateStyle) -> _Reading | None:
    """A date, month or year named outright, read by the resolver's own ``time_range``
    (an ISO day or month, as ``resolved`` writes them, directly)."""
    if _ISO_DAY.fullmatch(core):
        try:
            day = datetime.strptime(core, "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:  # "2023-13-45": no day
            return None
        return (*_day_range(day), "day"), _say(day, "day", style), False
    if m := _ISO_MONTH.fullmatch(core):
        first = datetime(int(m[1]), int(m[2]), 1, tzinfo=UTC)
        return (*_month_range(first.year, first.month), "month"), _say(first, "month", style), \
            False
    shapes: tuple[tuple[re.Pattern[str], Granularity], ...] = (
        (_DAY_MONTH_YEAR, "day"), (_MONTH_DAY_YEAR, "day"), (_MONTH_YEAR, "month"),
        (_YEAR, "year"))
    for pattern, granularity in shapes:
        if pattern.fullmatch(core) and (span := time_range(core)):
            return (*span, granularity), _say(span[0], granularity, style), False
    return None


def _dateparser(core: str, base: datetime, style: DateStyle = DEFAULT_DATE_STYLE
                ) -> _Reading | None:
    """dateparser's reading, for shapes no regex knows; its period is the granularity."""
    if not _DATEISH.search(core):
        return None
    data = _parser(base.replace(tzinfo=None)).get_date_data(core)
    if data.date_obj is None or data.period == "time":  # a clock time names no day
        return None
    when = data.date_obj.replace(tzinfo=UTC)
    # A phrase that names no year took its year from the base.
    relative = not re.search(r"\d{4}", core)
    granularity = cast(Granularity, data.period if data.period in ("week", "month", "year")
                       else "day")  # "day", or a part of one ("yesterday morning")
    if granularity == "week":
        start, end = _week(when, 0)
    elif granularity == "month":
        start, end = _month_range(when.year, when.month)
    elif granularity == "year":
        start, end = _year_range(when.year)
    else:
        if relative and _MONTH_WORD.search(core):
            when = _nearest_year(when, base)
        start, end = _day_range(when)
    return (start, end, granularity), _say(start, granularity, style), relative


def _nearest_year(when: datetime, base: datetime) -> datetime:
    """A day named by month and day alone ("February 15"): the next one when it is at
    most :data:`_AHEAD` away and nearer than the last one, else the last one.

    dateparser prefers the past, which suits a chat's recollections, a month ("in May")
    and a weekday said alone; but a day said four days before it is that day, not the
    one a year back. Further ahead, a plan and a memory are equally likely, and the past
    reading stands."""
    for year in (base.year, base.year + 1):
        try:
            ahead = when.replace(year=year)
        except ValueError:  # 29 February, not in this year
            continue
        # dateparser gave the last one before the base, so a later one is ahead of it.
        if ahead > when and ahead - base <= _AHEAD and ahead - base < base - when:
            return ahead
    return when


def _partial(core: str, base: datetime, style: DateStyle) -> _Reading | None:
    """A longer phrase ("early May 2023"): its first outright date, else its first time."""
    readings = [r for p in find_time_phrases(core) if len(p) < len(core)
                and (r := _normalise(p, base, style))]
    best = next((r for r in readings if not r.relative), readings[0] if readings else None)
    if best is None:
        return None
    return (best.start, best.end, best.granularity), best.resolved, best.relative


def _cross_check(core: str, base: datetime, span: _Span) -> None:
    """Log where dateparser reads a relative phrase differently; the resolver's span stands."""
    other = _dateparser(core, base)
    if other is not None and other[0][:2] != span[:2]:
        logger.debug("dateparser reads %r on %s as %s..%s; keeping %s..%s", core,
                     base.date(), other[0][0].date(), other[0][1].date(),
                     span[0].date(), span[1].date())


@lru_cache(maxsize=16)
def _parser(base: datetime) -> DateDataParser:
    # Settings (RELATIVE_BASE among them) are fixed at construction, so one parser per
    # session date; construction is cheap, the first parse loads English data (~0.1 s).
    from dateparser.date import DateDataParser

    return DateDataParser(languages=["en"], settings={
        "RELATIVE_BASE": base, "PREFER_DATES_FROM": "past", "RETURN_TIME_AS_PERIOD": True,
        "PREFER_DAY_OF_MONTH": "first", "PARSERS": ["relative-time", "absolute-time"]})


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _week(when: datetime, offset: int) -> tuple[datetime, datetime]:
    monday = _day_range(when)[0] - timedelta(days=when.weekday() - 7 * offset)
    return monday, _day_range(monday + timedelta(days=6))[1]


def _weekend(week: tuple[datetime, datetime]) -> tuple[datetime, datetime]:
    return week[1] - timedelta(days=2) + timedelta(seconds=1), week[1]


def _year_range(year: int) -> tuple[datetime, datetime]:
    return datetime(year, 1, 1, tzinfo=UTC), datetime(year, 12, 31, 23, 59, 59, tzinfo=UTC)


def _season(name: str, year: int) -> tuple[datetime, datetime]:
    first = _SEASONS[name]
    last_year, last_month = divmod(year * 12 + first - 1 + 2, 12)
    return _month_range(year, first)[0], _month_range(last_year, last_month + 1)[1]


def _season_name(name: str, year: int) -> str:
    return f"the {name} of {year}" + (f"-{(year + 1) % 100:02d}" if name == "winter" else "")


def _say(start: datetime, granularity: Granularity, style: DateStyle) -> str:
    if granularity == "year":
        return str(start.year)
    if granularity == "month":
        return render_month(start.year, start.month, style)
    day = _day(start, style)
    return f"the week of {day}" if granularity == "week" else day
