"""The sandbox-escape scenario: the real sandbox lets nothing out (quick slice, every kind
once), and every detector counts a deliberately broken case: code run with no sandbox at
all (``dspy.LocalInterpreter``), tools bound to the wrong tenant, an interpreter that
hangs, one whose shutdown hangs, and a missing sandbox."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata.bench.reliability import sandbox_escape as se
from memstrata.bench.reliability.common import Context
from memstrata.bench.reliability.sandbox_escape import (
    ATTEMPTS,
    TENANT_B,
    Attempt,
    Outcome,
    Probe,
    judge,
    run_attempts,
)


def _kinds(*names: str) -> tuple[Attempt, ...]:
    chosen = tuple(a for a in ATTEMPTS if a.kind in names)
    assert len(chosen) == len(names)
    return chosen


@pytest.fixture
def probe(tmp_path: Path) -> Any:
    made = Probe(tmp_path)
    yield made
    made.close()


def test_there_are_over_thirty_distinct_kinds_in_every_group() -> None:
    kinds = [a.kind for a in ATTEMPTS]
    assert len(kinds) == len(set(kinds)) >= 30
    assert {a.group for a in ATTEMPTS} >= {"files", "writes", "env", "network", "process",
                                           "interop", "cpu", "memory", "protocol", "tenant"}


def test_no_attempt_carries_a_marker_in_its_code(probe: Probe) -> None:
    # Markers must only come back by escaping, never because the code itself holds them.
    for attempt in ATTEMPTS:
        code = probe.fill(attempt.code)
        assert "%%" not in code, attempt.kind
        for secret in probe.secrets_shown.values():
            assert secret not in code, attempt.kind
        assert f"ESCAPED:{probe.token}" not in code, attempt.kind


def _judged(probe: Probe, kind: str, outcome: Outcome, act: Any = None) -> list[str]:
    attempt = _kinds(kind)[0]
    before = probe.snapshot()
    if act is not None:
        act()
    return [f"{counter}:{what}" for counter, what, _ in
            judge(probe, attempt, outcome, before, time_s=1.0, grace_s=1.0)]


def test_each_detector_counts_its_broken_case(probe: Probe) -> None:
    import socket

    assert _judged(probe, "deno_read_sync", Outcome(error="NotCapable")) == []
    assert _judged(probe, "deno_read_sync", Outcome(output=probe.host_marker)) == [
        "escapes:the host file marker came back to the sandbox"]
    assert _judged(probe, "py_os_environ", Outcome(error=f"x {probe.env_marker}"))
    assert _judged(probe, "deno_listen", Outcome(output=f"ESCAPED:{probe.token}"))
    assert _judged(probe, "deno_overwrite_victim", Outcome(),
                   lambda: probe.victim.write_text("pwned")) == [
        "escapes:a host file changed"]
    assert _judged(probe, "deno_chmod_victim", Outcome(), lambda: probe.victim.chmod(0o600))
    assert _judged(probe, "deno_write_tmp", Outcome(), lambda: probe.tmpfile.write_text("x"))
    assert _judged(probe, "subprocess_run", Outcome(), lambda: probe.spawn.write_text("x"))
    assert _judged(probe, "subprocess_run", Outcome(children=[4242]))

    def connect() -> None:
        with socket.create_connection(("127.0.0.1", probe.listener.port), timeout=2):
            pass
        deadline = time.monotonic() + 3
        while probe.listener.seen() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)

    assert _judged(probe, "py_socket_tcp", Outcome(), connect) == [
        "escapes:the host's listener saw a connection"]
    assert _judged(probe, "tenant_cross_write", Outcome(), lambda: probe.tenants.store.runs
                   .log_event(TENANT_B, {"written": "by A"})) == [
        "escapes:tenant B's data changed"]
    assert _judged(probe, "tenant_foreign_ids", Outcome(),
                   lambda: probe.captured.append(f"{{'text': '{probe.tenant_marker}'}}")) == [
        "escapes:the tenant B marker came back to the sandbox"]
    assert _judged(probe, "cpu_python_loop", Outcome(hung=True, seconds=9.0)) == [
        "escapes:the host hung: the step never returned"]
    assert _judged(probe, "timer_left_running", Outcome(shutdown_hung=True))
    assert _judged(probe, "output_flood", Outcome(error="stopped", host_growth_mb=2048))
    assert _judged(probe, "cpu_python_loop", Outcome(output="", seconds=0.1)) == [
        "escapes:a cpu-bound step ran to its end without being stopped"]
    assert _judged(probe, "cpu_python_loop", Outcome(error="stopped", seconds=5.0)) == [
        "escapes:the step was stopped only after its limit"]
    assert _judged(probe, "memory_python_alloc", Outcome(output=f"ESCAPED:{probe.token}"))
    assert _judged(probe, "deno_read_sync", Outcome(error="boom", error_type="KeyError",
                                                    recorded=False)) == [
        "crashes:the step raised KeyError, which ends an executor's run instead of being "
        "recorded"]
    assert _judged(probe, "big_int_result", Outcome(error="x", stopped_kind="crash")) == [
        "None:an ordinary error ended the sandbox"]


def test_code_run_without_a_sandbox_is_caught_escaping(tmp_path: Path) -> None:
    # dspy.LocalInterpreter is a plain subprocess: these attempts really get out, and
    # every one of them must be counted.
    kinds = ("py_open_etc_passwd", "py_open_host_marker", "py_listdir_host", "py_os_environ",
             "py_socket_tcp", "urllib_http", "subprocess_run", "os_system")
    ctx = Context(work=tmp_path, quick=True, budget_s=120)
    result = run_attempts(ctx, lambda probe: lambda: dspy.LocalInterpreter(
        execution_timeout=10), _kinds(*kinds), time_s=10, wall_s=10, grace_s=5)
    assert result.attempts == len(kinds)
    escaped = {d["kind"] for d in result.details if d["failure"]}
    assert escaped == set(kinds), result.figures["outcomes"]
    assert result.escapes >= len(kinds) and not (tmp_path / "host" / "escaped.txt").exists()


def test_tools_bound_to_the_wrong_tenant_are_caught_leaking(tmp_path: Path) -> None:
    ctx = Context(work=tmp_path, quick=True, budget_s=60)
    result = run_attempts(ctx, lambda probe: lambda: dspy.LocalInterpreter(
        execution_timeout=10), _kinds("tenant_search_own_tools", "tenant_foreign_blob"),
        time_s=10, wall_s=10, grace_s=5, tools_for=TENANT_B)
    assert result.escapes >= 2
    assert {d["failure"] for d in result.details} == {
        "the tenant B marker came back to the sandbox"}


class _Hangs:
    """An interpreter whose steps never return in time (or whose shutdown hangs)."""

    def __init__(self, hang_in: str) -> None:
        self.tools: dict[str, Any] = {}
        self.hang_in = hang_in

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> str:
        if self.hang_in == "execute":
            time.sleep(3)
        return ""

    def shutdown(self) -> None:
        if self.hang_in == "shutdown":
            time.sleep(3)


@pytest.mark.parametrize(("hang_in", "kind", "what"), [
    ("execute", "deno_read_sync", "the host hung: the step never returned"),
    ("shutdown", "timer_left_running", "the host hung: shutdown never returned")])
def test_a_hanging_interpreter_is_caught(tmp_path: Path, hang_in: str, kind: str,
                                         what: str) -> None:
    ctx = Context(work=tmp_path, quick=True, budget_s=60)
    result = run_attempts(ctx, lambda probe: lambda: _Hangs(hang_in), _kinds(kind),
                          time_s=0.2, wall_s=0.2, shutdown_s=0.2, grace_s=0.5)
    assert result.escapes >= 1 and result.details[0]["failure"] == what


def test_a_missing_sandbox_fails_instead_of_passing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTRATA_HOME", str(tmp_path / "nowhere"))
    result = se.run(Context(work=tmp_path / "w", quick=True))
    assert result.failures == 1 and result.figures["skipped"] is True
    assert result.attempts == 0 and "memstrata sandbox install" in result.details[0]["failure"]


@pytest.mark.slow
def test_quick_slice_every_kind_once_nothing_escapes(tmp_path: Path) -> None:
    from memstrata.programs.sandbox import sandbox_paths

    if not sandbox_paths().installed():
        pytest.fail("the sandbox's Pyodide is not installed: run `memstrata sandbox install`")
    # The suite gives the quick slice 60 s; a loaded machine needs more, and this test is
    # about the verdict, not the time.
    result = se.run(Context(work=tmp_path, quick=True, budget_s=400))
    outcomes = result.figures["outcomes"]
    assert result.failures == 0, result.details
    assert result.attempts == len(ATTEMPTS) == result.figures["kinds_run"]
    assert not result.stopped_early
    assert all(not line.startswith("BROKEN") for line in outcomes.values())
    # Every CPU-bound kind was stopped by the time limit (or ended by an error in time).
    for attempt in ATTEMPTS:
        if attempt.expect == "stopped":
            assert outcomes[attempt.kind].startswith("blocked: "), outcomes[attempt.kind]
