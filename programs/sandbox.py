"""DSPy's Deno/Pyodide sandbox, started with no network at all.

DSPy's ``PythonInterpreter`` runs ``runner.js`` under Deno; that script imports Pyodide
from npm and ``readLines`` from deno.land, both fetched at first start. Here both come from
disk: ``install_sandbox`` puts the Pyodide npm package under ``sandbox_home()`` once (from
the npm registry, or from a tarball for machines that never see it), and the Deno config
written beside it maps the deno.land URL to ``sandbox_files/readlines.ts`` and resolves
``npm:pyodide`` from that local ``node_modules``. Deno itself is the PyPI package ``deno``
(the ``sandbox`` extra), whatever model writes the code.

A custom ``deno_command`` skips DSPy's Deno version check and its ``DENO_NO_PACKAGE_JSON``
setting, so both are done here. ``dspy.LocalInterpreter`` is offered only on request,
and labelled for what it is: a subprocess, not a sandbox.

DSPy's interpreter bounds neither time nor memory, so ``SandboxInterpreter`` adds both
(``SandboxLimits``: a watchdog per step, V8's heap flags, ``RLIMIT_DATA``), restarts a
stopped sandbox with a recorded ``SandboxLimitError``, starts Deno with every permission
it does not need denied and no host secret in its environment, and runs a patched copy
of DSPy's runner (``RUNNER_FIXES``: odd exceptions no longer end a session; a memory
snapshot starts Pyodide in ~0.5 s). ``bench/reliability/sandbox_escape.py`` tries over 80
kinds of escape against it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import dspy
from dspy.primitives.code_interpreter import CodeExecutionError, CodeInterpreterError
from dspy.primitives.python_interpreter import _jsonrpc_notification
from dspy.utils.callback import with_callbacks
from pydantic import BaseModel, Field

from memstrata.errors import MemstrataError
from memstrata.memory.extras import MissingExtraError, require
from memstrata.memory.paths import memstrata_home

from .errors import ModelSetupError

try:
    import resource
except ImportError:  # not POSIX: the V8 flags alone bound the sandbox's memory
    resource = None  # type: ignore[assignment]

REGISTRY = "https://registry.npmjs.org"
LOCAL_WARNING = ("LocalInterpreter is NOT a sandbox: generated code runs as you, with your "
                 "files, environment and network")
InterpreterKind = Literal["sandbox", "local"]


class SandboxError(ModelSetupError):
    """The sandbox is not installed or does not start; the message says how to fix it."""


def runner_path() -> Path:
    """DSPy's sandbox runner script."""
    return Path(dspy.__file__).parent / "primitives" / "runner.js"


def runner_imports() -> tuple[str, str]:
    """(Pyodide version, deno.land URL) that the installed DSPy's runner imports."""
    source = runner_path().read_text(encoding="utf-8")
    version = re.search(r'"npm:pyodide@([\w.\-]+)/pyodide\.js"', source)
    web = re.search(r'"(https://deno\.land/[^"]+)"', source)
    if version is None or web is None:
        raise SandboxError(f"DSPy's runner ({runner_path()}) no longer imports Pyodide or "
                           "readLines the way this memstrata expects; upgrade memstrata")
    return version.group(1), web.group(1)


def sandbox_home() -> Path:
    """Where the sandbox's files live: ``$MEMSTRATA_HOME/sandbox`` (default
    ``~/.cache/memstrata/sandbox``)."""
    return memstrata_home() / "sandbox"


@dataclass(frozen=True)
class SandboxPaths:
    """The files one installed Pyodide version needs."""

    root: Path

    @property
    def package(self) -> Path:
        """The unpacked npm package."""
        return self.root / "node_modules" / "pyodide"

    @property
    def config(self) -> Path:
        """The Deno config: local node_modules, and the import map for readLines."""
        return self.root / "deno.json"

    @property
    def readlines(self) -> Path:
        """The local stand-in for the deno.land module."""
        return self.root / "readlines.ts"

    def installed(self) -> bool:
        """Whether every file is in place."""
        return all(p.exists() for p in (self.package / "pyodide.mjs",
                                        self.package / "pyodide.asm.wasm",
                                        self.config, self.readlines))


def sandbox_paths(home: Path | None = None) -> SandboxPaths:
    """The paths for the Pyodide version the installed DSPy needs."""
    version, _ = runner_imports()
    return SandboxPaths((home or sandbox_home()) / f"pyodide-{version}")


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def _check_integrity(data: bytes, integrity: str) -> None:
    algo, _, digest = integrity.partition("-")
    if algo not in ("sha512", "sha256", "sha1"):
        raise SandboxError(f"unknown integrity algorithm in npm metadata: {integrity[:20]}")
    actual = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if actual != digest:
        raise SandboxError("the downloaded Pyodide tarball does not match the npm registry's "
                           "integrity hash; not installing it")


