"""Background extraction under ``kill -9``: no job and no fact lost, none written twice.

``worker_kills``: a store holds ``jobs`` extraction jobs (one chunk of 19 turns each, in
several conversations, recorded by ``Memory.add`` with ``extraction="queue"``). Worker
processes (``memstrata.worker.Worker``, two at a time, forked from the crash scenarios'
fork server) run them with a deterministic fake model whose every call sleeps (a slow
model: most kills land inside a model call, the rest in a claim, a lease renewal or the
write transaction), and each is killed with SIGKILL after a random delay. The jobs'
leases are short, so a killed worker's job is taken again by a later worker. Once the
kills are done, one worker runs what is left to the end. Then:

- every job is ``done`` (a job ``pending``, ``running`` or ``failed`` at the end is lost:
  ``lost_writes``), and each fact the model proposed for it is stored (else
  ``lost_writes``);
- no fact is stored twice, and each job's result is its one fact, ``ADD`` (a ``NONE``
  means an earlier attempt's writes survived its kill: a duplicated write, counted under
  ``integrity_failures``, as is a job done twice, a fact no job reports, or a file that
  fails ``PRAGMA integrity_check``).

A worker that raises instead of being killed counts under ``crashes`` (its traceback in
the details). Quick slice: a few kills; full: at least 100.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

# Imported here, so the fork server loads them (DSPy with them) once, before its first
# fork: a worker then starts in milliseconds.
import memstrata.programs.ingest  # noqa: F401  (DSPy: the worker's extraction)
from memstrata import Memory
from memstrata.worker import ExtractionSettings, Worker

from ..background import model
from .common import Context, Scenario
from .crash import ForkServer

CHUNK = 19
LEASE_S = 0.6
"""A killed worker's job is taken again this long after its last renewal."""
DELAY_S = 0.4
"""Seconds each fake model call sleeps."""


def kill_target(db: str, delay_s: float, lease_s: float, error_file: str) -> None:
    """A worker process's life: run the store's jobs with the slow fake model until
    killed (never returns on its own: when idle it waits for more)."""
    settings = ExtractionSettings(mode="queue", lease_s=lease_s, retry_s=0.0, poll_s=0.05)
    memory = Memory.open(db, lm=model("scripted/slow", delay_s), extraction=settings)
    Worker(memory, settings).run()


def _setup(path: Path, jobs: int) -> dict[str, str]:
    """A store with ``jobs`` extraction jobs; the fact each job's chunk will give, by job id.

    Each chunk opens with words of its own: the facts of one conversation must not be
    near-duplicates, which reconciliation would rightly merge."""
    # Attempts unbounded for the scenario: a job killed again and again must still end
    # done (parking is what the tests check, not this scenario).
    settings = ExtractionSettings(mode="queue", max_attempts=100)
    rng = random.Random(jobs)
    with Memory.open(path, extraction=settings) as memory:
        for j in range(jobs):
            words = " ".join("".join(rng.choices("bcdfghjklmnpqrstvwxz", k=8))
                             for _ in range(3))
            memory.add([{"role": "user" if i % 2 else "assistant",
                         "content": f"{words} {j}" if i == 0 else f"job {j} turn {i}"}
                        for i in range(CHUNK)], user_id=f"t{j % 3}",
                       conversation_id=f"c{j % 7}")
        out = {}
        for job in memory.jobs(limit=100_000):
            after = (memory.job(job["id"]) or {})["params"]["after_seq"]
            first = memory.store.turns(job["user_id"], conversation_id=job["conversation_id"],
                                       after_seq=after, limit=1)[0]
            out[job["id"]] = f"user said {first.text[:60]}"
        return out


def _drain(path: Path, deadline: float) -> None:
    """Run what the kills left, in this process, until every job has ended."""
    settings = ExtractionSettings(mode="queue", lease_s=LEASE_S, retry_s=0.0, poll_s=0.05)
    with Memory.open(path, lm=model("scripted/slow", 0.0), extraction=settings) as memory:
        worker = Worker(memory, settings)
        while time.monotonic() < deadline:
            worker.run(until_idle=True)
            counts = memory.store.jobs.counts()
            if not counts["pending"] and not counts["running"]:
                return
            time.sleep(LEASE_S / 4)  # a dead worker's lease still held: let it expire


