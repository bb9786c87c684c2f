"""LoCoMo: read the JSON format, and load conversations into the store.

Each conversation becomes a tenant (``user_id`` = its ``sample_id``); its turns keep the
speaker, the source turn id (``D3:7``), the session date as event time, and any image
caption. Loading is one transaction per conversation: a bad record aborts that
conversation with an error naming the file and the record, and nothing of it is written.

The data's known quirks are handled, not crashed on: evidence strings holding several
ids (``"D8:6; D9:17"``) or a stray colon (``"D:11:26"``), evidence ids that do not exist,
empty evidence, and category-5 questions with ``adversarial_answer`` and no ``answer``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memstrata.memory import Conversation, Edge, Embedder, Session, Store, Turn
from memstrata.memory.models import with_caption
from pydantic import BaseModel, Field

_EVIDENCE_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y")


class LoCoMoError(ValueError):
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
        """A stable id: ``conv-26#12``."""
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


def read_locomo(path: str | Path) -> list[LoCoMoConversation]:
    """Read and validate a LoCoMo-format JSON file (a list of conversations).

    Raises:
        LoCoMoError: the file is missing, not JSON, or a record is malformed; the message
            names the file and the record (conversation, session, turn or question).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LoCoMoError(f"{path}: cannot read LoCoMo JSON: {exc}") from exc
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise LoCoMoError(f"{path}: expected a list of conversations, got {type(data).__name__}")
    return [_parse_conversation(path, n, record) for n, record in enumerate(data)]


def _parse_conversation(path: Path, n: int, record: Any) -> LoCoMoConversation:
    where = f"{path}: conversation #{n}"
    if not isinstance(record, dict) or not isinstance(record.get("conversation"), dict):
        raise LoCoMoError(f"{where}: missing the 'conversation' object")
    sample_id = str(record.get("sample_id") or f"conv-{n}")
    where = f"{path}: conversation {sample_id}"
    conv = record["conversation"]
    speakers = [conv[k] for k in ("speaker_a", "speaker_b") if isinstance(conv.get(k), str)]
    sessions = []
    for key, turns in conv.items():
        m = _SESSION_KEY.match(key)
        if not m:
            continue
        index = int(m[1])
        if not isinstance(turns, list):
            raise LoCoMoError(f"{where}, {key}: expected a list of turns")
        date_raw = conv.get(f"{key}_date_time")
        try:
            date = parse_session_date(date_raw) if date_raw else None
        except ValueError as exc:
            raise LoCoMoError(f"{where}, {key}_date_time: {exc}") from exc
        for t_n, turn in enumerate(turns):
            if not isinstance(turn, dict) or not all(
                isinstance(turn.get(f), str) for f in ("speaker", "dia_id", "text")
            ):
                raise LoCoMoError(
                    f"{where}, {key} turn #{t_n}: each turn needs string 'speaker', 'dia_id'"
                    f" and 'text' (got {str(turn)[:120]})"
                )
        sessions.append((index, date, turns))
    sessions.sort(key=lambda s: s[0])
    parsed = LoCoMoConversation(sample_id=sample_id, speakers=speakers, sessions=sessions)
    known = parsed.turn_ids
    qa = record.get("qa") or []
    if not isinstance(qa, list):
        raise LoCoMoError(f"{where}: 'qa' must be a list")
    for q_n, item in enumerate(qa):
        if not isinstance(item, dict) or not isinstance(item.get("question"), str):
            raise LoCoMoError(f"{where}, qa #{q_n}: each question needs a string 'question'")
        try:
            category = int(item.get("category"))  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise LoCoMoError(f"{where}, qa #{q_n}: bad category {item.get('category')!r}") from exc
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


def read_subset(path: str | Path, conversations: set[str] | None = None
                ) -> list[LoCoMoConversation]:
    """``read_locomo``, kept to the named conversations (all when ``None``).

    Raises:
        ValueError: a named conversation is not in the file.
    """
    convs = read_locomo(path)
    if conversations:
        missing = conversations - {c.sample_id for c in convs}
        if missing:
            raise ValueError(f"no conversation {sorted(missing)} in {path}")
        convs = [c for c in convs if c.sample_id in conversations]
    return convs


def apply_audit(conversations: list[LoCoMoConversation], path: str | Path) -> int:
    """Attach the public audit's corrected evidence and answers; returns entries applied.

    The audit file is a list of ``{sample_id, qa_index, correct_evidence, correct_answer}``.
    Entries for conversations not loaded are ignored.
    """
    path = Path(path)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LoCoMoError(f"{path}: cannot read audit JSON: {exc}") from exc
    by_key = {(c.sample_id, q.index): (c, q) for c in conversations for q in c.questions}
    applied = 0
    for n, entry in enumerate(entries):
        try:
            key = (str(entry["sample_id"]), int(entry["qa_index"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise LoCoMoError(f"{path}: audit entry #{n} lacks sample_id/qa_index") from exc
        if key not in by_key:
            continue
        conv, question = by_key[key]
        if "correct_evidence" in entry:
            known = conv.turn_ids
            question.corrected_evidence = [
                i for i in parse_evidence(entry["correct_evidence"] or []) if i in known
            ]
        if entry.get("correct_answer") is not None:
            question.corrected_answer = str(entry["correct_answer"])
        applied += 1
    return applied


@dataclass
class LoadStats:
    """What a load wrote, and how long the writing and the embedding took."""

    conversations: int = 0
    turns: int = 0
    embedded: int = 0
    embed_seconds: float = 0.0
    write_seconds: float = 0.0


def load_conversation(
    store: Store, conv: LoCoMoConversation, *, embedder: Embedder | None = None,
    stats: LoadStats | None = None, tenant: str | None = None,
) -> list[str]:
    """Write one conversation as its own tenant, replacing any earlier load of it.

    ``tenant`` puts it under a shared tenant instead (one user's several conversations,
    as cross-conversation reconciliation needs). Embeddings (if an embedder is given)
    are computed before the transaction opens, so the write itself is short; everything
    of the conversation commits together.
    """
    import time

    stats = stats if stats is not None else LoadStats()
    user = tenant or conv.sample_id
    turns: list[Turn] = []
    seq = 0
    for index, date, raw_turns in conv.sessions:
        for raw in raw_turns:
            metadata = {k: raw[k] for k in ("img_url", "blip_caption", "query") if raw.get(k)}
            turns.append(
                Turn(
                    user_id=user, conversation_id=conv.sample_id, session_id=f"session_{index}",
                    turn_id=raw["dia_id"], seq=seq, speaker=raw["speaker"], text=raw["text"],
                    event_time=date, metadata=metadata,
                )
            )
            seq += 1
    vectors = None
    if embedder is not None and turns:
        started = time.perf_counter()
        vectors = embedder.encode(store.contextual_texts(turns))
        stats.embed_seconds += time.perf_counter() - started
    started = time.perf_counter()
    with store.transaction():
        store.delete_conversation(user, conv.sample_id)
        store.add_conversation(
            Conversation(id=conv.sample_id, user_id=user, title=" & ".join(conv.speakers),
                         speakers=conv.speakers)
        )
        for index, date, _ in conv.sessions:
            store.add_session(Session(id=f"session_{index}", user_id=user,
                                      conversation_id=conv.sample_id, index=index,
                                      started_at=date))
        ids = store.add_turns(turns)
        # The whole conversation also as one blob: what an RLM searches through a BlobRef.
        store.blobs.put(user, conv.sample_id, transcript(turns),
                        {"kind": "conversation", "turns": len(turns)})
        store.add_edges(
            Edge(user_id=user, src=a, dst=b, relation="follows")
            for a, b, ta, tb in zip(ids, ids[1:], turns, turns[1:], strict=False)
            if ta.session_id == tb.session_id
        )
        if vectors is not None:
            store.set_embeddings(user, ids, vectors, embedder.name)  # type: ignore[union-attr]
            stats.embedded += len(ids)
    stats.write_seconds += time.perf_counter() - started
    stats.conversations += 1
    stats.turns += len(turns)
    return ids


def transcript(turns: list[Turn]) -> str:
    """A conversation as plain text: a header per session (with its date), then one line
    per turn, ``[D3:7] Caroline: text [image: caption]``."""
    lines: list[str] = []
    session = None
    for turn in turns:
        if turn.session_id != session:
            session = turn.session_id
            when = f" · {turn.event_time:%-d %B %Y, %H:%M}" if turn.event_time else ""
            if lines:
                lines.append("")
            lines.append(f"=== {session.replace('_', ' ')}{when} ===")
        lines.append(f"[{turn.turn_id}] {turn.speaker}: {with_caption(turn.text, turn.metadata)}")
    return "\n".join(lines) + "\n"


def load_locomo(
    store: Store, conversations: list[LoCoMoConversation], *, embedder: Embedder | None = None,
    progress: Callable[[int], None] | None = None, tenant: str | None = None,
) -> LoadStats:
    """Load several conversations, one transaction each; ``progress(turns)`` after each.

    Each is its own tenant unless ``tenant`` names one for all of them."""
    stats = LoadStats()
    for conv in conversations:
        load_conversation(store, conv, embedder=embedder, stats=stats, tenant=tenant)
        if progress is not None:
            progress(conv.turn_count)
    return stats
