"""``memstrata worker``: a process that runs the extraction jobs of a store.

Any number of them may run against one store: on PostgreSQL each takes a different job
(``FOR UPDATE SKIP LOCKED``), on SQLite one claim at a time under the write lock. A worker
killed at any point loses nothing: its job is taken again once its lease expires (see
``memstrata.worker``). Apps that record jobs for these workers open their memory with
``Memory.open(..., extraction="queue")``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from memstrata.cli_support import at_least
from memstrata.memory.store.opener import describe, store_missing


def cmd_worker(args: argparse.Namespace) -> int:
    """Run the extraction jobs recorded in --db with --lm, one at a time, until stopped
    (SIGINT or SIGTERM: the job in flight finishes first), --max-jobs ran, or, with
    --once, none is left. Prints one JSON line per job ended (its id, tenant,
    conversation, status, attempts, facts and error), then a summary line."""
    from memstrata import Memory
    from memstrata.agent_commands import model_from_args
    from memstrata.cli_support import no_store
    from memstrata.worker import ExtractionSettings, Worker, lower_thread_priority

    if store_missing(args.db):
        raise no_store(args.db)
    settings = ExtractionSettings(mode="queue", lease_s=args.lease, retry_s=args.retry,
                                  poll_s=args.poll, nice=args.nice,
                                  keep_done_days=args.keep_done if args.keep_done else None)
    # Before the model loads: its compute threads inherit the priority.
    lower_thread_priority(settings.nice)
    handle = model_from_args(args)
    stop = threading.Event()

    def ask_stop(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, ask_stop)
    with Memory.open(args.db, lm=handle, extraction=settings) as memory:
        worker = Worker(memory, settings)
        counts = {"done": 0, "failed": 0, "pending": 0, "running": 0}

        def report(job: Any) -> None:
            counts[job.status] = counts.get(job.status, 0) + 1
            print(json.dumps({"job": job.id, "user_id": job.user_id,
                              "conversation_id": job.conversation_id, "status": job.status,
                              "attempts": job.attempts, "facts": job.facts,
                              "error": job.error}, ensure_ascii=False), flush=True)

        ran = worker.run(stop=stop, max_jobs=args.max_jobs, until_idle=args.once,
                         report=report)
    print(json.dumps({"db": describe(args.db), "worker": worker.owner, "jobs": ran,
                      **{k: v for k, v in counts.items() if v}}), flush=True)
    return 0


def add_worker_parser(sub: Any) -> None:
    """Register ``memstrata worker``."""
    from memstrata.agent_commands import add_model_args

    p = sub.add_parser("worker", help="run the extraction jobs of a store (background "
                       "extraction in processes of their own)", description=cmd_worker.__doc__)
    p.add_argument("--db", required=True, metavar="FILE|URL",
                   help="the store: a SQLite file or a postgresql:// URL")
    add_model_args(p)
    p.add_argument("--once", action="store_true",
                   help="stop when no job is left instead of waiting for new ones")
    p.add_argument("--max-jobs", type=int, metavar="N", help="stop after N jobs")
    p.add_argument("--poll", type=float, default=1.0,
                   help="seconds between looks for new jobs when idle (default 1)")
    p.add_argument("--lease", type=float, default=300.0,
                   help="seconds a job is held before another worker may take it; renewed "
                   "while it runs (default 300)")
    p.add_argument("--retry", type=float, default=2.0,
                   help="seconds before a failed attempt's retry, doubled each time "
                   "(default 2)")
    p.add_argument("--nice", type=int, default=0, choices=range(20), metavar="0-19",
                   help="run at this much lower OS priority, the model's threads included "
                   "(Linux; default 0: as started)")
    p.add_argument("--keep-done", type=float, default=30.0, metavar="DAYS",
                   help="prune done jobs (of every tenant) that finished more than DAYS days "
                   "ago, at start and hourly; 0 keeps them all (default 30). Failed jobs "
                   "are kept")
    p.set_defaults(func=cmd_worker)


def cmd_jobs(args: argparse.Namespace) -> int:
    """Extraction jobs of a store: list them (newest first, one JSON line each), or prune
    finished ones. prune deletes the done jobs (--status failed: the parked ones; all:
    both) of --user, or of every tenant, that finished more than --older-than DAYS ago or
    before --before, or every one with neither; pending and running jobs are never
    pruned. The facts a job wrote stay. Workers prune done jobs by themselves after
    --keep-done days (memstrata worker). Prints the jobs deleted per status."""
    from memstrata import Memory
    from memstrata.cli_support import no_store

    if store_missing(args.db):
        raise no_store(args.db)
    with Memory.open(args.db, extraction="queue") as memory:
        if args.action == "prune":
            status = ("done", "failed") if args.status == "all" else args.status or "done"
            deleted = memory.prune_jobs(args.user, older_than_days=args.older_than,
                                        before=args.before, status=status,
                                        dry_run=args.dry_run)
            print(json.dumps({"deleted": deleted, "dry_run": args.dry_run}))
            return 0
        only = None if args.status == "all" else args.status
        jobs = memory.jobs(args.user, status=only, limit=args.limit)
        for job in jobs:
            print(json.dumps(job, ensure_ascii=False))
        if not jobs:  # stdout stays JSON lines (none); a person reading it learns why
            print("memstrata: no extraction jobs" + (f" of {args.user}" if args.user else "")
                  + (f" {only}" if only else ""), file=sys.stderr)
    return 0


def add_jobs_parser(sub: Any, default_db: str) -> None:
    """Register ``memstrata jobs``."""
    p = sub.add_parser("jobs", help="extraction jobs of a store: list, prune finished ones",
                       description=cmd_jobs.__doc__)
    p.add_argument("action", choices=("list", "prune"))
    p.add_argument("--db", default=default_db, metavar="FILE|URL",
                   help=f"store file or postgresql:// URL (default {default_db})")
    p.add_argument("--user", help="one tenant only (default: every tenant)")
    p.add_argument("--status", choices=("pending", "running", "done", "failed", "all"),
                   help="list: jobs of this status only (default all); prune: which "
                   "finished jobs, done, failed or all of both (default done; failed ones "
                   "are kept until retried or pruned by name)")
    p.add_argument("-n", "--limit", type=at_least(1), default=100,
                   help="list: newest N jobs (default 100)")
    prune = p.add_argument_group("prune", "delete finished jobs (never pending or running)")
    when = prune.add_mutually_exclusive_group()
    when.add_argument("--older-than", type=float, metavar="DAYS",
                      help="finished more than DAYS days ago")
    when.add_argument("--before", metavar="DATE",
                      help="finished before this ISO date or datetime (UTC if no zone)")
    prune.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    p.set_defaults(func=cmd_jobs)


def cmd_bench_background(args: argparse.Namespace) -> int:
    """Background extraction: add p95 with infer=True at --turns turns (background vs the
    synchronous path), another tenant's search p95 alone vs while a worker extracts, and
    the background path's facts vs the synchronous path's on the same turns. --lm
    scripted/slow is a deterministic fake whose calls sleep --delay seconds."""
    from memstrata.bench.background import check_parts, run_background_bench, table
    from memstrata.cli_support import print_report

    only = tuple(part.strip() for part in args.only.split(",") if part.strip())
    try:
        check_parts(only)
    except ValueError as exc:
        print(f"memstrata bench background: --only: {exc}", file=sys.stderr)
        return 2
    doc = run_background_bench(args.out, lm=args.lm, delay_s=args.delay, turns=args.turns,
                               calls=args.calls, queries=args.queries,
                               fact_turns=args.fact_turns, data=args.data, only=only)
    return print_report(table(doc), [Path(args.out) / "background.json"])


def add_background_bench_parser(bsub: Any) -> None:
    """Register ``memstrata bench background``."""
    from memstrata.programs.models import EMBEDDED

    p = bsub.add_parser("background", help="add latency, other tenants' search and facts "
                        "with extraction in the background",
                        description=cmd_bench_background.__doc__)
    p.add_argument("--lm", default=EMBEDDED,
                   help=f"the model (default {EMBEDDED}); scripted/slow: a fake whose "
                   "extraction calls sleep --delay seconds")
    p.add_argument("--delay", type=float, default=2.0,
                   help="seconds each scripted/slow extraction call sleeps (default 2)")
    p.add_argument("--turns", type=int, default=100_000,
                   help="turns in the store when add is timed (default 100000)")
    p.add_argument("--calls", type=int, default=200, help="timed adds per mode (default 200)")
    p.add_argument("--queries", type=int, default=200,
                   help="timed searches per condition (default 200)")
    p.add_argument("--fact-turns", type=int, default=60,
                   help="turns of the facts comparison (default 60)")
    p.add_argument("--data", type=Path,
                   help="a LoCoMo-format file: its first conversation's turns for the facts "
                   "comparison (default: a synthetic chat)")
    p.add_argument("--only", default="add,search,facts", metavar="PARTS",
                   help="comma-separated measurements to run: add, search, facts "
                   "(default all three)")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    p.set_defaults(func=cmd_bench_background)
