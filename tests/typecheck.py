"""Type-check the installed ``memstrata`` package with mypy, every module under its real name.

The package maps its folders onto subpackages (``[tool.setuptools.package-dir]``: ``memory/``
is ``memstrata.memory``, ``programs/`` is ``memstrata.programs``, ...), which mypy cannot
follow: it finds modules by directory, and setuptools' editable finder is an import hook it
does not run. So this lays the package out as installed, a ``memstrata/`` folder of symlinks
(the entries of ``memstrata/`` plus one link per mapped folder) kept in mypy's cache folder,
and runs mypy there with the project's ``[tool.mypy]`` configuration. Links point at
folders, so a module added anywhere is checked without rebuilding anything.

Run ``python tests/typecheck.py`` from anywhere: mypy's report, with paths turned back into
the repository's own, and its exit status (0: no error). Extra arguments go to mypy, e.g.
``python tests/typecheck.py --no-incremental``; with ``-c CODE`` (or ``-m``, ``-p``, files)
mypy checks that instead of the whole package, e.g.
``python tests/typecheck.py -c 'import memstrata; reveal_type(memstrata.Memory)'``.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "memstrata"
_TARGET_FLAGS = {"-c", "--command", "-m", "--module", "-p", "--package"}


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Each mapped subpackage (``memstrata.memory``) to its source folder, from pyproject."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: root / folder for name, folder in mapping.items()}


def build_layout(root: Path = ROOT) -> Path:
    """The folder holding ``memstrata/`` as installed (symlinks into ``root``), made current."""
    base = root / ".mypy_cache" / "layout"
    pkg = base / PACKAGE
    pkg.mkdir(parents=True, exist_ok=True)
    wanted: dict[str, Path] = {}
    dirs = package_dirs(root)
    for entry in dirs[PACKAGE].iterdir():
        if entry.name != "__pycache__":
            wanted[entry.name] = entry
    for name, folder in dirs.items():
        parts = name.split(".")
        # Only direct subpackages are mapped today; a deeper mapping would need nested links.
        if len(parts) == 2 and parts[0] == PACKAGE:
            wanted[parts[1]] = folder
    for existing in pkg.iterdir():
        target = wanted.get(existing.name)
        if target is None or not existing.is_symlink() or existing.readlink() != target:
            existing.unlink(missing_ok=True)
    for name, target in wanted.items():
        # Another run may be making the same link at the same time: either is the same.
        with contextlib.suppress(FileExistsError):
            (pkg / name).symlink_to(target)
    return base


def _to_repo_paths(text: str, root: Path) -> str:
    """Rewrite ``memstrata/memory/x.py`` (the layout's path) to ``memory/x.py`` (the repo's)."""
    dirs = package_dirs(root)
    subs = {n.split(".")[1]: f.relative_to(root).as_posix() for n, f in dirs.items() if "." in n}

    def swap(match: re.Match[str]) -> str:
        head = match.group(1)
        return subs.get(head, f"{PACKAGE}/{head}") + "/"

    return re.sub(rf"(?m)^{PACKAGE}/([A-Za-z_]\w*)/", swap, text)


def run_mypy(
    args: list[str] | None = None, root: Path = ROOT, targets: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run mypy over the laid-out package (or ``targets``, paths or ``-c`` code) and return it.

    The output's paths are the repository's. mypy runs in the layout folder so that
    ``import memstrata`` resolves there, never to the repository's partial ``memstrata/``.
    """
    base = build_layout(root)
    command = [
        sys.executable, "-m", "mypy",
        "--config-file", str(root / "pyproject.toml"),
        "--cache-dir", str(root / ".mypy_cache"),
        *(args or []),
        *(targets if targets is not None else ["-p", PACKAGE]),
    ]
    env = {**os.environ, "MYPYPATH": str(base)}
    done = subprocess.run(command, cwd=base, env=env, capture_output=True, text=True, check=False)
    done.stdout = _to_repo_paths(done.stdout, root)
    return done


def main(argv: list[str]) -> int:
    # What to check: the package, unless the arguments name something else.
    named = any(a in _TARGET_FLAGS or a.endswith(".py") for a in argv)
    done = run_mypy(argv, targets=[] if named else None)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
