"""Crash consistency scenarios: the quick slice is clean, and every detector can fail."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from memstrata import Memory
from memstrata.bench.reliability import crash
from memstrata.bench.reliability.common import Context, Scenario
from memstrata.memory import FactItem, default_embedder
from memstrata.memory.schema import LATEST_VERSION


@pytest.mark.parametrize("name", sorted(crash.SCENARIOS))
def test_quick_slice_finds_nothing(name: str, tmp_path: Path) -> None:
    ctx = Context(work=tmp_path, quick=True, seed=1, budget_s=60)
    result = crash.SCENARIOS[name](ctx)
    assert result.failures == 0, result.details
    assert result.attempts == 5 and not result.stopped_early


def test_a_spent_budget_starts_no_kill(tmp_path: Path) -> None:
    result = crash.crash_writes(Context(work=tmp_path, quick=True, budget_s=0))
    assert result.attempts == 0 and result.stopped_early


def test_fork_server_kills_and_reports_a_raising_worker(tmp_path: Path) -> None:
    errors = tmp_path / "err.txt"
    with crash.ForkServer() as forks:
        assert forks.threads == 1
        pid = forks.start(f"{crash.__name__}:migrate_task", path=str(tmp_path),
                          error_file=str(errors))  # a folder: the store cannot open
        end = forks.wait(pid, 60)
        assert not end.killed and end.code == 3
        assert "Error" in crash.child_error(errors)
        pid = forks.start(f"{crash.__name__}:writes_task", path=str(tmp_path / "w.db"),
                          report=str(tmp_path / "r.jsonl"), error_file=str(errors), seed=1,
                          cycle=0, turns=[], items=[])
        end = forks.kill(pid, 0.3)
        assert end.killed and end.signal == 9
    assert crash.read_lines(tmp_path / "r.jsonl")  # it wrote before it died


def test_a_probe_writer_that_hangs_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    Memory.open(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a write lock nobody releases: the writer waits
    try:
        with crash.ForkServer() as forks:
            pid = forks.start(f"{crash.__name__}:writes_task", path=str(path),
                              report=str(tmp_path / "r.jsonl"), error_file=str(tmp_path / "e"),
                              seed=1, cycle=0, turns=[], items=[], max_s=0.2)
            end = forks.wait(pid, 2.0)
    finally:
        holder.close()
    result = Scenario(name="t")
    crash.check_probe(end, result, 2.0)
    assert end.killed and result.crashes == 1


def _store(tmp_path: Path) -> tuple[Memory, list[str], str]:
    memory = Memory.open(tmp_path / "m.db")
    ids = [e["id"] for e in memory.add(["one garden", "two honey", "three violin"],
                                       user_id="ana", infer=False)]
    item = memory.store.add(FactItem(user_id="ana", text="bees make honey", tags=["bees"]))
    memory.update(ids[1], "two honey edited")
    return memory, ids, item


def _problems(memory: Memory) -> list[str]:
    return [what for what, _ in crash.index_problems(memory.store, default_embedder())]


def test_index_problems_is_quiet_on_a_sound_store(tmp_path: Path) -> None:
    memory, _, _ = _store(tmp_path)
    assert _problems(memory) == []


@pytest.mark.parametrize(("damage", "expected"), [
    ("DELETE FROM turns_fts WHERE rowid = (SELECT rowid FROM turns WHERE id = :t0)",
     "turn without its FTS row"),
    ("UPDATE turns SET text = 'changed behind the index' WHERE id = :t0",
     "stale FTS row of a turn"),
    ("UPDATE turns SET text = 'changed behind the index' WHERE id = :t0",
     "stale embedding"),
    ("DELETE FROM embeddings WHERE node_id = :item", "node without its embedding"),
    ("INSERT INTO embeddings VALUES ('t_gone', 'm', 'ana', 1, x'00000000')",
     "embedding of a node that is not there"),
    ("INSERT INTO edges (user_id, src, dst, relation, recorded_at) VALUES "
     "('ana', :t0, 't_gone', 'follows', '')", "edge to a node that is not there"),
    ("INSERT INTO versions VALUES ('ana', 't_gone', 1, 'ADD', '{}', '', '')",
     "versions of a node that is not there"),
    ("DELETE FROM item_tags", "item_tags disagree"),
    ("UPDATE turns SET seq = 0 WHERE id = :t1", "seq used twice"),
    ("DELETE FROM sessions", "turns of a session that has no row"),
    ("DELETE FROM items_fts", "item without its FTS row"),
])
def test_index_problems_finds_each_kind_of_damage(tmp_path: Path, damage: str,
                                                  expected: str) -> None:
    memory, ids, item = _store(tmp_path)
    memory.store.conn.execute(damage, {"t0": ids[0], "t1": ids[1], "item": item})
    assert any(p.startswith(expected) for p in _problems(memory)), _problems(memory)


def _raw_delete_turn(path: Path, node: str) -> None:
    """Remove a turn with everything that points at it (so only the loss shows)."""
    conn = sqlite3.connect(path)
    rowid = conn.execute("SELECT rowid FROM turns WHERE id = ?", (node,)).fetchone()[0]
    conn.execute("DELETE FROM turns_fts WHERE rowid = ?", (rowid,))
    conn.execute("DELETE FROM embeddings WHERE node_id = ?", (node,))
    conn.execute("DELETE FROM edges WHERE src = ? OR dst = ?", (node, node))
    conn.execute("DELETE FROM turns WHERE id = ?", (node,))
    conn.commit()
    conn.close()


def test_check_cycle_counts_a_lost_reported_write_and_a_partial_add(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Memory.open(path) as memory:
        texts = ["first said", "second said", "third said"]
        ids = [e["id"] for e in memory.add(texts, user_id="ana", infer=False,
                                           metadata={"batch": "b1", "size": 3})]
    lines = [{"n": 1, "op": "add", "user": "ana", "conv": "default", "batch": "b1",
              "texts": texts}, {"n": 1, "done": True, "ids": ids}]
    _raw_delete_turn(path, ids[2])
    result = Scenario(name="t")
    crash.check_cycle(path, crash.WriteModel(), lines, result, default_embedder())
    assert result.lost_writes == 1
    assert any(d["failure"] == "a partial add or conversation" for d in result.details)


def test_check_cycle_counts_an_update_that_did_not_land(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Memory.open(path) as memory:
        node = memory.add("before", user_id="ana", infer=False)[0]["id"]
    model = crash.WriteModel()
    model.turns[node] = crash._Node("before", "ana")
    lines = [{"n": 1, "op": "update", "id": node, "text": "after"}, {"n": 1, "done": True}]
    result = Scenario(name="t")
    crash.check_cycle(path, model, lines, result, default_embedder())
    assert result.lost_writes == 2  # the text, and the version the update keeps


def test_check_cycle_resolves_the_call_in_flight_both_ways(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Memory.open(path) as memory:
        texts = ["landed one", "landed two"]
        memory.add(texts, user_id="ana", infer=False, metadata={"batch": "b1", "size": 2})
    begun = [{"n": 1, "op": "add", "user": "ana", "conv": "default", "batch": "b1",
              "texts": texts}]
    model = crash.WriteModel()
    result = Scenario(name="t")
    crash.check_cycle(path, model, begun, result, default_embedder())
    assert result.failures == 0 and len(model.turns) == 2 and model.in_flight["committed"]
    lost = [{"n": 2, "op": "add", "user": "ana", "conv": "default", "batch": "b2",
             "texts": ["never landed"]}]
    crash.check_cycle(path, model, lost, result, default_embedder())
    assert result.failures == 0 and model.in_flight["absent"] == 1


def test_check_cycle_counts_a_row_nobody_reported(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Memory.open(path) as memory:
        memory.add("a phantom", user_id="ana", infer=False)
    result = Scenario(name="t")
    crash.check_cycle(path, crash.WriteModel(), [], result, default_embedder())
    assert result.integrity_failures == 1


@pytest.fixture(scope="module")
def old_store(tmp_path_factory: pytest.TempPathFactory) -> crash.MigrationTemplate:
    return crash.build_old_store(tmp_path_factory.mktemp("old"), 5, 200, 0)


def _migrating(old_store: crash.MigrationTemplate, tmp_path: Path) -> Path:
    path = tmp_path / "m.db"
    shutil.copyfile(old_store.path, path)
    return path


def test_check_migration_passes_an_untouched_and_a_migrated_store(
        old_store: crash.MigrationTemplate, tmp_path: Path) -> None:
    path = _migrating(old_store, tmp_path)
    result = Scenario(name="t")
    assert crash.check_migration(path, old_store, result) == 5  # then it migrates it
    assert crash.check_migration(path, old_store, result) == LATEST_VERSION
    assert result.failures == 0, result.details


def test_check_migration_finds_an_unrecorded_schema_change(
        old_store: crash.MigrationTemplate, tmp_path: Path) -> None:
    path = _migrating(old_store, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE turns_instances USING fts5vocab(turns_fts, 'instance')")
    conn.commit()
    conn.close()
    result = Scenario(name="t")
    crash.check_migration(path, old_store, result)
    assert result.details[0]["failure"].startswith("half-applied migration: the schema")


def test_check_migration_finds_fts_rows_half_rewritten(
        old_store: crash.MigrationTemplate, tmp_path: Path) -> None:
    from memstrata.memory.schema import MIGRATIONS

    path = _migrating(old_store, tmp_path)
    conn = sqlite3.connect(path)
    first = next(sql for v, _, sql in MIGRATIONS if v == 6).split(";")[0]
    conn.execute(first)  # migration 6's rewrite of turns_fts, unrecorded
    conn.commit()
    conn.close()
    result = Scenario(name="t")
    crash.check_migration(path, old_store, result)
    assert "FTS rows not in the recorded version's form" in result.details[0]["failure"]


def test_check_migration_counts_rows_lost(old_store: crash.MigrationTemplate,
                                          tmp_path: Path) -> None:
    path = _migrating(old_store, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM items WHERE rowid = 1")
    conn.commit()
    conn.close()
    result = Scenario(name="t")
    crash.check_migration(path, old_store, result)
    assert result.lost_writes >= 1


@pytest.fixture
def tenants(tmp_path: Path) -> tuple[Path, dict]:
    path = tmp_path / "t.db"
    crash.build_tenants(path, 40, 0)
    conn = sqlite3.connect(path)
    rowids = {u: {"turns_fts": [r[0] for r in conn.execute(
        "SELECT rowid FROM turns WHERE user_id = ?", (u,))],
        "items_fts": [r[0] for r in conn.execute(
            "SELECT rowid FROM items WHERE user_id = ?", (u,))]} for u in crash.TENANTS}
    before = crash.tenant_rows(conn, rowids)
    conn.close()
    return path, before


def test_check_forget_passes_a_real_forget(tenants: tuple[Path, dict]) -> None:
    path, before = tenants
    with Memory.open(path) as memory:
        memory.delete_all(crash.TENANTS[1])
    result = Scenario(name="t")
    assert crash.check_forget(path, before, crash.TENANTS[1], True, result) == "gone"
    assert result.failures == 0, result.details


def test_check_forget_finds_a_half_forgotten_tenant(tenants: tuple[Path, dict]) -> None:
    path, before = tenants
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM blobs WHERE user_id = ?", (crash.TENANTS[1],))
    conn.commit()
    conn.close()
    result = Scenario(name="t")
    assert crash.check_forget(path, before, crash.TENANTS[1], False, result) == "broken"
    assert result.integrity_failures == 1


def test_check_forget_finds_harm_to_another_tenant_and_an_undone_forget(
        tenants: tuple[Path, dict]) -> None:
    path, before = tenants
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM events WHERE user_id = ?", (crash.TENANTS[2],))
    conn.commit()
    conn.close()
    result = Scenario(name="t")
    assert crash.check_forget(path, before, crash.TENANTS[1], True, result) == "there"
    assert result.lost_writes == 2  # the other tenant's event, and the forget reported done


def test_check_forget_finds_a_forgotten_tenants_text_left_behind(
        tenants: tuple[Path, dict]) -> None:
    path, before = tenants
    victim = crash.TENANTS[1]
    conn = sqlite3.connect(path)  # deleting rows without scrubbing: their bytes stay
    for fts, table in (("turns_fts", "turns"), ("items_fts", "items")):
        conn.execute(f"DELETE FROM {fts} WHERE rowid IN (SELECT rowid FROM {table} WHERE"
                     " user_id = ?)", (victim,))
    conn.execute("DELETE FROM run_steps WHERE run_id IN (SELECT id FROM runs WHERE"
                 " user_id = ?)", (victim,))
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND"
                                 " sql NOT LIKE 'CREATE VIRTUAL%'").fetchall():
        if any(c[1] == "user_id" for c in conn.execute(f"PRAGMA table_info({table})")):
            conn.execute(f"DELETE FROM {table} WHERE user_id = ?", (victim,))
    conn.commit()
    conn.close()
    result = Scenario(name="t")
    assert crash.check_forget(path, before, victim, True, result) == "gone"
    assert result.secrets_found == 1
    assert result.details[0]["failure"] == "a forgotten tenant's text is still in the file"


def test_check_forget_finds_a_forgotten_tenants_terms_left_in_the_index(
        tenants: tuple[Path, dict]) -> None:
    from memstrata.memory.store import tenant_token

    path, before = tenants
    victim = crash.TENANTS[1]
    with Memory.open(path) as memory:
        memory.delete_all(victim)
        memory.store.conn.execute(  # an index row of the tenant that no turn owns
            "INSERT INTO turns_fts (rowid, body, context) VALUES (999999, ?, '')",
            (f"{tenant_token(victim)}xsecret",))
    result = Scenario(name="t")
    assert crash.check_forget(path, before, victim, True, result) == "gone"
    failures = {d["failure"] for d in result.details}
    assert "a forgotten tenant's terms remain in the FTS index" in failures
    assert result.secrets_found == 1 and result.integrity_failures >= 1
