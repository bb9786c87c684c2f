"""The verbs over every layer of a tenant's memory on the command line: ``answer``,
``context`` and ``read`` (``Memory``'s methods of the same names, as ``POST /v1/answer``,
``/v1/context`` and ``/v1/read`` serve them). Bad input is a one-line error and exit code
2 with nothing written; a store that is not there, or a tenant with nothing to answer
from, exit code 1 (``cli.main`` holds the convention)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from memstrata.cli_support import NotFound, at_least, query_arg, stdin_as_file, when_arg
from memstrata.memory.store.opener import describe

from .agent_commands import add_model_args, model_from_args
from .memory_commands import add_durability_arg, open_memory

ROUTES = ("auto", "rules", "answerer", "reasoner")
LAYERS = ("conversation", "semantic", "procedures", "strategies", "voe", "intentions")


def _nothing_stored(memory: Any, user: str, db: str) -> str | None:
    """What to say when ``user`` has no turn or item in the store, else None."""
    counts = memory.store.counts(user)
    if counts["turns"] or counts["items"]:
        return None
    return f"memstrata: nothing is stored for user {user!r} in {describe(db)}"


def cmd_answer(args: argparse.Namespace) -> int:
    """Answer a question from one user's whole memory, on the path the question calls for:
    a simple recall by the answerer over the packed memories, a computation, a date
    comparison, a contradiction or a synthesis by the adaptive reasoner (its calculator,
    its date order). Prints one JSON object: the answer, its evidence (store ids, which
    'memstrata get' reads), the path and why, and the LLM calls it took (one to classify
    and one to answer on a recall; two to about ten on the reasoner's path; none to
    classify with --route rules). A user with nothing stored exits 1 before the model
    loads. The run is recorded ('memstrata runs list')."""
    from memstrata.api import MAX_QUERY_BYTES, _check_id, _check_text
    from memstrata.mcp_server import _ANSWER_FIELDS

    # Memory.answer's own checks, before the model loads (seconds, for a local one).
    _check_text("question", args.question, limit=MAX_QUERY_BYTES)
    if args.conversation is not None:
        _check_id("--conversation", args.conversation)
    with open_memory(args) as memory:
        if (said := _nothing_stored(memory, args.user, args.db)) is not None:
            raise NotFound(f"{said}: nothing to answer from")
    handle = model_from_args(args)
    with open_memory(args, lm=handle) as memory:
        result = memory.answer(args.question, user_id=args.user,
                               conversation_id=args.conversation, route=args.route)
    print(json.dumps(result.model_dump(mode="json", include={*_ANSWER_FIELDS, "run_id"}),
                     ensure_ascii=False))
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    """One user's memory for a query as one budgeted block to put in a prompt: the turns
    and facts of their conversations, what was read, procedures, learned strategies, the
    VoE loop's expectation and facts, fired intentions; every line opens with its
    provenance ([id · speaker or source · date]). Prints the block, or with --json the
    whole result (the text, every store id in it, each layer's lines and tokens). No LLM
    call; tokens are counted as about four characters each. An empty block is said on
    stderr."""
    with open_memory(args) as memory:
        result = memory.context(args.query, user_id=args.user, budget=args.budget,
                                layers=args.layer, conversation_id=args.conversation)
        said = _nothing_stored(memory, args.user, args.db) if not result.ids else None
    if args.json:
        print(result.model_dump_json())
    elif result.text:
        print(result.text)
    if not result.ids:
        print(said or f"memstrata: nothing in {args.user!r}'s memory is shown for this query "
              "(the block is empty)", file=sys.stderr)
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    """Read a document (an article, a tutorial, a report: UTF-8 text, FILE '-' for stdin)
    into one user's memory, so 'answer', 'context' and 'search' find it beside what was
    said: an episode ('read TITLE (SOURCE) on WHEN'), a semantic fact a sentence, a
    numbered list of steps as a procedure; intentions whose keywords it holds fire. No LLM
    call. Prints the ids written, as JSON. --title defaults to the file's name. A read
    that takes over two seconds shows a progress bar on stderr (--quiet: none)."""
    from tqdm import tqdm

    from memstrata.api import MAX_MESSAGE_BYTES
    from memstrata.formats import ImportFormatError
    from memstrata.formats.messages import read_text
    from memstrata.memory.cognitive.reading import sentences

    with stdin_as_file(args.file) as path:
        size = os.stat(path).st_size if os.path.isfile(path) else 0
        name = "stdin" if args.file == "-" else args.file
        if size > MAX_MESSAGE_BYTES:
            raise SystemExit(f"memstrata: {name}: {size:,} bytes; a document is read whole, "
                             f"at most {MAX_MESSAGE_BYTES:,} bytes: split it and read each "
                             "part")
        try:
            text = read_text(path, archive=False)
        except ImportFormatError as exc:
            raise SystemExit(f"memstrata: {exc}") from None
    if not text.strip():
        raise SystemExit(f"memstrata: {name}: nothing to read (the file is empty)")
    title = args.title if args.title is not None else (
        None if args.file == "-" else os.path.basename(args.file))
    with open_memory(args, must_exist=False) as memory, tqdm(
            total=len(sentences(text)), unit="fact", desc="read", delay=2.0,
            disable=args.quiet) as bar:
        report = memory.read(text, user_id=args.user, title=title, source=args.source,
                             when=args.when, progress=bar.update)
    print(report.model_dump_json())
    return 0


def add_layer_parsers(sub: argparse._SubParsersAction, default_db: str) -> None:
    """Register ``answer``, ``context`` and ``read``."""

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--db", default=default_db,
                       help=f"store file or postgresql:// URL (default {default_db})")
        p.add_argument("--user", required=True, help="the tenant")

    p = sub.add_parser("answer", help="answer a question from a user's memory, with its "
                       "evidence (the embedded model by default)", description=cmd_answer.__doc__)
    p.add_argument("question", type=query_arg)
    common(p)
    p.add_argument("--conversation", help="answer from this conversation first")
    p.add_argument("--route", choices=ROUTES, default="auto",
                   help="auto: a model call decides the path (default); rules: the question's "
                   "words decide; answerer or reasoner: that path")
    add_model_args(p)
    add_durability_arg(p)
    p.set_defaults(func=cmd_answer)

    p = sub.add_parser("context", help="a user's memory for a query as one budgeted block "
                       "for a prompt (no model)", description=cmd_context.__doc__)
    p.add_argument("query", type=query_arg, help="what the block is for: the user's "
                   "message or question")
    common(p)
    p.add_argument("--budget", type=at_least(1), default=600,
                   help="the most tokens the block takes, headers included (default 600)")
    p.add_argument("--layer", action="append", choices=LAYERS,
                   help="show only this layer (repeat for several; default all)")
    p.add_argument("--conversation", help="route the conversation layer to this conversation")
    p.add_argument("--json", action="store_true",
                   help="print the whole result as JSON, not just the block")
    add_durability_arg(p)
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("read", help="read a document into a user's memory (no model)",
                       description=cmd_read.__doc__)
    p.add_argument("file", help="the text file to read ('-': stdin)")
    common(p)
    p.add_argument("--title", help="the document's title (default: the file's name)")
    p.add_argument("--source", help="who published it")
    p.add_argument("--when", type=when_arg("start"), help="the document's date: an ISO date "
                   "or datetime, or a phrase such as yesterday or 'last week'")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_durability_arg(p)
    p.set_defaults(func=cmd_read)
