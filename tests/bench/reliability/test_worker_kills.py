"""``worker_kills``: a small run kills workers mid-job and finds nothing lost or doubled;
the check counts a lost job, a lost fact and a duplicated one when they are there."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from memstrata import Memory
from memstrata.bench.reliability import worker_kills
from memstrata.bench.reliability.common import Context, Scenario


def test_a_small_run_loses_and_doubles_nothing(tmp_path: Path) -> None:
    result = worker_kills.worker_kills(Context(work=tmp_path, quick=True, seed=3,
                                               budget_s=150))
    figures = result.figures
    assert result.failures == 0, result.details
    assert result.attempts == figures["kills"] >= 6
    assert figures["jobs_done"] == figures["jobs"] == 20
    assert figures["attempts_killed"] >= 1     # kills landed inside jobs, which ran again
    assert figures["jobs_lost"] == figures["facts_duplicated"] == 0


def test_the_check_counts_lost_and_duplicated_work(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    expected = worker_kills._setup(path, 3)
    worker_kills._drain(path, deadline=float("inf"))
    clean = Scenario(name="clean")
    assert worker_kills.check(path, expected, clean)["jobs_done"] == 3
    assert clean.failures == 0
    first, second, third = sorted(expected)
    with Memory.open(path, extraction="queue") as memory:
        lost = memory.job(first)
        fact = next(r for r in memory.get_all(lost["user_id"], kind="fact")
                    if r["text"] == expected[first])
        memory.delete(fact["id"])                       # a job's fact gone
        doubled = memory.job(second)
        memory.store.jobs.enqueue(doubled["user_id"], doubled["conversation_id"], "extract",
                                  {"after_seq": -1, "upto_seq": -1})  # never run: lost
    conn = sqlite3.connect(path)
    conn.execute("UPDATE jobs SET result = json_array(json_object('event', 'NONE',"
                 " 'memory', ?)) WHERE id = ?", (expected[third], third))  # a re-run's result
    conn.commit()
    conn.close()
    broken = Scenario(name="broken")
    counts = worker_kills.check(path, expected, broken)
    assert counts["facts_lost"] == 1 and counts["jobs_lost"] == 1
    assert counts["jobs_duplicated"] == 1
    assert broken.lost_writes == 2 and broken.integrity_failures == 1
