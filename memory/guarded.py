"""``Guarded``: an object whose every method call holds a lock.

``Memory`` serialises store access with one re-entrant lock, and a model call must not
run under it (another tenant would wait for the model). A program that mixes store
reads and model calls (the personal answerer, the adaptive reasoner) is therefore given
its store-facing parts guarded: each of their method calls takes the lock and releases
it when it returns, so the lock is held for the reads and writes and never across a
model call made between them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Guarded(Generic[T]):
    """A proxy of ``target``: its methods run under ``lock``; other attributes are read
    through as they are (a guarded attribute that is itself an object is not guarded).

    Example:
        >>> import threading
        >>> lock = threading.RLock()
        >>> g = Guarded([3, 1, 2], lock)
        >>> g.count(1)
        1
    """

    def __init__(self, target: T, lock: threading.RLock | threading.Lock) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_lock", lock)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value
        lock = self._lock

        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return value(*args, **kwargs)

        return call

    @property
    def unwrapped(self) -> T:
        """The guarded object itself."""
        return self._target


def guarded(target: T, lock: threading.RLock | threading.Lock) -> T:
    """``target`` behind a :class:`Guarded` proxy, typed as ``target`` (for callers that
    pass it where the real type is expected)."""
    proxy: Callable[..., Any] = Guarded
    return proxy(target, lock)
