"""Answer scores: normalisation, token F1, EM, BLEU-1 and LoCoMo's per-category F1 (the
scorer the QA benchmarks report and the QA program's optimizer metric reads).

The normalisation and the per-category F1 follow LoCoMo's official scorer,
``snap-research/locomo`` at ``task_eval/evaluation.py`` (functions ``normalize_answer``,
``f1_score``, ``f1`` and ``eval_question_answering``; read at commit
``92286325a40764bee61f77824ddb95233b11c4d6``):

* ``normalize_answer``: drop commas, lower-case, drop ASCII punctuation
  (``string.punctuation``), replace the words ``a``, ``an``, ``the`` *and* ``and`` by a
  space, collapse whitespace.
* ``f1_score``: token F1 over Porter-stemmed normalised tokens (0 when no token is shared).
* category 1 (multi-hop, several answers): prediction and ground truth are both split on
  ``','``; for each ground-truth part take the best ``f1_score`` over the prediction parts,
  and average over the ground-truth parts.
* categories 2 and 4: plain ``f1_score``.
* category 3: the ground truth is cut at its first ``';'`` (and stripped) before scoring.
* category 5 (adversarial): 1 when the lower-cased prediction contains
  ``'no information available'`` or ``'not mentioned'``, else 0.

Stemming: the official code uses ``nltk.stem.PorterStemmer``. NLTK is not a dependency
here, so this module uses PyStemmer's ``'porter'`` algorithm (``Stemmer.Stemmer('porter')``,
Snowball's implementation of the original Porter algorithm) plus the two NLTK departures
that are cheap to copy: NLTK's small table of irregular forms (``dying -> die``,
``news -> news``, ...) and leaving words of one or two letters unstemmed. Some rarer
NLTK-specific rules (e.g. ``y -> i`` only after a consonant, so NLTK keeps ``play`` where
Snowball gives ``plai``) are not replicated; they change a score only when two *different*
words collide under one stemmer and not the other.

Exact match and BLEU-1 are not part of the official per-category score. ``exact_match``
here compares the normalised strings (the official, unused ``exact_match_score`` compares
the *sets* of normalised tokens instead). ``bleu1`` is sentence BLEU-1 over normalised,
unstemmed tokens, written out below.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter

import Stemmer

# What counts as an abstention is the QA program's contract; scoring reuses it.

__all__ = [
    "ADVERSARIAL_PHRASES",
    "bleu1",
    "exact_match",
    "locomo_f1",
    "missed_tokens",
    "normalize_answer",
    "score_answer",
    "token_f1",
]

#: Phrases whose presence (case-insensitive) makes a category-5 answer score 1, exactly as
#: in the official ``eval_question_answering``.
ADVERSARIAL_PHRASES: tuple[str, ...] = ("no information available", "not mentioned")

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")

# NLTK PorterStemmer's table of irregular forms (word -> stem), applied before stemming.
_NLTK_IRREGULAR: dict[str, str] = {
    "sky": "sky",
    "skies": "sky",
    "dying": "die",
    "lying": "lie",
    "tying": "tie",
    "news": "news",
    "innings": "inning",
    "inning": "inning",
    "outings": "outing",
    "outing": "outing",
    "cannings": "canning",
    "canning": "canning",
    "howe": "howe",
    "proceed": "proceed",
    "exceed": "exceed",
    "succeed": "succeed",
}

_STEMMER = Stemmer.Stemmer("porter")


def _stem(word: str) -> str:
    """Porter stem of one lower-case token, with NLTK's irregular forms and short words."""
    irregular = _NLTK_IRREGULAR.get(word)
    if irregular is not None:
        return irregular
    if len(word) <= 2:
        return word
    return str(_STEMMER.stemWord(word))


def _stemmed_tokens(text: str) -> list[str]:
    return [_stem(w) for w in normalize_answer(text).split()]


