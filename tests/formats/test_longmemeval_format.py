"""The LongMemEval format: dates, questions, haystacks as conversations, and its errors."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memstrata.formats import ImportFormatError, LongMemEvalQuestion, read_longmemeval
from memstrata.formats.longmemeval import parse_longmemeval_date


def _instance(qid: str = "q1", answer: Any = "Lisbon") -> dict[str, Any]:
    return {
        "question_id": qid, "question_type": "single-session-user",
        "question": "Where did I move?", "answer": answer,
        "question_date": "2023/05/30 (Tue) 23:40",
        "haystack_session_ids": ["s_a", "answer_s_b"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 10:02"],
        "haystack_sessions": [
            [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
            [{"role": "user", "content": "I moved to Lisbon", "has_answer": True},
             {"role": "assistant", "content": "Nice", "has_answer": False}],
        ],
        "answer_session_ids": ["answer_s_b"],
    }


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "lme.json"
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def _error(path: Path) -> ImportFormatError:
    with pytest.raises(ImportFormatError) as caught:
        read_longmemeval(path)
    assert caught.value.path == str(path) and str(path) in str(caught.value)
    assert caught.value.record in str(caught.value)
    return caught.value


def test_parse_date() -> None:
    assert parse_longmemeval_date("2023/05/30 (Tue) 23:40") == datetime(
        2023, 5, 30, 23, 40, tzinfo=UTC)
    assert parse_longmemeval_date("2023/5/3") == datetime(2023, 5, 3, tzinfo=UTC)
    assert parse_longmemeval_date("2023-05-30T23:40:00+02:00") == datetime(
        2023, 5, 30, 21, 40, tzinfo=UTC)
    for bad in ("30/05/2023", "2023/02/30 (Thu) 10:00", "", "soon"):
        with pytest.raises(ValueError):
            parse_longmemeval_date(bad)


def test_reads_instances(tmp_path: Path) -> None:
    records, questions = read_longmemeval(_write(tmp_path, [
        _instance(), _instance("q2_abs", answer=3)]))
    assert [r.id for r in records] == ["q1", "q2_abs"]
    first = records[0]
    assert [s.id for s in first.sessions] == ["s_a", "answer_s_b"]
    assert first.speakers == ["user", "assistant"]
    day = datetime(2023, 5, 21, 10, 2, tzinfo=UTC)
    answer_session = first.sessions[1]
    assert answer_session.started_at == day
    assert [m.timestamp for m in answer_session.messages] == [day, day]
    assert [m.metadata for m in answer_session.messages] == [{"has_answer": True}, {}]
    assert [m.speaker for m in first.sessions[0].messages] == ["user", "assistant"]
    # the shared haystack is repeated, not shared
    assert records[1].sessions == first.sessions
    q1, q2 = questions
    assert q1 == LongMemEvalQuestion(
        question_id="q1", question_type="single-session-user", question="Where did I move?",
        answer="Lisbon", question_date=datetime(2023, 5, 30, 23, 40, tzinfo=UTC),
        answer_session_ids=["answer_s_b"], abstention=False)
    assert q2.abstention and q2.answer == "3"


def test_invalid_json(tmp_path: Path) -> None:
    error = _error(_write(tmp_path, '[\n  {"question_id": "q1",\n  }\n]'))
    assert error.record == "line 3" and "invalid JSON" in error.reason


@pytest.mark.parametrize("data", [{"question_id": "q1"}, '"text"'])
def test_wrong_top_level_type(tmp_path: Path, data: Any) -> None:
    error = _error(_write(tmp_path, data))
    assert error.record == "top level" and "JSON array" in error.reason


def test_invalid_utf8(tmp_path: Path) -> None:
    error = _error(_write(tmp_path, b'[\n{"question_id": "caf\xe9"}]'))
    assert error.record == "line 2" and "UTF-8" in error.reason


def test_missing_file(tmp_path: Path) -> None:
    assert _error(tmp_path / "absent.json").record == "file"


def test_mismatched_haystack_lengths(tmp_path: Path) -> None:
    bad = _instance("q42")
    bad["haystack_dates"] = bad["haystack_dates"][:1]
    error = _error(_write(tmp_path, [_instance(), _instance("q2"), bad]))
    assert error.record == "instance 3 (question_id q42)"
    assert "haystack lengths differ" in error.reason and "1 haystack_dates" in error.reason


def test_missing_fields_and_non_objects(tmp_path: Path) -> None:
    bad = _instance("q9")
    del bad["question_date"], bad["haystack_sessions"]
    error = _error(_write(tmp_path, [_instance(), bad]))
    assert error.record == "instance 2 (question_id q9)"
    assert '"question_date"' in error.reason and '"haystack_sessions"' in error.reason
    error = _error(_write(tmp_path, [["not", "an", "instance"]]))
    assert error.record == "instance 1" and "JSON object" in error.reason


def test_bad_dates(tmp_path: Path) -> None:
    bad = _instance("q5")
    bad["question_date"] = "someday"
    error = _error(_write(tmp_path, [bad]))
    assert error.record == "instance 1 (question_id q5)" and "question_date" in error.reason
    bad = _instance("q6")
    bad["haystack_dates"][1] = "2023/13/01 (Mon) 10:00"
    error = _error(_write(tmp_path, [bad]))
    assert error.record == "instance 1 (question_id q6), session 2 (answer_s_b)"


def test_bad_turn_names_session_and_message(tmp_path: Path) -> None:
    bad = copy.deepcopy(_instance("q42"))
    bad["haystack_sessions"][1][1] = {"role": "assistant"}
    error = _error(_write(tmp_path, [_instance(), _instance("q2"), bad]))
    assert error.record == "instance 3 (question_id q42), session 2 (answer_s_b), message 2"
    assert '"content"' in error.reason
    assert "instance 3 (question_id q42), session 2 (answer_s_b), message 2" in str(error)


def test_repeated_question_id(tmp_path: Path) -> None:
    error = _error(_write(tmp_path, [_instance(), _instance()]))
    assert error.record == "instance 2 (question_id q1)" and "repeats" in error.reason
