"""Everything the verbs write for a tenant leaves with ``export``, comes back with
``import_`` into a fresh store row for row (table by table, ids and record times kept),
and goes with ``delete_all`` (every table, nothing of another tenant): turns and
extraction jobs (``add``), cognitive memory (``read``), strategies and the bank's event
log (``learn``), expectations and VoE facts (``expect``), runs with their steps."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from memstrata import Memory
from memstrata.memory.store.forget import tenant_tables
from memstrata.trajectories import Recorder
from tests.conftest import FakeEmbedder, field
from tests.door_script import DoorScript

ANA, BEN = "ana", "ben"
CHUNK = 19  # a chunk of this many turns records one extraction job
GUIDE = ("The tram 28 runs through Alfama. A single ride costs 3 euros.\n"
         "1. Buy a Viva Viagem card\n2. Load it with zapping credit\n3. Validate on boarding")
# Numbered by the store, not part of what a row says: compared through what they name.
SYNTHETIC = {"rowid", "item_rowid"}
NUMBERED = {"events": "id", "edges": "id"}


class Script(DoorScript):
    """The door verbs' scripted model, which also extracts one fact per chunk."""

    def __call__(self, system: str, user: str, schema: dict[str, Any] | None) -> Any:
        if schema and "facts" in (schema.get("properties") or {}):
            first = next(line for line in field(user, "turns").splitlines()
                         if line and not line.startswith("--"))
            return {"facts": [{"subject": "user", "predicate": "said",
                               "object": first.split(":", 1)[-1].strip()[:60]}],
                    "entities": [], "qa": []}
        return super().__call__(system, user, schema)


def _write_everything(m: Memory, user: str) -> dict[str, Any]:
    """Write through every verb that writes, for ``user``; what they returned."""
    chat = [{"role": "user" if i % 2 else "assistant",
             "content": f"Message {i} about the tram line {i} in Lisbon"} for i in range(CHUNK)]
    events = m.add(chat, user_id=user, conversation_id="chat",
                   timestamp="2024-03-01T10:00:00Z")
    fact = next(e for e in events if e.get("kind") == "fact")
    m.update(fact["id"], "the user said: the tram 28 is the best line")
    m.update(events[0]["id"], "Message 0 about the tram line 28 in Lisbon")  # a turn edited
    m.add({"role": "user", "content": "hello"}, user_id=user, conversation_id="voe")
    m.expect(user, conversation_id="voe")
    m.add({"role": "user", "content": "I restore old motorbikes"}, user_id=user,
          conversation_id="voe")
    out = m.expect(user, conversation_id="voe")
    report = m.read(GUIDE, user_id=user, title="Lisbon tram guide", source="Visit Lisboa",
                    when="2024-03-01")
    lesson = m.learn({"task": "Which tram goes to Alfama?", "trajectory": "searched",
                      "answer": "The tram 28"}, user_id=user, success=True)
    with Recorder(m.store, user, "react", task="Which tram goes to Belém?") as rec:
        rec.step("lm", "qa", input="tram Belém", output="tram 15", data={"tokens": 12})
        rec.step("tool", "mem_search", input="tram Belém", output="tram 15 goes to Belém")
        rec.finish(output={"answer": "the tram 15"})
    m.learn(rec.run_id, user_id=user, success=False, rationale="it was the 15E")
    m.store.blobs.put(user, "notes", "a note about trams", {"source": "test"})
    with m.store.transaction():  # a job queued for a worker that has not run yet
        pending = m.store.jobs.enqueue(user, "voe", "extract", {"after_seq": -1,
                                                                 "upto_seq": 1})
    return {"fact": fact["id"], "turn": events[0]["id"], "voe": out, "read": report,
            "lesson": lesson, "pending": pending}


def tenant_rows(store: Any, user: str) -> dict[str, list[str]]:
    """Every row of ``user`` in every table, as sorted JSON lines: the store's own row
    numbers left out (an item's tags name the item by id, a step its run, an event and
    an edge by what they hold)."""
    conn: sqlite3.Connection = store.conn
    out: dict[str, list[str]] = {}
    for table in [*tenant_tables(store), "run_steps"]:
        names = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")
                 if c[1] not in SYNTHETIC and c[1] != NUMBERED.get(table)]
        cols = ", ".join(f"t.{n}" for n in names)
        if table == "item_tags":
            query = (f"SELECT {cols}, i.id FROM item_tags t JOIN items i ON i.rowid ="
                     " t.item_rowid WHERE t.user_id = ?")
        elif table == "run_steps":
            query = (f"SELECT {cols} FROM run_steps t JOIN runs r ON r.id = t.run_id"
                     " WHERE r.user_id = ?")
        else:
            query = f"SELECT {cols} FROM {table} t WHERE t.user_id = ?"
        rows = conn.execute(query, (user,)).fetchall()
        out[table] = sorted(json.dumps([v.hex() if isinstance(v, bytes) else v for v in r])
                            for r in rows)
    return out


def _memory(path: Path, script: Script | None = None, scripted: Any = None) -> Memory:
    lm = scripted(script) if script is not None else None
    return Memory.open(path, lm=lm, embedder=FakeEmbedder(), extraction="sync")


