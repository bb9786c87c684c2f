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

import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from memstrata.errors import MemstrataError

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


FAULTS: dict[int, str] = {
    sqlite3.SQLITE_FULL: "the disk (or the file's size limit) is full",
    sqlite3.SQLITE_READONLY: "the file or its folder is read-only",
    sqlite3.SQLITE_CANTOPEN: "the file, or the -wal/-shm files beside it, cannot be opened "
                             "(is its folder missing or read-only?)",
    sqlite3.SQLITE_CORRUPT: "the file is corrupt",
    sqlite3.SQLITE_NOTADB: "the file is not a SQLite store (or its header is corrupt)",
    sqlite3.SQLITE_IOERR: "an I/O error (a full disk or a failing device)",
    sqlite3.SQLITE_PERM: "access to the file was denied",
    sqlite3.SQLITE_SCHEMA: "its schema is not the one memstrata wrote (damaged, or changed "
                           "by another program)",
}
"""SQLite's primary result codes that mean the file itself failed, and what each says."""
CLOSED = "the store was closed (open it again)"
"""A closed store's fault: a ``Memory`` (or store) used after ``close()``."""


class StoreError(MemstrataError, sqlite3.DatabaseError):
    """The store's file could not be read or written: full disk, read-only file or folder,
    corruption, or an I/O error. What the file held before (its last commit) is untouched
    as far as SQLite can keep it; the failed statement or transaction was rolled back.

    A ``sqlite3.DatabaseError``, so ``except sqlite3.Error`` still catches it. Its message
    names the file, the fault and SQLite's own words; ``code`` is SQLite's primary result
    code (``sqlite3.SQLITE_FULL``, ...); ``fault`` replaces the code's usual words where
    memstrata knows more (a folder given as the file). SQL mistakes and a locked file are
    not translated.
    """

    def __init__(self, path: str, code: int, detail: str, *, fault: str | None = None) -> None:
        self.path, self.code, self.detail, self.fault = path, code, detail, fault
        where = f"store {path}" if path else "store"
        fault = fault or FAULTS.get(code, "SQLite failed")
        super().__init__(f"{where}: {fault} ({detail})" if detail else f"{where}: {fault}")


def fault_detail(exc: BaseException) -> str:
    """An exception's message on one line, at most 200 characters (a StoreError's detail)."""
    return " ".join(str(exc).split())[:200]


def store_error(exc: BaseException, path: str) -> StoreError | None:
    """``exc`` as a :class:`StoreError` when it is a fault of the file, else None."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, sqlite3.ProgrammingError) and "closed database" in str(exc):
        return StoreError(path, sqlite3.SQLITE_MISUSE, "", fault=CLOSED)
    if isinstance(exc, sqlite3.OperationalError) and str(exc).startswith("Could not decode"):
        # Python's sqlite3 found a text value that is not UTF-8: its bytes were altered.
        return StoreError(path, sqlite3.SQLITE_CORRUPT, fault_detail(exc))
    if isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(
            ("no such table", "no such column")):
        # memstrata's SQL names only what its migrations made: the schema is not that.
        return StoreError(path, sqlite3.SQLITE_SCHEMA, str(exc)[:200])
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(exc, sqlite3.Error) or code is None or code & 0xFF not in FAULTS:
        return None
    return StoreError(path, code & 0xFF, str(exc))


@contextmanager
def stored_value(what: str) -> Iterator[None]:
    """Parse a value read from the file; one that does not parse (JSON, a time, a model's
    fields), or a row without a column the schema names (the schema's text altered, so
    ``SELECT *`` names it otherwise), had its bytes altered on disk, past what SQLite
    checks: a :class:`StoreError`."""
    try:
        yield
    except (ValueError, TypeError, KeyError) as exc:
        detail = f"{what} is unreadable: {fault_detail(exc)}"
        raise StoreError("", sqlite3.SQLITE_CORRUPT, detail) from exc


def stored_json(text: str | bytes, what: str, kind: type | None = None) -> Any:
    """JSON text read from the file, parsed; text that does not parse, or (with ``kind``)
    parses to another type than memstrata stored there, is damage (see
    :func:`stored_value`): a :class:`StoreError` naming ``what``."""
    with stored_value(what):
        value = json.loads(text)
        if kind is not None and not isinstance(value, kind):
            raise TypeError(f"a JSON {type(value).__name__} where a {kind.__name__} was stored")
        return value


@contextmanager
def file_faults(path: str) -> Iterator[None]:
    """Re-raise a fault of the file at ``path`` as a :class:`StoreError`; others as they are."""
    try:
        yield
    except sqlite3.Error as exc:
        err = store_error(exc, path)
        if err is None or err is exc:
            raise
        raise err from exc
    except UnicodeDecodeError as exc:
        # SQLite's own error message (quoting a damaged schema) is not UTF-8.
        raise StoreError(path, sqlite3.SQLITE_CORRUPT, f"garbled text in the file: {exc}"
                         ) from exc


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


def _finished(cursor: sqlite3.Cursor) -> Rows:
    """The cursor's rows, and the cursor closed: a read that fails part way (text that is
    not UTF-8 on a damaged file) otherwise leaves its statement active, and a later write
    that drops a table fails with "database table is locked"."""
    try:
        return Rows(cursor)
    finally:
        cursor.close()


class LockedConnection:
    """A ``sqlite3.Connection`` whose statements run one at a time under ``lock``.

    Only ``execute`` and ``executemany`` are wrapped; everything else is the connection's.
    """

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock, path: str = "") -> None:
        self.raw = conn
        self.lock = lock
        self.path = path

    def execute(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> Rows:
        """Run one statement and read its rows, holding the lock throughout. A fault of
        the file (full, read-only, corrupt) raises :class:`StoreError`."""
        with self.lock, file_faults(self.path):
            return _finished(self.raw.execute(sql, args))

    def executemany(self, sql: str, rows: Any) -> Rows:
        """Run one statement for each row of parameters, holding the lock throughout."""
        with self.lock, file_faults(self.path):
            return _finished(self.raw.executemany(sql, rows))

    def __getattr__(self, name: str) -> Any:
        with file_faults(self.path):  # a closed connection's attributes raise
            return getattr(self.raw, name)
