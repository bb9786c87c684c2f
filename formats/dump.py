"""A tenant's memory as JSONL, and back: what ``Memory.export`` / ``Memory.import_`` do.

One JSON object a line, each with a ``type``: ``conversation``, ``session``, ``turn``,
``item``, ``edge``, ``blob``, ``version`` (earlier versions of turns and items), ``run``
and ``step`` (recorded runs and their steps: LLM calls, tool calls, retrievals), ``event``
(the event log: the strategy bank's decisions, what agents logged) and ``job`` (extraction
jobs, with the fact events of the finished ones), in that order, each carrying its ids
and its record times. That is everything the verbs write for a tenant: what ``add``
stores and extracts, what ``read`` reads (episodes, semantic facts, procedures,
intentions, sensory and working items), what ``learn`` distils (strategies) and
``expect`` predicts (expectations, VoE facts), all of them items and edges.

Importing writes the same rows with the same ids and times (``updated_at`` included); the
store re-indexes and re-embeds them as it writes (strategies as the bank embeds them), so
the same queries find the same memories. Not in the file, by design: what the store
derives from the rows (full-text and tag indexes, vectors, cached values), the event
log's row numbers (the importing store numbers events anew, in their order), the lease
of a job that was running (it comes back ``pending``, its attempt not counted: the worker
that held it is not the importing store's), and the API keys of ``memstrata serve``
(credentials of a server, not memory). An import validates the whole file first and
writes in one transaction, so a bad file changes nothing. Every read and write goes
through store methods (``conversation_rows``, ``session_rows``, ``item_ids``,
``blobs.export``, ``version_rows``, ``restore_versions``, ``runs``, ``jobs`` and the
ordinary API): no SQL here. Files of version 1 (before runs, events and jobs were
exported) import as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memstrata.memory import MemoryStore
from memstrata.memory.bank import embed_strategies
from memstrata.memory.models import ITEM_ADAPTER, Conversation, Edge, Session, Turn, as_utc
from memstrata.memory.paths import refuse_database
from memstrata.memory.runs import RunRecord, StepRecord
from memstrata.memory.store.jobs import Job

from .records import ImportFormatError

FORMAT = "memstrata-export"
VERSION = 2
READS = (1, 2)
"""The format versions an import reads (1 held no runs, events or jobs)."""
_ORDER = ("conversation", "session", "turn", "item", "edge", "blob", "version", "run", "step",
          "event", "job")
_ALL = 10**9  # "every row" to the store's list methods, which take a limit


def export_tenant(store: MemoryStore, user_id: str, path: Path) -> int:
    """Write everything of ``user_id`` to ``path`` as JSONL; returns the lines written.

    The file is written beside ``path`` (``NAME.partial``) and renamed when whole; on any
    failure the partial file is removed. Raises ``IsADirectoryError`` when ``path`` is a
    folder, ``ValueError`` when it is the store's own file (or one beside it that SQLite
    keeps) or another SQLite database, which the export would replace, ``OSError`` when it
    cannot be written."""
    refuse_database(path, store_path=getattr(store, "path", None))
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
    runs = list(reversed(store.runs.list(user_id, limit=-1)))  # oldest first
    lines += [{"type": "run", **r.model_dump(mode="json", exclude={"user_id"})} for r in runs]
    lines += [{"type": "step", **s.model_dump(mode="json")}
              for r in runs for s in store.runs.steps(user_id, r.id)]
    lines += [{"type": "event", **{k: e[k] for k in ("agent_id", "run_id", "payload",
                                                     "recorded_at")}}
              for e in reversed(store.runs.events(user_id, limit=-1))]
    lines += [{"type": "job", **j.model_dump(mode="json", exclude={"user_id"})}
              for j in store.jobs.list(user_id, limit=_ALL, oldest=True)]
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
            if row.get("format") != FORMAT or row.get("version") not in READS:
                raise ImportFormatError(str(path), f"line {n}",
                                        f"not a {FORMAT} file of version "
                                        f"{' or '.join(map(str, READS))}")
            source = row.get("user_id")
            if not isinstance(source, str) or not source.strip():
                raise ImportFormatError(str(path), f"line {n}", "the header's user_id is "
                                        "not a tenant id (a non-empty string)")
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


@dataclass(frozen=True)
class ExportFile:
    """A memstrata export read and checked line by line (:func:`read_export`), not yet
    written: each row validated and bound to ``user_id``, with its line number."""

    path: str
    user_id: str
    conversations: list[tuple[int, Conversation]]
    sessions: list[tuple[int, Session]]
    turns: list[tuple[int, Turn]]
    items: list[tuple[int, Any]]
    edges: list[tuple[int, Edge]]
    blobs: list[tuple[int, dict[str, Any]]]
    blob_times: dict[int, datetime | None]
    versions: list[tuple[int, dict[str, Any]]]
    runs: list[tuple[int, RunRecord]]
    steps: list[tuple[int, StepRecord]]
    events: list[tuple[int, dict[str, Any]]]
    jobs: list[tuple[int, Job]]


def read_export(path: Path, user_id: str | None = None) -> ExportFile:
    """Read and check every line of an export without a store (into ``user_id``, default
    the exported tenant), so a refused file is refused before any store is opened.

    Raises:
        ImportFormatError: a line is not valid (the file and line named).
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
    runs = build("run", lambda r: RunRecord(user_id=user, **r))
    steps = build("step", lambda r: StepRecord(**r))
    jobs = build("job", lambda r: Job(user_id=user, **r))
    run_ids = {r.id for _, r in runs}
    for n, step in steps:
        if step.run_id not in run_ids:
            raise ImportFormatError(where, f"line {n}", f"a step of run {step.run_id!r}, "
                                    "which the file does not hold")
    for n, e in groups["event"]:
        if not ("payload" in e and isinstance(e.get("recorded_at"), str)
                and all(isinstance(e.get(k), str | None) for k in ("agent_id", "run_id"))):
            raise ImportFormatError(where, f"line {n}", "an event needs a payload and "
                                    "recorded_at (and agent_id, run_id: text or null)")
    blob_times: dict[int, datetime | None] = {}
    for n, blob in groups["blob"]:
        if not (isinstance(blob.get("key"), str) and isinstance(blob.get("text"), str)
                and isinstance(blob.get("metadata") or {}, dict)
                and isinstance(blob.get("recorded_at"), str | None)):
            raise ImportFormatError(where, f"line {n}", "a blob needs a string key and text "
                                    "(and an object as metadata, a time as recorded_at)")
        try:
            blob_times[n] = as_utc(datetime.fromisoformat(blob["recorded_at"])
                                   ) if blob.get("recorded_at") else None
        except ValueError:
            raise ImportFormatError(where, f"line {n}", "a blob's recorded_at is not an "
                                    "ISO-8601 time") from None
    for n, v in groups["version"]:
        if not (isinstance(v.get("node_id"), str) and isinstance(v.get("version"), int)
                and isinstance(v.get("event"), str) and "snapshot" in v
                and all(isinstance(v.get(k), str | None) for k in ("recorded_at", "valid_to"))):
            raise ImportFormatError(where, f"line {n}", "a version needs node_id, version, "
                                    "event, snapshot, recorded_at and valid_to")
    return ExportFile(where, user, convs, sessions, turns, items, edges, groups["blob"],
                      blob_times, groups["version"], runs, steps, groups["event"], jobs)


