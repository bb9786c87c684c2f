"""Background extraction: the worker that runs a memory's queued jobs.

``Memory.add(..., infer=True)`` stores the turns and, once a conversation's unextracted
turns fill an extraction chunk, records an ``extract`` job in the same transaction (the
store's ``jobs`` table: ``memory/store/jobs.py``). A :class:`Worker` runs those jobs:

- inside ``Memory``, on a thread started on first use (``extraction="background"``, the
  default);
- in the caller's thread (``extraction="sync"``: ``add`` returns the facts, as an
  extraction inside the call always did);
- in other processes (``memstrata worker --db FILE|URL``; ``extraction="queue"`` makes a
  ``Memory`` that only records jobs, for a web server whose workers run apart).

A job covers a fixed range of a conversation's turns (``params``: ``after_seq``,
``upto_seq``), fixed when it is recorded, so the facts it extracts are those the
synchronous path extracts from the same turns, whenever it runs. Jobs of one conversation
run in order; different conversations' jobs in any order, several at once across
processes.

Running one: claim it (a lease, renewed while it runs), read its turns, call the model
(no lock held: another tenant's search goes on meanwhile), then write every fact and mark
the job ``done`` with its fact events in one transaction. A worker killed at any point
leaves either nothing of the job or all of it; its lease then expires and another worker
takes the job again. A failed attempt (the model's output unparseable, the model
unreachable) is retried after a delay that doubles each time; after ``max_attempts`` the
job is parked ``failed`` with its error, visible in ``Memory.jobs``, and retried only by
``Memory.flush``. Finished jobs do not pile up: a worker deletes the done jobs that
finished more than ``keep_done_days`` ago (30 by default) when it starts and then once an
hour (``prune_every_s``); the facts they wrote stay. Failed jobs stay until retried or
pruned by hand (``Memory.prune_jobs``, ``memstrata jobs prune``).

The model runs outside ``Memory``'s lock; the store does not: the worker reaches the
store through :class:`LockedStore`, which takes the lock for each store call and for the
whole of each ``transaction()`` block, so the worker's reads and writes stay serialised
with the memory's other calls, as before.

The memory's worker thread runs at a lower OS priority (``ExtractionSettings.nice``, 10 by
default; Linux), and so do the threads it starts: an embedded model's compute threads
(llama.cpp's) are started from the thread that calls the model. On a machine with few
cores the model then takes the CPU only when the app's own threads (a search) leave it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, Field

from memstrata.errors import MemstrataError
from memstrata.memory.store.jobs import OPEN, Job, LeaseLost

if TYPE_CHECKING:
    from memstrata.memory.store.protocol import MemoryStore
    from memstrata.programs.ingest import IngestSettings
    from memstrata.programs.lm import ModelHandle


class Memory(Protocol):
    """What a worker reads of the :class:`~memstrata.api.Memory` it serves (a protocol,
    so this module stays below ``memstrata.api``, which runs it)."""

    store: MemoryStore
    lm: ModelHandle | None
    _lock: threading.RLock
    _ingest: IngestSettings | None
    _files: dict[str, str]

EXTRACT = "extract"
"""The kind of a fact-extraction job."""

Mode = Literal["background", "sync", "queue"]
MODES: tuple[str, ...] = ("background", "sync", "queue")


class JobTimeoutError(MemstrataError, TimeoutError):
    """``Memory.wait`` ran out of time with jobs still pending or running (they go on)."""


class ExtractionSettings(BaseModel):
    """How a memory runs its extraction jobs (``Memory.open``'s ``extraction``).

    ``mode``: ``"background"`` (a worker thread inside the memory, started on first use;
    ``add`` returns at once), ``"sync"`` (the caller's thread runs them: ``add`` returns
    with the facts) or ``"queue"`` (jobs are only recorded; ``memstrata worker``
    processes run them, and no LM is needed here).
    """

    mode: Mode = "background"
    max_attempts: int = Field(5, ge=1, le=100, description="attempts before a job is parked "
                              "failed (a killed worker's attempt counts)")
    lease_s: float = Field(300.0, gt=0, description="how long a claim holds a job before "
                           "another worker may take it; renewed every third of it")
    retry_s: float = Field(2.0, ge=0, description="delay before a failed attempt's retry; "
                           "doubled after each, at most retry_cap_s")
    retry_cap_s: float = Field(300.0, ge=0)
    poll_s: float = Field(1.0, gt=0, description="how often an idle worker looks for jobs "
                          "other processes recorded")
    nice: int = Field(10, ge=0, le=19, description="the OS priority (Linux nice value, "
                      "added to the process's) of the memory's worker thread and of the "
                      "threads it starts, an embedded model's compute threads included: "
                      "the app's own threads (another tenant's search) win the CPU from "
                      "a running extraction. 0 keeps the process's priority. Linux only "
                      "(elsewhere a thread's priority is the process's)")

    keep_done_days: float | None = Field(30.0, ge=0, description="how long a done job "
                                         "(its record and fact events) is kept after it "
                                         "finished before a worker prunes it; None keeps "
                                         "every one. Failed jobs are never pruned by a "
                                         "worker (Memory.prune_jobs does it by name)")
    prune_every_s: float = Field(3600.0, gt=0, description="how often a worker prunes "
                                 "done jobs older than keep_done_days (its first look "
                                 "for a job prunes too)")

    @classmethod
    def of(cls, value: str | ExtractionSettings | None) -> ExtractionSettings:
        """Settings from a mode name or settings (None: the defaults).

        Raises:
            ValueError: an unknown mode.
        """
        if isinstance(value, ExtractionSettings):
            return value
        if value is None:
            return cls()
        if value not in MODES:
            raise ValueError(f"extraction must be one of {', '.join(MODES)} (or "
                             f"ExtractionSettings), not {value!r}")
        return cls(mode=value)

    def retry_delay(self, attempts: int) -> float:
        """Seconds before the retry of a job that failed its ``attempts``-th attempt."""
        return min(self.retry_s * 2 ** max(attempts - 1, 0), self.retry_cap_s)


class LockedStore:
    """A store whose every call runs under ``lock``, as does each ``transaction()`` and
    ``reading()`` block as a whole; ``runs``, ``blobs`` and ``jobs`` come wrapped alike.
    What the worker's extraction uses, so that only the model call runs unlocked."""

    _WRAPPED = frozenset({"runs", "blobs", "jobs"})

    def __init__(self, store: Any, lock: threading.RLock) -> None:
        self._store = store
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name in self._WRAPPED:
            return LockedStore(value, self._lock)
        if not (inspect.ismethod(value) or inspect.isfunction(value)):
            return value

        @functools.wraps(value)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return value(*args, **kwargs)
        return locked

    @contextmanager
    def transaction(self) -> Iterator[LockedStore]:
        """The store's transaction, under the lock from start to end."""
        with self._lock, self._store.transaction():
            yield self

    @contextmanager
    def reading(self) -> Iterator[LockedStore]:
        """The store's read snapshot, under the lock from start to end."""
        with self._lock, self._store.reading():
            yield self


def new_owner(label: str = "worker") -> str:
    """A worker's lease name: host, process and a random suffix (unique per worker)."""
    return f"{label}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Runs a memory's jobs: one at a time with :meth:`run_once`, or on a thread with
    :meth:`start` until :meth:`stop` (see the module).

    ``memory`` supplies the store, the model, the ingest settings, the compiled extractor
    and the lock; ``settings`` the lease, the retry delays and the attempt bound.

    The worker shares the memory's store (and, on SQLite, its connection) through
    :class:`LockedStore`, not a connection of its own: the memory's caches (a tenant's
    vectors, row lengths) follow that connection's own writes, while another
    connection's commit drops them all.
    """

    def __init__(self, memory: Memory, settings: ExtractionSettings | None = None, *,
                 owner: str | None = None) -> None:
        self.memory = memory
        self.settings = settings or ExtractionSettings()
        self.owner = owner or new_owner()
        self.store = LockedStore(memory.store, memory._lock)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._current: Job | None = None
        self._changed = threading.Condition()
        self.finished = 0
        """Jobs this worker ended (done, or failed and parked or put back)."""
        self._pruned_at: float | None = None

    # -- one job ------------------------------------------------------------------------

    def run_once(self, *, user_id: str | None = None, conversation_id: str | None = None,
                 raise_errors: bool = False, due_only: bool = True) -> Job | None:
        """Claim and run the oldest claimable job (of one tenant or conversation when
        given); returns it as it ended, or None when none was claimable.

        ``raise_errors``: a failed attempt raises :class:`~memstrata.programs.ingest.IngestError`
        (after it is recorded) instead of returning. ``due_only=False`` also takes a job
        whose retry delay has not passed. Prunes old done jobs first when due
        (:meth:`prune_due`).
        """
        self.prune_due()
        job = self.store.jobs.claim(self.owner, lease_s=self.settings.lease_s,
                                    user_id=user_id, conversation_id=conversation_id,
                                    due_only=due_only)
        if job is None:
            return None
        self._current = job
        try:
            return self._run(job, raise_errors=raise_errors)
        finally:
            self._current = None
            self.finished += 1
            with self._changed:
                self._changed.notify_all()

    def prune_due(self) -> dict[str, int] | None:
        """Delete the done jobs (of every tenant) that finished more than
        ``keep_done_days`` ago, when ``prune_every_s`` has passed since this worker last
        did (or it never did); returns what it deleted, or None when it was not due (or
        ``keep_done_days`` is None). Failed jobs stay. A store failing here is left to the
        job calls that follow, which fail alike."""
        days = self.settings.keep_done_days
        now = time.monotonic()
        if days is None or (self._pruned_at is not None
                            and now - self._pruned_at < self.settings.prune_every_s):
            return None
        self._pruned_at = now
        cutoff = datetime.now(UTC) - timedelta(days=days)
        try:
            return self.store.jobs.prune(None, before=cutoff, status="done")
        except Exception:  # a closed or unreachable store: the claim after says so
            return None

    def _run(self, job: Job, *, raise_errors: bool) -> Job | None:
        from memstrata.programs.ingest import IngestError

        failure: Exception | None = None
        with self._heartbeat(job):
            try:
                if job.kind != EXTRACT:
                    raise IngestError(f"no job kind {job.kind!r}; this worker runs "
                                      f"{EXTRACT!r} jobs")
                self._extract(job)
            except LeaseLost:
                return self.store.jobs.get(job.user_id, job.id)
            except Exception as exc:  # recorded on the job; raised below when asked
                failure = exc
        if failure is not None:
            error = f"{type(failure).__name__}: {failure}"
            status = self.store.jobs.fail(job.user_id, job.id, self.owner, error,
                                          retry_s=self.settings.retry_delay(job.attempts))
            if raise_errors and status is not None:
                then = "parked" if status == "failed" else "queued again"
                raise IngestError(f"extraction job {job.id} of {job.conversation_id!r} "
                                  f"failed (attempt {job.attempts} of {job.max_attempts}; "
                                  f"turns kept, the job {then}): {error}") from failure
        return self.store.jobs.get(job.user_id, job.id)

    def _extract(self, job: Job) -> None:
        """Extract the job's turns and mark it done with the facts, in one transaction."""
        from memstrata.programs.ingest import IngestError, IngestSettings, ingest_turns

        memory, store = self.memory, self.store
        if memory.lm is None:
            raise IngestError("this worker has no LM to extract with (give one: "
                              "memstrata worker --lm MODEL, or Memory.open(lm=...))")
        after, upto = int(job.params["after_seq"]), int(job.params["upto_seq"])
        turns = [t for t in store.turns(job.user_id, conversation_id=job.conversation_id,
                                        after_seq=after, limit=max(upto - after, 0))
                 if t.seq <= upto]
        if not turns:  # the turns were deleted meanwhile: nothing to extract
            with store.transaction():
                store.jobs.complete(job.user_id, job.id, self.owner, [])
            return
        facts: list[Any] = []

        def written(report: Any) -> None:
            if report.failed_chunks:
                raise IngestError(f"extraction failed for {len(report.failed_chunks)} "
                                  f"chunk(s) of {job.conversation_id!r}: "
                                  f"{report.failed_chunks[0]}")
            events = [{**e.model_dump(exclude_none=True), "kind": "fact"} for e in facts]
            store.jobs.complete(job.user_id, job.id, self.owner, events)

        ingest_turns(store, job.user_id, job.conversation_id, turns,
                     memory.lm, settings=memory._ingest or IngestSettings(), events=facts,
                     program=memory._files.get("extractor"), on_written=written)

    @contextmanager
    def _heartbeat(self, job: Job) -> Iterator[None]:
        """Renew the job's lease every third of ``lease_s`` while the block runs."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.settings.lease_s / 3):
                try:
                    if not self.store.jobs.renew(job.user_id, job.id, self.owner,
                                                 lease_s=self.settings.lease_s):
                        return  # lost: the job's completion will say so
                except Exception:  # a closed store: the job's own calls fail too
                    return

        thread = threading.Thread(target=beat, name=f"memstrata-lease-{job.id[-8:]}",
                                  daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()

    # -- a loop -------------------------------------------------------------------------

    def run(self, *, stop: threading.Event | None = None, max_jobs: int | None = None,
            until_idle: bool = False, report: Callable[[Job], None] | None = None) -> int:
        """Run jobs until ``stop`` is set, ``max_jobs`` ran, or (``until_idle``) none is
        claimable; between jobs, look again every ``poll_s`` (or when woken). Returns
        the jobs run; ``report`` is called with each as it ended. A job's failure is
        recorded on it, never raised here."""
        stop = stop or self._stop
        ran = 0
        while not stop.is_set() and (max_jobs is None or ran < max_jobs):
            try:
                job = self.run_once()
            except Exception:  # the store failing (closed, unreachable): look again later
                if stop.is_set():
                    break
                job = None
                time.sleep(self.settings.poll_s)
            if job is not None:
                ran += 1
                if report is not None:
                    report(job)
                continue
            if until_idle:
                break
            self._wake.wait(self.settings.poll_s)
            self._wake.clear()
        return ran

    def start(self) -> None:
        """Run :meth:`run` on a daemon thread (once; a second call does nothing), at the
        lower priority ``settings.nice`` sets."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run_niced, name="memstrata-worker",
                                        daemon=True)
        self._thread.start()

    def _run_niced(self) -> None:
        lower_thread_priority(self.settings.nice)
        self.run()

    @property
    def running(self) -> bool:
        """Whether the worker thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        """Look for jobs now (a new one was recorded)."""
        self._wake.set()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread: no new job is claimed; the job in flight, if any, is given
        back (``pending``, its attempt not counted) so the next worker takes it at once,
        and its writes, should its model call still return, roll back (its lease is
        gone). Waits up to ``timeout_s`` for the thread to end."""
        self._stop.set()
        self._wake.set()
        job = self._current
        if job is not None:
            # A store already failing: the lease then expires by itself.
            with contextlib.suppress(Exception):
                self.store.jobs.release(job.user_id, job.id, self.owner)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def wait_change(self, timeout_s: float) -> None:
        """Block until this worker ends a job, at most ``timeout_s``."""
        with self._changed:
            self._changed.wait(timeout_s)


