"""The time normaliser: phrases as said + the session date -> spans, and the junk it refuses."""

from __future__ import annotations

import calendar
import logging
import re
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from memstrata.memory import timeparse
from memstrata.memory.timeparse import (
    TimeSpan,
    find_time_phrases,
    normalise_time,
    resolve_times,
    says_when,
)

MON_8_MAY = datetime(2023, 5, 8, 13, 56)  # LoCoMo's "1:56 pm on 8 May, 2023", a Monday
SAT_13_MAY = datetime(2023, 5, 13, 10, 0)
MON_17_JULY = datetime(2023, 7, 17, 9, 0)
DEC_20 = datetime(2023, 12, 20, 18, 30)
JAN_10 = datetime(2024, 1, 10, 8, 0)
OCT_15 = datetime(2023, 10, 15, 12, 0)

# phrase, base, first day, last day, granularity, resolved (in the "long" date style, as
# LoCoMo's answer key writes it; the ISO default is derived by ``_iso``), relative
CASES = [
    ("yesterday", MON_8_MAY, date(2023, 5, 7), date(2023, 5, 7), "day", "7 May 2023", True),
    ("today", MON_8_MAY, date(2023, 5, 8), date(2023, 5, 8), "day", "8 May 2023", True),
    ("tomorrow", MON_8_MAY, date(2023, 5, 9), date(2023, 5, 9), "day", "9 May 2023", True),
    ("last night", MON_8_MAY, date(2023, 5, 7), date(2023, 5, 7), "day", "7 May 2023", True),
    ("last year", MON_8_MAY, date(2022, 1, 1), date(2022, 12, 31), "year", "2022", True),
    ("next year", DEC_20, date(2024, 1, 1), date(2024, 12, 31), "year", "2024", True),
    ("last week", MON_8_MAY, date(2023, 5, 1), date(2023, 5, 7), "week",
     "the week before 8 May 2023", True),
    ("last weekend", MON_8_MAY, date(2023, 5, 6), date(2023, 5, 7), "weekend",
     "the weekend before 8 May 2023", True),
    ("this past weekend", MON_8_MAY, date(2023, 5, 6), date(2023, 5, 7), "weekend",
     "the weekend before 8 May 2023", True),
    ("this weekend", MON_8_MAY, date(2023, 5, 13), date(2023, 5, 14), "weekend",
     "the weekend of 8 May 2023", True),
    ("two weekends ago", MON_17_JULY, date(2023, 7, 8), date(2023, 7, 9), "weekend",
     "two weekends before 17 July 2023", True),
    # "n units ago" is the resolver's window centred n units back, in whole days.
    ("two weeks ago", MON_8_MAY, date(2023, 4, 21), date(2023, 4, 27), "week",
     "two weeks before 8 May 2023", True),
    ("a month ago", MON_8_MAY, date(2023, 4, 1), date(2023, 4, 15), "month",
     "a month before 8 May 2023", True),
    ("a few days ago", MON_8_MAY, date(2023, 5, 4), date(2023, 5, 6), "day",
     "a few days before 8 May 2023", True),
    ("next month", DEC_20, date(2024, 1, 1), date(2024, 1, 31), "month", "January 2024", True),
    ("last month", JAN_10, date(2023, 12, 1), date(2023, 12, 31), "month", "December 2023",
     True),
    ("last Saturday", MON_8_MAY, date(2023, 5, 6), date(2023, 5, 6), "day",
     "the Saturday before 8 May 2023", True),
    ("last Saturday", SAT_13_MAY, date(2023, 5, 6), date(2023, 5, 6), "day",
     "the Saturday before 13 May 2023", True),
    ("last Fri", MON_8_MAY, date(2023, 5, 5), date(2023, 5, 5), "day",
     "the Friday before 8 May 2023", True),
    ("next Saturday", MON_8_MAY, date(2023, 5, 13), date(2023, 5, 13), "day",
     "the Saturday after 8 May 2023", True),
    ("last summer", MON_8_MAY, date(2022, 6, 1), date(2022, 8, 31), "season",
     "the summer of 2022", True),
    ("last summer", OCT_15, date(2023, 6, 1), date(2023, 8, 31), "season",
     "the summer of 2023", True),
    ("last May", MON_8_MAY, date(2022, 5, 1), date(2022, 5, 31), "month", "May 2022", True),
    # Shapes only dateparser reads: its reading stands, its period is the granularity.
    # A day without its year: the last one, unless the next is within a quarter and
    # nearer ("I plan to return on July 20", said on 9 July).
    ("on 5 June", MON_17_JULY, date(2023, 6, 5), date(2023, 6, 5), "day", "5 June 2023", True),
    ("on 5 June", OCT_15, date(2023, 6, 5), date(2023, 6, 5), "day", "5 June 2023", True),
    ("on 5 June", MON_8_MAY, date(2023, 6, 5), date(2023, 6, 5), "day", "5 June 2023", True),
    ("on May 10", MON_8_MAY, date(2023, 5, 10), date(2023, 5, 10), "day", "10 May 2023",
     True),
    ("January 2", DEC_20, date(2024, 1, 2), date(2024, 1, 2), "day", "2 January 2024", True),
    ("on 5 June", JAN_10, date(2023, 6, 5), date(2023, 6, 5), "day", "5 June 2023", True),
    ("29 February", JAN_10, date(2024, 2, 29), date(2024, 2, 29), "day", "29 February 2024",
     True),
    ("29 February", MON_8_MAY, date(2020, 2, 29), date(2020, 2, 29), "day", "29 February 2020",
     True),
    ("in May", DEC_20, date(2023, 5, 1), date(2023, 5, 31), "month", "May 2023", True),
    ("the day before yesterday", MON_8_MAY, date(2023, 5, 6), date(2023, 5, 6), "day",
     "6 May 2023", True),
    # Absolute: the base plays no part.
    ("the 5th of June 2023", MON_8_MAY, date(2023, 6, 5), date(2023, 6, 5), "day",
     "5 June 2023", False),  # dateparser's reading: it names its year, so not relative
    ("2023-05-07", MON_8_MAY, date(2023, 5, 7), date(2023, 5, 7), "day", "7 May 2023", False),
    ("in 2019", MON_8_MAY, date(2019, 1, 1), date(2019, 12, 31), "year", "2019", False),
    ("May 2023", MON_8_MAY, date(2023, 5, 1), date(2023, 5, 31), "month", "May 2023", False),
    ("on 5 June 2023", MON_8_MAY, date(2023, 6, 5), date(2023, 6, 5), "day", "5 June 2023",
     False),
    ("in 1920", MON_8_MAY, date(1920, 1, 1), date(1920, 12, 31), "year", "1920", False),
    ("the summer of 2022", MON_8_MAY, date(2022, 6, 1), date(2022, 8, 31), "season",
     "the summer of 2022", False),
    ("winter 2022", MON_8_MAY, date(2022, 12, 1), date(2023, 2, 28), "season",
     "the winter of 2022-23", False),
    ("early May 2023", MON_8_MAY, date(2023, 5, 1), date(2023, 5, 31), "month", "May 2023",
     False),
    # A longer phrase falls back to the outright date inside it, not to its "last week".
    ("the last week of September 2023", MON_8_MAY, date(2023, 9, 1), date(2023, 9, 30),
     "month", "September 2023", False),
    # LoCoMo's answer-key restatements read back to their spans.
    ("the week before 9 June 2023", MON_8_MAY, date(2023, 5, 29), date(2023, 6, 4), "week",
     "the week before 9 June 2023", False),
    ("The sunday before 25 May 2023", MON_8_MAY, date(2023, 5, 21), date(2023, 5, 21), "day",
     "the Sunday before 25 May 2023", False),
]
IDS = [f"{c[0]}@{c[1]:%Y-%m-%d}" for c in CASES]
_MONTH = "|".join(calendar.month_name[1:])
_LONG_DAY = re.compile(rf"\b(\d{{1,2}}) ({_MONTH}) (\d{{4}})\b")
_LONG_MONTH = re.compile(rf"\b({_MONTH}) (\d{{4}})\b")


