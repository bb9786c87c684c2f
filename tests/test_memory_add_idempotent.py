"""``Memory.add`` stores what a user meant: one event per message in order, system prompts
and tool plumbing kept out of search by default, and a re-sent history stored once."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata import Memory
from tests.test_memory_api import answering

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Mention peanut allergies "
                                       "only if the user has one."}
M1 = {"role": "user", "content": "I am allergic to shellfish"}
M2 = {"role": "assistant", "content": "Noted, I will avoid shellfish recipes."}
M3 = {"role": "user", "content": "Suggest a dinner for Friday"}


def kinds(events: list[dict[str, Any]]) -> list[str]:
    """Each event as ``ADD`` or ``NONE:reason``."""
    return [e["event"] + (f":{e['reason']}" if "reason" in e else "") for e in events]


def texts(m: Memory, user: str = "u") -> list[str]:
    return [t.text for t in m.store.turns(user)]


def test_resent_growing_history_is_stored_once() -> None:
    m = Memory.open(":memory:")
    first = m.add([M1], user_id="u", infer=False)
    second = m.add([M1, M2], user_id="u", infer=False)
    third = m.add([M1, M2, M3], user_id="u", infer=False)
    assert kinds(first) == ["ADD"]
    assert kinds(second) == ["NONE:duplicate", "ADD"]
    assert kinds(third) == ["NONE:duplicate", "NONE:duplicate", "ADD"]
    assert second[0]["id"] == first[0]["id"] and third[1]["id"] == second[1]["id"]
    assert texts(m) == [M1["content"], M2["content"], M3["content"]]
    turns = m.store.turns("u")
    assert [t.seq for t in turns] == [0, 1, 2]
    assert {(e.src, e.dst) for e in m.store.edges("u")} == {(turns[0].id, turns[1].id),
                                                          (turns[1].id, turns[2].id)}


def test_resent_history_with_its_system_prompt_and_tool_calls() -> None:
    m = Memory.open(":memory:")
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "menu", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "pasta, curry"}
    history = [SYSTEM, M1, M2, call, result, M3]
    assert kinds(m.add(history[:3], user_id="u", infer=False)) == [
        "NONE:system", "ADD", "ADD"]
    assert kinds(m.add(history, user_id="u", infer=False)) == [
        "NONE:system", "NONE:duplicate", "NONE:duplicate", "NONE:tool", "NONE:tool", "ADD"]
    assert texts(m) == [M1["content"], M2["content"], M3["content"]]


def test_genuine_repeats_in_separate_adds_are_both_kept() -> None:
    m = Memory.open(":memory:")
    m.add([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}],
          user_id="u", infer=False)
    one = m.add({"role": "user", "content": "ok"}, user_id="u", infer=False)
    two = m.add({"role": "user", "content": "ok"}, user_id="u", infer=False)
    assert kinds(one) == kinds(two) == ["ADD"] and one[0]["id"] != two[0]["id"]
    assert kinds(m.add(["ok", "ok"], user_id="u", infer=False)) == ["ADD", "ADD"]
    assert texts(m) == ["hi", "Hello!", "ok", "ok", "ok", "ok"]


def test_timestamped_messages_repeat_only_at_the_same_time() -> None:
    m = Memory.open(":memory:")
    m.add("I started a new job", user_id="u", infer=False)
    at = {"role": "user", "content": "ok", "timestamp": "2024-05-01T09:30:00Z"}
    later = {**at, "timestamp": "2024-05-01T09:31:00Z"}
    first = m.add(at, user_id="u", infer=False)
    assert kinds(first) == ["ADD"]
    again = m.add(at, user_id="u", infer=False)
    assert kinds(again) == ["NONE:duplicate"] and again[0]["id"] == first[0]["id"]
    assert kinds(m.add(later, user_id="u", infer=False)) == ["ADD"]
    # Said twice at one time (a session's date, say): two turns, and sent again, two repeats.
    pair = [{**at, "timestamp": 1_800_000_000}, {**at, "timestamp": 1_800_000_000}]
    twice = m.add(pair, user_id="u", infer=False)
    assert kinds(twice) == ["ADD", "ADD"] and twice[0]["id"] != twice[1]["id"]
    again = m.add([*pair, {**at, "timestamp": 1_800_000_000}], user_id="u", infer=False)
    assert kinds(again) == ["NONE:duplicate", "NONE:duplicate", "ADD"]
    assert [e["id"] for e in again[:2]] == [e["id"] for e in twice]
    assert texts(m) == ["I started a new job", "ok", "ok", "ok", "ok", "ok"]


def test_a_source_id_tells_equal_messages_apart() -> None:
    m = Memory.open(":memory:")
    m.add("hello", user_id="u", infer=False)
    said = [{"speaker": "Ana", "content": "Haha", "timestamp": "2023-05-08",
             "metadata": {"source_id": f"D1:{n}"}} for n in (3, 5)]
    assert kinds(m.add(said[0], user_id="u", infer=False)) == ["ADD"]
    assert kinds(m.add(said[1], user_id="u", infer=False)) == ["ADD"]
    assert kinds(m.add(said, user_id="u", infer=False)) == ["NONE:duplicate"] * 2


def test_repeats_are_per_conversation_and_per_speaker() -> None:
    m = Memory.open(":memory:")
    m.add([M1], user_id="u", conversation_id="a", infer=False)
    assert kinds(m.add([M1], user_id="u", conversation_id="b", infer=False)) == ["ADD"]
    assert kinds(m.add([M1], user_id="v", conversation_id="a", infer=False)) == ["ADD"]
    assert kinds(m.add([{**M1, "role": "assistant"}], user_id="u", conversation_id="a",
                       infer=False)) == ["ADD"]
    named = {**M1, "name": "Ana"}  # the same text said by a named user is another speaker
    assert kinds(m.add([named], user_id="u", conversation_id="c", infer=False)) == ["ADD"]
    assert kinds(m.add([named, M2], user_id="u", conversation_id="c", infer=False)) == [
        "NONE:duplicate", "ADD"]


def test_one_event_per_message_in_order() -> None:
    batch: list[Any] = [
        SYSTEM,
        M1,
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "c1", "content": "booked"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "user", "content": "   "},
        {"role": "developer", "content": "Use metric units."},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
        M1,
        "and I keep bees",
    ]
    m = Memory.open(":memory:")
    events = m.add(batch, user_id="u", infer=False)
    assert kinds(events) == ["NONE:system", "ADD", "NONE:blank", "NONE:tool", "NONE:no_text",
                             "NONE:blank", "NONE:system", "NONE:tool", "ADD", "ADD"]
    assert [e["memory"] for e in events][:2] == [SYSTEM["content"], M1["content"]]
    assert events[4]["parts_skipped"] == ["image_url"] and events[4]["id"] is None
    assert events[3]["role"] == "tool" and events[6]["role"] == "developer"
    assert all(e["kind"] == "turn" for e in events)
    assert texts(m) == [M1["content"], M1["content"], "and I keep bees"]


def test_system_and_tool_messages_stay_out_of_search_by_default() -> None:
    tool = {"role": "tool", "tool_call_id": "c1", "content": "peanut butter in stock"}
    m = Memory.open(":memory:")
    m.add([SYSTEM, M1, tool], user_id="u", infer=False)
    hits = m.search("peanut allergies", user_id="u", k=10)
    assert all(h.text == M1["content"] for h in hits)
    assert m.store.counts("u")["turns"] == 1

    kept = Memory.open(":memory:")
    events = kept.add([SYSTEM, M1, tool], user_id="u", infer=False, skip_roles=())
    assert kinds(events) == ["ADD", "ADD", "ADD"]
    assert kept.search("peanut allergies", user_id="u", k=1)[0].text == SYSTEM["content"]
    only_tools = Memory.open(":memory:")
    events = only_tools.add([SYSTEM, M1, tool], user_id="u", infer=False,
                            skip_roles={"System", "developer"})
    assert kinds(events) == ["NONE:system", "ADD", "ADD"]
    assert only_tools.search("peanut butter", user_id="u", k=1)[0].text == tool["content"]
    with pytest.raises(ValueError, match="skip_roles"):
        m.add(M1, user_id="u", skip_roles="system")


def test_a_named_user_keeps_the_role() -> None:
    m = Memory.open(":memory:")
    events = m.add([{"role": "user", "name": "Ana", "content": "I keep bees"},
                    {"role": "system", "name": "setup", "content": "Be kind."}],
                   user_id="u", infer=False, skip_roles={"system", "assistant"})
    assert kinds(events) == ["ADD", "NONE:system"]
    turn = m.get(events[0]["id"])
    assert turn["speaker"] == "Ana" and turn["metadata"]["role"] == "user"
    assert kinds(m.add({"role": "assistant", "content": "Lovely"}, user_id="u",
                       infer=False, skip_roles={"assistant"})) == ["NONE:role"]


def test_fact_events_follow_the_message_events(scripted) -> None:
    from memstrata.programs.ingest import IngestSettings

    settings = IngestSettings()
    m = Memory(Memory.open(":memory:").store, lm=scripted(answering), ingest=settings,
               extraction="sync")
    chunk = [{"role": "user" if n % 2 else "assistant",
              "content": f"Message {n} about hiking trail number {n}"}
             for n in range(settings.chunking.max_turns)]
    events = m.add([SYSTEM, *chunk], user_id="u")
    n = len(chunk) + 1
    assert kinds(events[:n]) == ["NONE:system"] + ["ADD"] * len(chunk)
    assert events[n:] and all(e["kind"] == "fact" for e in events[n:])
    assert kinds(m.add([SYSTEM, *chunk], user_id="u")) == (
        ["NONE:system"] + ["NONE:duplicate"] * len(chunk))   # nothing new: no extraction


def test_importing_again_stores_only_what_is_new() -> None:
    """``import_conversations`` follows ``add``'s repeat rule: the same file imported
    twice stores its turns once, a newer export of the same conversation adds only its
    new messages (a session of it that continues, and a new one), and two equal
    messages said at different times stay two turns; ``replace`` writes the file whole
    again. (An import appended every message again, so a monthly re-import of a chat
    app's export doubled the history.)"""
    from datetime import UTC, datetime

    from memstrata.formats import ConversationRecord, SessionRecord, to_message

    def at(minute: int, role: str, text: str) -> Any:
        return to_message({"role": role, "content": text,
                           "timestamp": datetime(2024, 5, 1, 10, minute, tzinfo=UTC)})

    first = [at(0, "user", "ok"), at(1, "assistant", "Noted."), at(2, "user", "ok")]
    later = [at(30, "user", "My flight is on Friday")]

    def record(*sessions: list[Any]) -> ConversationRecord:
        return ConversationRecord(id="chat-1", sessions=[
            SessionRecord(id=f"s{n}", messages=msgs) for n, msgs in enumerate(sessions, 1)])

    m = Memory.open(":memory:")
    assert m.import_conversations([record(first)], user_id="u")["turns"] == 3
    again = m.import_conversations([record(first)], user_id="u")
    assert (again["turns"], again["duplicates"]) == (0, 3)
    newer = m.import_conversations([record(first, later)], user_id="u")
    assert (newer["turns"], newer["duplicates"]) == (1, 3)
    assert texts(m) == ["ok", "Noted.", "ok", "My flight is on Friday"]
    whole = m.import_conversations([record(first, later)], user_id="u", replace=True)
    assert (whole["turns"], whole["replaced"], "duplicates" in whole) == (4, 4, False)
    assert texts(m) == ["ok", "Noted.", "ok", "My flight is on Friday"]


def test_a_message_with_a_source_id_repeats_the_turn_of_that_id() -> None:
    """An importer's message ids (ChatGPT's, Claude's, LoCoMo's) name one message
    wherever it sits: untimed messages appended after a conversation's turns are found
    again by their ids (without ids they cannot be told from new ones saying the same)."""
    m = Memory.open(":memory:")
    m.add("Hello", user_id="u", infer=False)
    sourced = [{"role": "user", "content": "ok", "metadata": {"source_id": "a1"}},
               {"role": "assistant", "content": "Noted.", "metadata": {"source_id": "a2"}}]
    assert kinds(m.add(sourced, user_id="u", infer=False)) == ["ADD", "ADD"]
    again = m.add([*sourced, {"role": "user", "content": "ok",
                              "metadata": {"source_id": "a3"}}], user_id="u", infer=False)
    assert kinds(again) == ["NONE:duplicate", "NONE:duplicate", "ADD"]
    assert texts(m) == ["Hello", "ok", "Noted.", "ok"]
    plain = [{"role": "user", "content": "ok"}]
    assert kinds(m.add(plain, user_id="u", infer=False)) == ["ADD"]  # no id: a new "ok"
