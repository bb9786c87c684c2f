"""Background extraction: the jobs table, the worker, ``Memory.wait``/``jobs``/``job``,
the synchronous mode, failures parked, leases re-taken, tenants kept apart, and no lock
held across a model call (SQLite, and PostgreSQL where marked)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from memstrata import Memory
from memstrata.errors import MemstrataError
from memstrata.memory import Store
from memstrata.memory.store.jobs import LEASE_EXPIRED, LeaseLost
from memstrata.programs.ingest import IngestError
from memstrata.worker import ExtractionSettings, JobTimeoutError, Worker
from tests.conftest import field

CHUNK = 19  # IngestSettings' default chunk: a job is recorded once 19 turns wait


def facts_of(user: str) -> dict[str, Any]:
    """One fact per chunk, from its first turn (deterministic)."""
    first = next(line for line in field(user, "turns").splitlines()
                 if line and not line.startswith("--"))
    return {"facts": [{"subject": "user", "predicate": "said",
                       "object": first.split(":", 1)[-1].strip()[:60]}],
            "entities": [], "qa": []}


def extracting(system: str, user: str, schema: Any) -> Any:
    if schema and "facts" in json.dumps(schema):
        return facts_of(user)
    return {"answer": "unknown", "evidence": []}


class Gate:
    """A reply function whose extraction calls block until :meth:`open` (``entered`` is
    set once a call is inside)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.calls = 0

    def open(self) -> None:
        self.gate.set()

    def __call__(self, system: str, user: str, schema: Any) -> Any:
        if schema and "facts" in json.dumps(schema):
            self.calls += 1
            self.entered.set()
            assert self.gate.wait(30), "the test never opened the gate"
            return facts_of(user)
        return {"answer": "unknown", "evidence": []}


def messages(n: int, start: int = 0) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 else "assistant",
             "content": f"Message {i} about hiking trail number {i}"}
            for i in range(start, start + n)]


def fast(**kw: Any) -> ExtractionSettings:
    return ExtractionSettings(**{"retry_s": 0.0, "poll_s": 0.05, **kw})


