"""What every conversation format becomes before it reaches memory.

A format adapter (``messages``, ``locomo``, ``longmemeval``) reads a file into
:class:`ConversationRecord` objects and validates them completely *before* anything is
written, so a malformed file is an :class:`ImportFormatError` naming the file and the
record, and the store is untouched. ``Memory.import_conversations`` then writes the records.

The message shape is the one ``Memory.add`` takes (messages of the OpenAI Chat and
Responses APIs and of Anthropic's Messages API work as they are; see :func:`to_message`)::

    {"role": "user", "content": "I moved to Lisbon", "timestamp": "2024-05-01T09:30:00Z"}
    {"speaker": "Ana", "content": "...", "metadata": {"caption": "a photo of a beach"}}

``speaker`` names who said it; without one, ``name`` (OpenAI's optional field) or
``role`` stands in (``role`` is kept apart as :attr:`Message.role`). ``timestamp`` is the
event time (ISO 8601, or a Unix time in seconds).
``metadata["source_id"]``, when given, is the message's id in its source (LoCoMo's
``dia_id``): the stored turn keeps it as its ``turn_id``, what answers cite.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memstrata.errors import MemstrataError

from .content import Content, is_tool_result, read_content, tool_call_text


class ImportFormatError(MemstrataError, ValueError):
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
    """One message: who said it (``speaker``), in which role, what, and (optionally) when.

    ``role`` is the chat role as sent (``user``, ``assistant``, ``system``, ``developer``,
    ``tool``, ``function``; lower-cased), ``"tool"`` for a message that is only tool
    plumbing, None for a message that names only its ``speaker``. ``speaker`` may differ:
    ``{"role": "user", "name": "Ana"}`` is said by ``Ana`` in the role ``user``.
    """

    model_config = ConfigDict(extra="ignore")

    speaker: str = Field(min_length=1, max_length=200)
    content: str
    role: str | None = Field(default=None, max_length=200)
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


PARTS_SKIPPED = "parts_skipped"
"""Message metadata key: the types of the content parts that were not read as text."""


def to_message(raw: Any) -> Message:
    """One message from a string (said by ``user``), a chat message dict, or an item of
    OpenAI's Responses API.

    A chat message has ``role`` or ``speaker`` (``speaker`` names who said it; without
    one, ``name`` or ``role`` stands in), ``content``, optional ``timestamp`` and
    ``metadata``. Messages of the OpenAI Chat Completions API, the OpenAI Responses API
    (``{"type": "message", ...}`` or an input item without ``type``) and Anthropic's
    Messages API are taken as they are:

    * ``content`` is a string or a list of parts (:mod:`memstrata.formats.content`):
      text parts (plain strings, ``text``, ``input_text``, ``output_text``, ``refusal``)
      are read and joined with newlines; Chat's ``refusal`` field is read as text.
    * Media (images, audio, files, documents) and a model's private reasoning
      (``thinking``, ``redacted_thinking``, reasoning summaries) are not text: they are
      skipped and named, in order, in ``metadata["parts_skipped"]`` (``["image_url"]``).
      A message made only of them has blank content, and ``Memory.add`` reports it.
    * Tool plumbing: tool calls (Chat's ``tool_calls`` and ``function_call``,
      Anthropic's ``tool_use``) and tool results (Anthropic's ``tool_result``). Beside
      text they are not read (named in ``parts_skipped``); a message made only of them
      is a tool message: ``role`` ``"tool"``, its content the calls as ``name(arguments)``
      and the results' text, its speaker the one named, else ``tool`` for results and
      the sender's role for calls.
    * Responses items without a role: ``function_call`` and every ``*_call`` are tool
      messages said by ``assistant``; ``function_call_output`` and every
      ``*_call_output`` tool messages said by ``tool`` (``output`` read as content);
      ``reasoning`` an assistant message without text (``parts_skipped``
      ``["reasoning"]``).

    Raises:
        ValueError: the value is not a message (says what is missing), or a content part
            or item type that is refused (names the part's position and its type).
    """
    if isinstance(raw, str):
        return Message(speaker="user", role="user", content=raw)
    if isinstance(raw, Message):
        return raw
    if not isinstance(raw, dict):
        raise ValueError(f"a message is a string or a dict, not {type(raw).__name__}")
    role = raw.get("role")
    role = role.strip().lower() if isinstance(role, str) and role.strip() else None
    kind = raw.get("type")
    if role is None and not raw.get("speaker") and isinstance(kind, str) and kind != "message":
        parsed, role, speaker = _responses_item(raw, kind)
        named = None  # an item's "name" is its tool's
    else:
        given = raw.get("speaker") or raw.get("name") or raw.get("role")
        if not isinstance(given, str) or not given.strip():
            raise ValueError('a message needs "speaker" or "role" (a non-empty string)')
        speaker = given
        parsed = _chat_content(raw)
        named = raw.get("speaker") or raw.get("name")
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError('"metadata" must be an object')
    skipped = list(parsed.skipped)
    if any(t.strip() for t in parsed.text) or metadata.get("caption") or not parsed.tool_parts:
        content = "\n".join(t for t in parsed.text if t)
        skipped += parsed.tool_parts
    else:  # only tool plumbing: a tool message
        content = "\n".join(parsed.tool)
        if role not in TOOL_ROLES:
            role = "tool"
            if not (isinstance(named, str) and named.strip()) and all(
                    is_tool_result(k) for k in parsed.tool_parts):
                speaker = "tool"
    if skipped:
        metadata = {**metadata, PARTS_SKIPPED: skipped}
    try:
        return Message(speaker=speaker.strip(), role=role, content=content,
                       timestamp=raw.get("timestamp"), metadata=metadata)
    except ValidationError as exc:
        # pydantic prefixes a validator's own message with "Value error, ".
        raise ValueError("; ".join(e["msg"].removeprefix("Value error, ")
                                   for e in exc.errors())) from None


TOOL_ROLES = frozenset({"tool", "function"})
"""Chat roles of tool messages (``function`` is Chat's older name)."""


def _chat_content(raw: dict[str, Any]) -> Content:
    """The content of a chat message, with Chat's ``refusal``, ``audio``, ``tool_calls``
    and ``function_call`` fields."""
    extras = ("tool_calls", "function_call", "refusal", "audio")
    if raw.get("content") is None and "content" not in raw and not any(
            k in raw for k in extras):
        raise ValueError('a message needs "content" (a string or a list of content parts)')
    parsed = read_content(raw.get("content"))
    refusal = raw.get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        parsed.text.append(refusal)
    if raw.get("audio"):
        parsed.skip("audio")
    calls = raw.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ValueError('"tool_calls" must be a list')
    for n, call in enumerate(calls):
        if not isinstance(call, dict):
            raise ValueError(f"tool call {n} is a {type(call).__name__}, not an object")
        fn = call.get("function") or call.get("custom") or {}
        fn = fn if isinstance(fn, dict) else {}
        parsed.add_tool("tool_calls", tool_call_text(fn.get("name"),
                                                     fn.get("arguments", fn.get("input", ""))))
    if isinstance(legacy := raw.get("function_call"), dict):
        parsed.add_tool("function_call", tool_call_text(legacy.get("name"),
                                                        legacy.get("arguments", "")))
    return parsed


def _responses_item(raw: dict[str, Any], kind: str) -> tuple[Content, str, str]:
    """An OpenAI Responses item that is not a message: its content, role and sender."""
    parsed = Content()
    if kind == "reasoning":
        parsed.skip("reasoning")
        return parsed, "assistant", "assistant"
    if kind.endswith("_call_output"):
        output = raw.get("output")
        if isinstance(output, str | list | tuple):
            result = read_content(output, "output")
            for skipped in result.skipped:
                parsed.skip(skipped)
            parsed.add_tool(kind, "\n".join(t for t in [*result.text, *result.tool] if t))
        else:  # a screenshot or another object: plumbing with no text
            parsed.add_tool(kind, "")
        return parsed, "tool", "tool"
    if kind.endswith("_call"):
        name = raw.get("name")
        parsed.add_tool(kind, tool_call_text(name, raw.get("arguments", raw.get("input", "")))
                        if name else "")
        return parsed, "tool", "assistant"
    raise ValueError(f"an item of type {kind!r} is not a message (memstrata reads messages "
                     f"and the Responses items reasoning, *_call and *_call_output)")


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
