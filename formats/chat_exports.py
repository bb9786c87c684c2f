"""The data exports of chat apps: ChatGPT's and Claude's ``conversations.json``.

What a user downloads from the app ("Export data") is a zip holding
``conversations.json`` (either is read: :func:`~memstrata.formats.messages.read_text`), a
JSON array of conversations;
each becomes one :class:`ConversationRecord` (its id the app's, its title kept) with one
session that starts at the conversation's creation time. Messages go through
:func:`~memstrata.formats.records.to_message`, so the store's rules apply as for
``Memory.add``: system prompts (ChatGPT's custom instructions and hidden context among
them) and tool plumbing are kept out of search by default, and what is not text (images,
files, a model's reasoning) is named in ``metadata["parts_skipped"]``.

ChatGPT (``"mapping"``: a tree of message nodes): the conversation as the app shows it,
the branch from the root to ``current_node``; branches left by editing a message or
regenerating an answer are not read. Content types: ``text`` and ``multimodal_text``
(text parts and audio transcriptions read; images and other assets named), ``code``,
``execution_output`` and browsing results (tool plumbing: ``role`` ``tool``), a model's
reasoning (``thoughts``, ``reasoning_recap``: named, no text), ``user_editable_context``
(custom instructions: a system message). A message addressed to a tool (``recipient``
other than ``all``) is tool plumbing. Another content type's ``text`` or string ``parts``
are read; without either it is named in ``parts_skipped``.

Claude (``"chat_messages"``): ``sender`` ``human`` is the user; ``content`` parts as
Anthropic's Messages API has them (``text``, ``thinking``, ``tool_use``,
``tool_result``), else ``text``; attachments and files are named in ``parts_skipped``.

Each message keeps the app's id as ``metadata["source_id"]`` (ChatGPT's node id, Claude's
message uuid): the turn's id in its conversation, and what a later import of a newer
export matches it by. Records in errors: ``conversation N`` (1-based), and
``conversation N message M``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from .messages import json_kind, load_json, read_text
from .records import (
    ConversationRecord,
    ImportFormatError,
    Message,
    SessionRecord,
    parse_time,
    to_message,
)

ChatExport = Literal["chatgpt", "claude"]
TOOL_CONTENT = {"code", "execution_output", "tether_browsing_display", "tether_quote",
                "system_error", "computer_output"}
"""ChatGPT content types that are a tool's input or output, not what a person said."""
REASONING_CONTENT = {"thoughts", "reasoning_recap"}


def export_shape(doc: Any) -> ChatExport | None:
    """``chatgpt`` for an array of conversations with a ``mapping``, ``claude`` for one
    with ``chat_messages``, else None (judged by the first element)."""
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        if isinstance(doc[0].get("mapping"), dict):
            return "chatgpt"
        if isinstance(doc[0].get("chat_messages"), list):
            return "claude"
    return None


def read_chat_export(path: str | Path, app: ChatExport | None = None
                     ) -> list[ConversationRecord]:
    """The conversations of a ChatGPT or Claude export (``app``; by default told apart
    by its content), validated whole before returning.

    Raises:
        ImportFormatError: the file cannot be read, is not JSON, is not such an export,
            or a conversation or message in it is malformed (names which).
    """
    doc = load_json(path, read_text(path))
    shape = export_shape(doc)
    if shape is None or (app is not None and shape != app):
        wanted = {"chatgpt": 'conversations with "mapping" (ChatGPT)',
                  "claude": 'conversations with "chat_messages" (Claude)'}
        expected = wanted[app] if app else " or ".join(wanted.values())
        found = json_kind(doc) if not isinstance(doc, list) or not doc else (
            f"an array of {json_kind(doc[0])}" if not isinstance(doc[0], dict)
            else "an array of objects with keys " + ", ".join(list(doc[0])[:6]))
        raise ImportFormatError(str(path), "top level",
                                f"expected a JSON array of {expected}; found {found}")
    read = _chatgpt if shape == "chatgpt" else _claude
    records = []
    for n, raw in enumerate(doc, 1):
        where = f"conversation {n}"
        if not isinstance(raw, dict):
            raise ImportFormatError(str(path), where,
                                    f"a conversation is an object, not {json_kind(raw)}")
        try:
            records.append(read(raw, where))
        except _Bad as exc:
            raise ImportFormatError(str(path), exc.where, exc.why) from None
        except ValueError as exc:
            raise ImportFormatError(str(path), where, str(exc)) from None
    return records


class _Bad(Exception):
    def __init__(self, where: str, why: str) -> None:
        super().__init__(why)
        self.where, self.why = where, why


def _record(where: str, conv_id: Any, title: Any, created: Any, messages: list[Message]
            ) -> ConversationRecord:
    if not isinstance(conv_id, str) or not conv_id.strip():
        raise _Bad(where, "has no id (\"id\", \"conversation_id\" or \"uuid\")")
    speakers = list(dict.fromkeys(m.speaker for m in messages))
    started = parse_time(created)
    return ConversationRecord(
        id=conv_id, title=title if isinstance(title, str) else "", speakers=speakers,
        sessions=[SessionRecord(id="session_1", started_at=started or (
            messages[0].timestamp if messages else None), messages=messages)])


# -- ChatGPT ---------------------------------------------------------------------------------