def install_sandbox(from_tarball: str | Path | None = None, *, registry: str = REGISTRY,
                    home: Path | None = None, force: bool = False) -> SandboxPaths:
    """Put the Pyodide npm package DSPy's runner needs on disk, with the Deno config.

    Args:
        from_tarball: a ``pyodide-X.tgz`` (``npm pack pyodide@X``) to install from, for
            machines that cannot reach the npm registry.
        registry: the npm registry to download from otherwise (checked against its
            integrity hash).
        home: where to install (``sandbox_home()`` by default).
        force: reinstall even if present.

    Returns:
        The installed paths. Nothing is left half-written: files go to a temporary folder
        that is renamed into place at the end.
    """
    version, web_url = runner_imports()
    paths = sandbox_paths(home)
    if paths.installed() and not force:
        return paths
    if from_tarball is not None:
        data = Path(from_tarball).read_bytes()
    else:
        url = f"{registry.rstrip('/')}/pyodide/{version}"
        try:
            meta = json.loads(_fetch(url))
            data = _fetch(meta["dist"]["tarball"])
        except OSError as exc:
            raise SandboxError(
                f"could not download Pyodide {version} from {registry} ({exc}). On a machine "
                f"without the npm registry, run `npm pack pyodide@{version}` elsewhere and "
                f"`memstrata sandbox install --from pyodide-{version}.tgz` here") from None
        _check_integrity(data, meta["dist"].get("integrity", ""))
    paths.root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".install-", dir=paths.root.parent))
    try:
        target = staging / "node_modules" / "pyodide"
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(staging / "unpacked", filter="data")
        unpacked = staging / "unpacked" / "package"
        manifest = json.loads((unpacked / "package.json").read_text())
        if manifest.get("name") != "pyodide" or manifest.get("version") != version:
            raise SandboxError(f"the tarball holds {manifest.get('name')} "
                               f"{manifest.get('version')}, not pyodide {version}")
        target.parent.mkdir(parents=True)
        unpacked.rename(target)
        shutil.copy(Path(__file__).parent / "sandbox_files" / "readlines.ts",
                    staging / "readlines.ts")
        final = SandboxPaths(paths.root)
        config = {"nodeModulesDir": "manual",
                  "imports": {web_url: final.readlines.as_uri()}}
        (staging / "deno.json").write_text(json.dumps(config, indent=2))
        shutil.rmtree(staging / "unpacked")
        if paths.root.exists():
            shutil.rmtree(paths.root)
        staging.rename(paths.root)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return paths


def deno_binary() -> str:
    """The Deno executable from the PyPI package ``deno`` (the ``sandbox`` extra), or
    ``deno`` on PATH.

    Raises:
        MissingExtraError: neither is there.
    """
    try:
        return str(require("deno", "sandbox", "the RLM sandbox").find_deno_bin())
    except (ImportError, FileNotFoundError, RuntimeError) as exc:
        found = shutil.which("deno")
        if found is None:
            if isinstance(exc, MissingExtraError):
                raise exc from None
            raise SandboxError(f"Deno not found ({exc}): pip install --force-reinstall deno"
                               ) from None
        return found


def check_deno(binary: str) -> str:
    """The Deno version; raises unless it is 2.x (what DSPy's runner supports)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             timeout=20, env={**os.environ, "DENO_NO_PACKAGE_JSON": "1"},
                             check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"could not run {binary} --version: {exc}") from None
    match = re.match(r"deno (\d+)\.(\d+)\.(\d+)", out)
    if not match or int(match.group(1)) != 2:
        raise SandboxError(f"DSPy's sandbox needs Deno 2.x; {binary} is {out.splitlines()[:1]}")
    return ".".join(match.groups())


DENIED = ("--deny-write", "--deny-net", "--deny-env", "--deny-run", "--deny-ffi", "--deny-sys",
          "--deny-import")
"""Every permission the runner does not need, denied outright: ``Deno.permissions.request``
and a Worker's ``deno.permissions`` cannot grant any of them back."""

ENV_KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "DENO_DIR", "XDG_CACHE_HOME")
"""The host's environment variables the Deno process gets; nothing else (no API keys)
reaches it, whatever Deno's own permission checks do."""


