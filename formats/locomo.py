"""The LoCoMo JSON format, and LoCoMo's conventions, kept out of the library core.

A file is a JSON array of conversations (one object alone is read as a list of one)::

    {"sample_id": "conv-1",
     "conversation": {"speaker_a": "Ana", "speaker_b": "Ben",
                      "session_1_date_time": "1:56 pm on 8 May, 2023",
                      "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": "...",
                                     "img_url": ["..."], "blip_caption": "a photo of ..."}]},
     "qa": [{"question": "...", "answer": "...", "evidence": ["D1:1"], "category": 4}]}

:func:`parse_locomo` reads everything, questions included (the benchmark's view, in
``bench.locomo``); :func:`read_locomo` gives the conversations as
:class:`~memstrata.formats.records.ConversationRecord` objects for
``Memory.import_conversations``: one message per turn (``speaker``, ``content`` = its
text, ``timestamp`` = the session date, ``metadata["source_id"]`` = its ``dia_id``).
:func:`turn_metadata` maps a turn's side data to the core's keys: LoCoMo's image caption
``blip_caption`` becomes ``caption``.

The data's known quirks are handled, not crashed on: evidence strings holding several
ids (``"D8:6; D9:17"``) or a stray colon (``"D:11:26"``), evidence ids that do not exist,
empty evidence, and category-5 questions with ``adversarial_answer`` and no ``answer``.
A malformed file raises :class:`LoCoMoError` (an ``ImportFormatError``) naming the file
and the record (conversation, session, turn or question).

LoCoMo's answer-key conventions live here too, for the benchmark to select explicitly:
its date style (:data:`DATE_STYLE`, "8 May 2023") and its abstention phrase
(:data:`ABSTAIN_ANSWER`, which its category-5 scoring looks for).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, Field, ValidationError

from .records import ConversationRecord, ImportFormatError, Message, SessionRecord

DATE_STYLE: Final = "long"
"""The date style of LoCoMo's answer key ("8 May 2023", "the week before 9 June 2023"):
a ``memory.dates`` style name."""
ABSTAIN_ANSWER: Final = "Not mentioned in the conversation."
"""LoCoMo's abstention answer; its scorer credits category 5 for "not mentioned"."""
ABSTAIN_CUE: Final = "Not mentioned"
"""The short form a prompt teaches the model to say when the memories do not answer."""

_EVIDENCE_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y")
_SIDE_DATA = (("img_url", "img_url"), ("blip_caption", "caption"), ("query", "query"))


class LoCoMoError(ImportFormatError):
    """A LoCoMo file that cannot be read; the message names the file and the record."""


class Question(BaseModel):
    """One QA item, with evidence parsed and checked against the conversation's turns."""

    sample_id: str
    index: int
    question: str
    category: int
    answer: str | None = None
    adversarial_answer: str | None = None
    evidence: list[str] = Field(default_factory=list)
    evidence_raw: list[str] = Field(default_factory=list)
    unknown_evidence: list[str] = Field(default_factory=list)
    corrected_evidence: list[str] | None = None
    corrected_answer: str | None = None

    @property
    def qid(self) -> str:
        """A stable id: ``<sample_id>#<index>``."""
        return f"{self.sample_id}#{self.index}"


@dataclass
class LoCoMoConversation:
    """A parsed conversation: speakers, sessions of turns, and questions."""

    sample_id: str
    speakers: list[str]
    sessions: list[tuple[int, datetime | None, list[dict[str, Any]]]]
    questions: list[Question] = field(default_factory=list)

    @property
    def turn_ids(self) -> set[str]:
        """Every ``dia_id`` in the conversation."""
        return {t["dia_id"] for _, _, turns in self.sessions for t in turns}

    @property
    def turn_count(self) -> int:
        """How many turns the conversation has."""
        return sum(len(turns) for _, _, turns in self.sessions)


def turn_metadata(raw: dict[str, Any]) -> dict[str, Any]:
    """A raw turn's side data under the core's keys: ``img_url``, ``caption`` (LoCoMo's
    ``blip_caption``, the description of the image it shared) and ``query``; empty
    values are left out."""
    return {ours: raw[theirs] for theirs, ours in _SIDE_DATA if raw.get(theirs)}


def parse_evidence(raw: Iterable[Any]) -> list[str]:
    """Normalise evidence strings to ``D<session>:<turn>`` ids (several per string allowed)."""
    out: list[str] = []
    for value in raw:
        for session, turn in _EVIDENCE_ID.findall(str(value)):
            out.append(f"D{int(session)}:{int(turn)}")
    return list(dict.fromkeys(out))