def _iso(resolved: str) -> str:
    """A long-style restatement in the ISO style: "8 May 2023" -> "2023-05-08", "May
    2023" -> "2023-05"; years and seasons are the same in both."""
    months = {m: n for n, m in enumerate(calendar.month_name) if m}
    text = _LONG_DAY.sub(lambda m: f"{m[3]}-{months[m[2]]:02d}-{int(m[1]):02d}", resolved)
    return _LONG_MONTH.sub(lambda m: f"{m[2]}-{months[m[1]]:02d}", text)


def _expected(resolved: str, style: str) -> str:
    return resolved if style == "long" else _iso(resolved)


def _bounds(first: date, last: date) -> tuple[datetime, datetime]:
    return (datetime(first.year, first.month, first.day, tzinfo=UTC),
            datetime(last.year, last.month, last.day, 23, 59, 59, tzinfo=UTC))


@pytest.mark.parametrize("style", ["iso", "long"])
@pytest.mark.parametrize(("phrase", "base", "first", "last", "granularity", "resolved",
                          "relative"), CASES, ids=IDS)
def test_normalise_time(phrase: str, base: datetime, first: date, last: date,
                        granularity: str, resolved: str, relative: bool, style: str) -> None:
    span = normalise_time(phrase, base, style)  # type: ignore[arg-type]
    assert span is not None
    assert (span.start, span.end) == _bounds(first, last)
    assert span.granularity == granularity
    assert span.resolved == _expected(resolved, style)
    assert span.relative is relative
    assert span.text == phrase