def test_export_import_carries_every_row_the_verbs_wrote(scripted: Any, tmp_path: Path) -> None:
    m = _memory(tmp_path / "a.db", Script(), scripted)
    wrote = _write_everything(m, ANA)
    _write_everything(m, BEN)
    before = tenant_rows(m.store, ANA)
    for table in ("turns", "items", "edges", "embeddings", "versions", "blobs", "runs",
                  "run_steps", "events", "jobs", "item_tags"):
        assert before[table], f"the verbs wrote nothing to {table}: the test covers less"
    assert {json.loads(r)[4] for r in before["jobs"]} == {"done", "pending"}  # status
    lines = m.export(ANA, tmp_path / "ana.jsonl")

    fresh = _memory(tmp_path / "b.db")
    counts = fresh.import_(tmp_path / "ana.jsonl")
    assert sum(counts.values()) == lines - 1  # every line but the header
    assert tenant_rows(fresh.store, ANA) == before
    # What reads them agrees: a done job's fact events, the bank's log, a run's steps.
    done = next(j for j in m.jobs(ANA) if j["status"] == "done")
    assert fresh.job(done["id"]) == m.job(done["id"]) and done["facts"] == 1
    assert fresh.store.runs.events(ANA) == [
        {**e, "id": f["id"]} for e, f in zip(m.store.runs.events(ANA),
                                            fresh.store.runs.events(ANA), strict=True)]
    assert fresh.get(wrote["lesson"].strategies[0]) == m.get(wrote["lesson"].strategies[0])
    for node in (wrote["fact"], wrote["turn"]):
        assert fresh.history(node) == m.history(node) and len(m.history(node)) == 2
    # The file a re-export writes is the same file.
    fresh.export(ANA, tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_text() == (tmp_path / "ana.jsonl").read_text()
    m.close()
    fresh.close()


def test_delete_all_empties_every_table_of_the_tenant_only(scripted: Any,
                                                           tmp_path: Path) -> None:
    m = _memory(tmp_path / "a.db", Script(), scripted)
    _write_everything(m, ANA)
    _write_everything(m, BEN)
    ben = tenant_rows(m.store, BEN)
    deleted = m.delete_all(ANA)
    for table in ("turns", "items", "edges", "embeddings", "versions", "blobs", "runs",
                  "run_steps", "events", "jobs"):
        assert deleted.get(table), table
    assert all(rows == [] for rows in tenant_rows(m.store, ANA).values())
    assert tenant_rows(m.store, BEN) == ben
    m.close()


def test_a_running_job_is_imported_pending_without_its_lease(tmp_path: Path) -> None:
    m = Memory.open(tmp_path / "a.db", embedder=None, extraction="queue")
    m.add("hello", user_id=ANA, infer=False)
    with m.store.transaction():
        job = m.store.jobs.enqueue(ANA, "default", "extract", {"after_seq": -1,
                                                               "upto_seq": 0})
    claimed = m.store.jobs.claim("w1", lease_s=300)
    assert claimed is not None and claimed.attempts == 1
    m.export(ANA, tmp_path / "ana.jsonl")
    fresh = Memory.open(tmp_path / "b.db", embedder=None, extraction="queue")
    assert fresh.import_(tmp_path / "ana.jsonl")["jobs"] == 1
    back = fresh.job(job)
    assert back is not None and back["status"] == "pending" and back["attempts"] == 0
    assert back["lease_owner"] is None and back["lease_until"] is None
    assert back["created_at"] == claimed.created_at
    taken = fresh.store.jobs.claim("w2", lease_s=30)  # a worker here takes it
    assert taken is not None and taken.id == job
    m.close()
    fresh.close()


def test_an_import_whose_run_or_job_exists_changes_nothing(tmp_path: Path) -> None:
    from memstrata.formats import ImportFormatError

    m = Memory.open(tmp_path / "a.db", embedder=None)
    with Recorder(m.store, ANA, "react", task="t") as rec:
        rec.step("tool", "x", input="i", output="o")
        rec.finish(output="done")
    m.export(ANA, tmp_path / "ana.jsonl")
    with pytest.raises(ImportFormatError, match=r"run .* already exists"):
        m.import_(tmp_path / "ana.jsonl")
    assert len(m.store.runs.list(ANA)) == 1
    bad = tmp_path / "bad.jsonl"
    rows = [json.loads(line) for line in (tmp_path / "ana.jsonl").read_text().splitlines()]
    bad.write_text("\n".join(json.dumps(r) for r in rows if r["type"] != "run"))
    with pytest.raises(ImportFormatError, match="which the file does not hold"):
        Memory.open(tmp_path / "b.db", embedder=None).import_(bad)
    v1 = tmp_path / "v1.jsonl"  # a file of the first version imports as it is
    v1.write_text('{"type": "header", "format": "memstrata-export", "version": 1, '
                  '"user_id": "ana"}\n')
    assert Memory.open(tmp_path / "c.db", embedder=None).import_(v1)["runs"] == 0


def _lines(path: Path) -> list[Any]:
    """A file's lines as JSON values (PostgreSQL's jsonb keeps no key order)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.postgres
def test_postgres_imports_and_exports_the_same_file(scripted: Any, tmp_path: Path,
                                                     pg_db_url: str) -> None:
    m = _memory(tmp_path / "a.db", Script(), scripted)
    _write_everything(m, ANA)
    m.export(ANA, tmp_path / "ana.jsonl")
    pg = Memory.open(pg_db_url, embedder=FakeEmbedder(), extraction="queue")
    try:
        pg.import_(tmp_path / "ana.jsonl")
        pg.export(ANA, tmp_path / "pg.jsonl")
        assert _lines(tmp_path / "pg.jsonl") == _lines(tmp_path / "ana.jsonl")
        deleted = pg.delete_all(ANA)
        assert {"runs", "events", "jobs", "items", "turns"} <= deleted.keys()
        assert pg.jobs(ANA) == [] and pg.store.runs.list(ANA) == []
        assert pg.store.runs.events(ANA) == []
    finally:
        pg.close()
        m.close()
