"""Text normalisation shared by the lexical index, the query side and the baselines.

One tokenizer serves FTS5 indexing, querying and the rank-bm25 "normalised tokens"
baseline, so lexical scores are comparable. A query never reaches FTS5's ``MATCH``: its
tokens are looked up as terms (``fts_term``, ``tenant_term``), so no text of a user's is
ever read as FTS5 syntax.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

import Stemmer

# A compact English stop-word list (the Snowball list plus chat fillers). Question words
# are stop-words here: "when"/"what" carry intent, which query.py reads before stripping.
STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do
    does doesn't doing don't down during each few for from further had hadn't has hasn't
    have haven't having he he'd he'll he's her here here's hers herself him himself his how
    how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most
    mustn't my myself no nor not of off on once only or other ought our ours ourselves out
    over own same shan't she she'd she'll she's should shouldn't so some such than that
    that's the their theirs them themselves then there there's these they they'd they'll
    they're they've this those through to too under until up very was wasn't we we'd we'll
    we're we've were weren't what what's when when's where where's which while who who's
    whom why why's with won't would wouldn't us you you'd you'll you're you've your yours
    yourself yourselves also just really yeah yes oh hey hi hello ok okay thanks thank wow
    gonna wanna got get like well much many lot lots thing things something anything
    everything kind sort im ive id youre dont didnt doesnt isnt wasnt cant wont thats whats
    """.split()  # noqa: SIM905 - a word list reads better than a list literal
)

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_ASCII_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"“'‘(])")
"""Where one sentence ends and the next begins (after . ! or ?, before a capital or digit)."""


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits, inner apostrophes kept, as ``'``)."""
    # Neither apostrophe is a word character, so replacing one by the other before the
    # scan finds the same words as replacing it in each word after; on ASCII, _WORD's
    # letters and digits are [a-z0-9], which the regex engine matches faster.
    lowered = text.lower().replace("’", "'")
    return (_ASCII_WORD if lowered.isascii() else _WORD).findall(lowered)


TERM_CACHE = 200_000
"""Words whose index term :func:`tokens` keeps; the cache is emptied when it fills."""


class _Terms(dict[str, str | None]):
    """Each word's index term (None for a stop-word), computed on first sight."""

    def __missing__(self, word: str) -> str | None:
        if len(self) >= TERM_CACHE:
            self.clear()
        term = None if word in STOP_WORDS else _stemmer().stemWord(word.replace("'", ""))
        self[word] = term
        return term


_TERMS = _Terms()


def tokens(text: str) -> list[str]:
    """Normalised index tokens: words minus stop-words, Snowball-stemmed.

    Example:
        >>> tokens("Ana went to the LGBTQ support groups!")
        ['ana', 'went', 'lgbtq', 'support', 'group']
    """
    return [t for t in map(_TERMS.__getitem__, words(text)) if t is not None]


NEIGHBOUR_CHARS = 1000
"""How much of a neighbouring turn a turn's context holds (``nearest``): its sentences
next to the turn. A short turn's neighbours in LoCoMo fit whole; a long assistant answer
beside a short "thanks" would otherwise make the thanks match everything the answer said
(and copy a huge message into both neighbours' index rows)."""


def nearest(text: str, chars: int = NEIGHBOUR_CHARS, *, end: bool = False) -> str:
    """At most ``chars`` characters of ``text``, cut at a space: its start, or with
    ``end`` its end (the part of a preceding turn next to the one after it)."""
    if len(text) <= chars:
        return text
    if end:
        cut = text[-chars:]
        return cut.split(" ", 1)[1] if " " in cut[1:] else cut
    cut = text[:chars]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut


def context_of(texts: list[str], n: int) -> str:
    """The context of the ``n``-th of a session's turn texts, as the full-text index holds
    it: the end of the turn before it and the start of the turn after it."""
    around = []
    if n > 0:
        around.append(nearest(texts[n - 1], end=True))
    if n + 1 < len(texts):
        around.append(nearest(texts[n + 1]))
    return " ".join(around)


def index_text(text: str, tenant: str = "") -> str:
    """The string stored in an FTS5 column: normalised tokens joined by spaces, each
    prefixed with the tenant's token when one is given (``tenant_term``)."""
    terms = tokens(text)
    if not tenant or not terms:
        return " ".join(terms)
    lead = tenant_term(tenant, "")
    return lead + f" {lead}".join(terms)


TENANT_JOIN = "x"
"""Between a tenant token and a term in the index: ``u3f...9ax`` + ``caroline``."""


def tenant_term(tenant: str, token: str) -> str:
    """``token`` as the tenant's own index term (unchanged when ``tenant`` is empty)."""
    return f"{tenant}{TENANT_JOIN}{token}" if tenant else token


_LATIN = ((0x00C0, 0x024F), (0x1E00, 0x1EFF))
"""The Latin blocks whose letters FTS5's ``remove_diacritics`` folds to their base."""


@lru_cache(maxsize=65536)
def fts_term(token: str) -> str:
    """``token`` as FTS5's ``unicode61`` tokenizer stores it: lower case, and a Latin
    letter's diacritics removed (``café`` -> ``cafe``)."""
    token = token.lower()
    if token.isascii():
        return token
    out = []
    for ch in token:
        if any(lo <= ord(ch) <= hi for lo, hi in _LATIN):
            base = "".join(c for c in unicodedata.normalize("NFD", ch)
                           if not unicodedata.combining(c))
            out.append(base or ch)
        else:
            out.append(ch)
    return "".join(out)


def match_tokens(tokens: Sequence[str]) -> list[str]:
    """Query tokens as the stores match them: NUL removed (it ends a C string inside
    SQLite's parser), empty ones dropped, duplicates once."""
    return list(dict.fromkeys(t.replace("\x00", "") for t in tokens if t.strip("\x00")))


_CALENDAR = ("january|february|march|april|may|june|july|august|september|october|november|"
             "december|monday|tuesday|wednesday|thursday|friday|saturday|sunday")
_PLACE = re.compile(
    rf"\b(?:in|at|to|from|near|around|outside|across)\s+(?:the\s+)?(?!(?i:{_CALENDAR})\b)"
    r"[A-Z][\w'-]+")


@lru_cache(maxsize=16384)
def names_place(text: str) -> bool:
    """Whether ``text`` names a place the way people do: a capitalised name after a
    preposition of place ("in Berlin", "moved to Lisbon", "from the Netherlands"), not a
    month or a weekday ("in May").

    Example:
        >>> names_place("I moved to Lisbon in May"), names_place("I moved in May")
        (True, False)
    """
    return _PLACE.search(text) is not None


@lru_cache(maxsize=16384)
def asking_share(text: str) -> float:
    """The share of ``text``'s words that stand in sentences ending in a question mark
    (0.0 for text without words).

    Example:
        >>> asking_share("I went bowling. Have you ever tried it?")
        0.625
    """
    if "?" not in text:  # most long messages: no sentence to find
        return 0.0
    total = asked = 0
    for sentence in SENTENCE_END.split(text.strip()):
        n = len(_WORD.findall(sentence))
        total += n
        if sentence.rstrip().endswith("?"):
            asked += n
    return asked / total if total else 0.0
