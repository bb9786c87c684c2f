"""Blobs and run records (``store.blobs``, ``store.runs``) over both backends (``backend``,
see ``conftest.py``): the same results on SQLite and PostgreSQL for blob put/get/replace/
delete/export and their limits, runs started, finished, judged, listed and pruned with
their steps, the event log, redaction of what a run records, tenant isolation and
forgetting; and, on PostgreSQL, row-level security on these tables."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memstrata.memory import FactItem
from memstrata.memory.runs import MASK, RunRecord, StepRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)


# -- blobs ---------------------------------------------------------------------------------


def test_blob_put_info_text_keys_export_delete(backend: Any) -> None:
    text = "line one Paris\nline two é ü 日本\n" + "x" * 500
    info = backend.blobs.put("u1", "doc", text, {"kind": "conversation", "turns": 5})
    assert (info.user_id, info.key, info.chars, info.lines) == ("u1", "doc", len(text), 3)
    assert info.sha256 == hashlib.sha256(text.encode()).hexdigest()
    got = backend.blobs.info("u1", "doc")
    assert got is not None and got.model_dump() == info.model_dump()
    assert got.metadata == {"kind": "conversation", "turns": 5}
    assert backend.blobs.text("u1", "doc") == text
    kept = datetime(2024, 3, 1, 10, tzinfo=UTC)  # an import's record time is kept
    backend.blobs.put("u1", "a-first", "one\n", recorded_at=kept)
    assert backend.blobs.keys("u1") == ["a-first", "doc"]
    assert backend.blobs.export("u1") == [
        {"key": "a-first", "text": "one\n", "metadata": {}, "recorded_at": kept.isoformat()},
        {"key": "doc", "text": text, "metadata": {"kind": "conversation", "turns": 5},
         "recorded_at": info.recorded_at.isoformat()}]
    assert backend.blobs.delete("u1", "doc") is True
    assert backend.blobs.delete("u1", "doc") is False
    assert backend.blobs.info("u1", "doc") is None and backend.blobs.text("u1", "doc") is None
    assert backend.blobs.keys("u1") == ["a-first"]


def test_blob_put_replaces_the_key_keeping_one_blob(backend: Any) -> None:
    backend.blobs.put("u1", "k", "old text", {"v": 1})
    assert backend.blobs.text("u1", "k") == "old text"  # read (and, on SQLite, cached)
    info = backend.blobs.put("u1", "k", "new\ntext\n", {"v": 2})
    assert (info.chars, info.lines) == (9, 2)
    assert backend.blobs.keys("u1") == ["k"]
    assert backend.blobs.text("u1", "k") == "new\ntext\n"
    assert backend.blobs.info("u1", "k").metadata == {"v": 2}  # type: ignore[union-attr]
    backend.blobs.put("u1", "k", "new\ntext\n")  # same text again: still one blob
    assert [{k: b[k] for k in ("key", "text", "metadata")} for b in backend.blobs.export("u1")
            ] == [{"key": "k", "text": "new\ntext\n", "metadata": {}}]


@pytest.mark.parametrize("key", ["", "   ", "\n"])
def test_blob_key_must_be_non_empty(backend: Any, key: str) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        backend.blobs.put("u1", key, "text")
    assert backend.blobs.keys("u1") == []


def test_blob_sizes_empty_and_large(backend: Any) -> None:
    empty = backend.blobs.put("u1", "empty", "")
    assert (empty.chars, empty.lines) == (0, 0) and backend.blobs.text("u1", "empty") == ""
    big = ("a line of a long document\n" * 80_000)  # ~2 MB
    info = backend.blobs.put("u1", "big", big)
    assert (info.chars, info.lines) == (len(big), 80_000)
    assert backend.blobs.text("u1", "big") == big


def test_blobs_are_per_tenant(backend: Any) -> None:
    backend.blobs.put("u1", "k", "u1's text")
    backend.blobs.put("u2", "k", "u2's text", {"o": True})
    assert backend.blobs.text("u1", "k") == "u1's text"
    assert backend.blobs.text("u2", "k") == "u2's text"
    assert backend.blobs.info("u1", "k").metadata == {}  # type: ignore[union-attr]
    assert backend.blobs.keys("u3") == [] and backend.blobs.export("u3") == []
    assert backend.blobs.info("u3", "k") is None and backend.blobs.text("u3", "k") is None
    assert backend.blobs.delete("u3", "k") is False
    assert backend.blobs.delete("u1", "k") is True
    assert backend.blobs.text("u2", "k") == "u2's text"


# -- runs ----------------------------------------------------------------------------------


def _record(run_id: str = "run_1", user: str = "u1", day: int = 0, **fields: Any
            ) -> RunRecord:
    return RunRecord(id=run_id, user_id=user, program="demo",
                     started_at=T0 + timedelta(days=day), **fields)


def _run(store: Any, user: str, day: int, *, status: str = "ok", steps: int = 2) -> str:
    run_id = f"run_{user}_{day}"
    store.runs.start(_record(run_id, user, day, status=status))
    store.runs.add_steps(run_id, [StepRecord(idx=i, kind="tool") for i in range(steps)])
    return run_id


def _ids(store: Any, user: str) -> set[str]:
    return {r.id for r in store.runs.list(user, limit=1000)}


def test_run_start_get_finish_round_trip(backend: Any) -> None:
    run = _record(agent_id="a1", task="find Paris", config={"k": 3, "nested": {"x": [1, 2.5]}},
                  layers=["L1", "L3"], git_commit="abc123", db_state={"rows": {"items": 2}},
                  usage={"calls": 1})
    backend.runs.start(run)
    got = backend.runs.get("u1", "run_1")
    assert got is not None and got.model_dump() == run.model_dump()
    assert (got.output, got.verdict, got.status, got.finished_at) == (None, None, "running",
                                                                       None)
    done = run.model_copy(update={
        "output": {"answer": "Paris", "ids": ["f1"], "score": 0.5}, "verdict": True,
        "usage": {"calls": 2, "prompt_tokens": 10}, "leakage": {"other": 0}, "status": "ok",
        "finished_at": T0 + timedelta(seconds=3), "wall_s": 3.25, "layers": ["L1"]})
    backend.runs.finish(done)
    got = backend.runs.get("u1", "run_1")
    assert got is not None and got.model_dump() == done.model_dump()
    # A JSON string output and an error: kept as given.
    failed = _record("run_2", output="plain text", status="error", error="boom")
    backend.runs.start(failed)
    backend.runs.finish(failed)
    assert backend.runs.get("u1", "run_2").model_dump() == failed.model_dump()  # type: ignore[union-attr]
    assert backend.runs.get("u2", "run_1") is None  # another tenant's run
    assert backend.runs.get("u1", "nope") is None


def test_finish_and_set_verdict_touch_only_the_tenants_run(backend: Any) -> None:
    backend.runs.start(_record())
    assert backend.runs.set_verdict("u1", "run_1", {"score": 1.0, "why": "exact"}) is True
    assert backend.runs.get("u1", "run_1").verdict == {"score": 1.0, "why": "exact"}  # type: ignore[union-attr]
    assert backend.runs.set_verdict("u2", "run_1", "stolen") is False
    assert backend.runs.set_verdict("u1", "missing", 1) is False
    backend.runs.finish(_record(user="u2", status="error"))  # same id, wrong tenant: no-op
    got = backend.runs.get("u1", "run_1")
    assert got is not None and got.status == "running" and got.verdict["score"] == 1.0


def test_steps_round_trip_in_order(backend: Any) -> None:
    backend.runs.start(_record())
    at = T0 + timedelta(minutes=1)
    backend.runs.add_steps("run_1", [
        StepRecord(idx=1, kind="llm", name="answer", input="q", output="a" * 10,
                   output_chars=1000, data={"model": "m", "n": [1, 2]}, ms=12.5, at=at),
        StepRecord(idx=0, kind="retrieval", name="search", data={}),
    ])
    backend.runs.add_steps("run_1", [])  # nothing to add
    steps = backend.runs.steps("u1", "run_1")
    assert [(s.idx, s.kind, s.name) for s in steps] == [(0, "retrieval", "search"),
                                                        (1, "llm", "answer")]
    assert steps[1].model_dump() == StepRecord(
        run_id="run_1", idx=1, kind="llm", name="answer", input="q", output="a" * 10,
        output_chars=1000, data={"model": "m", "n": [1, 2]}, ms=12.5, at=at).model_dump()
    assert steps[0].at is not None and steps[0].ms is None  # stamped when written
    assert backend.runs.steps("u2", "run_1") == []  # not that tenant's run
    assert backend.runs.steps("u1", "nope") == []


def test_step_index_is_unique_per_run_and_the_run_must_exist(backend: Any,
                                                            backend_name: str) -> None:
    duplicate = sqlite3.IntegrityError
    if backend_name == "postgres":
        import psycopg

        duplicate = psycopg.IntegrityError  # type: ignore[assignment]
    backend.runs.start(_record())
    backend.runs.add_steps("run_1", [StepRecord(idx=0, kind="tool")])
    with pytest.raises(duplicate):
        backend.runs.add_steps("run_1", [StepRecord(idx=1, kind="tool"),
                                         StepRecord(idx=0, kind="again")])
    assert [s.kind for s in backend.runs.steps("u1", "run_1")] == ["tool"]  # all or nothing
    missing = sqlite3.IntegrityError if backend_name == "sqlite" else ValueError
    with pytest.raises(missing):
        backend.runs.add_steps("no_such_run", [StepRecord(idx=0, kind="tool")])


def test_list_is_newest_first_per_tenant_or_of_all(backend: Any) -> None:
    for user, day in (("u1", 0), ("u1", 2), ("u2", 1), ("u2", 3), ("u1", 1)):
        _run(backend, user, day)
    backend.runs.start(_record("run_u1_tie", "u1", 2))  # same start as run_u1_2: by id
    assert [r.id for r in backend.runs.list("u1")] == [
        "run_u1_2", "run_u1_tie", "run_u1_1", "run_u1_0"]
    assert [r.id for r in backend.runs.list("u1", limit=2)] == ["run_u1_2", "run_u1_tie"]
    assert backend.runs.list("u1", limit=0) == []
    assert len(backend.runs.list("u1", limit=-1)) == 4  # negative: no limit (as SQLite)
    assert [r.id for r in backend.runs.list("u3")] == []
    every = backend.runs.list()
    assert [(r.user_id, r.id) for r in every] == [
        ("u2", "run_u2_3"), ("u1", "run_u1_2"), ("u1", "run_u1_tie"), ("u1", "run_u1_1"),
        ("u2", "run_u2_1"), ("u1", "run_u1_0")]  # equal starts: by id, across tenants
    assert [r.id for r in backend.runs.list(None, limit=3)] == [
        "run_u2_3", "run_u1_2", "run_u1_tie"]
    assert len(backend.runs.list(None, limit=-1)) == 6


def test_event_log(backend: Any) -> None:
    first = backend.runs.log_event("u1", {"type": "note", "text": "one"})
    second = backend.runs.log_event("u1", ["a", 1, None], agent_id="a1", run_id="run_9")
    other = backend.runs.log_event("u2", "u2's event")
    assert first < second < other
    events = backend.runs.events("u1")
    assert [(e["id"], e["agent_id"], e["run_id"], e["payload"]) for e in events] == [
        (second, "a1", "run_9", ["a", 1, None]),
        (first, None, None, {"type": "note", "text": "one"})]
    assert set(events[0]) == {"id", "agent_id", "run_id", "payload", "recorded_at"}
    assert isinstance(events[0]["recorded_at"], str)
    assert [e["id"] for e in backend.runs.events("u1", limit=1)] == [second]
    assert [e["payload"] for e in backend.runs.events("u2")] == ["u2's event"]
    assert backend.runs.events("u3") == []


# -- prune (as tests/trajectories/test_prune.py, over both backends) -------------------------


def test_prune_before_removes_old_runs_with_their_steps_of_one_tenant(backend: Any) -> None:
    for day in range(5):
        _run(backend, "u1", day)
        _run(backend, "u2", day)
    # Within one second of a stored start: the comparison is by time, not by text.
    report = backend.runs.prune("u1", before=T0 + timedelta(days=2, milliseconds=1))
    assert (report.runs, report.steps) == (3, 6)
    assert _ids(backend, "u1") == {"run_u1_3", "run_u1_4"}
    assert len(_ids(backend, "u2")) == 5
    assert backend.runs.steps("u1", "run_u1_0") == []
    assert len(backend.runs.steps("u2", "run_u2_0")) == 2
    assert backend.runs.prune("u1", before=T0 + timedelta(days=3)).runs == 0  # not before


def test_prune_keep_and_both_rules(backend: Any) -> None:
    for day in range(6):
        _run(backend, "u1", day)
    assert backend.runs.prune("u1", keep=4).runs == 2
    assert _ids(backend, "u1") == {f"run_u1_{d}" for d in (2, 3, 4, 5)}
    assert backend.runs.prune("u1", before=T0 + timedelta(days=5), keep=3).runs == 1
    assert _ids(backend, "u1") == {"run_u1_3", "run_u1_4", "run_u1_5"}
    assert backend.runs.prune("u1", keep=0).runs == 3


def test_prune_spares_running_and_cited_runs(backend: Any) -> None:
    _run(backend, "u1", 0, status="running")
    cited = _run(backend, "u1", 1)
    _run(backend, "u1", 2)
    backend.add(FactItem(user_id="u1", text="learned from run one", evidence=[cited, "turn_9"]))
    late = T0 + timedelta(days=30)
    report = backend.runs.prune("u1", before=late)
    assert (report.runs, report.kept_running, report.kept_evidence) == (1, 1, 1)
    assert _ids(backend, "u1") == {"run_u1_0", cited}
    assert backend.runs.prune("u1", before=late, keep_evidence=False).runs == 1
    assert _ids(backend, "u1") == {"run_u1_0"}


def test_a_retired_item_or_another_tenant_does_not_protect_runs(backend: Any) -> None:
    cited = _run(backend, "u1", 1)
    fid = backend.add(FactItem(user_id="u1", text="old lesson", evidence=[cited]))
    backend.update("u1", fid, valid_to=T0 + timedelta(days=2))
    backend.add(FactItem(user_id="u2", text="same id, other tenant", evidence=[cited]))
    assert backend.runs.prune("u1", keep=0).runs == 1


def test_prune_dry_run_and_refusals(backend: Any) -> None:
    for day in range(3):
        _run(backend, "u1", day)
    report = backend.runs.prune("u1", keep=1, dry_run=True)
    assert report.dry_run and (report.runs, report.steps) == (2, 4)
    assert len(_ids(backend, "u1")) == 3
    with pytest.raises(ValueError, match="needs a rule"):
        backend.runs.prune("u1")
    with pytest.raises(ValueError, match="keep must be"):
        backend.runs.prune("u1", keep=-1)


# -- redaction, forgetting -----------------------------------------------------------------


def test_what_a_run_records_is_redacted(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICE_TOKEN", "env-secret-value-123")
    key = "sk-" + "a" * 24
    backend.runs.start(_record(task=f"call with {key}",
                               config={"api_key": "plain", "max_tokens": 5,
                                       "url": "postgresql://me:pw123@host/db"}))
    got = backend.runs.get("u1", "run_1")
    assert got is not None and got.task == f"call with {MASK}"
    assert got.config == {"api_key": MASK, "max_tokens": 5,
                          "url": f"postgresql://{MASK}@host/db"}
    backend.runs.finish(_record(output={"said": "env-secret-value-123 leaked"},
                                error="Bearer abcdefghijklmnop failed"))
    got = backend.runs.get("u1", "run_1")
    assert got is not None and got.output == {"said": f"{MASK} leaked"}
    assert got.error == f"{MASK} failed"
    backend.runs.set_verdict("u1", "run_1", {"password": 1234, "ok": True})
    assert backend.runs.get("u1", "run_1").verdict == {"password": MASK, "ok": True}  # type: ignore[union-attr]
    backend.runs.add_steps("run_1", [StepRecord(idx=0, kind="tool", input='{"token": "t0k3n"}',
                                                data={"secret": ["x"], "n": 1})])
    step = backend.runs.steps("u1", "run_1")[0]
    assert (step.input, step.data) == (f'{{"token": "{MASK}"}}', {"secret": MASK, "n": 1})
    backend.runs.log_event("u1", {"Authorization": "Basic xyz", "text": key})
    assert backend.runs.events("u1")[0]["payload"] == {"Authorization": MASK, "text": MASK}


def test_forget_user_removes_blobs_runs_steps_and_events(backend: Any) -> None:
    for user in ("u1", "u2"):
        backend.blobs.put(user, "k", "text")
        _run(backend, user, 0, steps=3)
        backend.runs.log_event(user, {"n": 1})
        backend.runs.log_event(user, {"n": 2})
    deleted = backend.forget_user("u1")
    assert {t: deleted.get(t) for t in ("blobs", "runs", "run_steps", "events")} == {
        "blobs": 1, "runs": 1, "run_steps": 3, "events": 2}
    assert backend.blobs.keys("u1") == [] and backend.runs.list("u1") == []
    assert backend.runs.steps("u1", "run_u1_0") == [] and backend.runs.events("u1") == []
    assert backend.blobs.keys("u2") == ["k"] and len(backend.runs.steps("u2", "run_u2_0")) == 3
    assert len(backend.runs.events("u2")) == 2


# -- PostgreSQL: row-level security on these tables ----------------------------------------


@pytest.mark.postgres
def test_rls_hides_blobs_and_run_records_without_the_tenant(pg_url: str) -> None:
    import psycopg

    from memstrata.memory.store.pg import PgStore

    with PgStore.open(pg_url, embedder=None) as backend:
        _rls_walls(backend, psycopg)


def _rls_walls(backend: Any, psycopg: Any) -> None:
    for user in ("u1", "u2"):
        backend.blobs.put(user, "k", f"{user} text")
        _run(backend, user, 0)
        backend.runs.log_event(user, {"who": user})
    tables = ("blobs", "runs", "run_steps", "events")
    with backend._pool.connection() as conn:  # the app role, no app.tenant set
        assert conn.execute("SELECT current_user").fetchone() == ("memstrata_app",)
        for table in tables:
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO events (user_id, payload, recorded_at)"
                         " VALUES ('u1', '{}', 'now')")
        with conn.transaction():  # one tenant set: its rows only, even unfiltered
            conn.execute("SELECT set_config('app.tenant', 'u2', true)")
            for table in tables:
                owners = {r[0] for r in conn.execute(f"SELECT user_id FROM {table}")}
                assert owners == {"u2"}, table
            assert conn.execute("DELETE FROM runs WHERE id = 'run_u1_0'").rowcount == 0
    assert _ids(backend, "u1") == {"run_u1_0"}