class SandboxLimits(BaseModel):
    """What one sandbox step may use before it is stopped with a recorded error.

    Attributes:
        time_s: wall-clock seconds one ``execute`` may run; time spent in host tools (a
            tool call, an ``llm_query``) does not count. Past it the Deno process is
            killed and the step raises ``SandboxLimitError``.
        memory_mb: memory the sandboxed code may take beyond the started sandbox: the
            Python (WASM) heap is capped at this (a ``MemoryError`` the step reports), the
            JavaScript heap at half of it, and on Linux everything the process commits
            (ArrayBuffers, workers) at this much above its size after start-up
            (``RLIMIT_DATA``; past it the process ends and the step raises).
        wall_s: wall-clock seconds one ``execute`` may run in all, tool calls included
            (a loop of quick tool calls is mostly tool time).
        start_s: seconds the sandbox may take to start (Deno + Pyodide, ~6 s cold).
        shutdown_s: seconds a shut-down sandbox may take to exit before it is killed (a
            timer or worker left running keeps Deno alive after its runner's loop ends).
        output_mb: the longest line the sandbox may write back (a step's printed output
            or a tool call's arguments), so a step cannot exhaust the host's memory.
        max_restarts: restarts after a stopped step, per interpreter, before the next
            step fails the run instead.
    """

    time_s: float = Field(30.0, gt=0)
    memory_mb: int = Field(1024, ge=256)
    wall_s: float = Field(600.0, gt=0)
    start_s: float = Field(120.0, gt=0)
    shutdown_s: float = Field(5.0, gt=0)
    output_mb: int = Field(32, ge=1)
    max_restarts: int = Field(5, ge=0)


def v8_flags(limits: SandboxLimits) -> str:
    """The ``--v8-flags`` value bounding the JavaScript heap and each WASM memory."""
    return (f"--v8-flags=--max-old-space-size={max(128, limits.memory_mb // 2)},"
            f"--wasm-max-mem-pages={limits.memory_mb * 16}")  # 64 KiB pages


RUNNER_FIXES = ((
    "    return json.dumps(sys.last_exc.args) if sys.last_exc else None\n",
    "    exc = getattr(sys, 'last_exc', None)\n"
    "    if not exc:\n"
    "        return 'null'\n"
    "    try:\n"
    "        return json.dumps(exc.args, default=repr, allow_nan=False)\n"
    "    except Exception:\n"
    "        pass\n"
    "    try:\n"
    "        return json.dumps([repr(a) for a in exc.args])\n"
    "    except Exception:\n"
    "        return json.dumps(['(arguments that cannot be shown)'])\n"), (
    "sys.stdout, sys.stderr = buf_stdout, buf_stderr\n",
    "sys.stdout, sys.stderr = buf_stdout, buf_stderr\nsys.last_exc = None\n"), (
    "const pyodide = await pyodideModule.loadPyodide();\n",
    "const snapshotPath = Deno.args.find((arg) => arg.startsWith(\"--memstrata-snapshot=\"))"
    "?.slice(21);\n"
    "let pyodide = null;\n"
    "if (snapshotPath) {\n"
    "  try {\n"
    "    pyodide = await pyodideModule.loadPyodide({ _loadSnapshot: "
    "Deno.readFileSync(snapshotPath) });\n"
    "    pyodide.runPython(\"import random\\nrandom.seed()\");\n"
    "  } catch (e) {\n"
    "    console.error(\"memory snapshot not used: \" + e);\n"
    "    pyodide = null;\n"
    "  }\n"
    "}\n"
    "if (pyodide === null) pyodide = await pyodideModule.loadPyodide();\n"),
)
"""(original, replacement) lines of DSPy's runner.js. Its error path JSON-encodes the last
exception's arguments; arguments JSON cannot hold (bytes, a set, a JavaScript error from
``js``, a NaN), or no exception at all (a JavaScript-side error, such as a step whose
value is a big int: ``JSON.parse(undefined)``), made that throw inside its ``catch``,
which ended the runner's loop and with it the session (``raise ValueError(b"x")`` was
enough). The second fix clears the last exception before each step, so a JavaScript-side
error is not reported with an earlier step's exception's arguments. The third starts
Pyodide from a memory snapshot when one is given (``--memstrata-snapshot=PATH``, see
``memory_snapshot``): ~0.5 s instead of ~4 s of CPU, which every run and every restart
after a stopped step pays; without one, or if it does not load, Pyodide starts as before.
``random`` (imported during Pyodide's start-up, so its state is in the snapshot) is
reseeded from ``os.urandom``; str hashes keep the snapshot's seed in every sandbox."""