def test_the_default_style_is_iso() -> None:
    assert normalise_time("yesterday", MON_8_MAY).resolved == "2023-05-07"  # type: ignore[union-attr]
    assert normalise_time("last week", MON_8_MAY).resolved == (  # type: ignore[union-attr]
        "the week before 2023-05-08")
    assert normalise_time("next month", DEC_20).resolved == "2024-01"  # type: ignore[union-attr]
    assert _iso("the Saturday before 8 May 2023") == "the Saturday before 2023-05-08"


@pytest.mark.parametrize("style", ["iso", "long"])
@pytest.mark.parametrize(("phrase", "base", "first", "last", "granularity", "resolved",
                          "relative"), CASES, ids=IDS)
def test_the_restatement_reads_back_to_the_same_span_under_any_base(
        phrase: str, base: datetime, first: date, last: date, granularity: str,
        resolved: str, relative: bool, style: str) -> None:
    # The resolved string names its anchor, so it no longer needs the session date; it
    # reads back in either style, and restates itself in the style asked for.
    said = _expected(resolved, style)
    for other in (base, datetime(2031, 3, 3)):
        for again_style in ("iso", "long"):
            again = normalise_time(said, other, again_style)  # type: ignore[arg-type]
            assert again is not None, (said, other)
            assert (again.start, again.end) == _bounds(first, last)
            assert (again.granularity, again.resolved, again.relative) == (
                granularity, _expected(resolved, again_style), False)


@pytest.mark.parametrize("phrase", [
    "", "   ", "D1:3", "d12:4", "42", "1234", "3:30",
    "1850", "in 2150",  # bare numbers outside 1900-2099 are not read as years
    "May 1850",  # more than 120 years before the base
    "on 5 June 2150",  # more than 120 years after it
    "a", "the", "hello there", "recently", "at 5pm",
    "31 February 2023",
    "summer",  # which summer: no year and no last/this/next
    # dateparser reads this as 16 May, a future date for a past-tense phrase.
    "a week ago from tomorrow",
])
def test_junk_is_refused(phrase: str) -> None:
    assert normalise_time(phrase, MON_8_MAY) is None


@pytest.mark.parametrize(("phrase", "dateparser_days"), [
    ("two weeks ago", (date(2023, 4, 24), date(2023, 4, 30))),
    ("a month ago", (date(2023, 4, 1), date(2023, 4, 30))),
    ("three days ago", (date(2023, 5, 5), date(2023, 5, 5))),
    ("10 years ago", (date(2013, 1, 1), date(2013, 12, 31))),
])
def test_the_regex_resolver_wins_where_dateparser_disagrees(
        phrase: str, dateparser_days: tuple[date, date],
        caplog: pytest.LogCaptureFixture) -> None:
    base = timeparse._utc(MON_8_MAY)
    theirs = timeparse._dateparser(phrase, base)
    assert theirs is not None and theirs[0][:2] == _bounds(*dateparser_days)
    caplog.set_level(logging.DEBUG, logger=timeparse.__name__)
    timeparse._normalise.cache_clear()  # the check runs (and logs) on a fresh reading
    ours = normalise_time(phrase, MON_8_MAY)
    assert ours is not None and (ours.start, ours.end) != theirs[0][:2]
    assert f"dateparser reads {phrase!r}" in caplog.text


def test_dateparser_alone_cannot_read_weekends_or_seasons() -> None:
    base = timeparse._utc(MON_8_MAY)
    for phrase in ("last weekend", "two weekends ago", "the summer of 2022", "a few days ago"):
        assert timeparse._dateparser(phrase, base) is None
        assert normalise_time(phrase, MON_8_MAY) is not None


