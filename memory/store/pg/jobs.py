"""The job queue on PostgreSQL: ``store.jobs``.

``PgJobs`` is the SQLite store's ``Jobs`` (``memory/store/jobs.py``): the same methods,
contracts and SQL through the PostgreSQL hooks of ``tables.py`` (``%s`` placeholders, each
statement in its tenant's transaction for row-level security, JSON as ``jsonb``). What
differs is what spans tenants, which row-level security hides from the store's role:

- ``claim`` calls ``memstrata_claim_job`` (migration 11), a definer function that parks
  the expired jobs with no attempt left and leases the oldest claimable job with
  ``FOR UPDATE SKIP LOCKED``, so workers in many processes each take a different job
  without waiting on one another; it returns the job's id and tenant, and the job is then
  read as that tenant.
- ``owner``, ``counts()`` and ``list()`` of every tenant go through
  ``memstrata_job_owner``, ``memstrata_job_counts`` and ``memstrata_job_tenants`` (ids,
  counts and tenants only); ``list()`` then reads each tenant's jobs as that tenant, and
  ``prune()`` of every tenant prunes each tenant's as that tenant.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..jobs import LEASE_EXPIRED, NEVER, STATUSES, Job, Jobs, prunable, stamp
from .tables import _PgTables


class PgJobs(_PgTables, Jobs):
    """The ``jobs`` table (see the module)."""

    def claim(self, owner: str, *, lease_s: float, user_id: str | None = None,
              conversation_id: str | None = None, due_only: bool = True) -> Job | None:
        """As ``Jobs.claim`` (see the module for how it spans tenants)."""
        now = stamp()
        with self.store.transaction():
            rows = self.store._rows(
                None, "SELECT job_id, job_user FROM memstrata_claim_job(%s, %s, %s, %s, %s,"
                " %s, %s)", (owner, now, stamp(after_s=lease_s), now if due_only else NEVER,
                             user_id, conversation_id, LEASE_EXPIRED))
            if not rows:
                return None
            return self.get(rows[0][1], rows[0][0])

    def owner(self, job_id: str) -> str | None:
        """The tenant of a job id, or None."""
        return self.store._rows(None, "SELECT memstrata_job_owner(%s)", (job_id,))[0][0]

    def counts(self, user_id: str | None = None) -> dict[str, int]:
        """Jobs per status (of one tenant, or of all); every status named, 0 included."""
        if user_id is not None:
            return super().counts(user_id)
        found = dict(self.store._rows(None, "SELECT status, n FROM memstrata_job_counts()"))
        return {s: int(found.get(s, 0)) for s in STATUSES}

    def list(self, user_id: str | None = None, *, status: str | Sequence[str] | None = None,
             conversation_id: str | None = None, limit: int = 100, oldest: bool = False
             ) -> list[Job]:
        """As ``Jobs.list``; of every tenant, one query per tenant with jobs, merged in
        queue order (creation time, then id)."""
        if user_id is not None:
            return super().list(user_id, status=status, conversation_id=conversation_id,
                                limit=limit, oldest=oldest)
        with self.store._tx():
            tenants = [r[0] for r in self.store._rows(
                None, "SELECT * FROM memstrata_job_tenants()")]
            jobs: list[Job] = []
            for tenant in tenants:
                jobs += super().list(tenant, status=status, conversation_id=conversation_id,
                                     limit=limit, oldest=oldest)
        jobs.sort(key=lambda j: (j.created_at, j.id), reverse=not oldest)
        return jobs[:max(0, int(limit))]

    def prune(self, user_id: str | None = None, *, before: datetime | str,
              status: str | Sequence[str] = ("done",), dry_run: bool = False
              ) -> dict[str, int]:
        """As ``Jobs.prune``; of every tenant, one tenant at a time (each in its own
        transaction, so row-level security sees its rows)."""
        if user_id is not None:
            return super().prune(user_id, before=before, status=status, dry_run=dry_run)
        with self.store._tx():
            tenants = [r[0] for r in self.store._rows(
                None, "SELECT * FROM memstrata_job_tenants()")]
        total = dict.fromkeys(prunable(status), 0)
        for tenant in tenants:
            for name, n in super().prune(tenant, before=before, status=status,
                                         dry_run=dry_run).items():
                total[name] += n
        return total
