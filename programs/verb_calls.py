"""Counting the LLM calls one ``Memory`` verb makes, in its own thread only, and
recording them in the verb's run record.

A model handle's meter counts every call of its LM, whichever thread made it; two
tenants answered at once would each see the other's calls. :func:`counting_calls` adds
a DSPy callback to the current thread's settings for the length of a block, so the
count is this block's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import dspy
from dspy.utils.callback import BaseCallback

from memstrata.memory import MemoryStore
from memstrata.trajectories.recorder import Recorder, RunClock, run_clock

__all__ = ["CallCounter", "counting_calls", "record_verb", "run_clock"]


class CallCounter(BaseCallback):
    """Counts the LM calls started while it is installed (``calls``)."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        """Count one call."""
        with self._lock:
            self.calls += 1


@contextmanager
def counting_calls(lm: Any = None) -> Iterator[CallCounter]:
    """Inside the block, this thread's LM calls are counted (and ``lm``, when given, is
    the LM DSPy calls); the counter's ``calls`` is final when the block ends."""
    counter = CallCounter()
    extra: dict[str, Any] = {"lm": lm} if lm is not None else {}
    with dspy.context(callbacks=[*dspy.settings.get("callbacks", []), counter], **extra):
        yield counter


def record_verb(store: MemoryStore, user_id: str, verb: str, *, task: str, llm_calls: int,
                began: RunClock, output: Any = None, data: dict[str, Any] | None = None,
                lock: threading.RLock | None = None) -> str:
    """Write one finished run record of a ``Memory`` verb (program ``memory.<verb>``),
    with its LLM calls in ``usage.calls`` and ``data`` as its one step; returns its id.
    ``began`` (:func:`~memstrata.trajectories.recorder.run_clock`, read when the verb
    began) makes the record's ``started_at`` and ``wall_s`` the verb's own, model calls
    included. The store is written under ``lock``."""
    with lock if lock is not None else nullcontext():
        rec = Recorder(store, user_id, f"memory.{verb}", task=task)
        rec.start(began=began)
        rec.step(verb, verb, input=task, output=output, data=data or {},
                 ms=(time.perf_counter() - began[1]) * 1000)
        rec.finish(output=output, usage={"calls": llm_calls})
    return rec.run_id