def patched_runner(paths: SandboxPaths) -> Path:
    """DSPy's runner with ``RUNNER_FIXES`` applied, written once beside the sandbox's files
    (named by its content's hash); DSPy's own runner if a fix no longer applies (a newer
    DSPy), whose failures the interpreter then survives by restarting."""
    source = runner_path().read_text(encoding="utf-8")
    for original, replacement in RUNNER_FIXES:
        if source.count(original) != 1:
            return runner_path().resolve()
        source = source.replace(original, replacement)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    target = paths.root / f"runner-{digest}.js"
    if not target.exists():
        staging = target.with_name(f".{target.name}.{os.getpid()}")
        staging.write_text(source, encoding="utf-8")
        os.replace(staging, target)  # atomic: concurrent starts write the same bytes
    return target.resolve()


SNAPSHOT_SCRIPT = """import pyodideModule from "npm:pyodide@{version}/pyodide.js";
const pyodide = await pyodideModule.loadPyodide({{ _makeSnapshot: true }});
Deno.writeFileSync(Deno.args[0], pyodide.makeMemorySnapshot());
"""
"""Makes a memory snapshot of a freshly started Pyodide (nothing imported, no code run)."""


def memory_snapshot(paths: SandboxPaths, deno: str, timeout_s: float = 120.0) -> Path | None:
    """A memory snapshot of freshly started Pyodide beside its files, made once (~4 s);
    None when it cannot be made (the sandbox then starts Pyodide the slow way).

    Made by Deno with no permission but reading the Pyodide folder and writing the one
    new file, from no code but Pyodide's own start-up; named by the script, the Pyodide
    and the Deno version, so an upgrade makes a new one.
    """
    version, _ = runner_imports()
    script = SNAPSHOT_SCRIPT.format(version=version)
    key = f"{script}\n{check_deno(deno)}"
    target = paths.root / f"snapshot-{hashlib.sha256(key.encode()).hexdigest()[:12]}.bin"
    failed = target.with_suffix(".failed")  # tried once and failed: not again every start
    if target.exists():
        return target.resolve()
    if failed.exists():
        return None
    maker = paths.root / f".make-snapshot-{os.getpid()}.js"
    staging = paths.root / f".snapshot-{os.getpid()}.bin"
    try:
        maker.write_text(script, encoding="utf-8")
        subprocess.run(
            [deno, "run", "--no-lock", "--cached-only", "--no-remote", "--no-prompt",
             f"--config={paths.config.resolve()}", f"--allow-read={paths.root.resolve()}",
             f"--allow-write={staging.resolve()}", str(maker.resolve()),
             str(staging.resolve())],
            capture_output=True, timeout=timeout_s, env=sandbox_env(), check=True)
        if staging.stat().st_size < 1024 * 1024:
            raise OSError("the snapshot is too small to be one")
        os.replace(staging, target)  # atomic: a concurrent maker writes the same kind
    except (OSError, subprocess.SubprocessError):
        with contextlib.suppress(OSError):
            failed.touch()
        return None
    finally:
        for leftover in (maker, staging):
            with contextlib.suppress(OSError):
                leftover.unlink()
    return target.resolve()


def deno_command(paths: SandboxPaths, deno: str | None = None,
                 limits: SandboxLimits | None = None, runner: Path | None = None,
                 snapshot: Path | None = None) -> list[str]:
    """The command that starts DSPy's runner with local Pyodide and no network.

    No ``--allow-net``, and every other permission but reading the runner and the local
    files denied outright (``DENIED``); ``--cached-only`` and ``--no-remote`` make any
    remote import an error rather than a download. The runner revokes the Pyodide folder
    after start-up (its ``--dspy-deno-dir`` argument). ``limits`` adds the V8 memory flags;
    ``snapshot`` (read only by a patched runner) starts Pyodide from a memory snapshot.
    """
    runner = (runner or runner_path()).resolve()
    readable = [str(runner), str(paths.root.resolve())]
    flags = [v8_flags(limits)] if limits is not None else []
    return [deno or deno_binary(), "run", "--no-lock", "--cached-only", "--no-remote",
            "--no-prompt", *DENIED, *flags, f"--config={paths.config.resolve()}",
            f"--allow-read={','.join(dict.fromkeys(readable))}", str(runner), "",
            f"--dspy-deno-dir={paths.root.resolve()}",
            *([f"--memstrata-snapshot={snapshot}"] if snapshot is not None else [])]


def sandbox_env() -> dict[str, str]:
    """The environment the Deno process starts with: ``ENV_KEPT`` from the host's, and
    Deno's settings for the runner."""
    kept = {name: os.environ[name] for name in ENV_KEPT if name in os.environ}
    return {**kept, "DENO_NO_PACKAGE_JSON": "1", "NO_COLOR": "1"}