def lower_thread_priority(nice: int) -> bool:
    """Add ``nice`` to the calling thread's nice value (Linux: the value is per thread,
    and threads it starts afterwards inherit it). True when it was set; False for 0,
    on another OS (where ``setpriority`` would lower the whole process) or when the OS
    refused."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(now + nice, 19))
    except OSError:  # a sandbox without the call: the thread keeps its priority
        return False
    return True


def job_dict(job: Job, *, events: bool = False) -> dict[str, Any]:
    """A job as ``Memory.jobs`` (``events=False``) or ``Memory.job`` returns it."""
    out: dict[str, Any] = {
        "id": job.id, "user_id": job.user_id, "conversation_id": job.conversation_id,
        "kind": job.kind, "status": job.status, "attempts": job.attempts,
        "error": job.error, "created_at": job.created_at, "updated_at": job.updated_at,
        "facts": job.facts}
    if events:
        out.update({"max_attempts": job.max_attempts, "params": job.params,
                    "lease_owner": job.lease_owner, "lease_until": job.lease_until,
                    "run_after": job.run_after, "events": list(job.result or [])})
    return out


def open_jobs(memory: Memory, user_id: str | None = None,
              conversation_id: str | None = None) -> list[Job]:
    """The jobs not finished yet, in queue order (of one tenant, or of all)."""
    return memory.store.jobs.list(user_id, status=OPEN, conversation_id=conversation_id,
                                  limit=1_000_000, oldest=True)

