"""The ``Memory`` verbs on the command line: ``add``, ``get``, ``history``, ``delete``,
``forget``, ``import`` and ``export``. Each prints JSON; bad input is a one-line error
and exit code 2, with nothing written; a store or memory that is not there, exit code 1
(:class:`NotFound`; ``cli.main`` holds the convention)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memstrata.cli_support import (
    NotFound,
    add_embedder_arg,
    no_store,
    stdin_as_file,
    stdout_as_file,
)
from memstrata.memory.paths import SQLITE_SIDE_FILES
from memstrata.memory.store.opener import describe, sqlite_path, store_missing

FORMATS = ("messages", "locomo", "longmemeval", "chatgpt", "claude")


@contextmanager
def open_memory(args: argparse.Namespace, *, must_exist: bool = True, lm: Any = None
                ) -> Iterator[Any]:
    """The command's ``Memory``, closed at the end. A store this command created is
    removed again when the command fails with nothing stored in it (a refused ``add`` or
    ``import`` into a new ``--db`` left an empty store behind)."""
    from memstrata import Memory
    from memstrata.cli_support import opener_embedder

    new = store_missing(args.db)
    if must_exist and new:
        raise no_store(args.db)
    # A command with --embedder writes (or re-embeds) with the model it names; without,
    # with the model that embedded the store.
    embedder = opener_embedder(True, getattr(args, "embedder", None))
    # One command, one process: extraction runs in it (a background job would be left
    # for a worker when the command exits).
    memory = Memory.open(args.db, lm=lm, durability=getattr(args, "durability", "normal"),
                         extraction="sync", embedder=embedder)
    try:
        yield memory
    except BaseException:
        empty = new and _holds_nothing(memory)
        memory.close()
        if empty:
            path = Path(sqlite_path(args.db))
            for name in (path.name, *(path.name + side for side in SQLITE_SIDE_FILES)):
                path.with_name(name).unlink(missing_ok=True)
        raise
    memory.close()


def _holds_nothing(memory: Any) -> bool:
    """Whether no row of any tenant is in the store (so removing its file loses nothing,
    whoever else may have opened it since); False when that cannot be read."""
    try:
        return not any(memory.store.counts().values())
    except Exception:  # a store that cannot be read is kept for the user to look at
        return False


def cmd_add(args: argparse.Namespace) -> int:
    """Add messages for a user: the text argument (said by --speaker), or, with no text
    (or '-'), JSONL messages on stdin ({"role"|"speaker", "content", "timestamp"?} a line,
    or a list of them). Prints one JSON event per line, one per message (NONE with its
    reason for one not stored: a repeat, a system prompt, tool plumbing, no text; a
    message without text is also counted on stderr), then the facts, extracted only with
    --lm."""
    if args.text is not None and args.text != "-":
        messages: Any = [{"speaker": args.speaker, "content": args.text}]
    else:  # no text, or '-': stdin, as other Unix tools read it
        messages = []
        for n, line in enumerate(sys.stdin, 1):
            if line.strip():
                try:
                    message = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SystemExit(f"memstrata: stdin line {n}: invalid JSON: {exc.msg}"
                                     ) from None
                # A line may hold a list of messages, as Memory.add takes one.
                messages.extend(message if isinstance(message, list) else [message])
        if not messages:
            raise SystemExit("memstrata: nothing to add (give TEXT or JSONL on stdin)")
    with open_memory(args, must_exist=False, lm=args.lm) as memory:
        try:
            events = memory.add(messages, user_id=args.user, conversation_id=args.conversation,
                                session_id=args.session, timestamp=args.timestamp,
                                infer=args.lm is not None)
            if args.lm is not None and args.flush:
                events += memory.flush(args.user, args.conversation)
        except ValueError as exc:
            raise SystemExit(f"memstrata: {exc}") from None
    for event in events:
        print(json.dumps(event, ensure_ascii=False))
    skipped = sum(e.get("reason") in ("blank", "no_text") for e in events)
    if skipped:  # Memory.add skips a message without text (a tool call alone)
        print(f"memstrata: {skipped} message{'s' * (skipped > 1)} without text skipped",
              file=sys.stderr)
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    """One turn or item by id, as JSON."""
    with open_memory(args) as memory:
        found = memory.get(args.id, user_id=args.user)
    if found is None:
        raise NotFound(f"memstrata: no memory {args.id!r}")
    print(json.dumps(found, ensure_ascii=False))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """Every version of a turn or item, oldest first, one JSON object a line."""
    with open_memory(args) as memory:
        versions = memory.history(args.id, user_id=args.user)
    if not versions:
        raise NotFound(f"memstrata: no memory {args.id!r}")
    for version in versions:
        print(version.model_dump_json(exclude={"node"} if not args.full else None))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    """Delete one turn or item (its versions, vectors, index rows and edges too)."""
    with open_memory(args) as memory:
        if not memory.delete(args.id, user_id=args.user):
            raise NotFound(f"memstrata: no memory {args.id!r}")
    print(json.dumps({"id": args.id, "event": "DELETE"}))
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    """Forget a user completely: every row of theirs in every table, their index entries,
    vectors, blobs, runs and versions. Asks first unless --yes."""
    if not args.yes:
        if not sys.stdin.isatty():
            raise SystemExit("memstrata: forget deletes everything of the user: pass --yes")
        reply = input(f"Forget everything of {args.user!r} in {describe(args.db)}? [y/N] ")
        if reply.strip().lower() not in {"y", "yes"}:
            print("nothing deleted")
            return 1
    with open_memory(args) as memory:
        try:
            deleted = memory.delete_all(args.user)
        except ValueError as exc:
            raise SystemExit(f"memstrata: {exc}") from None
    if not deleted:
        print(f"memstrata: nothing was stored for user {args.user!r} in {describe(args.db)}",
              file=sys.stderr)
    print(json.dumps({"user_id": args.user, "deleted": deleted}))
    return 0


def read_records(path: str, fmt: str) -> list[Any]:
    """The conversations of a file in one of :data:`FORMATS` (validated whole)."""
    from memstrata import formats

    if fmt == "messages":
        return formats.read_messages(path)
    if fmt == "locomo":
        return formats.read_locomo(path)
    if fmt in ("chatgpt", "claude"):
        return formats.read_chat_export(path, "chatgpt" if fmt == "chatgpt" else "claude")
    from memstrata.formats.longmemeval import read_longmemeval

    return read_longmemeval(path)[0]


def cmd_import(args: argparse.Namespace) -> int:
    """Import conversations from a file into one user, all or nothing: a documented messages
    JSON/JSONL file, LoCoMo JSON, LongMemEval JSON (each haystack its own conversation),
    ChatGPT's or Claude's conversations.json (the app's data export, or its zip as
    downloaded: each conversation as the app shows it), or a memstrata export; --format
    names it, or it is told apart by the file's content. A conversation the user already has
    (the same id: 'default' when the file names none, as for 'add') keeps its turns and gets
    the file's appended, less the messages it already holds (add's rule: importing a file
    again, or a newer export, adds only what is new); --replace deletes its turns first. No
    facts are extracted unless --lm is given. FILE '-' reads stdin. Said once the import is
    done (a refused file's stderr is its one error line): a file without messages, the
    messages not stored, those already stored and those a second import could not
    recognise."""
    with stdin_as_file(args.file) as path:
        counts = _import(args, path)
    if args.format != "export" and not any(counts.get(k) for k in ("turns", "skipped",
                                                                   "duplicates")):
        name = "stdin" if args.file == "-" else args.file
        print(f"memstrata: {name}: no messages in the file", file=sys.stderr)
    if counts.get("skipped"):
        n = counts["skipped"]
        print(f"memstrata: {n} message{'s' if n != 1 else ''} not stored (system prompts, tool "
              "plumbing and messages without text are skipped)", file=sys.stderr)
    if counts.get("duplicates"):
        n = counts["duplicates"]
        print(f"memstrata: {n} message{'s' if n != 1 else ''} already stored (not stored "
              "again)", file=sys.stderr)
    if counts.get("unrecognisable"):
        n = counts["unrecognisable"]
        print(f"memstrata: {n} message{'s' if n != 1 else ''} without a timestamp or id went "
              "after turns the conversation already had: importing this file again would "
              "store them again (give the messages timestamps or ids, or a conversation of "
              "their own)", file=sys.stderr)
    print(json.dumps({"db": describe(args.db), "user_id": args.user, "format": args.format,
                      **counts}))
    return 0


def _import(args: argparse.Namespace, path: str) -> dict[str, int]:
    """:func:`cmd_import`'s work on a file: the counts written."""
    from tqdm import tqdm

    from memstrata.formats import ImportFormatError
    from memstrata.formats.dump import read_export
    from memstrata.formats.sniff import sniff_format

    try:
        if args.format is None:
            args.format = sniff_format(path)
        # Read (and validated) before the store is opened: a refused file creates none.
        export = read_export(Path(path), args.user) if args.format == "export" else None
        records = read_records(path, args.format) if export is None else []
        with open_memory(args, must_exist=False, lm=args.lm) as memory:
            if export is not None:
                counts = memory.import_(export)
            else:
                total = sum(len(s.messages) for r in records for s in r.sessions)
                with tqdm(total=total, unit="turn", desc="import",
                          disable=args.quiet or not total) as bar:
                    counts = memory.import_conversations(records, user_id=args.user,
                                                         progress=bar.update,
                                                         replace=args.replace)
                if args.lm is not None:
                    counts["facts"] = sum(e["event"] != "NONE"
                                          for e in memory.flush(args.user))
    except ImportFormatError as exc:  # names the file and the line or record
        raise SystemExit(f"memstrata: {exc}") from None
    except ValueError as exc:
        raise SystemExit(f"memstrata: {path}: {exc}") from None
    return counts


def cmd_export(args: argparse.Namespace) -> int:
    """Write everything of a user (conversations, turns, items, edges, blobs, versions)
    as JSONL; `memstrata import FILE` reads it back. The file is replaced whole if it
    exists, unless it is a SQLite database (the store itself, say): that is refused.
    FILE '-' writes the JSONL to stdout (and no summary). A user with nothing stored is
    said on stderr (a misspelt --user exports an empty tenant)."""
    with open_memory(args) as memory, stdout_as_file(args.file) as path:
        lines = memory.export(args.user, path)
    if lines <= 1:  # the header alone
        print(f"memstrata: nothing is stored for user {args.user!r} in {describe(args.db)}",
              file=sys.stderr)
    if args.file != "-":
        print(json.dumps({"file": args.file, "user_id": args.user, "lines": lines}))
    return 0


def cmd_reembed(args: argparse.Namespace) -> int:
    """Give every turn and item of a user a vector of --embedder's model, for a store
    written with another embedder (its search warns that its dense channel sees only the
    rows that model embedded). Rows that have one are skipped, so a run that stopped is
    finished by the next; other models' vectors stay. Prints what was embedded as JSON."""
    from tqdm import tqdm

    with open_memory(args) as memory:
        total = sum(memory.store.counts(args.user)[t] for t in ("turns", "items"))
        with tqdm(total=total, unit="row", desc="reembed", disable=args.quiet) as bar:
            report = memory.reembed(user_id=args.user, progress=bar.update)
    print(json.dumps({"db": describe(args.db), **report.model_dump()}))
    return 0


def add_memory_parsers(sub: argparse._SubParsersAction, default_db: str) -> None:
    """Register the ``Memory`` verbs."""

    def common(p: argparse.ArgumentParser, user_required: bool = True) -> None:
        p.add_argument("--db", default=default_db,
                       help=f"store file or postgresql:// URL (default {default_db})")
        p.add_argument("--user", required=user_required, help="the tenant")
        add_durability_arg(p)

    p = sub.add_parser("add", help="add messages for a user (text, or JSONL on stdin)",
                       description=cmd_add.__doc__)
    p.add_argument("text", nargs="?", help="the message (omit it, or give '-', to read JSONL "
                   "from stdin: a line holds a message or a list of them)")
    common(p)
    p.add_argument("--speaker", default="user", help="who said TEXT (default 'user')")
    p.add_argument("--conversation", help="conversation id (default 'default')")
    p.add_argument("--session", help="session id (default: continue, or new after 2 h)")
    p.add_argument("--timestamp", help="event time of messages without one (ISO 8601)")
    p.add_argument("--lm", help="extract facts with this model (e.g. local/qwen2.5-coder-1.5b)")
    p.add_argument("--flush", action="store_true",
                   help="with --lm: extract now even if a chunk is not full")
    add_embedder_arg(p)
    p.set_defaults(func=cmd_add)

    for name, func, what in (("get", cmd_get, "one turn or item by id"),
                             ("history", cmd_history, "every version of a turn or item"),
                             ("delete", cmd_delete, "delete one turn or item")):
        p = sub.add_parser(name, help=what, description=func.__doc__)
        p.add_argument("id")
        common(p, user_required=False)
        if name == "history":
            p.add_argument("--full", action="store_true", help="each version's whole row")
        p.set_defaults(func=func)

    p = sub.add_parser("forget", help="forget a user completely", description=cmd_forget.__doc__)
    common(p)
    p.add_argument("--yes", action="store_true", help="do not ask")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("import", help="import conversations from a file",
                       description=cmd_import.__doc__)
    p.add_argument("file", help="the file to read ('-': stdin)")
    p.add_argument("--format", choices=(*FORMATS, "export"),
                   help="the file's format; by default told apart by its content: a memstrata "
                   "export's header line, a LoCoMo or LongMemEval JSON array, ChatGPT's or "
                   "Claude's conversations.json (the app's data export), else messages "
                   "(JSON or JSONL)")
    common(p)
    p.add_argument("--lm", help="also extract facts with this model")
    p.add_argument("--replace", action="store_true",
                   help="replace a conversation the user already has under the same id "
                   "(its turns are deleted first); without it, the file's are appended, "
                   "less those it already holds")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_embedder_arg(p)
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export", help="write everything of a user as JSONL",
                       description=cmd_export.__doc__)
    p.add_argument("file", help="the JSONL file to write ('-': stdout)")
    common(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("reembed", help="give a user's rows vectors of another embedder",
                       description=cmd_reembed.__doc__)
    common(p)
    add_embedder_arg(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_reembed)


def add_durability_arg(p: argparse.ArgumentParser) -> None:
    """``--durability normal|full`` (``Memory.open``'s ``durability``)."""
    p.add_argument("--durability", choices=("normal", "full"), default="normal",
                   help="SQLite: 'full' syncs every commit to the disk (it survives a power "
                   "loss; writes are slower); 'normal' (the default) survives a crash of "
                   "the process")