class SandboxStartError(SandboxError, CodeInterpreterError):
    """A sandbox did not start (in time). A ``CodeInterpreterError`` too, so an executor
    records the run as failed, as it did when DSPy's own start failed."""


class SandboxLimitError(MemstrataError, CodeExecutionError):
    """A sandbox step was stopped: over its time limit, out of memory, or its process
    ended. ``kind`` says which (``time``, ``memory``, ``output`` or ``crash``).

    It is a ``CodeExecutionError``, so RLM and the scratchpad show it as the step's
    output and go on; the sandbox restarts for the next step.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Watchdog:
    """Kills a process once it has run ``limit_s`` seconds not counting the time it is
    paused (the host runs a tool meanwhile), or ``wall_s`` seconds in all."""

    def __init__(self, process: subprocess.Popen[str], limit_s: float,
                 wall_s: float | None = None) -> None:
        self.process, self.limit_s = process, limit_s
        self.wall_s = wall_s if wall_s is not None else limit_s
        self.fired = False
        self._cond = threading.Condition()
        self._began = self._since = time.monotonic()
        self._used = 0.0
        self._paused = self._done = False
        self._thread = threading.Thread(target=self._run, name="sandbox-watchdog", daemon=True)
        self._thread.start()

    def pause(self) -> None:
        """Stop the sandbox's clock (the wall clock runs on)."""
        with self._cond:
            if not self._paused:
                self._used += time.monotonic() - self._since
                self._paused = True

    def resume(self) -> None:
        """Start the sandbox's clock again."""
        with self._cond:
            if self._paused:
                self._since, self._paused = time.monotonic(), False
                self._cond.notify()

    def stop(self) -> bool:
        """End the watch; whether it killed the process."""
        with self._cond:
            self._done = True
            self._cond.notify()
        self._thread.join()
        return self.fired

    def _run(self) -> None:
        with self._cond:
            while not self._done:
                now = time.monotonic()
                used = self._used + (0.0 if self._paused else now - self._since)
                left = min(self.limit_s - used, self.wall_s - (now - self._began))
                if left <= 0:
                    self.fired = True
                    with contextlib.suppress(OSError):
                        self.process.kill()
                    return
                # Paused, the sandbox's clock stands still: only the wall clock can run out.
                self._cond.wait(self.wall_s - (now - self._began) if self._paused else left)


