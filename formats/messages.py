"""The plain "messages" file format: chat messages, optionally tagged with their conversation
and session.

A file is one of:

* a JSON array of message objects,
* JSONL: one message object per line (blank lines are skipped),
* a JSON object ``{"messages": [...]}``.

Each message is what :func:`~memstrata.formats.records.to_message` takes (``speaker`` |
``name`` | ``role``, ``content``, optional ``timestamp`` and ``metadata``) plus optional
``conversation_id`` and ``session_id`` (both default to ``"default"``)::

    {"conversation_id": "c1", "session_id": "s1", "speaker": "Ana", "content": "Hi"}

Records in errors are 1-based: ``line 7`` for JSONL, ``message 3`` for an array.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from memstrata.memory.paths import refuse_database

from .records import ConversationRecord, ImportFormatError, Message, SessionRecord, to_message

DEFAULT_ID = "default"


ARCHIVE_MEMBER = "conversations.json"
"""What :func:`read_text` reads from a zip archive: the file a chat app's data export
(ChatGPT's, Claude's: a zip as downloaded) holds its conversations in."""
MAX_MEMBER_BYTES = 4 * 1024**3
"""The most bytes read out of an archive (a file that unpacks to more is refused, as an
archive built to unpack without end would be)."""


def read_text(path: str | Path, *, archive: bool = True) -> str:
    """The whole file as UTF-8 text (a leading BOM is dropped). A zip archive (a chat
    app's data export as downloaded) gives its :data:`ARCHIVE_MEMBER`, at its top or in
    one folder; with ``archive=False`` (a document, not an export) it is not UTF-8 text.

    Raises:
        ImportFormatError: the file is missing or unreadable, or not UTF-8 (names the
            line), or an archive that is damaged or holds no (or several)
            :data:`ARCHIVE_MEMBER`.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        scheme = urlsplit(str(path)).scheme if "://" in str(path) else ""
        hint = (f"; memstrata reads local files, not {scheme}:// URLs: download it and give "
                "its path" if len(scheme) > 1 else "")  # one letter: a Windows drive
        if isinstance(exc, IsADirectoryError):
            hint = "; it is a folder: give one file in it"
        raise ImportFormatError(str(path), "file", f"cannot read ({exc.strerror or exc})"
                                + hint) from None
    if archive and data[:4] == b"PK\x03\x04":
        data = _archive_member(str(path), data)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ImportFormatError(str(path), f"line {line}",
                                f"not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def _archive_member(where: str, data: bytes) -> bytes:
    """The bytes of a zip archive's :data:`ARCHIVE_MEMBER` (see :func:`read_text`)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            found = [info.filename for info in archive.infolist()
                     if not info.is_dir() and PurePosixPath(info.filename).name ==
                     ARCHIVE_MEMBER and len(PurePosixPath(info.filename).parts) <= 2]
            if len(found) != 1:
                why = ("holds no" if not found else f"holds {len(found)} files named") + \
                    f" {ARCHIVE_MEMBER} (at its top or in one folder)"
                raise ImportFormatError(where, "archive", f"a zip archive that {why}: "
                                        "memstrata reads a chat app's data export as "
                                        "downloaded; for another archive, unzip it and give "
                                        "the file")
            with archive.open(found[0]) as member:
                out = member.read(MAX_MEMBER_BYTES + 1)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError,
            OSError, RuntimeError) as exc:
        # NotImplementedError: a compression method zipfile lacks; RuntimeError: an
        # encrypted member.
        raise ImportFormatError(where, "archive", f"a damaged or unreadable zip archive "
                                f"({type(exc).__name__}: {exc})") from None
    if len(out) > MAX_MEMBER_BYTES:
        raise ImportFormatError(where, f"archive's {found[0]}", "unpacks to more than "
                                f"{MAX_MEMBER_BYTES // 1024**3} GiB")
    return out


def load_json(path: str | Path, text: str, record: str | None = None) -> Any:
    """``text`` parsed as one JSON document.

    Args:
        path: the file, for errors.
        text: the JSON text.
        record: the record to name in errors; by default the line the parser stopped at.

    Raises:
        ImportFormatError: the text is not valid JSON.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = record or f"line {exc.lineno}"
        raise ImportFormatError(str(path), where,
                                f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:  # json's parser recurses once per level of nesting
        raise ImportFormatError(str(path), record or "file", "JSON nested too deeply") from None


def _entries(path: str | Path, text: str) -> list[tuple[str, Any]]:
    """The file's raw messages, each with the record name errors will use."""
    lines = text.split("\n")  # not splitlines(): JSON strings may hold U+2028 and friends
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        return []  # an empty file (or only blank lines) is valid JSONL with no messages
    if not first.lstrip().startswith("["):
        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            # Several documents (or a broken one): JSONL if the first line stands alone,
            # otherwise one broken document whose own error position is the useful one.
            try:
                json.loads(first)
            except (json.JSONDecodeError, RecursionError):
                load_json(path, text)
            return [(f"line {n}", load_json(path, line, f"line {n}"))
                    for n, line in enumerate(lines, 1) if line.strip()]
        if isinstance(doc, dict) and "messages" not in doc:
            return [(f"line {lines.index(first) + 1}", doc)]  # one-line JSONL
    else:
        doc = load_json(path, text)
    if isinstance(doc, dict):
        doc = doc["messages"]
        if not isinstance(doc, list):
            raise ImportFormatError(str(path), '"messages"',
                                    f"must be an array, not {json_kind(doc)}")
    if not isinstance(doc, list):
        raise ImportFormatError(str(path), "top level", f"expected a JSON array of messages, "
                                f'an object {{"messages": [...]}} or JSONL, not {json_kind(doc)}')
    return [(f"message {n}", raw) for n, raw in enumerate(doc, 1)]


def json_kind(value: Any) -> str:
    """A JSON type name for errors (``object``, not ``dict``)."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _id(raw: dict[str, Any], key: str) -> str:
    """``conversation_id``/``session_id``: missing or null is the default; ints are text."""
    value = raw.get(key)
    if value is None:
        return DEFAULT_ID
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f'"{key}" must be a non-empty string')
    return value


def read_messages(path: str | Path) -> list[ConversationRecord]:
    """Conversations from a messages file, validated whole before returning.

    Messages are grouped by ``conversation_id``, then ``session_id`` (each in order of first
    appearance), keeping file order within a session. A session starts at its first
    message's timestamp (``None`` if that has none); a conversation's speakers are listed in
    order of first appearance.

    Raises:
        ImportFormatError: the file is unreadable, not UTF-8, not JSON/JSONL, has the wrong
            top-level type, or a message is invalid; names the file and the line or message.
    """
    grouped: dict[str, dict[str, list[Message]]] = {}
    for record, raw in _entries(path, read_text(path)):
        try:
            if not isinstance(raw, dict):
                raise ValueError(f"a message is a JSON object, not {json_kind(raw)}")
            conversation, session = _id(raw, "conversation_id"), _id(raw, "session_id")
            message = to_message(raw)
        except ValueError as exc:
            raise ImportFormatError(str(path), record, str(exc)) from None
        grouped.setdefault(conversation, {}).setdefault(session, []).append(message)
    records = []
    for conversation, sessions in grouped.items():
        speakers = dict.fromkeys(m.speaker for ms in sessions.values() for m in ms)
        records.append(ConversationRecord(
            id=conversation, speakers=list(speakers),
            sessions=[SessionRecord(id=sid, started_at=ms[0].timestamp, messages=ms)
                      for sid, ms in sessions.items()]))
    return records


def write_messages(records: Iterable[ConversationRecord], path: str | Path) -> Path:
    """Write conversations as a JSONL messages file that :func:`read_messages` reads back.

    Each line is one message: ``conversation_id``, ``session_id``, ``speaker``,
    ``content``, ``role`` (omitted when unknown), ``timestamp`` (ISO 8601, omitted when
    unknown) and ``metadata`` (omitted when empty). Only what the format carries survives:
    titles, record/session metadata, empty sessions and a ``started_at`` other than the
    first message's time are dropped. The file is replaced.

    Returns:
        The path written.

    Raises:
        TypeError: some metadata is not JSON-serialisable (nothing is written then).
        ValueError: ``path`` is a SQLite database (nothing is written).
    """
    refuse_database(path)
    lines = []
    for conversation in records:
        for session in conversation.sessions:
            for message in session.messages:
                row: dict[str, Any] = {"conversation_id": conversation.id,
                                       "session_id": session.id,
                                       "speaker": message.speaker, "content": message.content}
                if message.role is not None:
                    row["role"] = message.role
                if message.timestamp is not None:
                    row["timestamp"] = message.timestamp.isoformat()
                if message.metadata:
                    row["metadata"] = message.metadata
                lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    out = Path(path)
    out.write_text("".join(lines), encoding="utf-8")
    return out