def check(path: Path, expected: dict[str, str], result: Scenario) -> dict[str, int]:
    """Count lost and duplicated jobs and facts in the store at ``path`` (see the module)."""
    counts: Counter[str] = Counter()
    with Memory.open(path, extraction="queue") as memory:
        jobs = memory.jobs(limit=100_000)
        stored: Counter[str] = Counter()
        for tenant in sorted({j["user_id"] for j in jobs}):
            for row in memory.get_all(tenant, kind="fact", limit=10_000):
                stored[row["text"]] += 1
        reported: Counter[str] = Counter()
        for job in jobs:
            full = memory.job(job["id"]) or {}
            want = expected.get(job["id"])
            if job["status"] != "done":
                counts["jobs_lost"] += 1
                result.fail("lost_writes", "a job did not end done", job=job["id"],
                            status=job["status"], error=job["error"])
                continue
            events = full.get("events", [])
            reported.update(e["memory"] for e in events if e["event"] == "ADD")
            if [(e["event"], e["memory"]) for e in events] != [("ADD", want)]:
                counts["jobs_duplicated"] += 1
                result.fail("integrity_failures", "a job's result is not its one new fact",
                            job=job["id"], events=str(events)[:300], want=want)
        for job_id, text in expected.items():
            if stored[text] == 0:
                counts["facts_lost"] += 1
                result.fail("lost_writes", "a job's fact is not stored", job=job_id, fact=text)
            elif stored[text] > 1:
                counts["facts_duplicated"] += 1
                result.fail("integrity_failures", "a fact is stored twice", fact=text,
                            copies=stored[text])
        for text in stored.keys() - set(expected.values()):
            counts["facts_unexpected"] += 1
            result.fail("integrity_failures", "a fact no job proposed", fact=text)
        for text, n in reported.items():
            if n > 1:
                counts["facts_duplicated"] += 1
                result.fail("integrity_failures", "two jobs report the same new fact",
                            fact=text, jobs=n)
        counts["attempts"] = sum(j["attempts"] for j in jobs)
        counts["jobs_done"] = sum(j["status"] == "done" for j in jobs)
    conn = sqlite3.connect(path)
    try:
        verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()
    if verdict != "ok":
        result.fail("integrity_failures", "integrity_check failed", verdict=verdict)
    return dict(counts)


def worker_kills(ctx: Context) -> Scenario:
    """See the module."""
    result = Scenario(name="worker_kills")
    rng = random.Random(ctx.seed)
    kills_wanted = ctx.sized(6, 110)
    path = ctx.work / "jobs.db"
    expected = _setup(path, ctx.sized(20, 330))
    errors = ctx.work / "worker-errors.txt"
    started = time.monotonic()
    kills = exits = 0
    with ForkServer() as forks:
        while kills < kills_wanted and not ctx.expired():
            pids = [forks.start("memstrata.bench.reliability.worker_kills:kill_target",
                                db=str(path), delay_s=DELAY_S, lease_s=LEASE_S,
                                error_file=str(errors)) for _ in range(2)]
            for pid in pids:
                end = forks.kill(pid, rng.uniform(0.2, 1.5))
                kills += end.killed
                exits += not end.killed
                if not end.killed:
                    result.fail("crashes", "a worker ended instead of being killed",
                                code=end.code, signal=end.signal)
        result.stopped_early = kills < kills_wanted
    if errors.exists():
        result.note(worker_error=errors.read_text(encoding="utf-8")[-1500:])
    kill_s = time.monotonic() - started
    _drain(path, time.monotonic() + max(60.0, ctx.deadline - time.monotonic()))
    counts = check(path, expected, result)
    result.attempts = kills
    result.figures = {"kills": kills, "jobs": len(expected), "workers_exited": exits,
                      "kill_seconds": round(kill_s, 1), "model_delay_s": DELAY_S,
                      "lease_s": LEASE_S, **counts,
                      "attempts_killed": counts.get("attempts", 0) - counts.get("jobs_done", 0),
                      "jobs_lost": counts.get("jobs_lost", 0),
                      "jobs_duplicated": counts.get("jobs_duplicated", 0),
                      "facts_lost": counts.get("facts_lost", 0),
                      "facts_duplicated": counts.get("facts_duplicated", 0)}
    return result


SCENARIOS: dict[str, Callable[[Context], Scenario]] = {"worker_kills": worker_kills}

__all__ = ["SCENARIOS", "check", "kill_target", "worker_kills"]
