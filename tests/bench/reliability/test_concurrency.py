"""Concurrency scenarios: the quick slice is clean, and every detector can fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata import Memory
from memstrata.bench.reliability import concurrency as cc
from memstrata.bench.reliability.common import Context, Scenario


@pytest.mark.parametrize("name", sorted(cc.SCENARIOS))
def test_quick_slice_finds_nothing(name: str, tmp_path: Path) -> None:
    result = cc.SCENARIOS[name](Context(work=tmp_path, quick=True, seed=1, budget_s=60))
    assert result.failures == 0, result.details
    assert result.attempts > 0 and not result.stopped_early
    assert result.figures["locked_surfaced"] == 0


def _shared(tmp_path: Path) -> tuple[Memory, dict[str, str]]:
    memory = Memory.open(tmp_path / "m.db")
    hot = {memory.add("hot first", user_id=cc.USER, conversation_id="hot",
                      infer=False)[0]["id"]: "hot first"}
    return memory, hot


def test_check_processes_is_quiet_when_the_reports_match(tmp_path: Path) -> None:
    memory, hot = _shared(tmp_path)
    [node] = hot
    added = memory.add("p0w1 garden", user_id=cc.USER, conversation_id="shared",
                       infer=False)[0]["id"]
    memory.update(node, "p1w2 hot trail")
    lines = [{"op": "add", "id": added, "text": "p0w1 garden", "conv": "shared"},
             {"op": "update", "id": node, "text": "p1w2 hot trail"}]
    result = Scenario(name="t")
    cc.check_processes(memory, lines, hot, result)
    assert result.failures == 0, result.details


def test_check_processes_counts_lost_twice_and_raised(tmp_path: Path) -> None:
    memory, hot = _shared(tmp_path)
    [node] = hot
    # One batch: sent alone again, a conversation's first turn would read as a re-send.
    twice = [e["id"] for e in memory.add(["same text"] * 2, user_id=cc.USER,
                                         conversation_id="shared", infer=False)]
    lines = [{"op": "add", "id": "t_" + "0" * 24, "text": "never stored", "conv": "shared"},
             {"op": "add", "id": twice[0], "text": "same text", "conv": "shared"},
             {"op": "add", "id": twice[1], "text": "same text", "conv": "shared"},
             {"op": "update", "id": node, "text": "an update the history lacks"},
             {"op": "error", "call": "write", "error": "OperationalError: database is locked",
              "busy": True}]
    result = Scenario(name="t")
    cc.check_processes(memory, lines, hot, result)
    assert result.lost_writes == 2  # the missing add, the update missing from the history
    assert result.integrity_failures == 1  # the text stored twice
    assert result.crashes == 1


def test_check_threads_counts_what_is_missing_or_extra(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path / "m.db")
    kept = memory.add("t0c1 kept", user_id="user0", infer=False)[0]["id"]
    memory.add("t0c2 nobody reported this", user_id="user0", infer=False)
    mine = cc._Thread(user="user0", texts={kept: "t0c1 kept", "t_" + "1" * 24: "t0c3 lost"})
    result = Scenario(name="t")
    cc.check_threads(memory, [mine], result)
    assert result.lost_writes == 1 and result.integrity_failures == 1


def test_breaches_sees_another_tenants_row_id_and_text() -> None:
    owners = {"t_" + "a" * 24: 0, "t_" + "b" * 24: 1}
    clean = [{"id": "t_" + "a" * 24, "user_id": cc.TENANTS[0],
              "text": f"{cc.tenant_marker(0)} mine"}]
    assert cc.breaches(clean, 0, owners.get) == []
    assert cc.breaches([{"user_id": cc.TENANTS[1]}], 0, owners.get)
    assert cc.breaches({"results": [{"id": "t_" + "b" * 24}]}, 0, owners.get)
    assert cc.breaches(f"the {cc.tenant_marker(1)} text", 0, owners.get)
    # A result may repeat its request: the query's words and the ids asked for are not
    # rows of the other tenant.
    query = f"bees {cc.tenant_marker(1)}"
    assert cc.breaches({"query": query, "missing": ["t_" + "b" * 24]}, 0, owners.get,
                       [query, "t_" + "b" * 24]) == []


def test_tenancy_under_load_counts_a_leaking_read(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    real_get = Memory.get

    def leaky_get(self: Memory, id: str, *, user_id: str | None = None):
        return real_get(self, id)  # forgets to check the tenant

    monkeypatch.setattr(Memory, "get", leaky_get)
    result = cc.tenancy_under_load(Context(work=tmp_path, quick=True, seed=2, budget_s=60))
    assert result.breaches > 0


def test_final_check_finds_a_row_under_the_wrong_tenant(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path / "m.db")
    node = memory.add(f"{cc.tenant_marker(3)} misfiled", user_id=cc.TENANTS[0],
                      infer=False)[0]["id"]
    result = Scenario(name="t")
    cc.final_check(memory, {node: (0, "another text")}, result)
    assert result.breaches == 1 and result.lost_writes == 1
