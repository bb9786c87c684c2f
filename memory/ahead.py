"""One thread a process for a search's lock-free work started ahead of when it is needed.

A search over a big tenant starts its dense pass (NumPy products) on this thread, then
reads the full-text index in its own: NumPy's products and SQLite's reads both release
the GIL, so on a second core the two overlap. Work submitted here must run no SQL and
take no lock a search holds (the search waits for it while holding them). Jobs run one
at a time, in the order submitted.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

THREAD_NAME = "memstrata-ahead"
"""The thread's name prefix (a thread dump names it)."""

_pool: tuple[int, ThreadPoolExecutor] | None = None
_lock = threading.Lock()


def submit(fn: Callable[[], T]) -> Future[T]:
    """Run ``fn`` on the process's ahead thread; its future holds the result (or the
    exception it raised).

    Raises:
        RuntimeError: the interpreter is shutting down (no new work is taken).
    """
    return _executor().submit(fn)


def _executor() -> ThreadPoolExecutor:
    """The process's one ahead thread (a forked child starts its own: the parent's
    thread is not in it)."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix=THREAD_NAME))
        return _pool[1]
