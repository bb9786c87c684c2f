"""The cognitive scorer: item matching (numbers, commands, names), partial credit, none."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from memstrata.bench.cognitive.scoring import Rule, level_summary, matches, score, tokens


def rule(**kwargs: object) -> Rule:
    return Rule.model_validate(kwargs)


# --------------------------------------------------------------------------- partial credit


def test_all_items_give_partial_credit() -> None:
    r = rule(all=["Vell", "Halloran"])
    assert score("Tomas Vell and Rune Halloran", r) == 1.0
    assert score("Only Tomas Vell", r) == 0.5
    assert score("Kasimir Oduya", r) == 0.0


def test_any_counts_as_one_item() -> None:
    r = rule(all=["mass start"], any=["50", "fifty"])
    assert score("the 50 km mass start", r) == 1.0
    assert score("the mass start", r) == 0.5  # 1 of (1 all + 1 any)
    assert score("the 50 km classic", r) == 0.5
    assert score("the 50 km mass start, fifty kilometres", r) == 1.0  # any counts once
    assert score("February 15", rule(any=["February 15", "15 February"])) == 1.0
    assert score("February 16", rule(any=["February 15", "15 February"])) == 0.0


def test_none_item_zeroes_the_score() -> None:
    r = rule(all=["10"], none=["9"])
    assert score("He has 10 titles", r) == 1.0
    assert score("He has 10 titles, up from 9", r) == 0.0


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("item", "answer", "expected"),
    [
        ("4.1 million", "Kestrel reported 4,100,000 viewers", True),
        ("4.1 million", "about 4.1 million people", True),
        ("4.1 million", "4.2 million", False),
        ("4.1 million", "4.1 viewers", False),  # 4.1 is not 4.1 million
        ("500,000", "a gap of 0.5 million", True),
        ("11,400", "11400 spectators", True),
        ("12%", "up 12 percent", True),
        ("2", "two medals", True),
        ("7", "17 medals", False),  # a number, not a digit inside another number
        ("6", "6 gold", True),
    ],
)
def test_number_items_match_by_value(item: str, answer: str, expected: bool) -> None:
    assert matches(item, answer) is expected


def test_tolerance_is_relative() -> None:
    r = rule(all=["100"], tolerance=0.05)
    assert score("about 104", r) == 1.0
    assert score("about 96", r) == 1.0
    assert score("about 106", r) == 0.0
    assert score("100.5", rule(all=["100"])) == 0.0  # tolerance 0 is exact


def test_a_year_item_is_matched_as_text() -> None:
    assert matches("1998", "their first gold since 1998")
    assert not matches("1998", "their first gold since 1999")


# --------------------------------------------------------------------------- commands


def test_command_matches_verbatim_after_collapsing_whitespace() -> None:
    item = "tidectl serve --port 9000"
    assert matches(item, "Run `tidectl serve --port 9000`.")
    assert matches(item, "tidectl  serve\n  --port 9000")
    assert not matches(item, "Tidectl serve --port 9000")  # case-sensitive
    assert not matches(item, "tidectl serve --port 90001")
    assert not matches(item, "tidectl serve --port=9000")


def test_flag_does_not_match_a_longer_flag() -> None:
    assert matches("--confirm", "tidectl publish --env production --confirm")
    assert not matches("--confirm", "tidectl publish --confirm-all")
    assert not matches("--env production", "--env production-eu")


def test_command_items_score_partially() -> None:
    r = rule(all=["tidectl publish", "--env production", "--confirm"])
    assert score("tidectl publish --confirm --env production", r) == 1.0
    assert score("tidectl publish --env production", r) == pytest.approx(2 / 3)


# --------------------------------------------------------------------------- names and text


def test_name_does_not_match_inside_another_word() -> None:
    assert not matches("Ann", "Anna won")
    assert not matches("Vell", "Vellinga won")
    assert matches("Ann", "Ann's time was best")
    assert matches("MARWOOD", "Ilse marwood won")


def test_text_tokens_are_contiguous_and_not_stemmed() -> None:
    assert matches("opening ceremony", "The Opening Ceremony, with 3.1 million")
    assert not matches("opening ceremony", "the ceremony opening")
    assert not matches("title", "ten titles")
    assert matches("Zoe", "Zoë Brandt")  # accents fold away


def test_times_match_as_token_runs() -> None:
    assert matches("41:08.3", "She won in 41:08.3.")
    assert not matches("41:08.3", "She won in 41:08.4.")
    assert tokens("50km, Klaebo's") == ["50", "km", "klaebo", "s"]


# --------------------------------------------------------------------------- rule and summary


def test_rule_needs_all_or_any() -> None:
    with pytest.raises(ValidationError, match="give at least one of all/any"):
        rule(none=["9"])
    with pytest.raises(ValidationError):
        rule(all=["10"], tolerance=-0.1)
    with pytest.raises(ValidationError, match="no letters or digits"):
        rule(all=["--"])


def test_level_summary_is_the_mean() -> None:
    assert level_summary([1.0, 0.5, 0.0]) == 0.5
    assert level_summary([]) == 0.0


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_score_is_bounded_and_deterministic(answer: str) -> None:
    r = rule(all=["4.1 million", "Kestrel"], any=["--confirm", "Ann"], none=["9"])
    first = score(answer, r)
    assert 0.0 <= first <= 1.0
    assert score(answer, r) == first