def write_export(store: MemoryStore, export: ExportFile) -> dict[str, int]:
    """Write a read export into ``store`` in one transaction; returns counts per line type.

    Raises:
        ImportFormatError: a turn, item, run or job id of the file already exists in the
            store; nothing is written.
    """
    where, user = export.path, export.user_id
    convs, sessions, turns, items = export.conversations, export.sessions, export.turns, \
        export.items
    edges, runs, steps, jobs = export.edges, export.runs, export.steps, export.jobs
    for n, node in [*turns, *items]:
        if store.owner(node.id) is not None:
            raise ImportFormatError(where, f"line {n}", f"id {node.id!r} already exists in "
                                    "this store (forget it first, or import into a new file)")
    for n, record in runs:
        if store.runs.get(user, record.id) is not None:
            raise ImportFormatError(where, f"line {n}", f"run {record.id!r} already exists "
                                    "in this store (forget it first, or import into a new file)")
    for n, job in jobs:
        if store.jobs.owner(job.id) is not None:
            raise ImportFormatError(where, f"line {n}", f"job {job.id!r} already exists "
                                    "in this store (forget it first, or import into a new file)")
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
        strategies = [i.id for _, i in items if i.kind == "strategy" and i.id]
        if strategies and store.embedder is not None:  # as the bank embeds them
            embed_strategies(store, user, store.embedder, strategies)
        store.add_edges(e for _, e in edges)
        for n, blob in export.blobs:
            store.blobs.put(user, blob["key"], blob["text"], blob.get("metadata") or {},
                            recorded_at=export.blob_times[n])
        store.restore_versions(user, (v for _, v in export.versions))
        for _, record in runs:
            store.runs.start(record)
        by_run: dict[str, list[StepRecord]] = {}
        for _, step in steps:
            by_run.setdefault(step.run_id, []).append(step)
        for run_id, its_steps in by_run.items():
            store.runs.add_steps(run_id, its_steps)
        store.runs.restore_events(user, [e for _, e in export.events])
        store.jobs.restore(user, [j for _, j in jobs])
    return {"conversations": len(convs), "sessions": len(sessions), "turns": len(turns),
            "items": len(items), "edges": len(edges), "blobs": len(export.blobs),
            "versions": len(export.versions), "runs": len(runs), "steps": len(steps),
            "events": len(export.events), "jobs": len(jobs)}
