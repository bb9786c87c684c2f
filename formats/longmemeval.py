"""The LongMemEval JSON format (``longmemeval_s``, ``longmemeval_m``, ``longmemeval_oracle``).

A file is a JSON array of instances; each holds one question and its own haystack::

    {"question_id": "q42", "question_type": "single-session-user", "question": "...",
     "answer": "...", "question_date": "2023/05/30 (Tue) 23:40",
     "haystack_session_ids": ["s1"], "haystack_dates": ["2023/05/20 (Sat) 10:02"],
     "haystack_sessions": [[{"role": "user", "content": "...", "has_answer": true}]],
     "answer_session_ids": ["s1"]}

Each instance becomes one :class:`ConversationRecord` (id = ``question_id``), so sessions
shared between instances are repeated per instance. Question ids ending in ``_abs`` are
abstention questions. Records in errors are 1-based: ``instance 3 (question_id q42),
session 2, message 5``. The whole file is loaded at once (``longmemeval_m`` needs the RAM).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from .messages import json_kind, load_json, read_text
from .records import ConversationRecord, ImportFormatError, SessionRecord, parse_time, to_message

_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\(\w+\))?\s*(?:(\d{1,2}):(\d{2}))?")


def parse_longmemeval_date(text: str) -> datetime:
    """A UTC time from LongMemEval's ``2023/05/30 (Tue) 23:40`` style, or from ISO 8601.

    The weekday is optional and not checked; without a time of day it is midnight.

    Raises:
        ValueError: the text is neither style, or not a real date.
    """
    if not isinstance(text, str):
        raise ValueError(f"date {text!r} is not text")
    match = _DATE.fullmatch(text.strip())
    if match:
        year, month, day, hour, minute = (int(g or 0) for g in match.groups())
        try:
            return datetime(year, month, day, hour, minute, tzinfo=UTC)
        except ValueError as exc:
            raise ValueError(f"date {text!r}: {exc}") from None
    try:
        moment = parse_time(text)
    except ValueError:
        moment = None
    if moment is None:
        raise ValueError(f'date {text!r} is not like "2023/05/30 (Tue) 23:40" or ISO 8601')
    return moment


def _text(value: Any) -> Any:
    """Ids and answers may be numbers in the data; they are compared as text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


class LongMemEvalQuestion(BaseModel):
    """One instance's question, kept apart from the haystack that goes into memory.

    ``abstention`` is true for questions (id ending in ``_abs``) whose right answer is
    that the haystack does not say.
    """

    question_id: str = Field(min_length=1)
    question_type: str
    question: str
    answer: str
    question_date: datetime
    answer_session_ids: list[str] = Field(default_factory=list)
    abstention: bool = False

    @field_validator("question_id", "answer", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        return _text(value)

    @field_validator("answer_session_ids", mode="before")
    @classmethod
    def _ids_as_text(cls, value: Any) -> Any:
        return [_text(v) for v in value] if isinstance(value, list) else value

    @field_validator("question_date", mode="before")
    @classmethod
    def _date(cls, value: Any) -> Any:
        return value if isinstance(value, datetime) else parse_longmemeval_date(value)


_REQUIRED = ("question_id", "question_type", "question", "answer", "question_date",
             "haystack_session_ids", "haystack_dates", "haystack_sessions")
_HAYSTACK = ("haystack_session_ids", "haystack_dates", "haystack_sessions")


def _question(raw: dict[str, Any]) -> LongMemEvalQuestion:
    """The instance's question; ``ValueError`` says which field is wrong."""
    missing = [key for key in _REQUIRED if key not in raw]
    if missing:
        raise ValueError("missing " + ", ".join(f'"{key}"' for key in missing))
    fields = {key: raw[key] for key in LongMemEvalQuestion.model_fields if key in raw}
    fields["abstention"] = str(_text(raw["question_id"])).endswith("_abs")
    try:
        return LongMemEvalQuestion(**fields)
    except ValidationError as exc:
        raise ValueError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                   for e in exc.errors())) from None


