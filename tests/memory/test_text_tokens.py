"""Index tokens: the cached pipeline equals the plain one, word for word."""

from __future__ import annotations

import random

import pytest
import Stemmer

from memstrata.memory import text as textmod

SAMPLES = [
    "",
    "Ana went to the LGBTQ support groups!",
    "I don't know; it's Caroline’s dog’s bowl. Y'all aren't ready",
    "ÉCOLE café naïve İstanbul ΣΊΣΥΦΟΣ straße ﬁne 1²³ ٣٤ 日本語 😀 a_b c-d",
    "running runs ran runner easily fairly 3.14 2024-05-01 e-mail x'y' 'quoted'",
]


def _plain_tokens(text: str) -> list[str]:
    """The pipeline without a cache: lower-case words (’ read as '), stop-words out,
    apostrophes dropped, Snowball-stemmed."""
    found = [w.replace("’", "'") for w in textmod._WORD.findall(text.lower())]
    kept = [w.replace("'", "") for w in found if w not in textmod.STOP_WORDS]
    return Stemmer.Stemmer("english").stemWords([w for w in kept if w])


def _random_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = "aAbZ zé’'_-.\n\tİΣσς ß ﬁ 1²٣ 日本 😀 \u0301eK" + "the and you don't "
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
            for _ in range(count)]


@pytest.mark.parametrize("text", SAMPLES + _random_texts(300, seed=7))
def test_tokens_and_index_text_match_the_plain_pipeline(text: str) -> None:
    want = _plain_tokens(text)
    assert textmod.tokens(text) == want
    assert textmod.words(text) == [w.replace("’", "'")
                                   for w in textmod._WORD.findall(text.lower())]
    assert textmod.index_text(text) == " ".join(want)
    assert textmod.index_text(text, "u1") == " ".join(textmod.tenant_term("u1", t)
                                                      for t in want)


def test_a_full_term_cache_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(textmod, "TERM_CACHE", 5)
    monkeypatch.setattr(textmod, "_TERMS", textmod._Terms())
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa the and"
    assert textmod.tokens(text) == _plain_tokens(text)
    assert len(textmod._TERMS) <= 5
    assert textmod.tokens(text) == _plain_tokens(text)
