"""The "messages" format: JSON array, JSONL and {"messages": [...]} files, their errors, and
the write/read round trip."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memstrata.formats import (
    ConversationRecord,
    ImportFormatError,
    Message,
    SessionRecord,
    read_messages,
    write_messages,
)

MESSAGES: list[dict[str, Any]] = [
    {"conversation_id": "c1", "session_id": "s1", "role": "user", "content": "I moved to Lisbon",
     "timestamp": "2024-05-01T09:30:00Z"},
    {"conversation_id": "c1", "session_id": "s1", "role": "assistant", "content": "Nice!"},
    {"conversation_id": "c2", "speaker": "Ana", "content": "a beach",
     "metadata": {"caption": "a photo"}},
    {"conversation_id": "c1", "session_id": "s2", "name": "Bo", "content": "later",
     "timestamp": 1714560000},
]


def _write(tmp_path: Path, text: str | bytes, name: str = "m.jsonl") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _check(records: list[ConversationRecord]) -> None:
    """The grouping MESSAGES must come out as, whatever the file's shape."""
    assert [r.id for r in records] == ["c1", "c2"]
    c1, c2 = records
    assert [s.id for s in c1.sessions] == ["s1", "s2"]
    assert [m.content for m in c1.sessions[0].messages] == ["I moved to Lisbon", "Nice!"]
    assert c1.sessions[0].started_at == datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
    assert c1.sessions[1].started_at == datetime.fromtimestamp(1714560000, UTC)
    assert c1.speakers == ["user", "assistant", "Bo"]
    assert [s.id for s in c2.sessions] == ["default"]
    assert c2.sessions[0].started_at is None
    assert c2.sessions[0].messages[0].metadata == {"caption": "a photo"}


@pytest.mark.parametrize("shape", ["array", "jsonl", "object"])
def test_reads_each_shape(tmp_path: Path, shape: str) -> None:
    if shape == "array":
        text = json.dumps(MESSAGES, indent=2)
    elif shape == "object":
        text = json.dumps({"messages": MESSAGES})
    else:
        text = "\n\n".join(json.dumps(m) for m in MESSAGES) + "\n\n"  # blank lines skipped
    _check(read_messages(_write(tmp_path, text)))


def test_defaults_and_single_line(tmp_path: Path) -> None:
    records = read_messages(_write(tmp_path, '{"role": "user", "content": "hi"}\n'))
    assert [(r.id, [s.id for s in r.sessions]) for r in records] == [("default", ["default"])]
    assert read_messages(_write(tmp_path, "\n  \n", "empty.jsonl")) == []


def test_round_trip(tmp_path: Path) -> None:
    records = read_messages(_write(tmp_path, json.dumps(MESSAGES)))
    out = write_messages(records, tmp_path / "out.jsonl")
    assert read_messages(out) == records
    first = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    assert first == {"conversation_id": "c1", "session_id": "s1", "speaker": "user",
                     "content": "I moved to Lisbon", "role": "user",
                     "timestamp": "2024-05-01T09:30:00+00:00"}


def test_round_trip_keeps_odd_text(tmp_path: Path) -> None:
    text = "line\u2028sep, ünïcode, \"quotes\"\nand a newline"
    record = ConversationRecord(id="c", sessions=[SessionRecord(
        id="s", messages=[Message(speaker="Ana", content=text, metadata={"k": [1, 2]})])])
    assert read_messages(write_messages([record], tmp_path / "o.jsonl")) == [
        record.model_copy(update={"speakers": ["Ana"]})]


def _error(path: Path) -> ImportFormatError:
    with pytest.raises(ImportFormatError) as caught:
        read_messages(path)
    assert str(path) in str(caught.value)
    assert caught.value.path == str(path)
    return caught.value


def test_missing_file(tmp_path: Path) -> None:
    error = _error(tmp_path / "nope.jsonl")
    assert error.record == "file" and "cannot read" in error.reason


def test_invalid_json_array(tmp_path: Path) -> None:
    error = _error(_write(tmp_path, '[\n {"role": "user", "content": "a"},\n {oops}\n]'))
    assert error.record == "line 3" and "invalid JSON" in error.reason


def test_invalid_pretty_object_names_its_line(tmp_path: Path) -> None:
    error = _error(_write(tmp_path, '{\n  "messages": [\n    {"role": "user",,}\n  ]\n}'))
    assert error.record == "line 3" and "invalid JSON" in error.reason


def test_jsonl_bad_line_number(tmp_path: Path) -> None:
    lines = [json.dumps(m) for m in MESSAGES] + ["", '{"role": "user", "content": "x"', ""]
    error = _error(_write(tmp_path, "\n".join(lines)))
    assert error.record == "line 6" and "invalid JSON" in error.reason
    assert "line 6" in str(error)


def test_message_without_content(tmp_path: Path) -> None:
    text = json.dumps({"messages": [MESSAGES[0], {"role": "user"}]})
    error = _error(_write(tmp_path, text))
    assert error.record == "message 2" and '"content"' in error.reason


def test_bad_timestamp_in_jsonl(tmp_path: Path) -> None:
    bad = {"role": "user", "content": "x", "timestamp": "yesterday-ish"}
    error = _error(_write(tmp_path, json.dumps(MESSAGES[0]) + "\n" + json.dumps(bad) + "\n"))
    assert error.record == "line 2" and "yesterday-ish" in error.reason


def test_bad_ids_and_non_objects(tmp_path: Path) -> None:
    error = _error(_write(tmp_path, '[{"role": "u", "content": "x", "session_id": ""}]'))
    assert error.record == "message 1" and "session_id" in error.reason
    error = _error(_write(tmp_path, '{"role": "u", "content": "x"}\n"just text"\n'))
    assert error.record == "line 2" and "JSON object" in error.reason


@pytest.mark.parametrize("text", ['"hello"', "42", '{"messages": {"role": "user"}}'])
def test_wrong_top_level_type(tmp_path: Path, text: str) -> None:
    error = _error(_write(tmp_path, text))
    assert error.record in ("top level", '"messages"') and "not" in error.reason


def test_invalid_utf8(tmp_path: Path) -> None:
    good = json.dumps(MESSAGES[0]).encode()
    error = _error(_write(tmp_path, good + b'\n{"role": "user", "content": "caf\xe9"}\n'))
    assert error.record == "line 2" and "UTF-8" in error.reason


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, b"\xef\xbb\xbf" + json.dumps(MESSAGES).encode())
    _check(read_messages(path))