def _haystack(path: str, where: str, raw: dict[str, Any]) -> list[SessionRecord]:
    """The instance's sessions, each turn timed at its session's date."""
    lists = {key: raw[key] for key in _HAYSTACK}
    for key, value in lists.items():
        if not isinstance(value, list):
            raise ImportFormatError(path, where, f'"{key}" must be an array')
    if len({len(value) for value in lists.values()}) > 1:
        raise ImportFormatError(path, where, "haystack lengths differ: " + ", ".join(
            f"{len(v)} {k}" for k, v in lists.items()))
    sessions = []
    for n, (sid, date, turns) in enumerate(zip(*lists.values(), strict=True), 1):
        here = f"{where}, session {n}"
        try:
            sid = _text(sid)
            if not isinstance(sid, str) or not sid:
                raise ValueError("the session id must be a non-empty string")
            here = f"{where}, session {n} ({sid})"
            started = parse_longmemeval_date(date)
            if not isinstance(turns, list):
                raise ValueError(f"a session is an array of turns, not {json_kind(turns)}")
        except ValueError as exc:
            raise ImportFormatError(path, here, str(exc)) from None
        messages = []
        for m, turn in enumerate(turns, 1):
            try:
                if not isinstance(turn, dict):
                    raise ValueError(f"a turn is a JSON object, not {json_kind(turn)}")
                meta = {"has_answer": True} if turn.get("has_answer") else {}
                raw = {"role": turn.get("role"), "timestamp": started, "metadata": meta}
                if "content" in turn:  # without it a turn is malformed; null is no text
                    raw["content"] = turn["content"]
                messages.append(to_message(raw))
            except ValueError as exc:
                raise ImportFormatError(path, f"{here}, message {m}", str(exc)) from None
        sessions.append(SessionRecord(id=sid, started_at=started, messages=messages))
    return sessions


def read_longmemeval(path: str | Path
                     ) -> tuple[list[ConversationRecord], list[LongMemEvalQuestion]]:
    """Haystacks and questions from a LongMemEval file, validated whole before returning.

    Returns:
        One conversation per instance (id = ``question_id``; sessions = the haystack, each
        with its id and date; turns keep ``role`` as speaker and carry
        ``{"has_answer": true}`` metadata where marked) and the questions, in file order.

    Raises:
        ImportFormatError: the file is unreadable, not UTF-8 or JSON, not an array of
            instances, or an instance is invalid (missing fields, haystack lengths that
            differ, a bad date, a bad turn, a repeated question_id); names the file and
            the instance, session and message.
    """
    name = str(path)
    data = load_json(name, read_text(path))
    if not isinstance(data, list):
        raise ImportFormatError(name, "top level", "expected a JSON array of LongMemEval "
                                f"instances, not {json_kind(data)}")
    records: list[ConversationRecord] = []
    questions: list[LongMemEvalQuestion] = []
    seen: dict[str, int] = {}  # question_id -> instance: ids become conversation ids
    for n, raw in enumerate(data, 1):
        where = f"instance {n}"
        try:
            if not isinstance(raw, dict):
                raise ValueError(f"an instance is a JSON object, not {json_kind(raw)}")
            if "question_id" in raw:
                where = f"instance {n} (question_id {_text(raw['question_id'])})"
            question = _question(raw)
            if question.question_id in seen:
                raise ValueError(f"question_id repeats instance {seen[question.question_id]}")
        except ValueError as exc:
            raise ImportFormatError(name, where, str(exc)) from None
        seen[question.question_id] = n
        sessions = _haystack(name, where, raw)
        speakers = dict.fromkeys(m.speaker for s in sessions for m in s.messages)
        records.append(ConversationRecord(id=question.question_id, speakers=list(speakers),
                                          sessions=sessions))
        questions.append(question)
    return records, questions
