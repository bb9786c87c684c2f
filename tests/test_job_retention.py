"""Finished extraction jobs do not pile up: workers prune done jobs after
``keep_done_days`` (failed ones stay until retried or pruned by name), ``Memory.prune_jobs``
and ``memstrata jobs prune`` prune by hand, and the facts a pruned job wrote stay."""

from __future__ import annotations

import json
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memstrata import Memory
from memstrata.worker import ExtractionSettings, Worker
from tests.test_jobs import CHUNK, add_each, extracting, fast, messages


def _done_job(m: Memory, user: str = "u") -> dict[str, Any]:
    add_each(m, messages(CHUNK), user=user)
    m.wait(timeout=30)
    [job] = [j for j in m.jobs(user) if j["status"] == "done"]
    return job


def test_prune_jobs_deletes_done_jobs_and_keeps_their_facts(scripted: Any) -> None:
    m = Memory.open(":memory:", lm=scripted(extracting), embedder=None,
                    extraction=fast(keep_done_days=None))
    try:
        job = _done_job(m)
        other = _done_job(m, "v")
        facts = m.get_all("u", kind="fact")
        assert facts and m.job(job["id"])["events"]  # type: ignore[index]
        assert m.prune_jobs("u", older_than_days=1) == {"done": 0}
        assert m.prune_jobs("u", before=date(2000, 1, 1)) == {"done": 0}
        assert m.prune_jobs("u", before="2000-01-01T00:00:00Z") == {"done": 0}
        assert m.prune_jobs("u", dry_run=True) == {"done": 1} and m.job(job["id"])
        assert m.prune_jobs("u") == {"done": 1}
        assert m.job(job["id"]) is None and m.jobs("u") == []
        assert m.get_all("u", kind="fact") == facts  # what the job wrote stays
        assert m.job(other["id"]) is not None  # another tenant's job is not touched
        assert m.prune_jobs(status=("done", "failed")) == {"done": 1, "failed": 0}
        for bad in ({"status": "pending"}, {"older_than_days": -1},
                    {"older_than_days": 1, "before": "2020-01-01"}):
            with pytest.raises(ValueError):
                m.prune_jobs("u", **bad)
    finally:
        m.close()


def test_a_worker_prunes_old_done_jobs_now_and_then_and_keeps_failed_ones(
        scripted: Any) -> None:
    m = Memory.open(":memory:", lm=scripted(extracting), embedder=None,
                    extraction=fast(keep_done_days=None))
    try:
        first = _done_job(m)
        with m.store.transaction():  # a parked job: kept whatever its age
            parked = m.store.jobs.enqueue("x", "c", "extract", max_attempts=1)
        m.store.jobs.claim("w", lease_s=30, user_id="x")
        m.store.jobs.fail("x", parked, "w", "boom", retry_s=0)
        keeping = Worker(m, ExtractionSettings(keep_done_days=1))
        assert keeping.prune_due() == {"done": 0}  # finished less than a day ago
        assert keeping.prune_due() is None         # not due again within the hour
        assert Worker(m, ExtractionSettings(keep_done_days=None)).prune_due() is None
        pruning = Worker(m, ExtractionSettings(keep_done_days=0, prune_every_s=3600))
        assert pruning.run_once() is None            # no job; it pruned first
        kept = m.job(parked)
        assert m.job(first["id"]) is None and kept is not None and kept["status"] == "failed"
    finally:
        m.close()


def test_done_jobs_do_not_pile_up_under_the_background_worker(scripted: Any) -> None:
    m = Memory.open(":memory:", lm=scripted(extracting), embedder=None,
                    extraction=fast(keep_done_days=0, prune_every_s=0.001))
    kept = Memory.open(":memory:", lm=scripted(extracting), embedder=None, extraction="sync")
    try:
        for n in range(3):
            add_each(m, messages(CHUNK, start=n * CHUNK))
            add_each(kept, messages(CHUNK, start=n * CHUNK))
            m.wait(timeout=30)
        assert len(kept.jobs("u")) == 3  # a sync memory runs no worker loop: kept
        # The idle worker's looks for jobs prune what is done (older than 0 days here).
        deadline = time.monotonic() + 10
        while m.jobs("u") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert m.jobs("u") == []
        texts = [f["text"] for f in m.get_all("u", kind="fact")]
        assert texts and texts == [f["text"] for f in kept.get_all("u", kind="fact")]
    finally:
        m.close()
        kept.close()


def test_jobs_command_lists_and_prunes(scripted: Any, tmp_path: Path, capsys: Any) -> None:
    from memstrata.cli import main

    path = tmp_path / "m.db"
    with Memory.open(path, lm=scripted(extracting), embedder=None,
                     extraction=fast(keep_done_days=None)) as m:
        job = _done_job(m)
    capsys.readouterr()
    assert main(["jobs", "list", "--db", str(path), "--status", "done"]) == 0
    assert [json.loads(x)["id"] for x in capsys.readouterr().out.splitlines()] == [job["id"]]
    assert main(["jobs", "prune", "--db", str(path), "--older-than", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": {"done": 0}, "dry_run": False}
    assert main(["jobs", "prune", "--db", str(path), "--user", "u", "--status", "all",
                 "--before", (datetime.now(UTC) + timedelta(minutes=1)).isoformat()]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == {"done": 1, "failed": 0}
    assert main(["jobs", "prune", "--db", str(path), "--status", "pending"]) == 2
    assert "finished" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["jobs", "list", "--db", str(tmp_path / "none.db")])
    assert stopped.value.code == 1
