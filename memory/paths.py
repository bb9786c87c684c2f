"""Where memstrata keeps its own files on this machine (no DSPy import: the CLI reads it)."""

from __future__ import annotations

import os
from pathlib import Path


def memstrata_home() -> Path:
    """``$MEMSTRATA_HOME``, default ``~/.cache/memstrata``: the sandbox, the models, the
    record of passed decode checks."""
    return Path(os.environ.get("MEMSTRATA_HOME") or Path.home() / ".cache" / "memstrata")


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
"""What SQLite keeps beside a database ``NAME``: ``NAME-wal``, ``NAME-shm``, ``NAME-journal``."""


def refuse_database(path: str | Path, *, store_path: str | None = None) -> None:
    """Raise ``ValueError`` when writing a file at ``path`` (a user's export, cache or
    program file) would replace or damage a database: ``store_path`` itself or a file
    SQLite keeps beside it, any file that starts with SQLite's header, or one named as a
    SQLite database's side file next to that database. Nothing is written or created.
    """
    target = Path(path).expanduser()
    if store_path and store_path != ":memory:":
        own = Path(store_path).expanduser()
        if target.resolve() in {Path(f"{own}{side}").resolve()
                                for side in ("", *SQLITE_SIDE_FILES)}:
            raise ValueError(f"cannot write {path}: it is the store itself (name another file)")
    candidates = [target] + [target.with_name(target.name[: -len(side)])
                             for side in SQLITE_SIDE_FILES
                             if target.name.endswith(side) and len(target.name) > len(side)]
    for candidate in candidates:
        try:
            with candidate.open("rb") as existing:
                header = existing.read(len(SQLITE_HEADER))
        except OSError:  # not there, a folder, unreadable: the write itself says what fails
            continue
        if header == SQLITE_HEADER and candidate == target:
            raise ValueError(f"cannot write {path}: it is a SQLite database, which this "
                             "would replace (name another file)")
        if header == SQLITE_HEADER:
            raise ValueError(f"cannot write {path}: SQLite keeps it beside the database "
                             f"{candidate} (name another file)")
