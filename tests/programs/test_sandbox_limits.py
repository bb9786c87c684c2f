"""The sandbox's limits and hardening: time and memory limits end a step with a recorded
error and a restart, the executors record it as a step, DSPy's runner no longer dies on
odd exceptions, a full stderr pipe no longer hangs a step, shutdown returns with a timer
left running, and the Deno process gets no host secrets.

The real-sandbox tests need ``memstrata sandbox install`` (the README's first command);
they are ``slow``. The rest run anywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dspy.primitives.code_interpreter import CodeExecutionError

from memstrata.programs import sandbox
from memstrata.programs.sandbox import (
    DENIED,
    RUNNER_FIXES,
    SandboxInterpreter,
    SandboxLimitError,
    SandboxLimits,
    _StderrTail,
    _Watchdog,
    deno_command,
    runner_path,
    sandbox_env,
    sandbox_factory,
    sandbox_paths,
)


def test_every_runner_fix_still_applies_to_the_installed_dspy() -> None:
    # A DSPy upgrade that changes these lines silently drops the fixes: fail loudly here.
    source = runner_path().read_text(encoding="utf-8")
    for original, _ in RUNNER_FIXES:
        assert source.count(original) == 1, original


def test_the_command_denies_every_permission_but_reading_its_files(tmp_path: Path) -> None:
    paths = sandbox.SandboxPaths(tmp_path)
    command = deno_command(paths, "deno", SandboxLimits(memory_mb=512), tmp_path / "r.js",
                           tmp_path / "snap.bin")
    assert not any(c.startswith(("--allow-net", "--allow-env", "--allow-write", "--allow-run",
                                 "--allow-ffi", "--allow-sys", "--allow-all")) for c in command)
    assert set(DENIED) <= set(command) and "--no-prompt" in command
    assert "--v8-flags=--max-old-space-size=256,--wasm-max-mem-pages=8192" in command
    assert command[-1] == f"--memstrata-snapshot={tmp_path / 'snap.bin'}"


def test_the_deno_environment_keeps_no_host_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-the-sandbox")
    monkeypatch.setenv("DENO_DIR", "/tmp/deno-cache")
    env = sandbox_env()
    assert "OPENAI_API_KEY" not in env and env["DENO_DIR"] == "/tmp/deno-cache"
    assert env["DENO_NO_PACKAGE_JSON"] == "1"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True)
    yield proc
    proc.kill()
    proc.wait()


def test_the_watchdog_kills_after_the_limit(sleeper: subprocess.Popen[str]) -> None:
    started = time.monotonic()
    dog = _Watchdog(sleeper, 0.3)
    sleeper.wait(timeout=5)
    assert dog.stop() and 0.25 < time.monotonic() - started < 3


def test_tool_time_does_not_count_but_the_wall_clock_does(
        sleeper: subprocess.Popen[str]) -> None:
    dog = _Watchdog(sleeper, 0.3, wall_s=1.0)
    dog.pause()  # a host tool runs: the step's own clock stands still
    time.sleep(0.6)
    assert sleeper.poll() is None
    started = time.monotonic()
    sleeper.wait(timeout=5)  # the wall clock (1 s in all) still ends it
    assert dog.stop() and time.monotonic() - started < 1.0


def test_a_stopped_watch_never_kills(sleeper: subprocess.Popen[str]) -> None:
    dog = _Watchdog(sleeper, 0.2)
    assert dog.stop() is False
    time.sleep(0.4)
    assert sleeper.poll() is None


@pytest.mark.parametrize(("last_words", "kind"), [
    ("error: Uncaught (in promise) RangeError: Array buffer allocation failed", "memory"),
    ("Deno could not start: unable to create worker threads.\nThis usually happens when "
     "running in a container with a low\nPID limit.", "memory"),
    ("error: Uncaught SyntaxError: Unexpected token", "crash"),
])
def test_a_process_that_ends_is_classified_by_its_last_words(last_words: str,
                                                            kind: str) -> None:
    """Out of memory inside the runner (not the step) ends Deno with code 1 and says so
    only on stderr: the lost step is a memory incident, with those words kept."""
    proc = subprocess.Popen([sys.executable, "-c", f"import sys; print({last_words!r}, "
                             "file=sys.stderr); sys.exit(1)"], stderr=subprocess.PIPE, text=True)
    proc.wait(timeout=10)
    interp = SandboxInterpreter([sys.executable], limits=SandboxLimits(max_restarts=0))
    interp.deno_process, interp._stderr = proc, _StderrTail(proc)
    err = interp._stopped("No response during execution", fired=False, seconds=0.1)
    assert err.kind == kind
    assert interp.incidents[-1]["exit_code"] == 1
    assert last_words in interp.incidents[-1]["stderr"]


# -- the real sandbox ---------------------------------------------------------------------


@pytest.fixture
def installed() -> None:
    if not sandbox_paths().installed():
        pytest.fail("the sandbox's Pyodide is not installed: run `memstrata sandbox install`")


def _interp(**limits: Any) -> SandboxInterpreter:
    return sandbox_factory(limits=SandboxLimits(**limits))()


@pytest.mark.slow
def test_a_cpu_bound_step_ends_with_a_recorded_error_and_the_sandbox_restarts(
        installed: None) -> None:
    interp = _interp(time_s=2.0)
    try:
        interp.execute("kept = 41")
        started = time.monotonic()
        with pytest.raises(SandboxLimitError, match="time limit") as err:
            interp.execute("while True:\n    pass")
        assert err.value.kind == "time" and time.monotonic() - started < 2.0 + 3
        assert interp.incidents[-1]["kind"] == "time"
        # The next step runs in a fresh process, with the tool-free steps replayed.
        assert interp.execute("print(kept + 1)").strip() == "42"
        assert interp.restarts == 1
    finally:
        interp.shutdown()


@pytest.mark.slow
def test_a_slow_start_does_not_keep_the_first_step_from_being_replayed(
        installed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    spawn = SandboxInterpreter._spawn_process

    def slow_spawn(self: SandboxInterpreter) -> None:  # a loaded machine's start-up
        time.sleep(sandbox.JOURNAL_MAX_STEP_S + 0.5)
        spawn(self)

    monkeypatch.setattr(SandboxInterpreter, "_spawn_process", slow_spawn)
    interp = _interp(time_s=2.0)
    try:
        interp.execute("kept = 41")
        assert [code for code, _ in interp._journal] == ["kept = 41"]
    finally:
        interp.shutdown()


@pytest.mark.slow
def test_memory_bound_steps_end_with_a_recorded_error_within_the_limit(
        installed: None) -> None:
    interp = _interp(memory_mb=512, time_s=30.0)
    try:
        with pytest.raises(CodeExecutionError, match="MemoryError"):  # the WASM heap's cap
            interp.execute("x = bytearray(900 * 2**20)")
        with pytest.raises(CodeExecutionError) as err:  # ArrayBuffers: RLIMIT_DATA
            interp.execute("import js\njs.eval('globalThis.k = []; for (let i = 0; i < 100; "
                           "i++) globalThis.k.push(new Uint8Array(2**24).fill(1))')")
        assert "RangeError" in str(err.value) or getattr(err.value, "kind", "") == "memory", \
            (str(err.value), interp.incidents)
        started = time.monotonic()
        with pytest.raises(SandboxLimitError) as stop:  # the JavaScript heap: V8 gives up
            interp.execute("import js\njs.eval('globalThis.a = []; while (true) "
                           "globalThis.a.push(new Array(1e6).fill(1.5))')")
        took = time.monotonic() - started
        assert stop.value.kind == "memory" and took < 30, (took, interp.incidents)
        assert interp.execute("print('alive')").strip() == "alive"
    finally:
        interp.shutdown()


@pytest.mark.slow
def test_odd_exceptions_and_values_no_longer_end_the_session(installed: None) -> None:
    interp = _interp(time_s=10.0)
    try:
        interp.execute("kept = 7")
        with pytest.raises(CodeExecutionError, match="ValueError"):
            interp.execute("raise ValueError(b'bytes', {1, 2}, float('nan'))")
        with pytest.raises(CodeExecutionError, match="BigInt"):
            interp.execute("2**80")
        with pytest.raises(CodeExecutionError, match="NotCapable"):
            interp.execute("from js import Deno\nDeno.readTextFileSync('/etc/hostname')")
        assert interp.execute("print(kept)").strip() == "7"
        assert interp.restarts == 0 and interp.incidents == []
    finally:
        interp.shutdown()


@pytest.mark.slow
def test_a_full_stderr_pipe_does_not_hang_the_step(installed: None) -> None:
    interp = _interp(time_s=10.0)
    try:
        out = interp.execute("import js\njs.eval('for (let i = 0; i < 2000; i++) "
                             "console.error(\"x\".repeat(1000))')\nprint('done')")
        assert out.strip() == "done" and interp.incidents == []
    finally:
        interp.shutdown()


@pytest.mark.slow
def test_shutdown_returns_with_a_timer_left_running(installed: None) -> None:
    interp = _interp(shutdown_s=1.0)
    interp.execute("import js\njs.eval('setInterval(() => {}, 100)')")
    process = interp.deno_process
    started = time.monotonic()
    interp.shutdown()  # DSPy's own shutdown waits forever here
    assert time.monotonic() - started < 5 and process.poll() is not None


@pytest.mark.slow
def test_the_deno_process_has_no_host_secret_in_its_environment(
        installed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTRATA_TEST_SECRET", "s3cr3t-value")
    interp = _interp()
    try:
        interp.start()
        environ = Path(f"/proc/{interp.deno_process.pid}/environ").read_bytes()
        assert b"s3cr3t-value" not in environ
        assert "None" in interp.execute(
            "import os\nprint(os.environ.get('MEMSTRATA_TEST_SECRET'))")
    finally:
        interp.shutdown()


@pytest.mark.slow
def test_a_big_output_line_ends_the_step_not_the_host(installed: None) -> None:
    interp = _interp(output_mb=2, time_s=20.0)
    try:
        with pytest.raises(SandboxLimitError, match="more than 2 MB") as err:
            interp.execute("print('x' * (3 * 2**20))")
        assert err.value.kind == "output"
    finally:
        interp.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["scratchpad", "rlm"])
def test_executors_record_a_stopped_step_and_go_on(installed: None, executor: str,
                                                   store: Any, scripted: Any) -> None:
    from memstrata.programs import ExecutorSettings, run_executor
    from memstrata.tools import ToolSession

    session = ToolSession(store, "u1")
    prompts: list[str] = []

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        if "code" in (schema or {}).get("properties", {}):
            prompts.append(user)
            if len(prompts) == 1:
                return {"reasoning": "spin", "code": "while True:\n    pass"}
            return {"reasoning": "done", "code": "SUBMIT(answer='recovered')"}
        return {"reasoning": "", "answer": "fallback"}

    run = run_executor("Anything?", session, scripted(reply),
                       ExecutorSettings(executor=executor, max_iters=3, sandbox_time_s=2.0))
    assert run.error is None, run.error
    assert "time limit" in run.steps[0]["output"]
    assert run.answer == "recovered" and run.converged
    assert "time limit" in prompts[1]  # the model saw what happened to its step
    assert store.runs.get("u1", run.run_id).status == "ok"


def test_limits_reach_the_sandbox_from_the_executor_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.programs import ExecutorSettings, executors

    seen: dict[str, Any] = {}

    def fake(kind: str = "sandbox", home: Path | None = None, *,
             limits: SandboxLimits | None = None) -> Any:
        seen["limits"] = limits
        raise RuntimeError("stop here")

    monkeypatch.setattr(executors, "interpreter_factory", fake)
    settings = ExecutorSettings(executor="scratchpad", sandbox_time_s=7.5, sandbox_memory_mb=300)
    with pytest.raises(RuntimeError, match="stop here"):
        executors.run_executor("q", None, None, settings, tools=[])  # type: ignore[arg-type]
    assert seen["limits"] == SandboxLimits(time_s=7.5, memory_mb=300)


@pytest.mark.slow
def test_the_factory_leaves_the_host_environment_alone(installed: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DENO_NO_PACKAGE_JSON", raising=False)
    sandbox_factory()
    assert "DENO_NO_PACKAGE_JSON" not in os.environ  # it used to set it for every process


@pytest.mark.slow
def test_a_memory_snapshot_starts_the_sandbox_fast_and_fresh(installed: None) -> None:
    factory = sandbox_factory()
    seen = []
    for _ in range(2):
        interp = factory()
        try:
            started = time.monotonic()
            interp.start()
            took = time.monotonic() - started
            seen.append(interp.execute("import random\nprint(random.random())").strip())
        finally:
            interp.shutdown()
    assert any(c.startswith("--memstrata-snapshot=") for c in interp.deno_command)
    assert took < 3.0  # ~0.5 s; ~4 s of CPU without the snapshot
    assert seen[0] != seen[1]  # random is reseeded, not replayed from the snapshot


def test_a_sandbox_that_never_starts_is_a_recorded_error_not_a_hang() -> None:
    from dspy.primitives.code_interpreter import CodeInterpreterError

    interp = SandboxInterpreter([sys.executable, "-c", "import time; time.sleep(30)"],
                                limits=SandboxLimits(start_s=0.5))
    started = time.monotonic()
    with pytest.raises(CodeInterpreterError, match=r"did not start within 0\.5 s"):
        interp.execute("print(1)")  # DSPy's own start waited forever here
    assert time.monotonic() - started < 5
    interp.shutdown()
