"""Installing the sandbox's files: from a tarball, checked, never half-written."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from memstrata.programs import sandbox
from memstrata.programs.sandbox import (
    SandboxError,
    deno_command,
    install_sandbox,
    runner_imports,
    sandbox_factory,
)


def _tarball(tmp_path: Path, version: str, name: str = "pyodide") -> Path:
    buffer = io.BytesIO()
    files = {"package/package.json": json.dumps({"name": name, "version": version}),
             "package/pyodide.mjs": "export const loadPyodide = () => {};",
             "package/pyodide.asm.wasm": "wasm"}
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = tmp_path / f"{name}-{version}.tgz"
    out.write_bytes(buffer.getvalue())
    return out


def test_install_from_a_tarball_writes_the_config_and_import_map(tmp_path: Path) -> None:
    version, web_url = runner_imports()
    paths = install_sandbox(_tarball(tmp_path, version), home=tmp_path / "home")
    assert paths.installed() and paths.root.name == f"pyodide-{version}"
    config = json.loads(paths.config.read_text())
    assert config["nodeModulesDir"] == "manual"
    assert config["imports"] == {web_url: paths.readlines.as_uri()}
    assert "export async function* readLines" in paths.readlines.read_text()
    command = deno_command(paths, "deno")
    assert "--cached-only" in command and not any(c.startswith("--allow-net") for c in command)
    assert f"--config={paths.config.resolve()}" in command
    # Already there: nothing happens without --force.
    assert install_sandbox(tmp_path / "missing.tgz", home=tmp_path / "home") == paths


def test_a_wrong_tarball_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pytest.raises(SandboxError, match="not pyodide"):
        install_sandbox(_tarball(tmp_path, "0.0.1"), home=home)
    assert [p.name for p in home.iterdir()] == []  # no staging folder left behind


def test_a_download_must_match_the_registry_hash(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    version, _ = runner_imports()
    data = _tarball(tmp_path, version).read_bytes()
    good = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    meta = {"dist": {"tarball": "https://registry.invalid/p.tgz", "integrity": good}}
    monkeypatch.setattr(sandbox, "_fetch", lambda url: json.dumps(meta).encode()
                        if url.endswith(version) else data)
    assert install_sandbox(home=tmp_path / "a").installed()
    meta["dist"]["integrity"] = "sha512-" + base64.b64encode(b"x" * 64).decode()
    with pytest.raises(SandboxError, match="integrity"):
        install_sandbox(home=tmp_path / "b")

    def offline(url: str) -> bytes:
        raise OSError("no route to host")

    monkeypatch.setattr(sandbox, "_fetch", offline)
    with pytest.raises(SandboxError, match="npm pack pyodide@"):
        install_sandbox(home=tmp_path / "c")


def test_a_missing_install_says_how_to_fix_it(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="memstrata sandbox install"):
        sandbox_factory(home=tmp_path / "empty")
