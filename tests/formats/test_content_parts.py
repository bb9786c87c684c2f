"""Every content-part shape of the OpenAI Chat Completions API, the OpenAI Responses API and
Anthropic's Messages API is read (text kept) or named (media, reasoning, tool plumbing),
and anything else is refused naming the message and the part type."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.formats import Message, to_message, to_messages


def shape(m: Message) -> tuple[str, str | None, str, list[str]]:
    return m.speaker, m.role, m.content, m.metadata.get("parts_skipped", [])


def test_chat_completions_parts() -> None:
    chat: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in English."}]},
        {"role": "user", "content": [
            {"type": "text", "text": "What is in this photo?"},
            {"type": "image_url", "image_url": {"url": "https://example.org/p.png"}},
            {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}},
            {"type": "file", "file": {"file_id": "file-1"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."},
                                          {"type": "refusal", "refusal": "I won't name it."}]},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "assistant", "content": None, "function_call": {"name": "g", "arguments": "{}"}},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
        {"role": "function", "name": "weather", "content": "sunny"},
        {"role": "assistant", "content": None, "audio": {"id": "audio_1"}},
        {"role": "user", "name": "Ana", "content": "I live in Lisbon"},
    ]
    assert [shape(m) for m in to_messages(chat)] == [
        ("system", "system", "You are terse.", []),
        ("developer", "developer", "Answer in English.", []),
        ("user", "user", "What is in this photo?", ["image_url", "input_audio", "file"]),
        ("assistant", "assistant", "A cat.\nI won't name it.", []),
        ("assistant", "assistant", "I can't help with that.", []),
        ("assistant", "tool", 'weather({"city": "Rome"})', []),
        ("assistant", "assistant", "Checking.", ["tool_calls"]),
        ("assistant", "tool", "g({})", []),
        ("tool", "tool", "sunny", []),
        ("weather", "function", "sunny", []),
        ("assistant", "assistant", "", ["audio"]),
        ("Ana", "user", "I live in Lisbon", []),
    ]


def test_responses_api_parts_and_items() -> None:
    items: list[dict[str, Any]] = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "input_text", "text": "Summarise this lease"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
            {"type": "input_file", "file_id": "file-2"}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "It runs a year.", "annotations": []},
                     {"type": "refusal", "refusal": "No legal advice."}]},
        {"type": "reasoning", "id": "rs_1",
         "summary": [{"type": "summary_text", "text": "The user wants a summary."}]},
        {"type": "function_call", "call_id": "c2", "name": "lookup",
         "arguments": '{"q": "lease"}'},
        {"type": "function_call_output", "call_id": "c2", "output": "found 3 clauses"},
        {"type": "function_call_output", "call_id": "c3",
         "output": [{"type": "input_text", "text": "page 2"},
                    {"type": "input_image", "image_url": "data:,"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"role": "assistant", "content": [
            {"type": "reasoning_text", "text": "private"},
            {"type": "summary_text", "text": "private too"},
            {"type": "output_text", "text": "Done."}]},
    ]
    assert [shape(m) for m in to_messages(items)] == [
        ("developer", "developer", "Be brief.", []),
        ("user", "user", "Summarise this lease", ["input_image", "input_file"]),
        ("assistant", "assistant", "It runs a year.\nNo legal advice.", []),
        ("assistant", "assistant", "", ["reasoning"]),
        ("assistant", "tool", 'lookup({"q": "lease"})', []),
        ("tool", "tool", "found 3 clauses", []),
        ("tool", "tool", "page 2", ["input_image"]),
        ("assistant", "tool", "", []),
        ("assistant", "assistant", "Done.", ["reasoning_text", "summary_text"]),
    ]


def test_anthropic_messages_parts() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [
            {"type": "text", "text": "Read this"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBO"}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                            "data": "lease text"}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "The user wants…", "signature": "sig"},
            {"type": "redacted_thinking", "data": "EmwK"},
            {"type": "text", "text": "Let me check.", "citations": None},
            {"type": "tool_use", "id": "tu1", "name": "search", "input": {"q": "lease"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu1",
             "content": [{"type": "text", "text": "3 results"},
                         {"type": "image", "source": {"type": "url", "url": "x"}}]}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu2", "content": "plain result"},
            {"type": "text", "text": "Also, I moved to Porto."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "tu3", "name": "save",
                                           "input": {}}]},
        {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "st1", "name": "web_search", "input": {"q": "x"}},
            {"type": "web_search_tool_result", "tool_use_id": "st1", "content": []}]},
    ]
    assert [shape(m) for m in to_messages(messages)] == [
        ("user", "user", "Read this", ["image", "document"]),
        ("assistant", "assistant", "Let me check.",
         ["thinking", "redacted_thinking", "tool_use"]),
        ("tool", "tool", "3 results", ["image"]),
        ("user", "user", "Also, I moved to Porto.", ["tool_result"]),
        ("assistant", "tool", "save({})", []),
        ("assistant", "tool", 'web_search({"q": "x"})', []),
    ]


def test_plain_string_parts_and_strings() -> None:
    m = to_message({"role": "user",
                    "content": ["I like tea", {"type": "text", "text": "and cake"}]})
    assert shape(m) == ("user", "user", "I like tea\nand cake", [])
    assert shape(to_message("hello")) == ("user", "user", "hello", [])
    assert shape(to_message({"speaker": "Ana", "content": "hi"})) == ("Ana", None, "hi", [])


@pytest.mark.parametrize(("raw", "message"), [
    ({"role": "user", "content": [{"type": "text", "text": "a"},
                                  {"type": "video_url", "video_url": {"url": "v"}}]},
     r"message 2: content part 1 has type 'video_url'"),
    ({"role": "user", "content": [{"text": "no type"}]},
     r'message 2: content part 0 has no "type"'),
    ({"role": "user", "content": [7]}, r"message 2: content part 0 is a int"),
    ({"role": "user", "content": [{"type": "text"}]},
     r'message 2: content part 0 \(text\) has no "text" string'),
    ({"role": "user", "content": [{"type": "input_text", "text": None}]},
     r'message 2: content part 0 \(input_text\) has no "text" string'),
    ({"role": "user", "content": [{"type": "tool_result", "content": [{"type": "audio"}]}]},
     r"message 2: content part 0 \(tool_result\) part 0 has type 'audio'"),
    ({"role": "user", "content": {"type": "text", "text": "a dict, not a list"}},
     r"message 2: content must be a string or a list"),
    ({"type": "item_reference", "id": "msg_1"}, r"message 2: an item of type 'item_reference'"),
    ({"role": "assistant", "content": None, "tool_calls": {"id": "c"}},
     r'message 2: "tool_calls" must be a list'),
])
def test_refused_parts_name_the_message_and_the_type(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        to_messages(["fine", {"role": "assistant", "content": "fine"}, raw])
