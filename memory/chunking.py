"""Chunking a conversation for extraction: turn count, time gaps and topic shift.

The extractor makes one LLM call per chunk, so the chunk plan *is* the ingest's call
budget: every chunk holds at least ``min_turns`` turns (bar a conversation shorter than
that), which caps calls at ``turns / min_turns``. Within that bound the strategy picks
where chunks end:

* ``turns``: equal splits of each segment, nothing else considered;
* ``gap``: segments end at a session change or a silence longer than ``gap``; segments
  too short for a call of their own join the next one;
* ``topic`` (default): ``gap``, then each long segment is cut where the talk changes
  most — the lowest lexical overlap between the few turns before and after a boundary,
  searched near each even cut so sizes stay balanced.

No model is needed: topic shift is measured on the index tokens (``text.tokens``), which
is what the lexical channel retrieves on too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, Field

from . import text as textmod
from .models import Turn

Strategy = Literal["turns", "gap", "topic"]


class ChunkSettings(BaseModel):
    """How a conversation is cut into extraction chunks."""

    strategy: Strategy = "topic"
    min_turns: int = Field(10, ge=1, description="fewest turns a chunk (an LLM call) covers")
    max_turns: int = Field(19, ge=1, description="most turns a chunk covers")
    gap: timedelta = Field(timedelta(hours=2), description="a silence that ends a segment")
    window: int = Field(3, ge=1, description="turns each side compared for a topic shift")
    search: int = Field(3, ge=0, description="how far from an even cut a topic cut may move")


class Chunk(BaseModel):
    """Consecutive turns of one conversation, extracted in one call."""

    conversation_id: str
    turns: list[Turn]

    @property
    def turn_ids(self) -> list[str]:
        """The source ids of the chunk's turns, in order."""
        return [t.turn_id for t in self.turns]


def _segments(turns: Sequence[Turn], settings: ChunkSettings) -> list[list[Turn]]:
    """Split at session changes and long silences."""
    out: list[list[Turn]] = []
    for turn in turns:
        if out:
            last = out[-1][-1]
            silent = (turn.event_time is not None and last.event_time is not None
                      and turn.event_time - last.event_time > settings.gap)
            if turn.session_id == last.session_id and not silent:
                out[-1].append(turn)
                continue
        out.append([turn])
    return out


def _join_short(segments: list[list[Turn]], min_turns: int) -> list[list[Turn]]:
    """Join segments shorter than ``min_turns`` to the next (the last to the previous)."""
    out: list[list[Turn]] = []
    carry: list[Turn] = []
    for segment in segments:
        carry = carry + segment
        if len(carry) >= min_turns:
            out.append(carry)
            carry = []
    if carry:
        if out:
            out[-1] = out[-1] + carry
        else:
            out.append(carry)
    return out


def _shift(tokens: list[set[str]], cut: int, window: int) -> float:
    """How much the talk changes at ``cut``: 1 - Jaccard overlap of the two windows."""
    before = set().union(*tokens[max(0, cut - window):cut])
    after = set().union(*tokens[cut:cut + window])
    if not before or not after:
        return 0.0
    return 1.0 - len(before & after) / len(before | after)


def _cuts(segment: list[Turn], settings: ChunkSettings) -> list[int]:
    """Where to cut one segment: as few pieces as keep each within ``max_turns``."""
    n = len(segment)
    pieces = max(1, min(n // settings.min_turns, -(-n // settings.max_turns)))
    if pieces == 1:
        return []
    even = [round(i * n / pieces) for i in range(1, pieces)]
    if settings.strategy != "topic":
        return even
    tokens = [set(textmod.tokens(t.text)) for t in segment]
    cuts: list[int] = []
    for i, ideal in enumerate(even):
        low = max((cuts[-1] if cuts else 0) + settings.min_turns, ideal - settings.search)
        # leave room for the pieces still to come
        high = min(n - (pieces - 1 - i) * settings.min_turns, ideal + settings.search)
        candidates = range(low, high + 1) if low <= high else [ideal]
        cuts.append(max(candidates, key=lambda c: (_shift(tokens, c, settings.window),
                                                   -abs(c - ideal))))
    return cuts


def chunk_turns(turns: Sequence[Turn], settings: ChunkSettings | None = None) -> list[Chunk]:
    """Cut one conversation's turns (in order) into extraction chunks.

    Example:
        >>> turns = store.turns("u1", conversation_id="chat-1")  # doctest: +SKIP
        >>> sum(len(c.turns) for c in chunk_turns(turns)) == len(turns)  # doctest: +SKIP
        True
    """
    settings = settings or ChunkSettings()
    if settings.max_turns < settings.min_turns:
        raise ValueError("max_turns must be at least min_turns")
    if not turns:
        return []
    conversation = turns[0].conversation_id
    if any(t.conversation_id != conversation for t in turns):
        raise ValueError("chunk_turns takes the turns of one conversation")
    if settings.strategy == "turns":
        segments = [list(turns)]
    else:
        segments = _join_short(_segments(turns, settings), settings.min_turns)
    chunks: list[Chunk] = []
    for segment in segments:
        bounds = [0, *_cuts(segment, settings), len(segment)]
        chunks += [Chunk(conversation_id=conversation, turns=segment[a:b])
                   for a, b in itertools.pairwise(bounds) if b > a]
    return chunks