def add_each(m: Memory, msgs: list[dict[str, str]], user: str = "u",
             conv: str | None = None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for msg in msgs:
        events += m.add(msg, user_id=user, conversation_id=conv)
    return events


def test_add_returns_before_the_extraction_and_wait_sees_it_done(scripted) -> None:
    gate = Gate()
    m = Memory.open(":memory:", lm=scripted(gate), embedder=None, extraction=fast())
    try:
        started = time.perf_counter()
        events = add_each(m, messages(CHUNK))
        assert time.perf_counter() - started < 10
        assert all(e["kind"] == "turn" for e in events)  # no facts: not extracted yet
        assert gate.entered.wait(10)                      # the worker is in the model call
        [job] = m.jobs("u")
        assert job["status"] == "running" and job["facts"] == 0
        with pytest.raises(JobTimeoutError) as info:
            m.wait("u", timeout=0.2)
        assert isinstance(info.value, TimeoutError) and isinstance(info.value, MemstrataError)
        gate.open()
        summary = m.wait("u", timeout=30)
        assert summary["done"] == 1 and summary["pending"] == summary["running"] == 0
        done = m.job(job["id"], user_id="u")
        assert done is not None and done["status"] == "done" and done["attempts"] == 1
        assert done["facts"] == len(done["events"]) == 1
        assert done["events"][0]["kind"] == "fact" and done["events"][0]["event"] == "ADD"
        assert done["params"] == {"after_seq": -1, "upto_seq": CHUNK - 1}
        json.dumps(m.jobs()) and json.dumps(done)        # JSON-serialisable as they are
        assert set(m.jobs()[0]) == {"id", "user_id", "conversation_id", "kind", "status",
                                    "attempts", "error", "created_at", "updated_at", "facts"}
    finally:
        gate.open()
        m.close()


def test_background_facts_equal_the_synchronous_paths(scripted) -> None:
    """The same turns, added one by one: the facts each job extracts are those the
    synchronous path returns from ``add``, in the same order, and the stored facts match."""
    msgs = messages(3 * CHUNK + 5)
    sync = Memory.open(":memory:", lm=scripted(extracting), embedder=None, extraction="sync")
    back = Memory.open(":memory:", lm=scripted(extracting), embedder=None, extraction=fast())
    try:
        sync_events = [e for e in add_each(sync, msgs) if e["kind"] == "fact"]
        assert all(e["kind"] == "turn" for e in add_each(back, msgs))
        back.wait(timeout=30)
        jobs = list(reversed(back.jobs("u")))           # oldest first
        assert [j["status"] for j in jobs] == ["done"] * 3
        back_events = [e for j in jobs for e in back.job(j["id"])["events"]]  # type: ignore[index]

        def shape(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
            return [(e["event"], e["memory"]) for e in events]

        assert sync_events and shape(back_events) == shape(sync_events)

        def stored(m: Memory) -> list[str]:
            return sorted(r["text"] for r in m.get_all("u", kind="fact"))

        assert stored(back) == stored(sync)
        # flush: the partial tail, once, in both modes
        assert shape(back.flush("u")) == shape(sync.flush("u"))
        assert back.flush("u") == [] and sync.flush("u") == []
    finally:
        sync.close()
        back.close()


def test_sync_mode_returns_facts_and_failures_are_ingest_errors(scripted) -> None:
    m = Memory.open(":memory:", lm=scripted(lambda s, u, schema: "not json at all"),
                    embedder=None, extraction=ExtractionSettings(mode="sync", retry_s=0.0,
                                                                 max_attempts=2))
    try:
        with pytest.raises(IngestError, match="turns kept"):
            add_each(m, messages(CHUNK))
        assert m.store.counts("u")["turns"] == CHUNK       # the turns were stored
        [job] = m.jobs("u")
        assert job["status"] == "pending" and job["attempts"] == 1 and job["error"]
        summary = m.wait("u", timeout=30)                 # sync: runs it here, until parked
        assert summary["failed"] == 1 and m.jobs("u")[0]["attempts"] == 2
    finally:
        m.close()


def test_a_job_that_keeps_failing_is_parked_with_its_error(scripted) -> None:
    calls = {"n": 0}

    def broken(system: str, user: str, schema: Any) -> Any:
        calls["n"] += 1
        return "this is not JSON"

    m = Memory.open(":memory:", lm=scripted(broken), embedder=None,
                    extraction=fast(max_attempts=3))
    try:
        add_each(m, messages(CHUNK))
        summary = m.wait("u", timeout=60)
        assert summary["failed"] == 1 and summary["done"] == 0
        [job] = m.jobs("u", status="failed")
        assert job["attempts"] == 3 and "could not be parsed" in job["error"]
        before = calls["n"]
        time.sleep(0.3)                                   # parked: never taken again
        assert calls["n"] == before and m.jobs("u")[0]["status"] == "failed"
        assert m.get_all("u", kind="fact") == []          # nothing half-written
        # flush gives it another try, its attempts counted afresh; the job is then queued
        # again (no retry delay here), so the background worker may already be at it.
        with pytest.raises(IngestError, match=r"\(attempt 1 of 3; turns kept, the job "
                                              r"queued again\)"):
            m.flush("u")
    finally:
        m.close()


def test_an_abandoned_lease_is_taken_again_and_a_job_that_kills_workers_is_parked(
        scripted) -> None:
    m = Memory.open(":memory:", lm=scripted(extracting), embedder=None,
                    extraction=fast(mode="queue", max_attempts=2))
    try:
        add_each(m, messages(CHUNK))
        add_each(m, messages(CHUNK), conv="other")
        jobs = m.store.jobs
        dead = jobs.claim("dead-worker", lease_s=0.05)     # a worker that then died
        assert dead is not None and dead.status == "running"
        assert jobs.claim("another", lease_s=30, conversation_id=dead.conversation_id) is None
        time.sleep(0.1)
        worker = Worker(m, fast(max_attempts=2))
        again = worker.run_once(conversation_id=dead.conversation_id)
        assert again is not None and again.id == dead.id
        assert again.status == "done" and again.attempts == 2
        with pytest.raises(LeaseLost):                    # the dead worker's late write
            jobs.complete("u", dead.id, "dead-worker", [])
        # The other job dies on both its attempts: parked with what happened.
        for _ in range(2):
            assert jobs.claim("dead-worker", lease_s=0.01) is not None
            time.sleep(0.05)
        assert jobs.claim("live", lease_s=30) is None
        [parked] = m.jobs("u", status="failed")
        assert parked["error"] == LEASE_EXPIRED.format(attempts=2)
    finally:
        m.close()


def test_jobs_are_kept_per_tenant_and_forgotten_with_it(scripted) -> None:
    m = Memory.open(":memory:", lm=scripted(extracting), embedder=None, extraction=fast())
    try:
        add_each(m, messages(CHUNK), user="ana")
        add_each(m, messages(CHUNK), user="ben")
        m.wait(timeout=30)
        [a], [b] = m.jobs("ana"), m.jobs("ben")
        assert a["user_id"] == "ana" and b["user_id"] == "ben"
        assert m.job(b["id"], user_id="ana") is None and m.job(b["id"])["user_id"] == "ben"
        assert m.job("job_nope") is None
        assert {j["user_id"] for j in m.jobs()} == {"ana", "ben"}
        assert m.delete_all("ana").get("jobs") == 1
        assert m.jobs("ana") == [] and m.job(a["id"]) is None and m.jobs("ben") == [b]
        with pytest.raises(ValueError, match="status"):
            m.jobs("ana", status="lost")
        with pytest.raises(ValueError, match="limit"):
            m.jobs("ana", limit=2.5)  # type: ignore[arg-type]
    finally:
        m.close()


def test_another_tenants_search_runs_while_a_model_call_is_in_flight(scripted) -> None:
    gate = Gate()
    m = Memory.open(":memory:", lm=scripted(gate), embedder=None, extraction=fast())
    try:
        m.add("Ben keeps bees in his orchard", user_id="ben", infer=False)
        add_each(m, messages(CHUNK), user="ana")
        assert gate.entered.wait(10)                      # ana's extraction: inside the LM
        found: list[Any] = []
        reader = threading.Thread(target=lambda: found.append(
            m.search("bees orchard", user_id="ben", k=1)))
        reader.start()
        reader.join(5)
        assert not reader.is_alive() and found[0][0].text == "Ben keeps bees in his orchard"
        # ana's own writes go on too: a new chunk of turns mid-extraction is its next job
        add_each(m, messages(CHUNK, start=CHUNK), user="ana")
        assert [j["status"] for j in m.jobs("ana")] == ["pending", "running"]
        gate.open()
        m.wait("ana", timeout=30)
        first, second = reversed(m.jobs("ana"))
        one, two = m.job(first["id"]), m.job(second["id"])
        assert one["params"]["upto_seq"] == two["params"]["after_seq"] == CHUNK - 1  # type: ignore[index]
        assert two["params"]["upto_seq"] == 2 * CHUNK - 1                          # type: ignore[index]
        texts = sorted(r["text"] for r in m.get_all("ana", kind="fact"))
        assert texts == sorted({e["memory"] for j in (one, two) for e in j["events"]})  # type: ignore[index]
    finally:
        gate.open()
        m.close()


def test_forgetting_a_tenant_mid_extraction_writes_nothing_back(scripted) -> None:
    gate = Gate()
    m = Memory.open(":memory:", lm=scripted(gate), embedder=None, extraction=fast())
    try:
        add_each(m, messages(CHUNK), user="ana")
        assert gate.entered.wait(10)
        m.delete_all("ana")
        gate.open()
        deadline = time.monotonic() + 10
        while m._worker is not None and m._worker.finished == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert m.store.counts("ana") == {k: 0 for k in m.store.counts("ana")}
        assert m.jobs("ana") == [] and m.get_all("ana") == []
    finally:
        gate.open()
        m.close()


def test_close_leaves_the_job_for_the_next_worker(scripted, tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    gate = Gate()
    m = Memory.open(path, lm=scripted(gate), embedder=None, extraction=fast())
    add_each(m, messages(CHUNK))
    assert gate.entered.wait(10)
    m.close()                                             # mid model call
    gate.open()
    with Memory.open(path, lm=scripted(extracting), embedder=None, extraction=fast()) as again:
        [job] = again.jobs("u")
        assert job["status"] == "pending" and job["attempts"] == 0  # given back, not counted
        assert again.wait(timeout=30)["done"] == 1
        assert len(again.get_all("u", kind="fact")) == 1


def test_queue_mode_records_jobs_for_separate_workers(scripted, tmp_path: Path,
                                                       monkeypatch, capsys) -> None:
    from memstrata import agent_commands
    from memstrata.cli import main

    path = tmp_path / "queue.db"
    with Memory.open(path, embedder=None, extraction="queue") as app:  # no LM here
        add_each(app, messages(CHUNK + 3))
        assert app.flush("u") == []                       # the tail: a job for the workers
        assert [j["status"] for j in app.jobs("u")] == ["pending", "pending"]
        with pytest.raises(JobTimeoutError, match="memstrata worker"):
            app.wait(timeout=0.1)
    monkeypatch.setattr(agent_commands, "model_from_args", lambda args: scripted(extracting))
    assert main(["worker", "--db", str(path), "--once"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [x["status"] for x in lines[:2]] == ["done", "done"]
    assert lines[-1]["jobs"] == 2 and lines[-1]["done"] == 2
    with Memory.open(path, embedder=None) as app:
        assert app.wait(timeout=1)["done"] == 2
    with pytest.raises(SystemExit):
        main(["worker", "--db", str(tmp_path / "missing.db"), "--once"])


def test_extraction_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="extraction must be one of"):
        Memory.open(":memory:", extraction="later")
    assert Memory.open(":memory:", extraction="sync").extraction.mode == "sync"
    with pytest.raises(ValueError, match="timeout"):
        Memory.open(":memory:").wait(timeout=-1)
    assert ExtractionSettings(retry_s=2).retry_delay(3) == 8


def test_store_claims_in_order_and_never_twice() -> None:
    store = Store.open(":memory:", embedder=None)
    jobs = store.jobs
    with store.transaction():
        a1 = jobs.enqueue("a", "c1", "extract")
        a2 = jobs.enqueue("a", "c1", "extract")
        b1 = jobs.enqueue("b", "c1", "extract")
    first = jobs.claim("w1", lease_s=30)
    second = jobs.claim("w2", lease_s=30)
    assert (first.id, second.id) == (a1, b1)              # a2 waits for a1
    assert jobs.claim("w3", lease_s=30) is None
    assert jobs.fail("a", a1, "w2", "not mine", retry_s=0) is None
    assert jobs.fail("a", a1, "w1", "boom", retry_s=60) == "pending"
    assert jobs.claim("w3", lease_s=30) is None           # a1 is not due; a2 still waits
    assert jobs.claim("w3", lease_s=30, due_only=False).id == a1
    jobs.complete("a", a1, "w3", [{"event": "ADD"}])
    assert jobs.claim("w1", lease_s=30).id == a2
    assert jobs.counts() == {"pending": 0, "running": 2, "done": 1, "failed": 0}
    assert jobs.counts("b") == {"pending": 0, "running": 1, "done": 0, "failed": 0}
    assert [j.id for j in jobs.list("a")] == [a2, a1]
    assert jobs.owner(b1) == "b" and jobs.get("a", b1) is None


@pytest.mark.postgres
def test_postgres_jobs_claim_skip_locked_and_keep_tenants_apart(pg_url: str) -> None:
    from memstrata.memory.store.pg import PgStore

    store = PgStore.open(pg_url, embedder=None)
    try:
        jobs = store.jobs
        with store.transaction():
            a1 = jobs.enqueue("a", "c1", "extract", {"after_seq": -1, "upto_seq": 3})
            a2 = jobs.enqueue("a", "c1", "extract")
            b1 = jobs.enqueue("b", "c1", "extract")
        claimed: list[Any] = []

        def take(owner: str) -> None:
            claimed.append(jobs.claim(owner, lease_s=30))

        threads = [threading.Thread(target=take, args=(f"w{n}",)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        taken = sorted(j.id for j in claimed if j is not None)
        assert taken == sorted([a1, b1])                  # each once; a2 waits for a1
        assert jobs.get("a", a1).params == {"after_seq": -1, "upto_seq": 3}
        assert jobs.get("b", a1) is None and jobs.owner(b1) == "b"
        owner = jobs.get("a", a1).lease_owner
        jobs.complete("a", a1, owner, [{"event": "ADD", "memory": "x"}])
        with pytest.raises(LeaseLost):
            jobs.complete("a", a1, owner, [])
        assert jobs.claim("w9", lease_s=0.01).id == a2
        time.sleep(0.05)
        assert jobs.claim("w10", lease_s=30).id == a2 and jobs.get("a", a2).attempts == 2
        assert jobs.counts() == {"pending": 0, "running": 2, "done": 1, "failed": 0}
        assert jobs.counts("a")["done"] == 1
        assert [j.id for j in jobs.list()] == [b1, a2, a1]
        assert [j.id for j in jobs.list("b")] == [b1]
        assert jobs.get("a", a1).result == [{"event": "ADD", "memory": "x"}]
        assert store.forget_user("a").get("jobs") == 2 and jobs.counts("a")["done"] == 0
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_background_extraction_matches_sqlite(scripted, pg_db_url: str) -> None:
    msgs = messages(2 * CHUNK)
    lite = Memory.open(":memory:", lm=scripted(extracting), embedder=None, extraction="sync")
    pg = Memory.open(pg_db_url, lm=scripted(extracting), embedder=None, extraction=fast())
    try:
        want = [(e["event"], e["memory"]) for e in add_each(lite, msgs) if e["kind"] == "fact"]
        add_each(pg, msgs)
        assert pg.wait("u", timeout=60)["done"] == 2
        got = [(e["event"], e["memory"]) for j in reversed(pg.jobs("u"))
               for e in pg.job(j["id"])["events"]]  # type: ignore[index]
        assert got == want
        assert pg.delete_all("u").get("jobs") == 2 and pg.jobs() == []
    finally:
        lite.close()
        pg.close()