def normalize_answer(s: str) -> str:
    """Normalise an answer the way LoCoMo's official scorer does.

    Commas are dropped, the text is lower-cased, ASCII punctuation is removed, the words
    ``a``, ``an``, ``the`` and ``and`` become spaces, and whitespace is collapsed.

    Args:
        s: Raw answer text.

    Returns:
        The normalised text (possibly empty).

    Example:
        >>> normalize_answer("The Cat, and the Hat!")
        'cat hat'
    """
    s = s.replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def token_f1(prediction: str, truth: str) -> float:
    """Token-level F1 between two answers (LoCoMo's ``f1_score``).

    Both sides are normalised with :func:`normalize_answer`, split on whitespace and
    Porter-stemmed; overlap counts shared tokens with multiplicity. With ``p`` the shared
    count over the prediction length and ``r`` the shared count over the truth length,
    F1 is ``2pr / (p + r)``; it is 0 when nothing is shared (including empty inputs).

    Args:
        prediction: Model answer.
        truth: Ground-truth answer.

    Returns:
        F1 in [0, 1].

    Example:
        >>> token_f1("the cat sat", "a cat sat down")
        0.8
    """
    pred_tokens = _stemmed_tokens(prediction)
    truth_tokens = _stemmed_tokens(truth)
    common = Counter(pred_tokens) & Counter(truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def missed_tokens(prediction: str, truth: str) -> list[str]:
    """The words of ``truth`` that :func:`token_f1` finds no match for in ``prediction``.

    Words are normalised as ``token_f1`` normalises them, and matched by their stems with
    multiplicity (the second "red" of the truth is missed if the prediction says it once).

    Example:
        >>> missed_tokens("a cat", "the black cats")
        ['black']
    """
    left = Counter(_stemmed_tokens(prediction))
    missed = []
    for word in normalize_answer(truth).split():
        stem = _stem(word)
        if left[stem] > 0:
            left[stem] -= 1
        else:
            missed.append(word)
    return missed


def exact_match(prediction: str, truth: str) -> float:
    """1.0 when the normalised prediction equals the normalised truth, else 0.0.

    Args:
        prediction: Model answer.
        truth: Ground-truth answer.

    Returns:
        1.0 or 0.0.

    Example:
        >>> exact_match("The Eiffel Tower!", "eiffel tower")
        1.0
    """
    return 1.0 if normalize_answer(prediction) == normalize_answer(truth) else 0.0


def bleu1(prediction: str, truth: str) -> float:
    """Sentence BLEU-1 over normalised (unstemmed) tokens.

    With ``c`` prediction tokens and ``r`` reference tokens::

        precision = sum_w min(count_pred(w), count_ref(w)) / c
        BP        = 1                 if c >= r
                    exp(1 - r / c)    if c < r
        BLEU-1    = BP * precision

    An empty prediction scores 0 (as does any prediction against an empty reference,
    since no token can be matched).

    Args:
        prediction: Model answer (the hypothesis).
        truth: Ground-truth answer (the single reference).

    Returns:
        BLEU-1 in [0, 1].

    Example:
        >>> round(bleu1("cat sat", "the cat sat on a mat"), 4)  # 1.0 * exp(1 - 4/2)
        0.3679
    """
    pred_tokens = normalize_answer(prediction).split()
    ref_tokens = normalize_answer(truth).split()
    c, r = len(pred_tokens), len(ref_tokens)
    if c == 0:
        return 0.0
    clipped = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    precision = clipped / c
    brevity = 1.0 if c >= r else math.exp(1.0 - r / c)
    return brevity * precision


def _multi_answer_f1(prediction: str, truth: str) -> float:
    """LoCoMo's ``f1``: mean over ','-separated truths of the best F1 over prediction parts."""
    predictions = [p.strip() for p in prediction.split(",")]
    truths = [g.strip() for g in truth.split(",")]
    best = [max(token_f1(p, g) for p in predictions) for g in truths]
    return sum(best) / len(best)


def _adversarial_score(prediction: str) -> float:
    lowered = prediction.lower()
    return 1.0 if any(phrase in lowered for phrase in ADVERSARIAL_PHRASES) else 0.0


def _category_truth(truth: str, category: int) -> str:
    """The ground truth as the official scorer uses it (category 3 cuts at ';')."""
    return truth.split(";")[0].strip() if category == 3 else truth


def locomo_f1(prediction: str, truth: str, category: int) -> float:
    """LoCoMo's official per-category answer score.

    * 1: multi-answer F1 (both sides split on ``','``; mean over truth parts of the best
      :func:`token_f1` over prediction parts).
    * 2, 4: :func:`token_f1`.
    * 3: :func:`token_f1` against the truth up to its first ``';'``.
    * 5: 1.0 if the prediction contains ``'no information available'`` or
      ``'not mentioned'`` (case-insensitive), else 0.0; ``truth`` is ignored.

    Args:
        prediction: Model answer.
        truth: Ground-truth answer (ignored for category 5).
        category: LoCoMo question category, 1 to 5.

    Returns:
        Score in [0, 1].

    Raises:
        ValueError: If ``category`` is not 1 to 5 (the official scorer raises too).

    Example:
        >>> round(locomo_f1("Paris, Rome", "Rome, Paris, Oslo", 1), 4)
        0.6667
        >>> locomo_f1("That is not mentioned.", "", 5)
        1.0
    """
    if category == 5:
        return _adversarial_score(prediction)
    if category == 1:
        return _multi_answer_f1(prediction, truth)
    if category in (2, 3, 4):
        return token_f1(prediction, _category_truth(truth, category))
    raise ValueError(f"unknown LoCoMo category {category!r} (expected 1 to 5)")


def score_answer(prediction: str, truth: str | None, category: int) -> dict[str, float]:
    """F1 (official per-category rule), exact match and BLEU-1 for one answer.

    For categories 1 to 4, ``f1`` is :func:`locomo_f1`, and ``em`` and ``bleu1`` compare
    the prediction with the whole truth string (cut at ``';'`` for category 3, as the
    official scorer does before any metric). For category 5 all three values are the
    adversarial 0/1 score and ``truth`` may be ``None``.

    Args:
        prediction: Model answer.
        truth: Ground-truth answer; may be ``None`` only for category 5.
        category: LoCoMo question category, 1 to 5.

    Returns:
        ``{"f1": ..., "em": ..., "bleu1": ...}``, each a float in [0, 1].

    Raises:
        ValueError: If ``category`` is not 1 to 5, or ``truth`` is ``None`` outside
            category 5.

    Example:
        >>> score_answer("Paris.", "paris", 2)
        {'f1': 1.0, 'em': 1.0, 'bleu1': 1.0}
        >>> score_answer("No information available.", None, 5)
        {'f1': 1.0, 'em': 1.0, 'bleu1': 1.0}
    """
    if category == 5:
        value = _adversarial_score(prediction)
        return {"f1": value, "em": value, "bleu1": value}
    if category not in (1, 2, 3, 4):
        raise ValueError(f"unknown LoCoMo category {category!r} (expected 1 to 5)")
    if truth is None:
        raise ValueError(f"category {category} needs a ground-truth answer, got None")
    ref = _category_truth(truth, category)
    return {
        "f1": locomo_f1(prediction, truth, category),
        "em": exact_match(prediction, ref),
        "bleu1": bleu1(prediction, ref),
    }
