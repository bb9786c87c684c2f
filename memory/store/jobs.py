"""The durable job queue: background work (fact extraction) recorded in the store.

A job is one row of ``jobs`` (migration 11): its tenant (``user_id``) and conversation,
its ``kind`` (``"extract"``), ``params`` (JSON: for an extraction, the turns it covers),
``status`` (``pending``, ``running``, ``done``, ``failed``), ``attempts`` out of
``max_attempts``, the last ``error``, a lease (``lease_owner`` and ``lease_until``) while a
worker runs it, ``run_after`` (a failed attempt's retry waits until then), its ``result``
(JSON, once done) and ``facts`` (how many fact events the result holds), and its record
times (``created_at``, ``updated_at``; ISO-8601 UTC text, so text order is time order).

The life of a job:

- :meth:`Jobs.enqueue` writes it ``pending``, inside the caller's transaction (``Memory.add``
  enqueues in the transaction that stores the turns, so turns are never stored without
  their job, nor a job without its turns).
- :meth:`Jobs.claim` takes the oldest claimable job: ``pending`` and due, or ``running``
  with an expired lease (its worker died). It counts an attempt and writes the lease. A
  conversation's jobs are taken in order: none while an earlier job of the same
  conversation is pending or running. A job whose lease expired with no attempt left is
  parked ``failed`` first (a job that kills its worker every time is not taken forever).
- The worker renews the lease while it works (:meth:`Jobs.renew`), then ends the job:
  :meth:`Jobs.complete` (``done`` with its result; in the transaction that writes what the
  job made, so both commit or neither) or :meth:`Jobs.fail` (``pending`` again after a
  delay, or ``failed`` with its error once no attempt is left). Both check the lease:
  a worker that lost it (expired and taken by another) raises :class:`LeaseLost`, which
  rolls its writes back, so a job's work is committed once.
- :meth:`Jobs.release` gives a running job back without counting the attempt (a worker
  stopping cleanly).
- :meth:`Jobs.prune` deletes finished jobs last changed before a time: ``done`` ones (a
  worker does it now and then, ``ExtractionSettings.keep_done_days``), or ``failed`` ones
  when asked by name. A job not finished (``pending``, ``running``) is never pruned. The
  facts a done job wrote stay (items, with their versions); its record and its fact
  events go with it.
- :meth:`Jobs.restore` writes jobs back as an export holds them (``Memory.import_``).

SQLite: a claim runs in one ``BEGIN IMMEDIATE`` transaction (the store's
``transaction``), so two processes never take the same job. PostgreSQL
(``pg/jobs.py``): the same SQL through the PostgreSQL hooks, and a claim across tenants
through a definer function with ``FOR UPDATE SKIP LOCKED``.

Every method that takes ``user_id`` reads and writes that tenant's jobs only; those that
span tenants (``claim`` without a tenant, ``owner``, ``list``/``counts`` without one) return
ids, tenants and counts, or the rows a worker or an operator needs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from memstrata.errors import MemstrataError

from ..models import as_utc
from .blobs import StoreTables

JobStatus = Literal["pending", "running", "done", "failed"]
STATUSES: tuple[str, ...] = ("pending", "running", "done", "failed")
"""Every job status, in the order a job goes through them."""
OPEN = ("pending", "running")
"""The statuses of a job not finished yet."""
FINISHED = ("done", "failed")
"""The statuses of a job that will not run again by itself (what :meth:`Jobs.prune` may
delete)."""
COLUMNS = ("id, user_id, conversation_id, kind, status, params, attempts, max_attempts,"
           " error, lease_owner, lease_until, run_after, result, facts, created_at, updated_at")
NEVER = "9999-12-31T23:59:59.999999+00:00"
"""A time after every stored one."""
LEASE_EXPIRED = ("its worker stopped before finishing it (killed, or its lease expired) on "
                 "each of {attempts} attempts")
"""The error of a job parked because its lease expired with no attempt left."""


def prunable(status: str | Sequence[str]) -> list[str]:
    """The statuses :meth:`Jobs.prune` is asked for, checked: finished ones only.

    Raises:
        ValueError: a status other than ``done`` and ``failed``, or none.
    """
    statuses = [status] if isinstance(status, str) else list(status)
    if not statuses or any(s not in FINISHED for s in statuses):
        raise ValueError(f"only finished jobs are pruned: status in {FINISHED}, not "
                         f"{status!r}")
    return list(dict.fromkeys(statuses))


class LeaseLost(MemstrataError, RuntimeError):
    """The worker no longer holds the job's lease (it expired and another worker took the
    job, or the job was released or deleted): what it wrote for the job must roll back."""


class Job(BaseModel):
    """One job row (see the module)."""

    id: str
    user_id: str
    conversation_id: str
    kind: str
    status: JobStatus
    params: dict[str, Any] = Field(default_factory=dict)
    attempts: int = 0
    max_attempts: int = 1
    error: str | None = None
    lease_owner: str | None = None
    lease_until: str | None = None
    run_after: str
    result: list[dict[str, Any]] | None = None
    facts: int = 0
    created_at: str
    updated_at: str


def stamp(at: datetime | None = None, *, after_s: float = 0.0) -> str:
    """A record time as the jobs table stores it: ISO-8601 UTC with microseconds."""
    when = (at or datetime.now(UTC)) + timedelta(seconds=after_s)
    return when.astimezone(UTC).isoformat(timespec="microseconds")


class Jobs(StoreTables):
    """The ``jobs`` table of one store (reach it as ``store.jobs``; see the module)."""

    def _job(self, row: dict[str, Any]) -> Job:
        row["params"] = self._parsed(row["params"]) if row["params"] is not None else {}
        row["result"] = self._parsed(row["result"]) if row["result"] is not None else None
        return Job.model_validate(row)

    # -- writing ------------------------------------------------------------------------

    def enqueue(self, user_id: str, conversation_id: str, kind: str,
                params: dict[str, Any] | None = None, *, max_attempts: int = 5) -> str:
        """Record a new ``pending`` job; returns its id. Call it inside the transaction
        that writes what the job is for."""
        job_id = f"job_{uuid.uuid4().hex}"
        now = stamp()
        with self.store.transaction():
            self._change(
                user_id, "INSERT INTO jobs (id, user_id, conversation_id, kind, status,"
                " params, attempts, max_attempts, run_after, facts, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, 'pending', ?, 0, ?, ?, 0, ?, ?)",
                (job_id, user_id, conversation_id, kind, self._json(params or {}),
                 max(1, int(max_attempts)), now, now, now))
        return job_id

    def claim(self, owner: str, *, lease_s: float, user_id: str | None = None,
              conversation_id: str | None = None, due_only: bool = True) -> Job | None:
        """Take the oldest claimable job (of one tenant, or one conversation of it, when
        given), counting an attempt and leasing it to ``owner`` for ``lease_s`` seconds;
        None when there is none. Jobs whose lease expired with no attempt left are parked
        ``failed`` first (see the module). ``due_only=False`` also takes a pending job
        whose retry delay has not passed."""
        now = stamp()
        until = stamp(after_s=lease_s)
        due = now if due_only else NEVER
        where, args = self._scope(user_id, conversation_id)
        with self.store.transaction():  # SQLite: BEGIN IMMEDIATE, one claimer at a time
            self._park_expired(now, where, args)
            rows = self._select(
                user_id, "SELECT j.id, j.user_id FROM jobs j WHERE ((j.status = 'pending'"
                " AND j.run_after <= ?) OR (j.status = 'running' AND j.lease_until < ?))"
                f" AND j.attempts < j.max_attempts{where} AND NOT EXISTS (SELECT 1 FROM"
                " jobs e WHERE e.user_id = j.user_id AND e.conversation_id ="
                " j.conversation_id AND e.rowid < j.rowid AND e.status IN ('pending',"
                " 'running')) ORDER BY j.rowid LIMIT 1", (due, now, *args))
            if not rows:
                return None
            job_id, tenant = rows[0]["id"], rows[0]["user_id"]
            self._change(tenant, "UPDATE jobs SET status = 'running', lease_owner = ?,"
                         " lease_until = ?, attempts = attempts + 1, updated_at = ?"
                         " WHERE id = ? AND user_id = ?", (owner, until, now, job_id, tenant))
            return self.get(tenant, job_id)

    @staticmethod
    def _scope(user_id: str | None, conversation_id: str | None, alias: str = "j."
               ) -> tuple[str, list[Any]]:
        """`` AND`` clauses narrowing to a tenant and a conversation (``alias``: the
        table's alias with its dot, or ``""``)."""
        where: str = ""
        args: list[Any] = []
        if user_id is not None:
            where, args = f" AND {alias}user_id = ?", [user_id]
        if conversation_id is not None:
            where += f" AND {alias}conversation_id = ?"
            args.append(conversation_id)
        return where, args

    def _park_expired(self, now: str, where: str, args: Sequence[Any]) -> None:
        """Park (``failed``) the running jobs whose lease expired with no attempt left."""
        rows = self._select(
            None, "SELECT j.id, j.user_id, j.attempts FROM jobs j WHERE j.status ="
            f" 'running' AND j.lease_until < ? AND j.attempts >= j.max_attempts{where}",
            (now, *args))
        for row in rows:
            self._change(row["user_id"], "UPDATE jobs SET status = 'failed', error = ?,"
                         " lease_owner = NULL, lease_until = NULL, updated_at = ? WHERE id = ?"
                         " AND user_id = ? AND status = 'running'",
                         (LEASE_EXPIRED.format(attempts=row["attempts"]), now, row["id"],
                          row["user_id"]))

    def renew(self, user_id: str, job_id: str, owner: str, *, lease_s: float) -> bool:
        """Extend ``owner``'s lease on a running job by ``lease_s`` from now; False when
        ``owner`` no longer holds it."""
        with self.store.transaction():
            return self._change(
                user_id, "UPDATE jobs SET lease_until = ?, updated_at = ? WHERE id = ? AND"
                " user_id = ? AND status = 'running' AND lease_owner = ?",
                (stamp(after_s=lease_s), stamp(), job_id, user_id, owner)) > 0

    def complete(self, user_id: str, job_id: str, owner: str, result: list[dict[str, Any]],
                 *, facts: int | None = None) -> None:
        """Mark a job ``done`` with its result (``facts``: the events it counts; default
        the result's length). Call it in the transaction that writes the job's work.

        Raises:
            LeaseLost: ``owner`` no longer holds the job (nothing is changed).
        """
        with self.store.transaction():
            changed = self._change(
                user_id, "UPDATE jobs SET status = 'done', result = ?, facts = ?, error = NULL,"
                " lease_owner = NULL, lease_until = NULL, updated_at = ? WHERE id = ? AND"
                " user_id = ? AND status = 'running' AND lease_owner = ?",
                (self._json(result), len(result) if facts is None else facts, stamp(),
                 job_id, user_id, owner))
            if not changed:
                raise LeaseLost(f"job {job_id}: {owner} no longer holds its lease")

    def fail(self, user_id: str, job_id: str, owner: str, error: str, *, retry_s: float
             ) -> str | None:
        """End a failed attempt: ``pending`` again, due in ``retry_s`` seconds, or
        ``failed`` (parked, with ``error``) when it has no attempt left. Returns the new
        status, or None when ``owner`` no longer held the job (nothing is changed)."""
        now = stamp()
        with self.store.transaction():
            rows = self._select(user_id, "SELECT attempts, max_attempts FROM jobs WHERE id = ?"
                                " AND user_id = ? AND status = 'running' AND lease_owner = ?",
                                (job_id, user_id, owner))
            if not rows:
                return None
            status = ("failed" if rows[0]["attempts"] >= rows[0]["max_attempts"]
                      else "pending")
            self._change(user_id, "UPDATE jobs SET status = ?, error = ?, run_after = ?,"
                         " lease_owner = NULL, lease_until = NULL, updated_at = ? WHERE id = ?"
                         " AND user_id = ?", (status, error[:2000], stamp(after_s=retry_s),
                                              now, job_id, user_id))
            return status

    def release(self, user_id: str, job_id: str, owner: str) -> bool:
        """Give a running job back (``pending``, due now, its attempt not counted); False
        when ``owner`` no longer held it."""
        with self.store.transaction():
            return self._change(
                user_id, "UPDATE jobs SET status = 'pending', attempts = CASE WHEN"
                " attempts > 0 THEN attempts - 1 ELSE 0 END,"
                " lease_owner = NULL, lease_until = NULL, run_after = ?, updated_at = ?"
                " WHERE id = ? AND user_id = ? AND status = 'running' AND lease_owner = ?",
                (stamp(), stamp(), job_id, user_id, owner)) > 0

    def retry_failed(self, user_id: str, conversation_id: str | None = None, *,
                     hold_s: float = 0.0) -> int:
        """Make the tenant's parked (``failed``) jobs ``pending`` again with their attempts
        reset (what ``flush`` does before extracting); returns how many. ``hold_s`` keeps
        them from workers that take only due jobs for that long, so the caller that
        retries them (taking jobs whether due or not) runs them itself."""
        where, args = self._scope(user_id, conversation_id, "")
        with self.store.transaction():
            return self._change(
                user_id, "UPDATE jobs SET status = 'pending', attempts = 0, run_after = ?,"
                f" updated_at = ? WHERE status = 'failed'{where}",
                (stamp(after_s=hold_s), stamp(), *args))

    def prune(self, user_id: str | None = None, *, before: datetime | str,
              status: str | Sequence[str] = ("done",), dry_run: bool = False
              ) -> dict[str, int]:
        """Delete the finished jobs (of one tenant, or of all) of ``status`` (``done``,
        ``failed`` or both) whose last change (``updated_at``: when they finished) is
        before ``before``; returns how many per status (``dry_run``: would be, nothing
        deleted). The facts a job wrote are items and stay; :meth:`get` of a pruned job
        is None.

        Raises:
            ValueError: a status other than ``done`` and ``failed`` (a job not finished
                is never pruned), or none.
        """
        statuses = prunable(status)
        cutoff = before if isinstance(before, str) else stamp(as_utc(before))
        where, args = self._scope(user_id, None)
        rule = (f"j.status IN ({', '.join('?' * len(statuses))}) AND j.updated_at < ?"
                f"{where}")
        rule_args = [*statuses, cutoff, *args]
        with self.store.transaction():
            rows = self._select(user_id, "SELECT j.status, count(*) AS n FROM jobs j WHERE"
                                f" {rule} GROUP BY j.status", rule_args)
            found = {r["status"]: int(r["n"]) for r in rows}
            if found and not dry_run:
                self._change(user_id, f"DELETE FROM jobs WHERE id IN (SELECT j.id FROM jobs j"
                             f" WHERE {rule})", rule_args)
        return {s: found.get(s, 0) for s in statuses}

    def restore(self, user_id: str, jobs: Sequence[Job]) -> int:
        """Write jobs of ``user_id`` back as an export holds them, in the order given (a
        conversation's jobs run in that order), ids, attempts, results and record times
        kept. A job that was ``running`` comes back ``pending`` with no lease, its
        attempt not counted (the worker that held it is not this store's). Returns how
        many. Call it inside the transaction that writes their turns."""
        rows = []
        for job in jobs:
            running = job.status == "running"
            rows.append((
                job.id, user_id, job.conversation_id, job.kind,
                "pending" if running else job.status, self._json(job.params),
                max(job.attempts - 1, 0) if running else job.attempts, job.max_attempts,
                job.error, None if running else job.lease_owner,
                None if running else job.lease_until, job.run_after,
                None if job.result is None else self._json(job.result), job.facts,
                job.created_at, job.updated_at))
        if rows:
            with self.store.transaction():
                self._change_many(user_id, f"INSERT INTO jobs ({COLUMNS}) VALUES"
                                  f" ({', '.join('?' * 16)})", rows)
        return len(rows)

    # -- reading --------------------------------------------------------------------------

    def get(self, user_id: str, job_id: str) -> Job | None:
        """One job of this tenant, or None."""
        rows = self._select(user_id, f"SELECT {COLUMNS} FROM jobs WHERE id = ? AND user_id = ?",
                            (job_id, user_id))
        return self._job(rows[0]) if rows else None

    def owner(self, job_id: str) -> str | None:
        """The tenant of a job id, or None."""
        rows = self._select(None, "SELECT user_id FROM jobs WHERE id = ?", (job_id,))
        return rows[0]["user_id"] if rows else None

    def list(self, user_id: str | None = None, *, status: str | Sequence[str] | None = None,
             conversation_id: str | None = None, limit: int = 100, oldest: bool = False
             ) -> list[Job]:
        """Jobs of one tenant (or of all), newest first (``oldest``: in queue order),
        optionally of some statuses or one conversation; at most ``limit``."""
        statuses = [status] if isinstance(status, str) else list(status or [])
        where, args = self._scope(user_id, conversation_id)
        if statuses:
            where += f" AND j.status IN ({', '.join('?' * len(statuses))})"
            args += statuses
        order = "ASC" if oldest else "DESC"
        return [self._job(r) for r in self._select(
            user_id, f"SELECT {COLUMNS} FROM jobs j WHERE 1 = 1{where} ORDER BY j.rowid"
            f" {order} LIMIT ?", (*args, max(0, int(limit))))]

    def counts(self, user_id: str | None = None) -> dict[str, int]:
        """Jobs per status (of one tenant, or of all); every status named, 0 included."""
        where, args = self._scope(user_id, None)
        rows = self._select(user_id, "SELECT j.status, count(*) AS n FROM jobs j WHERE 1 = 1"
                            f"{where} GROUP BY j.status", args)
        found = {r["status"]: int(r["n"]) for r in rows}
        return {s: found.get(s, 0) for s in STATUSES}
