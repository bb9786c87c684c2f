"""What every conversation format becomes before it reaches memory.

A format adapter (``messages``, ``locomo``, ``longmemeval``) reads a file into
:class:`ConversationRecord` objects and validates them completely *before* anything is
written, so a malformed file is an :class:`ImportFormatError` naming the file and the
record, and the store is untouched. ``Memory.import_conversations`` then writes the records.

The message shape is the one ``Memory.add`` takes (OpenAI chat messages work as they are)::

    {"role": "user", "content": "I moved to Lisbon", "timestamp": "2024-05-01T09:30:00Z"}
    {"speaker": "Ana", "content": "...", "metadata": {"caption": "a photo of a beach"}}

``speaker`` names who said it; without one, ``name`` (OpenAI's optional field) or
``role`` stands in. ``timestamp`` is the event time (ISO 8601, or a Unix time in seconds).
``metadata["source_id"]``, when given, is the message's id in its source (LoCoMo's
``dia_id``): the stored turn keeps it as its ``turn_id``, what answers cite.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class ImportFormatError(ValueError):
    """A file or a record is not in the format asked for; names the file and the record."""

    def __init__(self, path: str, record: str, reason: str) -> None:
        self.path, self.record, self.reason = path, record, reason
        super().__init__(f"{path}: {record}: {reason}")


def parse_time(value: Any) -> datetime | None:
    """An event time from ISO 8601 text, a datetime, or Unix seconds; naive means UTC.

    Raises:
        ValueError: the value is none of those.
    """
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            moment = datetime.fromtimestamp(float(value), UTC)
        except (OverflowError, OSError, ValueError):  # NaN, or past year 9999 either way
            raise ValueError(f"timestamp {value!r} is out of range for Unix seconds") from None
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"timestamp {value!r} is not ISO 8601 (2024-05-01T09:30:00Z)"
                             ) from None
    else:
        raise ValueError(f"timestamp of type {type(value).__name__} is not ISO 8601 text or "
                         "Unix seconds")
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class Message(BaseModel):
    """One message: who said it, what, and (optionally) when it happened."""

    model_config = ConfigDict(extra="ignore")

    speaker: str = Field(min_length=1, max_length=200)
    content: str
    timestamp: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("timestamp", mode="before")
    @classmethod
    def _time(cls, value: Any) -> datetime | None:
        return parse_time(value)

    @property
    def blank(self) -> bool:
        """Nothing to remember: blank content and no caption (``metadata["caption"]``),
        as in an assistant message that only calls tools."""
        return not self.content.strip() and not self.metadata.get("caption")


def to_message(raw: Any) -> Message:
    """One message from a string (said by ``user``) or a message dict.

    Raises:
        ValueError: the value is not a message (says what is missing).
    """
    if isinstance(raw, str):
        return Message(speaker="user", content=raw)
    if isinstance(raw, Message):
        return raw
    if not isinstance(raw, dict):
        raise ValueError(f"a message is a string or a dict, not {type(raw).__name__}")
    speaker = raw.get("speaker") or raw.get("name") or raw.get("role")
    if not isinstance(speaker, str) or not speaker.strip():
        raise ValueError('a message needs "speaker" or "role" (a non-empty string)')
    content = raw.get("content")
    if content is None and ("content" in raw or "tool_calls" in raw or "function_call" in raw):
        content = ""  # OpenAI's assistant message that only calls tools: no text, no error
    if isinstance(content, list):  # OpenAI content parts: keep the text parts
        content = "\n".join(p.get("text", "") for p in content
                            if isinstance(p, dict) and p.get("type") == "text")
    if not isinstance(content, str):
        raise ValueError('a message needs "content" (a string)')
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError('"metadata" must be an object')
    try:
        return Message(speaker=speaker.strip(), content=content,
                       timestamp=raw.get("timestamp"), metadata=metadata)
    except ValidationError as exc:
        # pydantic prefixes a validator's own message with "Value error, ".
        raise ValueError("; ".join(e["msg"].removeprefix("Value error, ")
                                   for e in exc.errors())) from None


def to_messages(messages: Any) -> list[Message]:
    """Messages from a string, one message dict, or a list of either.

    Raises:
        ValueError: an entry is not a message; names its position.
    """
    if isinstance(messages, str | dict | Message):
        messages = [messages]
    if not isinstance(messages, list | tuple):
        raise ValueError(f"messages must be a string, a dict or a list, not "
                         f"{type(messages).__name__}")
    out: list[Message] = []
    for n, raw in enumerate(messages):
        try:
            out.append(to_message(raw))
        except ValueError as exc:
            raise ValueError(f"message {n}: {exc}") from None
    return out


class SessionRecord(BaseModel):
    """One sitting of a conversation: its id, when it started, its messages in order."""

    id: str = Field(min_length=1)
    started_at: datetime | None = None
    messages: list[Message]
    metadata: dict[str, Any] = Field(default_factory=dict)


class ConversationRecord(BaseModel):
    """A conversation as imported: its id, participants, sessions in order."""

    id: str = Field(min_length=1)
    title: str = ""
    speakers: list[str] = Field(default_factory=list)
    sessions: list[SessionRecord]
    metadata: dict[str, Any] = Field(default_factory=dict)