def _chatgpt(raw: dict[str, Any], where: str) -> ConversationRecord:
    mapping = raw["mapping"]
    nodes = [node for node in _branch(mapping, raw.get("current_node"), where)
             if isinstance(node.get("message"), dict)]
    messages = []
    for m, node in enumerate(nodes, 1):
        try:
            messages.append(_chatgpt_message(node["message"], node.get("id")))
        except ValueError as exc:
            raise _Bad(f"{where} message {m}", str(exc)) from None
    return _record(where, raw.get("conversation_id") or raw.get("id"),
                   raw.get("title"), raw.get("create_time"), messages)


def _branch(mapping: dict[str, Any], current: Any, where: str) -> list[dict[str, Any]]:
    """The nodes from the root to ``current`` (or to the newest leaf), in order."""
    if not isinstance(current, str) or current not in mapping:
        leaves = [node for node in mapping.values()
                  if isinstance(node, dict) and not node.get("children")]
        if not leaves:
            return []
        current = max(leaves, key=lambda n: _time(n.get("message")))["id"] \
            if all(isinstance(n.get("id"), str) for n in leaves) else None
        if current not in mapping:
            raise _Bad(where, '"mapping" nodes have no "id"')
    path, seen = [], set()
    node_id: Any = current
    while isinstance(node_id, str) and node_id in mapping:
        if node_id in seen:
            raise _Bad(where, f'"mapping" has a cycle at node {node_id!r}')
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, dict):
            raise _Bad(where, f"mapping node {node_id!r} is {json_kind(node)}, not an object")
        path.append(node)
        node_id = node.get("parent")
    return path[::-1]


def _time(message: Any) -> float:
    value = message.get("create_time") if isinstance(message, dict) else None
    return float(value) if isinstance(value, int | float) else 0.0


def _chatgpt_message(msg: dict[str, Any], node_id: Any) -> Message:
    author, content, metadata = (_object(msg.get(key))
                                 for key in ("author", "content", "metadata"))
    role = author.get("role") if isinstance(author.get("role"), str) else None
    kind = content.get("content_type")
    text, skipped = _chatgpt_text(kind, content)
    recipient = msg.get("recipient")
    if kind == "user_editable_context" or metadata.get("is_visually_hidden_from_conversation"):
        role = "system"  # custom instructions, context the app adds: not said in the chat
    elif kind in TOOL_CONTENT or role == "tool" or (
            isinstance(recipient, str) and recipient != "all"):
        role = "tool"
    out: dict[str, Any] = {"role": role, "content": text, "timestamp": msg.get("create_time"),
                           **_source(msg.get("id") or node_id)}
    if role == "tool" and isinstance(author.get("name"), str) and author["name"]:
        out["speaker"] = author["name"]
    if role is None:
        raise ValueError('has no "author.role"')
    message = to_message(out)
    if skipped:
        message.metadata["parts_skipped"] = skipped
    return message


def _source(message_id: Any) -> dict[str, Any]:
    """The app's id of a message as its ``source_id`` (the turn's id in its conversation,
    as LoCoMo's ``dia_id`` is), where it has one."""
    if isinstance(message_id, str) and message_id.strip():
        return {"metadata": {"source_id": message_id}}
    return {}


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _chatgpt_text(kind: Any, content: dict[str, Any]) -> tuple[str, list[str]]:
    """The text of a ChatGPT ``content`` and what was not read in it."""
    if kind in REASONING_CONTENT:
        return "", [str(kind)]
    if kind == "user_editable_context":
        said = [content.get(key) for key in ("user_profile", "user_instructions")]
        return "\n".join(p for p in said if isinstance(p, str) and p.strip()), []
    texts: list[str] = []
    skipped: list[str] = []
    parts = content.get("parts")
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str) and (
                part.get("content_type") in ("audio_transcription", "text", None)):
            texts.append(part["text"])
        elif part is not None:
            skipped.append(str(part.get("content_type") or "part")
                           if isinstance(part, dict) else json_kind(part))
    if isinstance(content.get("text"), str):
        texts.append(content["text"])
    if not texts and not skipped and kind not in ("text", "multimodal_text"):
        skipped.append(str(kind or "content"))
    return "\n".join(t for t in texts if t.strip()), skipped


# -- Claude ----------------------------------------------------------------------------------


def _claude(raw: dict[str, Any], where: str) -> ConversationRecord:
    messages = []
    for m, msg in enumerate(raw["chat_messages"], 1):
        try:
            messages.append(_claude_message(msg))
        except ValueError as exc:
            raise _Bad(f"{where} message {m}", str(exc)) from None
    return _record(where, raw.get("uuid") or raw.get("id"), raw.get("name"),
                   raw.get("created_at"), messages)


def _claude_message(msg: Any) -> Message:
    if not isinstance(msg, dict):
        raise ValueError(f"a message is an object, not {json_kind(msg)}")
    sender = msg.get("sender")
    if not isinstance(sender, str) or not sender.strip():
        raise ValueError('has no "sender"')
    role = "user" if sender == "human" else sender
    content = msg.get("content")
    if not isinstance(content, list) or not content:
        content = msg.get("text") if isinstance(msg.get("text"), str) else ""
    message = to_message({"role": role, "content": content, "timestamp": msg.get("created_at"),
                          **_source(msg.get("uuid"))})
    files = [f for key in ("attachments", "files") for f in msg.get(key) or []
             if isinstance(f, dict)]
    if files:
        message.metadata["parts_skipped"] = [*message.metadata.get("parts_skipped", []),
                                             *(["file"] * len(files))]
    return message
