"""Pruning finished jobs, on both backends: ``done`` (and, asked by name, ``failed``) jobs
finished before a time go, of one tenant or of all; pending and running jobs never."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

PAST = datetime.now(UTC) - timedelta(days=1)


def _job(store: Any, user: str, conv: str, end: str | None) -> str:
    """A job of ``user`` left ``pending`` (``end`` None), ``running``, ``done`` or
    ``failed``."""
    with store.transaction():
        job_id = store.jobs.enqueue(user, conv, "extract", {"after_seq": -1, "upto_seq": 0},
                                    max_attempts=1)
    if end is None:
        return job_id
    assert store.jobs.claim("w", lease_s=300, user_id=user, conversation_id=conv).id == job_id
    if end == "done":
        store.jobs.complete(user, job_id, "w", [{"event": "ADD", "memory": "x"}])
    elif end == "failed":
        assert store.jobs.fail(user, job_id, "w", "boom", retry_s=0) == "failed"
    return job_id


def test_prune_deletes_finished_jobs_only(backend: Any) -> None:
    jobs = backend.jobs
    done = _job(backend, "a", "c1", "done")
    failed = _job(backend, "a", "c2", "failed")
    pending = _job(backend, "a", "c3", None)
    running = _job(backend, "a", "c4", "running")
    other = _job(backend, "b", "c1", "done")
    future = datetime.now(UTC) + timedelta(seconds=5)
    assert jobs.prune(None, before=PAST) == {"done": 0}  # they finished after it
    assert jobs.prune("a", before=future, dry_run=True) == {"done": 1}
    assert jobs.get("a", done) is not None
    assert jobs.prune("a", before=future) == {"done": 1}
    assert jobs.get("a", done) is None and jobs.get("b", other) is not None
    assert jobs.counts("a") == {"pending": 1, "running": 1, "done": 0, "failed": 1}
    # Every tenant (PostgreSQL: one at a time, as each), failed ones by name.
    assert jobs.prune(None, before=future, status=("done", "failed")) == {
        "done": 1, "failed": 1}
    assert jobs.get("b", other) is None and jobs.get("a", failed) is None
    assert {j.id for j in jobs.list()} == {pending, running}
    bad: list[Any] = ["pending", "running", [], ("done", "lost")]
    for status in bad:
        with pytest.raises(ValueError, match="finished"):
            jobs.prune("a", before=future, status=status)
    assert jobs.prune(None, before=future, status="failed") == {"failed": 0}


def test_restore_writes_jobs_back_with_their_times(backend: Any) -> None:
    jobs = backend.jobs
    done = jobs.get("a", _job(backend, "a", "c1", "done"))
    running = jobs.get("a", _job(backend, "a", "c2", "running"))
    backend.forget_user("a")
    with backend.transaction():
        assert jobs.restore("z", [done, running]) == 2
    assert jobs.get("z", done.id) == done.model_copy(update={"user_id": "z"})
    back = jobs.get("z", running.id)
    assert (back.status, back.attempts, back.lease_owner, back.lease_until) == (
        "pending", 0, None, None)
    assert back.created_at == running.created_at
