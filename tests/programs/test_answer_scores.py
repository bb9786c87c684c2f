"""LoCoMo QA metrics: normalisation, token F1, EM, BLEU-1, per-category F1, abstentions.

Every expected number below is worked out by hand in the comment next to it.
"""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.programs import answer_scores
from memstrata.programs.answer_scores import (
    bleu1,
    exact_match,
    locomo_f1,
    normalize_answer,
    score_answer,
    token_f1,
)
from memstrata.programs.qa import ABSTAIN_PHRASES, is_abstention

# --------------------------------------------------------------------------- normalize


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Cat, and the Hat!", "cat hat"),
        ("  Mr. Smith's   dog  ", "mr smiths dog"),
        # word boundaries: "anderson" and "band" keep their "and"/"an"
        ("Anderson and the band", "anderson band"),
        # commas are deleted outright (no space), exactly as the official code does
        ("Hello,world", "helloworld"),
        ("A\tAN\nthe", ""),
        ("!!!", ""),
        ("", ""),
        # only ASCII punctuation is removed
        ("it’s", "it’s"),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


# --------------------------------------------------------------------------- token F1


def test_token_f1_hand_computed() -> None:
    # pred -> [cat, sat]; truth -> [cat, sat, down]; shared 2
    # P = 2/2 = 1, R = 2/3, F1 = 2 * 1 * (2/3) / (1 + 2/3) = (4/3) / (5/3) = 0.8
    assert token_f1("the cat sat", "a cat sat down") == pytest.approx(0.8)
    # pred -> [visit, pari, in, 2019]; truth -> [she, visit, pari]; shared 2
    # P = 2/4 = 1/2, R = 2/3, F1 = 2 * (1/2) * (2/3) / (1/2 + 2/3) = (2/3) / (7/6) = 4/7
    assert token_f1("visited Paris in 2019", "She visited Paris") == pytest.approx(0.5714285714)
    # overlap counts with multiplicity: pred [cat, cat], truth [cat] -> shared min(2, 1) = 1
    # P = 1/2, R = 1, F1 = 2 * (1/2) * 1 / (3/2) = 2/3
    assert token_f1("cat cat", "cat") == pytest.approx(0.6666666667)


def test_token_f1_stems() -> None:
    # running -> run, runs -> run: identical stems, F1 = 1
    assert token_f1("running", "runs") == pytest.approx(1.0)
    # hiked -> hike, hiking -> hike
    assert token_f1("hiked", "Hiking!") == pytest.approx(1.0)
    # Porter does not map the irregular past "ran" to "run": nothing shared
    assert token_f1("ran", "running") == pytest.approx(0.0)


def test_token_f1_nltk_departures() -> None:
    # NLTK's irregular-form table: dying -> die (Snowball alone gives "dy")
    assert token_f1("dying", "die") == pytest.approx(1.0)
    # news stays "news" in NLTK, so it does not match "new"
    assert token_f1("news", "new") == pytest.approx(0.0)
    # NLTK leaves 1-2 letter words alone: "us" is not cut to "u"
    assert token_f1("us", "u") == pytest.approx(0.0)


def test_token_f1_empty_inputs() -> None:
    assert token_f1("", "cat") == 0.0
    assert token_f1("cat", "") == 0.0
    assert token_f1("", "") == 0.0
    # only articles -> empty after normalisation
    assert token_f1("the", "a") == 0.0


# --------------------------------------------------------------------------- exact match


def test_exact_match() -> None:
    # "the eiffel tower!" -> "eiffel tower"
    assert exact_match("The Eiffel Tower!", "eiffel tower") == 1.0
    assert exact_match("An apple.", "apple") == 1.0
    assert exact_match("New York, NY", "new york ny") == 1.0
    # word order matters, and there is no stemming
    assert exact_match("tower eiffel", "eiffel tower") == 0.0
    assert exact_match("running", "runs") == 0.0


def test_exact_match_empty_inputs() -> None:
    assert exact_match("", "cat") == 0.0
    assert exact_match("cat", "") == 0.0
    # both normalise to "" -> equal
    assert exact_match("", "") == 1.0
    assert exact_match("the", "") == 1.0