def test_the_base_is_read_in_utc_and_spans_are_aware_utc() -> None:
    # 01:00 on 8 May at UTC+5 is 20:00 on 7 May in UTC: "yesterday" is then 6 May.
    aware = datetime(2023, 5, 8, 1, 0, tzinfo=timezone(timedelta(hours=5)))
    span = normalise_time("yesterday", aware)
    assert span is not None and span.resolved == "2023-05-06"
    assert span.start.tzinfo == UTC and span.end.tzinfo == UTC
    naive = normalise_time("yesterday", datetime(2023, 5, 8, 1, 0))
    assert naive is not None and naive.resolved == "2023-05-07"


def test_spans_are_frozen() -> None:
    span = normalise_time("yesterday", MON_8_MAY)
    assert span is not None
    with pytest.raises(ValidationError):
        span.resolved = "tomorrow"  # type: ignore[misc]
    assert isinstance(span, TimeSpan)


@pytest.mark.parametrize(("text", "expected"), [
    ("I ran a charity race last Saturday – it was great!", ["last Saturday"]),
    ("We went camping two weekends ago and again last weekend.",
     ["two weekends ago", "last weekend"]),
    ("This may be the best painting I have done since 2019.", ["2019"]),
    ("We married on 5 June 2020 and moved in May.", ["5 June 2020", "May"]),
    ("The week before 9 June 2023 I was in Paris.", ["The week before 9 June 2023"]),
    ("The week before 2023-06-09 I was in Paris.", ["The week before 2023-06-09"]),
    ("The summer of 2022 was hot, and last summer too.", ["The summer of 2022", "last summer"]),
    ("A few days ago I went to a poetry reading, and last Fri a gig.",
     ["A few days ago", "last Fri"]),
    ("It was May 8, 2023, yesterday.", ["May 8, 2023", "yesterday"]),
    # No times: an id, a count, a verb, a chair.
    ("See D1:3 - I have 2000 followers and the chair I last sat on.", []),
    ("Nothing to see here.", []),
])
def test_find_time_phrases(text: str, expected: list[str]) -> None:
    found = find_time_phrases(text)
    assert found == expected
    assert all(normalise_time(p, MON_8_MAY) is not None for p in found)


def test_resolve_times_finds_and_normalises_in_order() -> None:
    text = "Yesterday I said that last week was busy, unlike in 2019."
    spans = resolve_times(text, MON_8_MAY)
    assert [(s.text, s.resolved) for s in spans] == [
        ("Yesterday", "2023-05-07"), ("last week", "the week before 2023-05-08"),
        ("2019", "2019")]
    spans = resolve_times(text, MON_8_MAY, "long")
    assert [(s.text, s.resolved) for s in spans] == [
        ("Yesterday", "7 May 2023"), ("last week", "the week before 8 May 2023"),
        ("2019", "2019")]
    assert resolve_times("Nothing here, D1:3.", MON_8_MAY) == []


@pytest.mark.parametrize("text", [
    "Yesterday I went bowling", "I won the tournament last Tuesday", "We moved in 2019",
    "I've been playing for a month now", "She left her job after 3 years",
    "I recently joined a gym", "a couple of weeks ago we met", "It was on 5 June, 2023",
    "lately I've been painting", "We trained for two hours",
])
def test_says_when_finds_a_time_or_a_length_of_time(text: str) -> None:
    assert says_when(text)


@pytest.mark.parametrize("text", [
    "I love bowling with my friends", "This may be the best pizza", "2000 followers!",
    "Playing the game was so much fun", "", "Our team won by a mile",
])
def test_says_when_ignores_text_without_one(text: str) -> None:
    assert not says_when(text)


def test_says_when_holds_for_every_text_with_a_time_phrase() -> None:
    """The cheap pre-check of :func:`says_when` never hides a phrase that
    :func:`find_time_phrases` finds."""
    texts = ["in May we left", "on July 12", "two weekends ago", "last Fri was fun",
             "the week before 9 June 2023", "in early 2021", "this past weekend",
             "a few days ago", "since 2019", "Tues. next week", "the day before 2023-06-09",
             "in the summer of 2022", "next Tues"]
    for text in texts:
        assert find_time_phrases(text), text  # the premise: each holds a phrase
        assert says_when(text), text
