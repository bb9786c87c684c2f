"""Counting every LLM call: calls, input and output tokens, latency.

``CallMeter`` is a DSPy callback attached to an LM at setup, so no call can bypass it.
Token counts come from the response's usage (the provider's, or llama.cpp's own count).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from dspy.utils.callback import BaseCallback
from pydantic import BaseModel


class CallRecord(BaseModel):
    """One LLM call as the meter saw it."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None


class Usage(BaseModel):
    """Totals over a span of calls."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    errors: int = 0


def _tokens(usage: dict[str, Any], *names: str) -> int:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int):
            return value
    return 0


class CallMeter(BaseCallback):
    """Records every call of the LM it is attached to.

    Example:
        >>> meter = CallMeter()
        >>> mark = meter.mark()
        >>> meter.since(mark).calls
        0
    """

    def __init__(self) -> None:
        self.records: list[CallRecord] = []
        self._open: dict[str, tuple[Any, float]] = {}
        self._lock = threading.Lock()

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        """Note when a call starts and on which LM."""
        with self._lock:
            self._open[call_id] = (instance, time.perf_counter())

    def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        """Record the finished call, with its usage from the LM's latest history entry."""
        with self._lock:
            instance, started = self._open.pop(call_id, (None, time.perf_counter()))
            history = getattr(instance, "history", None) or [{}]
            usage = history[-1].get("usage") or {}
            self.records.append(CallRecord(
                model=str(getattr(instance, "model", "?")),
                input_tokens=_tokens(usage, "prompt_tokens", "input_tokens"),
                output_tokens=_tokens(usage, "completion_tokens", "output_tokens"),
                seconds=time.perf_counter() - started,
                error=None if exception is None
                else f"{type(exception).__name__}: {exception}"[:300]))

    def mark(self) -> int:
        """A position to measure from (see ``since``)."""
        return len(self.records)

    def since(self, mark: int = 0) -> Usage:
        """Totals of the calls recorded after ``mark``."""
        records = self.records[mark:]
        return Usage(calls=len(records),
                     input_tokens=sum(r.input_tokens for r in records),
                     output_tokens=sum(r.output_tokens for r in records),
                     seconds=round(sum(r.seconds for r in records), 4),
                     errors=sum(1 for r in records if r.error))