# --------------------------------------------------------------------------- BLEU-1


def test_bleu1_brevity_penalty() -> None:
    # pred [cat, sat] (c = 2); ref [cat, sat, on, mat] (r = 4); clipped 2 -> precision 1
    # BP = exp(1 - 4/2) = exp(-1) = 0.36787944117144233
    assert bleu1("cat sat", "the cat sat on a mat") == pytest.approx(0.36787944117144233)
    # pred [cat, fish] (c = 2); ref [cat, dog, bird] (r = 3); clipped 1 -> precision 1/2
    # BP = exp(1 - 3/2) = exp(-0.5) = 0.6065306597126334; BLEU-1 = 0.3032653298563167
    assert bleu1("cat fish", "cat dog bird") == pytest.approx(0.3032653298563167)


def test_bleu1_no_penalty_and_clipping() -> None:
    # c = 3 >= r = 2 -> BP = 1; clipped 1 (cat) -> 1/3
    assert bleu1("cat dog bird", "cat fish") == pytest.approx(0.3333333333)
    # clipping: "dog" appears 3 times in pred, once in ref -> clipped 1; c = 3 -> 1/3
    assert bleu1("dog dog dog", "dog cat") == pytest.approx(0.3333333333)
    # identical after normalisation
    assert bleu1("The cat.", "cat") == pytest.approx(1.0)


def test_bleu1_empty_inputs() -> None:
    assert bleu1("", "cat") == 0.0
    assert bleu1("the", "cat") == 0.0  # empty after normalisation
    assert bleu1("cat", "") == 0.0  # c = 1, r = 0: BP 1, nothing matched
    assert bleu1("", "") == 0.0


# --------------------------------------------------------------------------- locomo_f1


def test_locomo_f1_category_1_multi_answer() -> None:
    # truths [rome, paris, oslo]; best over preds [paris, rome]: 1, 1, 0 -> mean 2/3
    assert locomo_f1("Paris, Rome", "Rome, Paris, Oslo", 1) == pytest.approx(0.6666666667)
    # one prediction part [hike, swim]; truths [hike] and [swim]
    # each: P = 1/2, R = 1 -> F1 = 2/3; mean 2/3
    assert locomo_f1("hiking and swimming", "hiking, swimming", 1) == pytest.approx(
        0.6666666667)
    # extra prediction parts do not cost anything in category 1: best for "pottery" is 1
    assert locomo_f1("pottery, painting", "pottery", 1) == pytest.approx(1.0)
    # ... but do in category 2: pred [potteri, paint], truth [potteri] -> P 1/2, R 1 -> 2/3
    assert locomo_f1("pottery, painting", "pottery", 2) == pytest.approx(0.6666666667)


def test_locomo_f1_category_3_cuts_at_semicolon() -> None:
    # truth -> "2020"; pred [in, 2020]: P = 1/2, R = 1 -> F1 = 2/3
    assert locomo_f1("in 2020", "2020; she said so", 3) == pytest.approx(0.6666666667)
    # without the cut (category 2): truth [2020, she, said, so]; P = 1/2, R = 1/4
    # F1 = 2 * (1/8) / (3/4) = 1/3
    assert locomo_f1("in 2020", "2020; she said so", 2) == pytest.approx(0.3333333333)
    assert locomo_f1("Likely yes", "Likely yes; because she likes it", 3) == pytest.approx(1.0)


def test_locomo_f1_categories_2_and_4_are_token_f1() -> None:
    # same hand value as above: 0.8
    assert locomo_f1("the cat sat", "a cat sat down", 2) == pytest.approx(0.8)
    assert locomo_f1("the cat sat", "a cat sat down", 4) == pytest.approx(0.8)


def test_locomo_f1_category_5_adversarial() -> None:
    assert locomo_f1("Not mentioned in the conversation", "Paris", 5) == 1.0
    assert locomo_f1("NO INFORMATION AVAILABLE.", "Paris", 5) == 1.0
    # a "correct-looking" answer to an adversarial question scores 0
    assert locomo_f1("Paris", "Paris", 5) == 0.0
    # only the two official phrases count for category 5
    assert locomo_f1("That is unknown.", "Paris", 5) == 0.0
    assert locomo_f1("", "", 5) == 0.0


