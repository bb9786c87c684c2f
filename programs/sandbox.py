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
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import dspy
from memstrata.memory.extras import MissingExtraError, require

from .errors import ModelSetupError
from .paths import memstrata_home

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


def deno_command(paths: SandboxPaths, deno: str | None = None) -> list[str]:
    """The command that starts DSPy's runner with local Pyodide and no network.

    No ``--allow-net``; ``--cached-only`` makes any remote import an error rather than a
    download. Read access covers the runner and the local files; the runner revokes the
    Pyodide folder after start-up (its ``--dspy-deno-dir`` argument).
    """
    runner = runner_path().resolve()
    readable = [str(runner), str(paths.root.resolve())]
    return [deno or deno_binary(), "run", "--no-lock", "--cached-only",
            f"--config={paths.config.resolve()}", f"--allow-read={','.join(readable)}",
            str(runner), "", f"--dspy-deno-dir={paths.root.resolve()}"]


def sandbox_factory(tools: dict[str, Callable[..., Any]] | None = None,
                    home: Path | None = None) -> Callable[[], dspy.PythonInterpreter]:
    """A zero-argument factory of offline sandboxes (what ``dspy.RLM`` takes).

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
    os.environ["DENO_NO_PACKAGE_JSON"] = "1"  # the runner's subprocess inherits os.environ
    command = deno_command(paths, deno)

    def factory() -> dspy.PythonInterpreter:
        return dspy.PythonInterpreter(deno_command=command, tools=dict(tools or {}))

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


def interpreter_factory(kind: InterpreterKind = "sandbox", home: Path | None = None
                        ) -> Callable[[], Any]:
    """The offline sandbox (default), or ``dspy.LocalInterpreter`` when asked for by name.

    ``local`` is not a sandbox (see ``LOCAL_WARNING``); callers show that warning.
    """
    if kind == "sandbox":
        return sandbox_factory(home=home)
    if kind == "local":
        return LocalInterpreter
    raise ValueError(f"interpreter must be 'sandbox' or 'local', not {kind!r}")
