"""Passages of a long message: what a search quotes of it, and how well its best part
matches a query.

A long assistant answer holds code, lists and tables on several topics; the whole message
matches a query only as an average of its parts. A passage is a fenced code block, or a
run of paragraphs (a paragraph longer than the window, a run of sentences) of at most
:data:`PASSAGE_CHARS` characters. Pure text work: no store access, no model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from . import text as textmod

PASSAGE_CHARS = 600
"""A passage's most characters (a code block or a sentence longer than this is one
passage by itself)."""

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_PARAGRAPH = re.compile(r"\n\s*\n")


def _windows(pieces: Iterable[str], chars: int) -> list[str]:
    """Consecutive pieces joined while they fit in ``chars`` (one piece may exceed it)."""
    out: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + 1 + len(piece) > chars:
            out.append(current)
            current = piece
        else:
            current = f"{current}\n{piece}" if current else piece
    if current:
        out.append(current)
    return out


def _prose(text: str, chars: int) -> list[str]:
    parts: list[str] = []
    for paragraph in _PARAGRAPH.split(text):
        paragraph = paragraph.strip()
        if len(paragraph) > chars:
            parts += _windows(textmod.SENTENCE_END.split(paragraph), chars)
        elif paragraph:
            parts.append(paragraph)
    return _windows(parts, chars)


@lru_cache(maxsize=4096)
def split_passages(text: str, chars: int = PASSAGE_CHARS) -> tuple[str, ...]:
    """The passages of ``text`` in order: each fenced code block whole, the prose between
    them in windows of at most ``chars`` characters. A text of at most ``chars``
    characters is one passage.

    Example:
        >>> split_passages("Intro.\\n\\n```py\\nx = 1\\n```\\n\\nOutro.", chars=10)
        ('Intro.', '```py\\nx = 1\\n```', 'Outro.')
    """
    if len(text) <= chars:
        return (text,)
    out: list[str] = []
    start = 0
    for fence in _FENCE.finditer(text):
        out += _prose(text[start:fence.start()], chars)
        out.append(fence.group(0))
        start = fence.end()
    out += _prose(text[start:], chars)
    return tuple(out) or (text,)


def best_passage(text: str, words: set[str], chars: int = PASSAGE_CHARS) -> tuple[str, float]:
    """The passage of ``text`` holding the most of ``words`` (index tokens,
    ``text.tokens``), the first on a tie, and the share of ``words`` it holds (0.0 when
    ``words`` is empty)."""
    best, share = "", -1.0
    for passage in split_passages(text, chars):
        held = len(words & set(textmod.tokens(passage))) / len(words) if words else 0.0
        if held > share:
            best, share = passage, held
    return best, max(share, 0.0)
