"""A tenant's memory as JSONL, and back: what ``Memory.export`` / ``Memory.import_`` do.

One JSON object a line, each with a ``type``: ``conversation``, ``session``, ``turn``,
``item``, ``edge``, ``blob`` and ``version`` (earlier versions of turns and items), in
that order, each carrying its ids and both times (event and record). Importing writes
the same rows with the same ids (the store re-indexes and re-embeds them as it writes),
so the same queries find the same memories; it validates the whole file first and writes
in one transaction, so a bad file changes nothing. Every read and write goes through store
methods (``conversation_rows``, ``session_rows``, ``item_ids``, ``blobs.export``,
``version_rows``, ``restore_versions`` and the ordinary API): no SQL here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memstrata.memory import MemoryStore
from memstrata.memory.models import ITEM_ADAPTER, Conversation, Edge, Session, Turn

from .records import ImportFormatError

FORMAT = "memstrata-export"
VERSION = 1
_ORDER = ("conversation", "session", "turn", "item", "edge", "blob", "version")


def export_tenant(store: MemoryStore, user_id: str, path: Path) -> int:
    """Write everything of ``user_id`` to ``path`` as JSONL; returns the lines written.

    The file is written beside ``path`` (``NAME.partial``) and renamed when whole; on any
    failure the partial file is removed. Raises ``IsADirectoryError`` when ``path`` is a
    folder, ``OSError`` when it cannot be written."""
    lines: list[dict[str, Any]] = [{"type": "header", "format": FORMAT, "version": VERSION,
                                    "user_id": user_id}]
    lines += [{"type": "conversation", **c} for c in store.conversation_rows(user_id)]
    lines += [{"type": "session", **s} for s in store.session_rows(user_id)]
    lines += [{"type": "turn", **t.model_dump(mode="json", exclude={"user_id"})}
              for t in store.turns(user_id)]
    item_ids = store.item_ids(user_id)
    for start in range(0, len(item_ids), 500):
        lines += [{"type": "item", **i.model_dump(mode="json", exclude={"user_id"})}
                  for i in store.get_many(user_id, item_ids[start:start + 500])]
    lines += [{"type": "edge", **e.model_dump(mode="json", exclude={"user_id", "id"})}
              for e in store.edges(user_id, limit=10**9)]
    lines += [{"type": "blob", **b} for b in store.blobs.export(user_id)]
    lines += [{"type": "version", **v} for v in store.version_rows(user_id)]
    if path.is_dir():
        raise IsADirectoryError(f"cannot export to {path}: it is a folder (name a file)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    try:
        with tmp.open("w", encoding="utf-8") as out:
            for line in lines:
                out.write(_line(line) + "\n")
        tmp.replace(path)  # a crash mid-write leaves no truncated export under the name
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(lines)


def _line(row: dict[str, Any]) -> str:
    """One JSONL line: UTF-8 text as it is, or, for a row stored before text was checked at
    the door (a lone surrogate in it), JSON escapes, so the export still holds every row
    (importing that line then names it as not valid Unicode)."""
    text = json.dumps(row, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(row)
    return text


def _read(path: Path) -> tuple[str, dict[str, list[tuple[int, dict[str, Any]]]]]:
    try:
        raw = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFormatError(str(path), "file", str(exc)) from None
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = {t: [] for t in _ORDER}
    source = None
    for n, text in enumerate(raw.split("\n"), 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ImportFormatError(str(path), f"line {n}", f"invalid JSON: {exc.msg}") from None
        except RecursionError:  # json's parser recurses once per level of nesting
            raise ImportFormatError(str(path), f"line {n}", "JSON nested too deeply") from None
        try:  # "\ud800" is valid JSON but no text: SQLite and the embedder refuse it
            json.dumps(row, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ImportFormatError(str(path), f"line {n}", "text is not valid Unicode "
                                    "(a lone surrogate)") from None
        if "\\u0000" in text and _has_nul(row):  # PostgreSQL stores no NUL: neither does SQLite
            raise ImportFormatError(str(path), f"line {n}", "text holds a NUL character")
        kind = row.get("type") if isinstance(row, dict) else None
        if kind == "header":
            if row.get("format") != FORMAT or row.get("version") != VERSION:
                raise ImportFormatError(str(path), f"line {n}",
                                        f"not a {FORMAT} v{VERSION} file")
            source = row.get("user_id")
        elif kind in groups:
            groups[kind].append((n, row))
        else:
            raise ImportFormatError(str(path), f"line {n}", f"unknown line type {kind!r}")
    if source is None:
        raise ImportFormatError(str(path), "line 1", f"no {FORMAT} header line")
    return source, groups


def _has_nul(value: Any) -> bool:
    """Whether a NUL character is in any key or string of JSON data (no recursion)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def import_tenant(store: MemoryStore, path: Path, user_id: str | None = None) -> dict[str, int]:
    """Write an export back (into ``user_id``, default the exported tenant).

    Raises:
        ImportFormatError: a line is not valid, or an id already exists in the store;
            nothing is written.
    """
    source, groups = _read(path)
    user = user_id or source
    where = str(path)
    def build(kind: str, make: Any) -> list[tuple[int, Any]]:
        out = []
        for n, r in groups[kind]:
            try:
                out.append((n, make({k: v for k, v in r.items() if k != "type"})))
            except ValidationError as exc:
                first = exc.errors()[0]
                field = ".".join(map(str, first["loc"]))
                raise ImportFormatError(where, f"line {n} ({kind})",
                                        f"{field + ': ' if field else ''}{first['msg']}"
                                        ) from None
        return out

    convs = build("conversation", lambda r: Conversation(user_id=user, **r))
    sessions = build("session", lambda r: Session(user_id=user, **r))
    turns = build("turn", lambda r: Turn(user_id=user, **r))
    items = build("item", lambda r: ITEM_ADAPTER.validate_python({"user_id": user, **r}))
    edges = build("edge", lambda r: Edge(user_id=user, **r))
    for n, blob in groups["blob"]:
        if not (isinstance(blob.get("key"), str) and isinstance(blob.get("text"), str)
                and isinstance(blob.get("metadata") or {}, dict)):
            raise ImportFormatError(where, f"line {n}", "a blob needs a string key and text "
                                    "(and an object as metadata)")
    for n, v in groups["version"]:
        if not (isinstance(v.get("node_id"), str) and isinstance(v.get("version"), int)
                and isinstance(v.get("event"), str) and "snapshot" in v
                and all(isinstance(v.get(k), str | None) for k in ("recorded_at", "valid_to"))):
            raise ImportFormatError(where, f"line {n}", "a version needs node_id, version, "
                                    "event, snapshot, recorded_at and valid_to")
    for n, node in [*turns, *items]:
        if store.owner(node.id) is not None:
            raise ImportFormatError(where, f"line {n}", f"id {node.id!r} already exists in "
                                    "this store (forget it first, or import into a new file)")
    with store.transaction():
        for _, conv in convs:
            store.add_conversation(conv)
        for _, session in sessions:
            store.add_session(session)
        # In the order they were first recorded (the file lists them by conversation): a
        # ranking breaks ties by insertion order, so this restores the same search results.
        ordered = sorted((t for _, t in turns), key=lambda t: (
            t.recorded_at is None, t.recorded_at or datetime.min.replace(tzinfo=UTC)))
        for start in range(0, len(ordered), 1000):
            store.add_turns(ordered[start:start + 1000])
        store.add_many(i for _, i in items)
        store.add_edges(e for _, e in edges)
        for _, blob in groups["blob"]:
            store.blobs.put(user, blob["key"], blob["text"], blob.get("metadata") or {})
        store.restore_versions(user, (v for _, v in groups["version"]))
    return {"conversations": len(convs), "sessions": len(sessions), "turns": len(turns),
            "items": len(items), "edges": len(edges), "blobs": len(groups["blob"]),
            "versions": len(groups["version"])}