class _StderrTail:
    """Reads a process's stderr as it comes and keeps its last ``keep`` characters.

    Nothing else reads Deno's stderr while it runs; once its 64 KiB pipe buffer filled
    (a step writing to ``console.error``, Pyodide's loading messages), Deno blocked
    writing and the step hung until its time limit.
    """

    def __init__(self, process: subprocess.Popen[str], keep: int = 4000) -> None:
        self.keep = keep
        self._text = ""
        self._fd = process.stderr.fileno() if process.stderr is not None else None
        self._thread = threading.Thread(target=self._run, name="sandbox-stderr", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._fd is not None:
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self._text = (self._text + chunk.decode("utf-8", "replace"))[-self.keep:]

    def text(self, wait_s: float = 1.0) -> str:
        """What was kept (waiting up to ``wait_s`` for the rest of an ended process's)."""
        self._thread.join(wait_s)
        return self._text


def _vm_data_kb(pid: int) -> int | None:
    """The process's committed private memory (``VmData``, kB), where /proc says."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmData:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


KILLED_BY = (-5, -6, -9, -11)
"""Exit codes of a Deno process that ran out of memory: V8's fatal OOM (SIGTRAP, SIGABRT),
a failed allocation (SIGSEGV), the kernel's OOM killer (SIGKILL)."""
_OUT_OF_MEMORY = re.compile(r"out of memory|allocation failed|heap limit|unable to create "
                            r"worker threads|failed to spawn thread|resource temporarily "
                            r"unavailable", re.I)
"""What an ended Deno process says on stderr when it ran out of memory in its runner."""
JOURNAL_MAX_CHARS = 2_000_000
"""Most characters of code and variables the interpreter keeps to restore a restarted
sandbox; past it, later steps are not restored."""
JOURNAL_MAX_STEP_S = 2.0
"""A step that took longer is not replayed (a restart would repeat its cost)."""


class SandboxInterpreter(dspy.PythonInterpreter):
    """DSPy's Deno/Pyodide interpreter with limits, a clean environment and restarts.

    Each ``execute`` runs under ``SandboxLimits``: past the time limit the Deno process is
    killed; past the memory limit the step gets a ``MemoryError`` or the process ends; a
    line longer than ``output_mb`` ends it too. Any of these, or the process dying for
    another reason, raises ``SandboxLimitError`` (a ``CodeExecutionError``, which RLM and
    the scratchpad record as the step's output), and a fresh process starts at once in
    the background (while the model thinks about its next step); the next ``execute``
    uses it, or after ``max_restarts`` raises ``CodeInterpreterError`` instead. The fresh
    process replays the earlier steps that succeeded without calling a tool (their
    effects are the sandbox's alone: the injected variables, RLM's set-up, pure
    computations), with tools refused during the replay; what steps computed from tool
    results is lost, and the error says so. ``incidents`` lists every stopped step.
    """

    # The base class's, declared here because DSPy ships no type information.
    deno_process: subprocess.Popen[str] | None
    if TYPE_CHECKING:
        def _raise_terminal_error(self, message: str, cause: Exception | None = None
                                  ) -> NoReturn: ...

    def __init__(self, deno_command: list[str], *, limits: SandboxLimits | None = None,
                 tools: dict[str, Callable[..., Any]] | None = None,
                 env: dict[str, str] | None = None) -> None:
        super().__init__(deno_command=deno_command, tools=tools)
        self.limits = limits or SandboxLimits()
        self.env = sandbox_env() if env is None else env
        self.restarts = 0
        self.incidents: list[dict[str, Any]] = []
        self._journal: list[tuple[str, dict[str, Any]]] = []
        self._journal_chars = 0
        self._lost = self._replaying = self._overflow = False
        self._tool_calls = 0
        self._watchdog: _Watchdog | None = None
        self._respawn: threading.Thread | None = None
        self._respawn_error: BaseException | None = None
        self._stderr: _StderrTail | None = None

    def _spawn_process(self) -> None:
        """Start Deno with ``env``, bounded by ``start_s``; then cap its memory."""
        try:
            process = self.deno_process = subprocess.Popen(
                self.deno_command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, encoding="UTF-8", env=self.env)
        except FileNotFoundError as exc:
            raise SandboxStartError(f"Deno not found ({exc}): pip install --force-reinstall "
                                    "deno") from None
        self._stderr = _StderrTail(process)
        watchdog = _Watchdog(process, self.limits.start_s)
        try:
            self._health_check()
        except CodeInterpreterError as exc:
            if watchdog.stop():
                raise SandboxStartError(f"the sandbox did not start within "
                                        f"{self.limits.start_s:g} s (SandboxLimits.start_s)"
                                        ) from None
            raise SandboxStartError(f"the sandbox does not start: {str(exc)[:500]}") from None
        watchdog.stop()
        self._cap_memory(process.pid)

    def _cap_memory(self, pid: int) -> None:
        # RLIMIT_DATA counts writable private mappings, not V8's reserved address space,
        # so it bounds what the process commits (RLIMIT_AS would have to exceed V8's
        # reservations, tens of GB). Set after start-up, relative to what start-up took.
        current = _vm_data_kb(pid)
        if current is None or resource is None or not hasattr(resource, "prlimit"):
            return  # not Linux: the V8 flags alone bound the heaps
        cap = current * 1024 + self.limits.memory_mb * 1024 * 1024
        with contextlib.suppress(OSError, ValueError):
            resource.prlimit(pid, resource.RLIMIT_DATA, (cap, cap))

    def _read_response_line(self, context: str) -> str:
        """One line from Deno, at most ``output_mb``; a longer one ends the process."""
        limit = self.limits.output_mb * 1024 * 1024
        process = self.deno_process
        assert process is not None and process.stdout is not None  # read only once started
        line = process.stdout.readline(limit + 1)
        if len(line) > limit:
            self._overflow = True
            self._raise_terminal_error(f"the sandbox wrote a line of over {limit:,} "
                                       f"characters {context}")
        if line.strip():
            return line.strip()
        diagnostic = (f" (last sandbox diagnostic: {self._last_diagnostic})"
                      if self._last_diagnostic else "")
        code = process.poll()
        if code is not None:
            stderr = self._stderr.text() if self._stderr is not None else ""
            self._raise_terminal_error(f"Deno exited (code {code}) {context}: {stderr}"
                                       f"{diagnostic}")
        self._raise_terminal_error(f"No response {context}{diagnostic}")

    def invoke_tool(self, tool_name: str, kwargs: dict[str, Any]) -> Any:
        """The tool's result; its time does not count against the step's ``time_s``, and
        no tool runs while a restarted sandbox replays earlier steps."""
        if self._replaying:
            raise CodeInterpreterError("tools are not called while the sandbox restores "
                                       "earlier steps after a restart")
        self._tool_calls += 1
        if self._watchdog is not None:
            self._watchdog.pause()
        try:
            return super().invoke_tool(tool_name, kwargs)
        finally:
            if self._watchdog is not None:
                self._watchdog.resume()

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        """Run ``code`` within the limits (see the class); restarts a lost sandbox first."""
        if self._lost:
            self._restart()
        if self.deno_process is None and not self._session_ended:
            self.start()  # start-up (Deno, Pyodide) is not the step's cost for the journal
        calls, started = self._tool_calls, time.monotonic()
        result = self._bounded(code, variables)
        if self._tool_calls == calls and time.monotonic() - started <= JOURNAL_MAX_STEP_S:
            self._remember(code, variables or {})
        return result

    def _bounded(self, code: str, variables: dict[str, Any] | None) -> Any:
        """``PythonInterpreter.execute`` under the watchdog; a lost process becomes a
        ``SandboxLimitError``."""
        self._overflow = False
        self._watchdog = None if self.deno_process is None else _Watchdog(
            self.deno_process, self.limits.time_s, self.limits.wall_s)
        started, ended = time.monotonic(), self._session_ended
        try:
            result = super().execute(code, variables)
        except CodeInterpreterError as exc:
            fired = self._watchdog is not None and self._watchdog.stop()
            if isinstance(exc, CodeExecutionError) or ended or not (fired or self._session_ended):
                raise
            raise self._stopped(str(exc), fired, time.monotonic() - started) from None
        finally:
            fired = self._watchdog is not None and self._watchdog.stop()
            self._watchdog = None
        if fired:  # killed just as the result came back: the process is gone all the same
            raise self._stopped("", True, time.monotonic() - started)
        return result

    def _stopped(self, message: str, fired: bool, seconds: float) -> SandboxLimitError:
        """Record a lost step, start its replacement, and say what happened."""
        code = self.deno_process.poll() if self.deno_process is not None else None
        # An ended process's last words: out of memory inside the runner itself (not the
        # step's code) ends Deno with code 1 and says so only on stderr. A thread Deno
        # cannot start near the RLIMIT_DATA cap (its stack is a private writable mapping)
        # is the same thing, though Deno's hint blames a PID limit: this sandbox sets none.
        said = self._stderr.text() if code is not None and self._stderr is not None else ""
        if self._overflow:
            kind, what = "output", (f"the step wrote more than {self.limits.output_mb} MB "
                                    "at once and was stopped")
        elif fired:
            kind, what = "time", (f"the step ran past the sandbox's time limit "
                                  f"({self.limits.time_s:g} s running, {self.limits.wall_s:g}"
                                  " s with tool calls) and was stopped")
        elif code in KILLED_BY or _OUT_OF_MEMORY.search(f"{message}\n{said}"):
            kind, what = "memory", (f"the sandbox process ended (exit code {code}), most "
                                    f"likely over its memory limit of "
                                    f"{self.limits.memory_mb} MB")
        else:
            kind, what = "crash", f"the sandbox failed: {message[:300]}"
        self.incidents.append({"kind": kind, "exit_code": code, "seconds": round(seconds, 2),
                               "message": message[:300], "stderr": said[-300:]})
        self._lost = True
        if self.restarts < self.limits.max_restarts:
            self._respawn_error = None
            self._respawn = threading.Thread(target=self._respawn_now, daemon=True,
                                             name="sandbox-respawn")
            self._respawn.start()
        return SandboxLimitError(
            f"{what}. The sandbox restarts for the next step: variables made by earlier "
            "steps that called tools are gone (recompute them).", kind)

    def _respawn_now(self) -> None:
        """(In the background) end the lost process and start a fresh one."""
        old = self.deno_process
        if old is not None and old.poll() is None:
            old.kill()
        if old is not None:
            old.wait()
        self.deno_process = None
        try:
            self._spawn_process()
        except BaseException as exc:  # reported by _restart, in the caller's thread
            self._respawn_error = exc

    def _join_respawn(self) -> None:
        if self._respawn is not None:
            self._respawn.join()
            self._respawn = None

    def wait_restarted(self) -> None:
        """Block until a restart running in the background is done (at most about
        ``start_s``); at once when there is none."""
        respawn = self._respawn
        if respawn is not None:
            respawn.join()

    def _remember(self, code: str, variables: dict[str, Any]) -> None:
        size = len(code) + len(json.dumps(variables, default=str))
        if self._journal_chars + size <= JOURNAL_MAX_CHARS:
            self._journal.append((code, dict(variables)))
            self._journal_chars += size

    def _restart(self) -> None:
        """Take the fresh process and replay the journal; past ``max_restarts`` the run
        fails."""
        self._join_respawn()
        if self.restarts >= self.limits.max_restarts:
            raise CodeInterpreterError(
                f"the sandbox was stopped {self.restarts + 1} times in one session "
                f"(SandboxLimits.max_restarts = {self.limits.max_restarts}); giving up")
        self.restarts += 1
        if self._respawn_error is not None or self.deno_process is None:
            raise CodeInterpreterError(f"the sandbox could not restart: {self._respawn_error}")
        self._session_ended = self._lost = False
        self._tools_registered = self._mounted_files = False
        self._replaying = True
        try:
            for code, variables in self._journal:
                try:
                    self._bounded(code, variables)
                except SandboxLimitError:
                    break  # the replay itself was stopped: the next step restarts again
                except (CodeInterpreterError, SyntaxError):
                    continue  # best effort: a step that depended on a lost one
        finally:
            self._replaying = False

    @with_callbacks
    def shutdown(self) -> None:
        """End the process: ask it to stop, and kill it after ``shutdown_s`` (DSPy's own
        shutdown waits forever on a sandbox that left a timer running)."""
        self._join_respawn()
        process = self.deno_process
        if process is not None and process.poll() is None:
            if self._session_ended or self._lost:
                process.kill()
            else:
                with contextlib.suppress(OSError, ValueError):
                    stdin = process.stdin
                    if stdin is not None:
                        stdin.write(_jsonrpc_notification("shutdown") + "\n")
                        stdin.close()
            try:
                process.wait(timeout=self.limits.shutdown_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._session_ended = True
        self.deno_process = None
        self._owner_thread = None


def sandbox_factory(tools: dict[str, Callable[..., Any]] | None = None,
                    home: Path | None = None, *, limits: SandboxLimits | None = None
                    ) -> Callable[[], SandboxInterpreter]:
    """A zero-argument factory of offline sandboxes (what ``dspy.RLM`` takes).

    Args:
        tools: host functions the sandboxed code may call.
        home: where the sandbox is installed (``sandbox_home()`` by default).
        limits: each step's time and memory limits (``SandboxLimits()`` by default).

    Raises:
        SandboxError: Pyodide is not installed (run ``memstrata sandbox install``) or Deno
            is missing or not 2.x.
    """
    paths = sandbox_paths(home)
    if not paths.installed():
        raise SandboxError(f"the sandbox's Pyodide is not installed at {paths.root}: run "
                           "`memstrata sandbox install` once (it needs the npm registry, or "
                           "`--from pyodide-X.tgz`)")
    deno = deno_binary()
    check_deno(deno)
    limits = limits or SandboxLimits()
    runner = patched_runner(paths)
    # Only the patched runner reads the snapshot argument.
    snapshot = memory_snapshot(paths, deno) if runner != runner_path().resolve() else None
    command = deno_command(paths, deno, limits, runner, snapshot)

    def factory() -> SandboxInterpreter:
        return SandboxInterpreter(command, limits=limits, tools=dict(tools or {}))

    return factory


class LocalInterpreter(dspy.LocalInterpreter):
    """``dspy.LocalInterpreter`` (NOT a sandbox) that calls tools the way the sandbox does.

    The sandbox binds positional arguments to the tool's parameter names before the call;
    ``dspy.LocalInterpreter`` passes them on positionally, which RLM's keyword-only tool
    wrappers refuse. Binding them here keeps agent code portable between the two.
    """

    def invoke_tool(self, tool_name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Bind positional ``args`` by the tool's signature, then call it by keyword."""
        tool = self.tools.get(tool_name)
        if args and tool is not None:
            import inspect

            try:
                kwargs = dict(inspect.signature(tool).bind(*args, **kwargs).arguments)
                args = []
            except TypeError:
                pass  # let the tool report the mismatch itself
        return super().invoke_tool(tool_name, args, kwargs)


def interpreter_factory(kind: InterpreterKind = "sandbox", home: Path | None = None, *,
                        limits: SandboxLimits | None = None) -> Callable[[], Any]:
    """The offline sandbox (default), or ``dspy.LocalInterpreter`` when asked for by name.

    ``limits`` bound each sandbox step; ``local`` has none and is not a sandbox (see
    ``LOCAL_WARNING``); callers show that warning.
    """
    if kind == "sandbox":
        return sandbox_factory(home=home, limits=limits)
    if kind == "local":
        return LocalInterpreter
    raise ValueError(f"interpreter must be 'sandbox' or 'local', not {kind!r}")
