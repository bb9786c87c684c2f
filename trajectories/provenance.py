"""Which code produced a run: the git commit (and whether the tree was dirty)."""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path

# A checkout holds this file as <root>/trajectories/provenance.py.
_ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def git_commit() -> str | None:
    """``<sha>`` or ``<sha>-dirty`` of the checkout memstrata runs from; None when it is
    not a git checkout (an installed wheel: the version is recorded instead)."""
    root = _ROOT
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if dirty else sha or None


def code_version() -> str:
    """The git commit where there is one, else the package version."""
    return git_commit() or f"memstrata {_version()}"


def _version() -> str:
    try:
        return metadata.version("memstrata")
    except metadata.PackageNotFoundError:
        return "unknown"
