"""The LoCoMo format adapter: conversations as records, captions mapped, errors named."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memstrata.formats import ConversationRecord, ImportFormatError, read_locomo
from memstrata.formats.locomo import LoCoMoError, parse_locomo, turn_metadata


def _conversation(sample_id: str = "conv-1") -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ana", "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a beagle."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Look at my garden!",
                 "img_url": ["https://example.invalid/g.jpg"],
                 "blip_caption": "a photo of sunflowers", "query": "garden"},
            ],
            "session_2_date_time": "10:04 am on 9 May, 2023",
            "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "Hiked yesterday."}],
        },
        "qa": [{"question": "What did Ana adopt?", "answer": "a beagle",
                "evidence": ["D1:1"], "category": 4}],
    }


def _write(tmp_path: Path, data: Any, name: str = "locomo.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_turns_become_messages_with_the_session_date_and_source_ids(tmp_path) -> None:
    records = read_locomo(_write(tmp_path, [_conversation(), _conversation("conv-2")]))
    assert [r.id for r in records] == ["conv-1", "conv-2"]
    record = records[0]
    assert isinstance(record, ConversationRecord)
    assert record.speakers == ["Ana", "Ben"] and record.title == "Ana & Ben"
    assert [s.id for s in record.sessions] == ["session_1", "session_2"]
    first, second = record.sessions
    assert first.started_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert [(m.speaker, m.content) for m in first.messages] == [
        ("Ana", "I adopted a beagle."), ("Ben", "Look at my garden!")]
    assert all(m.timestamp == first.started_at for m in first.messages)
    assert second.messages[0].timestamp == datetime(2023, 5, 9, 10, 4, tzinfo=UTC)
    assert [[m.metadata["source_id"] for m in s.messages] for s in record.sessions] == [
        ["D1:1", "D1:2"], ["D2:1"]]
    assert first.messages[0].metadata == {"source_id": "D1:1"}
    # LoCoMo's blip_caption is the core's general "caption"; its other side data is kept
    assert first.messages[1].metadata == {
        "img_url": ["https://example.invalid/g.jpg"], "caption": "a photo of sunflowers",
        "query": "garden", "source_id": "D1:2"}


def test_the_benchmark_view_keeps_the_questions(tmp_path) -> None:
    [conv] = parse_locomo(_write(tmp_path, _conversation()))  # one object: a list of one
    assert conv.sample_id == "conv-1" and conv.turn_count == 3
    assert [(q.qid, q.evidence, q.category) for q in conv.questions] == [
        ("conv-1#0", ["D1:1"], 4)]


def test_turn_metadata_maps_the_caption_and_drops_empty_values() -> None:
    assert turn_metadata({"text": "hi", "blip_caption": "a cat", "img_url": []}) == {
        "caption": "a cat"}
    assert turn_metadata({"text": "hi"}) == {}


@pytest.mark.parametrize(("data", "record"), [
    ("{not json", "file"),
    ('"a string"', "top level"),
    ([{"sample_id": "conv-x"}], "conversation #0"),
    ([_conversation(), {"sample_id": "conv-bad", "conversation": {
        "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": 7}]}}],
     "conversation conv-bad, session_1 turn #0"),
    ([{"sample_id": "conv-d", "conversation": {"session_1_date_time": "someday",
                                               "session_1": []}}],
     "conversation conv-d, session_1_date_time"),
    ([{"sample_id": "conv-q", "conversation": {}, "qa": [{"question": "q?"}]}],
     "conversation conv-q, qa #0"),
    ([{"sample_id": "conv-e", "conversation": {
        "session_1": [{"speaker": "", "dia_id": "D1:1", "text": "no speaker"}]}}],
     "conversation conv-e, turn D1:1"),
])
def test_a_malformed_file_names_the_file_and_the_record(tmp_path, data, record) -> None:
    path = _write(tmp_path, data, "bad.json")
    with pytest.raises(ImportFormatError) as info:
        read_locomo(path)
    assert isinstance(info.value, LoCoMoError)
    assert info.value.path == str(path) and info.value.record == record
    assert str(info.value).startswith(f"{path}: {record}: ")


def test_a_missing_file_is_an_import_format_error(tmp_path) -> None:
    with pytest.raises(ImportFormatError, match="cannot read LoCoMo JSON"):
        read_locomo(tmp_path / "nope.json")