def parse_session_date(value: str) -> datetime:
    """Parse LoCoMo's ``"1:56 pm on 8 May, 2023"`` as UTC (the data has no zone)."""
    cleaned = " ".join(value.split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise ValueError(f"unrecognised session date {value!r}")


def parse_locomo(path: str | Path) -> list[LoCoMoConversation]:
    """Read and validate a LoCoMo-format JSON file: conversations and their questions.

    Raises:
        LoCoMoError: the file is missing, not JSON, or a record is malformed; the message
            names the file and the record (conversation, session, turn or question).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise LoCoMoError(str(path), "file", f"cannot read LoCoMo JSON: {exc}") from exc
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise LoCoMoError(str(path), "top level",
                          f"expected a list of conversations, got {type(data).__name__}")
    return [_parse_conversation(path, n, record) for n, record in enumerate(data)]


def read_locomo(path: str | Path) -> list[ConversationRecord]:
    """A LoCoMo file's conversations as records, validated whole (questions are left out).

    Each turn becomes a message: ``speaker``, ``content`` (its text), ``timestamp`` (the
    session's date) and ``metadata`` (:func:`turn_metadata`, and ``source_id``, its
    ``dia_id``).

    Raises:
        LoCoMoError: the file is unreadable or a record is malformed (names the file and
            the record).
    """
    return [to_record(conv, str(path)) for conv in parse_locomo(path)]


def to_record(conv: LoCoMoConversation, path: str = "<locomo>") -> ConversationRecord:
    """One parsed conversation as a :class:`ConversationRecord`.

    Raises:
        LoCoMoError: a turn is not a valid message (names ``path`` and the turn).
    """
    sessions: list[SessionRecord] = []
    for index, date, turns in conv.sessions:
        messages = []
        for raw in turns:
            try:
                messages.append(Message(
                    speaker=raw["speaker"], content=raw["text"], timestamp=date,
                    metadata={**turn_metadata(raw), "source_id": raw["dia_id"]}))
            except ValidationError as exc:
                raise LoCoMoError(path, f"conversation {conv.sample_id}, turn {raw['dia_id']}",
                                  "; ".join(e["msg"] for e in exc.errors())) from None
        # Session N is "session_N": LoCoMo's key, and the id Memory gives a Nth session.
        sessions.append(SessionRecord(id=f"session_{index}", started_at=date,
                                      messages=messages))
    return ConversationRecord(
        id=conv.sample_id, title=" & ".join(conv.speakers), speakers=conv.speakers,
        sessions=sessions)


def _parse_conversation(path: Path, n: int, record: Any) -> LoCoMoConversation:
    name = str(path)
    if not isinstance(record, dict) or not isinstance(record.get("conversation"), dict):
        raise LoCoMoError(name, f"conversation #{n}", "missing the 'conversation' object")
    sample_id = str(record.get("sample_id") or f"conv-{n}")
    where = f"conversation {sample_id}"
    conv = record["conversation"]
    speakers = [conv[k] for k in ("speaker_a", "speaker_b") if isinstance(conv.get(k), str)]
    sessions = []
    for key, turns in conv.items():
        m = _SESSION_KEY.match(key)
        if not m:
            continue
        index = int(m[1])
        if not isinstance(turns, list):
            raise LoCoMoError(name, f"{where}, {key}", "expected a list of turns")
        date_raw = conv.get(f"{key}_date_time")
        try:
            date = parse_session_date(date_raw) if date_raw else None
        except ValueError as exc:
            raise LoCoMoError(name, f"{where}, {key}_date_time", str(exc)) from exc
        for t_n, turn in enumerate(turns):
            if not isinstance(turn, dict) or not all(
                isinstance(turn.get(f), str) for f in ("speaker", "dia_id", "text")
            ):
                raise LoCoMoError(
                    name, f"{where}, {key} turn #{t_n}",
                    f"each turn needs string 'speaker', 'dia_id' and 'text' (got "
                    f"{str(turn)[:120]})")
        sessions.append((index, date, turns))
    sessions.sort(key=lambda s: s[0])
    parsed = LoCoMoConversation(sample_id=sample_id, speakers=speakers, sessions=sessions)
    known = parsed.turn_ids
    qa = record.get("qa") or []
    if not isinstance(qa, list):
        raise LoCoMoError(name, where, "'qa' must be a list")
    for q_n, item in enumerate(qa):
        if not isinstance(item, dict) or not isinstance(item.get("question"), str):
            raise LoCoMoError(name, f"{where}, qa #{q_n}", "each question needs a string "
                              "'question'")
        try:
            raw_category: Any = item.get("category")  # JSON: int() says if it is a number
            category = int(raw_category)
        except (TypeError, ValueError) as exc:
            raise LoCoMoError(name, f"{where}, qa #{q_n}",
                              f"bad category {item.get('category')!r}") from exc
        raw = item.get("evidence") or []
        raw = raw if isinstance(raw, list) else [raw]
        ids = parse_evidence(raw)
        answer = item.get("answer")
        adversarial = item.get("adversarial_answer")
        parsed.questions.append(
            Question(
                sample_id=sample_id, index=q_n, question=item["question"], category=category,
                answer=None if answer is None else str(answer),
                adversarial_answer=None if adversarial is None else str(adversarial),
                evidence=[i for i in ids if i in known],
                evidence_raw=[str(r) for r in raw],
                unknown_evidence=[i for i in ids if i not in known],
            )
        )
    return parsed
