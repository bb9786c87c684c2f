"""Chunk plans: call cap, session and silence boundaries, topic cuts, every turn once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstrata.memory.chunking import ChunkSettings, chunk_turns
from memstrata.memory.models import Turn

DAY = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)


def turns(sessions: list[list[str]], *, minutes: int | None = None) -> list[Turn]:
    out: list[Turn] = []
    for s, texts in enumerate(sessions, start=1):
        for i, text in enumerate(texts, start=1):
            when = DAY + timedelta(days=7 * s)
            if minutes is not None:
                when = DAY + timedelta(minutes=minutes * len(out))
            out.append(Turn(user_id="u", conversation_id="c", session_id=f"session_{s}",
                            turn_id=f"D{s}:{i}", seq=len(out), speaker="Ana" if i % 2 else "Tom",
                            text=text, event_time=when))
    return out


def flat(chunks) -> list[str]:
    return [t.turn_id for c in chunks for t in c.turns]


@pytest.mark.parametrize("strategy", ["turns", "gap", "topic"])
@pytest.mark.parametrize("sizes", [[5], [25], [7, 3, 30, 12], [19, 20, 41], [9] * 6])
def test_every_turn_once_and_the_call_cap_holds(strategy: str, sizes: list[int]) -> None:
    ts = turns([[f"talk {s} {i}" for i in range(n)] for s, n in enumerate(sizes)])
    settings = ChunkSettings(strategy=strategy)
    chunks = chunk_turns(ts, settings)
    assert flat(chunks) == [t.turn_id for t in ts]
    assert len(chunks) <= max(1, len(ts) // settings.min_turns)
    if len(ts) >= settings.min_turns:
        assert all(len(c.turns) >= settings.min_turns for c in chunks)


def test_gap_strategy_keeps_sessions_apart_when_they_are_long_enough() -> None:
    ts = turns([[f"a{i}" for i in range(12)], [f"b{i}" for i in range(14)]])
    chunks = chunk_turns(ts, ChunkSettings(strategy="gap"))
    assert [{t.session_id for t in c.turns} for c in chunks] == [{"session_1"}, {"session_2"}]
    # equal splits ignore sessions: 26 turns -> 2 chunks of 13
    assert [len(c.turns) for c in chunk_turns(ts, ChunkSettings(strategy="turns"))] == [13, 13]


def test_a_long_silence_ends_a_segment_inside_a_session() -> None:
    ts = turns([[f"x{i}" for i in range(24)]], minutes=1)
    for t in ts[12:]:
        t.event_time = t.event_time + timedelta(hours=5)
    chunks = chunk_turns(ts, ChunkSettings(strategy="gap"))
    assert [len(c.turns) for c in chunks] == [12, 12]


def test_topic_strategy_cuts_where_the_talk_changes() -> None:
    garden = ["my tomatoes need water", "the garden roses bloom", "compost helps tomatoes"]
    cars = ["the engine of my car broke", "a mechanic fixed the car engine", "new car tyres"]
    texts = [garden[i % 3] for i in range(13)] + [cars[i % 3] for i in range(13)]
    chunks = chunk_turns(turns([texts]), ChunkSettings(strategy="topic"))
    assert [len(c.turns) for c in chunks] == [13, 13]
    even = chunk_turns(turns([texts[2:]]), ChunkSettings(strategy="topic"))
    assert [len(c.turns) for c in even] == [11, 13]  # moved off the even cut (12) to the shift


def test_bad_settings_and_mixed_conversations_are_refused() -> None:
    with pytest.raises(ValueError, match="max_turns"):
        chunk_turns(turns([["a"]]), ChunkSettings(min_turns=10, max_turns=5))
    mixed = turns([["a", "b"]])
    mixed[1].conversation_id = "other"
    with pytest.raises(ValueError, match="one conversation"):
        chunk_turns(mixed)
    assert chunk_turns([]) == []
