"""Sharing one SQLite connection between threads, and one file between processes.

One :class:`LockedConnection` wraps the store's connection: every statement runs under the
store's re-entrant lock and its rows are read before the lock is released, so threads never
interleave inside a statement, and a thread's transaction (which holds the same lock from
``BEGIN`` to ``COMMIT``) is never joined by another thread's writes. Across processes,
write transactions start with ``BEGIN IMMEDIATE`` (the write lock is taken up front, so two
writers cannot deadlock on a lock upgrade, which SQLite reports as an immediate BUSY that
``busy_timeout`` does not wait out), and :func:`retry_busy` retries what still reports BUSY.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
"""How long a statement waits for another process's write lock before SQLite gives up."""

RETRY_FOR_S = 60.0
"""How long :func:`retry_busy` keeps retrying a statement that reports the file locked."""


def is_busy(exc: BaseException) -> bool:
    """True for SQLite's "database is locked" / "database is busy" errors."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc).lower()
    return "database is locked" in text or "database is busy" in text


def retry_busy(fn: Callable[[], T], *, budget_s: float = RETRY_FOR_S) -> T:
    """``fn()``, retried with jittered backoff while SQLite reports the file locked.

    Raises:
        sqlite3.OperationalError: still locked after ``budget_s`` seconds (another
            process holds the write lock that long), or any other SQLite error at once.
    """
    deadline = time.monotonic() + budget_s
    pause = 0.005
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause * (0.5 + random.random()))
        pause = min(pause * 2, 0.25)


class Rows:
    """A finished statement's rows (what ``execute`` returns): iterate or fetch them."""

    __slots__ = ("_at", "_rows", "description", "lastrowid", "rowcount")

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._rows = cursor.fetchall()
        self._at = 0
        self.description = cursor.description
        self.rowcount = cursor.rowcount
        self.lastrowid = cursor.lastrowid

    def fetchall(self) -> list[Any]:
        """Every row not yet fetched."""
        rows = self._rows[self._at:] if self._at else self._rows
        self._rows, self._at = [], 0
        return rows

    def fetchone(self) -> Any:
        """The next row, or None."""
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class LockedConnection:
    """A ``sqlite3.Connection`` whose statements run one at a time under ``lock``.

    Only ``execute`` and ``executemany`` are wrapped; everything else is the connection's.
    """

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock) -> None:
        self.raw = conn
        self.lock = lock

    def execute(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> Rows:
        """Run one statement and read its rows, holding the lock throughout."""
        with self.lock:
            return Rows(self.raw.execute(sql, args))

    def executemany(self, sql: str, rows: Any) -> Rows:
        """Run one statement for each row of parameters, holding the lock throughout."""
        with self.lock:
            return Rows(self.raw.executemany(sql, rows))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)
