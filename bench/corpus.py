"""Evaluation corpora for ``bench retrieval``: any supported file read into one shape.

Three file formats are read, told apart by their shape:

* **LoCoMo** (a JSON array of ``{"sample_id", "conversation", "qa"}``): each conversation
  its own tenant; categories 1-4 with evidence are scored; the audit file corrects them.
* **LongMemEval** (a JSON array of instances with ``haystack_sessions``): each instance
  its own tenant (its haystack); the evidence is the turns marked ``has_answer``, or, where
  an instance marks none, every turn of its ``answer_session_ids`` sessions; the category
  is the ``question_type``. Abstention questions (``_abs``) have no evidence and are left out.
* **Labelled messages** (``{"name", "conversations": [...], "questions": [...]}``, see
  ``bench/corpora/README.md``): each conversation its own tenant; evidence ids are the
  messages' ``metadata.source_id``.

Every question becomes an :class:`EvalQuestion` whose ``sample_id`` is the tenant it is
asked of, whose evidence ids are stored turns' ``turn_id``, and whose category is text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from memstrata.formats.longmemeval import read_longmemeval
from memstrata.formats.messages import json_kind, load_json, read_text
from memstrata.formats.records import (
    ConversationRecord,
    ImportFormatError,
    SessionRecord,
    to_message,
)
from memstrata.formats.sniff import json_shape

from .locomo import LoCoMoConversation, apply_audit, read_locomo

LOCOMO_CATEGORIES = (1, 2, 3, 4)

Kind = Literal["locomo", "longmemeval", "messages"]


@dataclass
class EvalQuestion:
    """A question asked of one tenant (``sample_id``), with the ids of its evidence turns."""

    sample_id: str
    qid: str
    question: str
    evidence: list[str]
    category: str
    corrected_evidence: list[str] | None = None
    asked_at: datetime | None = None


@dataclass
class EvalCorpus:
    """One evaluation corpus: its conversations (``locomo`` for LoCoMo files, ``records``
    otherwise, one tenant each: the record's id) and its questions."""

    name: str
    kind: Kind
    path: str
    questions: list[EvalQuestion]
    records: list[ConversationRecord] = field(default_factory=list)
    locomo: list[LoCoMoConversation] = field(default_factory=list)
    audit: str | None = None
    audit_entries_applied: int = 0

    @property
    def tenants(self) -> list[str]:
        """The tenant of each conversation, in file order."""
        if self.kind == "locomo":
            return [c.sample_id for c in self.locomo]
        return [r.id for r in self.records]

    @property
    def messages(self) -> int:
        """How many messages (turns) the corpus holds."""
        if self.kind == "locomo":
            return sum(c.turn_count for c in self.locomo)
        return sum(len(s.messages) for r in self.records for s in r.sessions)

    @property
    def categories(self) -> list[str]:
        """The question categories, LoCoMo's in number order, others sorted."""
        found = {q.category for q in self.questions}
        return sorted(found, key=lambda c: (not c.isdigit(), int(c) if c.isdigit() else 0, c))


def sniff(path: str | Path) -> Kind:
    """Which supported format the file at ``path`` is in.

    Raises:
        ImportFormatError: unreadable, not JSON, or none of the three shapes.
    """
    doc = load_json(str(path), read_text(path))
    if isinstance(doc, dict) and "conversations" in doc and "questions" in doc:
        return "messages"
    shape = json_shape(doc)
    if shape == "longmemeval" or (shape == "locomo" and "qa" in doc[0]):  # scored: has qa
        return shape
    raise ImportFormatError(str(path), "top level", "not a LoCoMo file (an array of "
                            '{"conversation", "qa"}), a LongMemEval file (an array of '
                            'instances with "haystack_sessions") or a labelled-messages file '
                            f'({{"conversations", "questions"}}); found {json_kind(doc)}')


def load_corpus(path: str | Path, *, audit: str | Path | None = None,
                limit: int | None = None, name: str | None = None) -> EvalCorpus:
    """Read any supported file (see the module doc) as an evaluation corpus.

    Args:
        path: the file.
        audit: LoCoMo only: the audit corrections file ("corrected" = original without).
        limit: keep only the first N scored questions per conversation.
        name: the corpus name (default: the labelled file's ``name``, else the file stem).

    Raises:
        ImportFormatError: the file or a record in it is malformed (names both).
    """
    kind = sniff(path)
    reader = {"locomo": _locomo, "longmemeval": _longmemeval, "messages": _labelled}[kind]
    corpus = reader(Path(path), audit)
    if name:
        corpus.name = name
    if limit is not None:
        asked: dict[str, int] = {}
        kept = []
        for q in corpus.questions:
            asked[q.sample_id] = asked.get(q.sample_id, 0) + 1
            if asked[q.sample_id] <= limit:
                kept.append(q)
        corpus.questions = kept
    return corpus


def _locomo(path: Path, audit: str | Path | None) -> EvalCorpus:
    convs = read_locomo(path)
    applied = apply_audit(convs, audit) if audit else 0
    questions = [
        EvalQuestion(sample_id=q.sample_id, qid=q.qid, question=q.question,
                     evidence=list(q.evidence), category=str(q.category),
                     corrected_evidence=q.corrected_evidence)
        for c in convs for q in c.questions
        if q.category in LOCOMO_CATEGORIES and (q.evidence or q.corrected_evidence)
    ]
    return EvalCorpus(name=path.stem, kind="locomo", path=str(path), questions=questions,
                      locomo=convs, audit=str(audit) if audit else None,
                      audit_entries_applied=applied)


def _longmemeval(path: Path, audit: str | Path | None) -> EvalCorpus:
    records, raw_questions = read_longmemeval(path)
    questions = []
    for record, q in zip(records, raw_questions, strict=True):
        marked, in_answer = [], []
        for session in record.sessions:
            for n, message in enumerate(session.messages, 1):
                # The label must not reach the store: it would be a free hint to a retriever.
                has_answer = bool(message.metadata.pop("has_answer", False))
                message.metadata["source_id"] = f"{session.id}:{n}"
                if has_answer:
                    marked.append(f"{session.id}:{n}")
                if session.id in q.answer_session_ids and not message.blank:
                    in_answer.append(f"{session.id}:{n}")
        evidence = marked or in_answer
        if q.abstention or not evidence:
            continue
        questions.append(EvalQuestion(sample_id=record.id, qid=q.question_id,
                                      question=q.question, evidence=evidence,
                                      category=q.question_type, asked_at=q.question_date))
    return EvalCorpus(name=path.stem, kind="longmemeval", path=str(path),
                      questions=questions, records=records)


class _Session(BaseModel):
    id: str = Field(min_length=1)
    started_at: datetime | None = None
    messages: list[Any]


class _Conversation(BaseModel):
    id: str = Field(min_length=1)
    sessions: list[_Session]


class _Question(BaseModel):
    id: str = Field(min_length=1)
    conversation_id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    evidence: list[str] = Field(min_length=1)
    category: str = "all"
    asked_at: datetime | None = None


def _parse(path: Path, where: str, model: type[BaseModel], raw: Any) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ImportFormatError(str(path), where, "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())
        ) from None


def _labelled(path: Path, audit: str | Path | None) -> EvalCorpus:
    doc = load_json(str(path), read_text(path))
    for key in ("conversations", "questions"):
        if not isinstance(doc[key], list):
            raise ImportFormatError(str(path), f'"{key}"',
                                    f"must be an array, not {json_kind(doc[key])}")
    records: list[ConversationRecord] = []
    known: dict[str, set[str]] = {}
    for c, raw_conv in enumerate(doc["conversations"], 1):
        conv = _parse(path, f"conversation {c}", _Conversation, raw_conv)
        if conv.id in known:
            raise ImportFormatError(str(path), f"conversation {c}", f"id {conv.id!r} repeats")
        ids: set[str] = set()
        sessions = []
        for s, session in enumerate(conv.sessions, 1):
            messages = []
            for m, raw in enumerate(session.messages, 1):
                where = f"conversation {conv.id}, session {s}, message {m}"
                try:
                    message = to_message(raw)
                except ValueError as exc:
                    raise ImportFormatError(str(path), where, str(exc)) from None
                source = message.metadata.get("source_id")
                if not isinstance(source, str) or not source or source in ids:
                    raise ImportFormatError(str(path), where, 'needs a "metadata.source_id" '
                                            "string, unique in its conversation")
                ids.add(source)
                messages.append(message)
            sessions.append(SessionRecord(id=session.id, started_at=session.started_at,
                                          messages=messages))
        known[conv.id] = ids
        speakers = dict.fromkeys(m.speaker for s in sessions for m in s.messages)
        records.append(ConversationRecord(id=conv.id, speakers=list(speakers),
                                          sessions=sessions))
    questions = []
    for n, raw_q in enumerate(doc["questions"], 1):
        q = _parse(path, f"question {n}", _Question, raw_q)
        if q.conversation_id not in known:
            raise ImportFormatError(str(path), f"question {q.id}",
                                    f"no conversation {q.conversation_id!r}")
        missing = [e for e in q.evidence if e not in known[q.conversation_id]]
        if missing:
            raise ImportFormatError(str(path), f"question {q.id}",
                                    f"evidence {missing[0]!r} is no message of "
                                    f"{q.conversation_id}")
        questions.append(EvalQuestion(sample_id=q.conversation_id, qid=q.id,
                                      question=q.question, evidence=list(q.evidence),
                                      category=q.category, asked_at=q.asked_at))
    name = doc.get("name") if isinstance(doc.get("name"), str) and doc.get("name") else None
    return EvalCorpus(name=name or path.stem, kind="messages", path=str(path),
                      questions=questions, records=records)