def test_locomo_f1_empty_and_bad_category() -> None:
    for category in (1, 2, 3, 4):
        assert locomo_f1("", "", category) == 0.0
        assert locomo_f1("cat", "", category) == 0.0
    for category in (0, 6):
        with pytest.raises(ValueError):
            locomo_f1("cat", "cat", category)


# --------------------------------------------------------------------------- abstention


@pytest.mark.parametrize(
    "text",
    [
        "No information available.",
        "It is NOT   mentioned",
        "It is not\nmentioned.",
        "There is no information about that.",
        "That detail is not available.",
        "The answer is unknown",
        "This cannot be determined from the chat.",
        "Not stated.",
    ],
)
def test_is_abstention_true(text: str) -> None:
    assert is_abstention(text) is True


@pytest.mark.parametrize("text", ["Paris", "", "She knows it well.", "In May 2023."])
def test_is_abstention_false(text: str) -> None:
    assert is_abstention(text) is False


def test_abstain_phrases_are_lower_case_and_include_official_ones() -> None:
    assert "no information available" in ABSTAIN_PHRASES
    assert "not mentioned" in ABSTAIN_PHRASES
    assert all(p == p.lower() for p in ABSTAIN_PHRASES)


# --------------------------------------------------------------------------- score_answer


def test_score_answer_regular_categories() -> None:
    assert score_answer("Paris.", "paris", 2) == pytest.approx(
        {"f1": 1.0, "em": 1.0, "bleu1": 1.0})
    # f1: pred [cat, sat], truth [cat, sat, on, mat] -> P 1, R 1/2 -> 2/3
    # em: 0; bleu1: exp(1 - 4/2) = 0.36787944117144233
    assert score_answer("cat sat", "the cat sat on a mat", 4) == pytest.approx(
        {"f1": 0.6666666667, "em": 0.0, "bleu1": 0.36787944117144233})
    # category 1: f1 is order-free (1.0); em compares "rome paris" with "paris rome" (0.0);
    # bleu1: c = r = 2, both tokens matched -> 1.0
    assert score_answer("Rome, Paris", "Paris, Rome", 1) == pytest.approx(
        {"f1": 1.0, "em": 0.0, "bleu1": 1.0})
    # category 3: em and bleu1 also use the truth cut at ';'
    assert score_answer("Likely yes", "Likely yes; because she likes it", 3) == pytest.approx(
        {"f1": 1.0, "em": 1.0, "bleu1": 1.0})


def test_score_answer_category_5() -> None:
    assert score_answer("Not mentioned.", None, 5) == {"f1": 1.0, "em": 1.0, "bleu1": 1.0}
    assert score_answer("Paris", None, 5) == {"f1": 0.0, "em": 0.0, "bleu1": 0.0}
    assert score_answer("Paris", "Paris", 5) == {"f1": 0.0, "em": 0.0, "bleu1": 0.0}


def test_score_answer_empty_and_errors() -> None:
    assert score_answer("", "cat", 2) == {"f1": 0.0, "em": 0.0, "bleu1": 0.0}
    assert score_answer("", "", 1) == {"f1": 0.0, "em": 1.0, "bleu1": 0.0}
    with pytest.raises(ValueError):
        score_answer("cat", None, 2)
    with pytest.raises(ValueError):
        score_answer("cat", "cat", 7)


# --------------------------------------------------------------------------- properties


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), st.integers(1, 5))
def test_scores_are_floats_in_unit_interval(pred: str, truth: str, category: int) -> None:
    scores = score_answer(pred, truth, category)
    assert set(scores) == {"f1", "em", "bleu1"}
    for value in scores.values():
        assert type(value) is float
        assert 0.0 <= value <= 1.0
    for value in (token_f1(pred, truth), bleu1(pred, truth), exact_match(pred, truth)):
        assert type(value) is float
        assert 0.0 <= value <= 1.0


def test_docstring_examples() -> None:
    result = doctest.testmod(answer_scores)
    assert result.attempted > 0
    assert result.failed == 0
