"""Which import format a file is in, told apart by its content (``memstrata import``
without ``--format``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from .chat_exports import export_shape
from .dump import FORMAT as EXPORT_FORMAT
from .messages import load_json, read_text

FileFormat = Literal["messages", "locomo", "longmemeval", "chatgpt", "claude", "export"]


def json_shape(doc: Any) -> Literal["locomo", "longmemeval"] | None:
    """``locomo`` for an array of ``{"conversation": {...}}`` objects, ``longmemeval`` for an
    array of instances with ``haystack_sessions``, else None (judged by the first element)."""
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        if "haystack_sessions" in doc[0]:
            return "longmemeval"
        if isinstance(doc[0].get("conversation"), dict):
            return "locomo"
    return None


def sniff_format(path: str | Path) -> FileFormat:
    """The format of the file at ``path``: ``export`` when its first line is a memstrata
    export's header, ``locomo`` or ``longmemeval`` for a JSON array of that shape
    (:func:`json_shape`), ``chatgpt`` or ``claude`` for an app's data export
    (:func:`~memstrata.formats.chat_exports.export_shape`), else ``messages`` (whose
    reader names what is wrong, if anything).

    Raises:
        ImportFormatError: the file cannot be read, is not UTF-8, or starts as a JSON array
            and is not valid JSON.
    """
    text = read_text(path)
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        head = json.loads(first)
    except (json.JSONDecodeError, RecursionError):
        head = None
    if isinstance(head, dict) and head.get("type") == "header" and (
            head.get("format") == EXPORT_FORMAT):
        return "export"
    if text.lstrip().startswith("["):
        doc = load_json(path, text)
        shape = json_shape(doc) or export_shape(doc)
        if shape is not None:
            return shape
    return "messages"
