"""``Recorder``: one run of a program or executor, written to the store as it ends.

A run records its config, the memory layers it had, what was retrieved, packed and
injected, each step (code, tool call, output size), the verdict, the LLM calls and
tokens and the wall time, plus the git commit and a pointer to the database state it
read, so a result can be traced to the code and data behind it. Everything passes
through ``redact`` first: keys and tokens never reach a record.

Example:
    >>> from memstrata.memory import Store
    >>> store = Store.open(":memory:")
    >>> with Recorder(store, "u1", "demo", task="2+2?", config={"k": 3}) as run:
    ...     _ = run.step("tool", "calc", input="2+2", output="4")
    ...     _ = run.finish(output={"answer": "4"})
    >>> store.runs.get("u1", run.run_id).status
    'ok'
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memstrata.memory import MemoryStore
from memstrata.memory.models import utcnow
from memstrata.memory.runs import RunRecord, RunStatus, StepRecord

from .provenance import git_commit
from .redact import redact, redact_text

PREVIEW_CHARS = 2000


def as_text(value: Any) -> str:
    """A value as the text a run step shows: a string as it is, None as empty, anything
    else as JSON (or its repr when it is not JSON)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


RunClock = tuple[datetime, float]
"""When work began: the wall-clock time and ``time.perf_counter()``."""


def run_clock() -> RunClock:
    """Now, as :meth:`Recorder.start` takes it for work recorded once it is done."""
    return utcnow(), time.perf_counter()


class Recorder:
    """Records one run; use as a context manager (an exception marks the run ``error``).

    Args:
        store: where the run is written (its own tables in the same file).
        user_id: the tenant the run worked for.
        program: what ran (``rlm``, ``react``, ``qa``...).
        task: the question or task, as given.
        config: the settings that shaped the run (secrets are masked).
        layers: the memory layers enabled for it.
        agent_id: the agent, where there is one.
        preview_chars: how much of each step's input and output is kept (sizes are
            always kept in full).
    """

    def __init__(self, store: MemoryStore, user_id: str, program: str, *, task: str = "",
                 config: dict[str, Any] | None = None, layers: Sequence[str] = (),
                 agent_id: str | None = None, preview_chars: int = PREVIEW_CHARS) -> None:
        self.store = store
        self.preview_chars = preview_chars
        self.run_id = f"run_{uuid.uuid4().hex[:20]}"
        self.record = RunRecord(
            id=self.run_id, user_id=user_id, agent_id=agent_id, program=program,
            task=redact_text(task), config=redact(config or {}), layers=list(layers),
            started_at=utcnow())
        self.steps: list[StepRecord] = []
        self._started = 0.0
        self._finished = False

    def __enter__(self) -> Recorder:
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            self.fail(exc)
        elif not self._finished:
            self.finish()

    def start(self, *, began: RunClock | None = None) -> None:
        """Write the run's first row, with the code version and the data it starts from.
        ``began`` (:func:`run_clock`, read when the work began) dates a run recorded after
        its work is done, so its ``started_at`` and ``wall_s`` are the work's."""
        if began is not None:
            self.record.started_at, self._started = began
        else:
            self._started = time.perf_counter()
        self.record.git_commit = git_commit()
        self.record.db_state = self.store.state_pointer(self.record.user_id)
        self.store.runs.start(self.record)

    def step(self, kind: str, name: str = "", *, input: Any = None,
             output: Any = None, data: dict[str, Any] | None = None, ms: float | None = None,
             output_chars: int | None = None) -> StepRecord:
        """Add a step: ``retrieve``, ``pack``, ``inject``, ``iteration``, ``code``, ``tool``,
        ``llm`` or ``verdict`` (any name works; these are the ones memstrata writes)."""
        full = as_text(output)
        step = StepRecord(
            run_id=self.run_id, idx=len(self.steps), kind=kind, name=name,
            input=redact_text(as_text(input))[: self.preview_chars],
            output=redact_text(full)[: self.preview_chars],
            output_chars=len(full) if output_chars is None else output_chars,
            data=redact(data or {}), ms=None if ms is None else round(ms, 3), at=utcnow())
        self.steps.append(step)
        return step

    def finish(self, *, output: Any = None, verdict: Any = None,
               usage: dict[str, Any] | None = None, leakage: dict[str, Any] | None = None,
               config: dict[str, Any] | None = None) -> RunRecord:
        """Close the run as ``ok`` and write it with its steps."""
        return self._close("ok", None, output=output, verdict=verdict, usage=usage,
                           leakage=leakage, config=config)

    def fail(self, exc: BaseException | str, *, output: Any = None,
             usage: dict[str, Any] | None = None, leakage: dict[str, Any] | None = None
             ) -> RunRecord:
        """Close the run as ``error``, keeping what was recorded so far (and any output,
        usage and leakage the failed run still produced)."""
        message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        return self._close("error", message[:2000], output=output, usage=usage,
                           leakage=leakage)

    def _close(self, status: RunStatus, error: str | None, **fields: Any) -> RunRecord:
        if self._finished:
            return self.record
        rec = self.record
        rec.status = status
        rec.error = None if error is None else redact_text(error)
        for name in ("output", "verdict", "usage", "leakage"):
            if fields.get(name) is not None:
                setattr(rec, name, redact(fields[name]))
        if fields.get("config"):
            rec.config = redact({**rec.config, **fields["config"]})
        rec.finished_at = utcnow()
        rec.wall_s = round(time.perf_counter() - self._started, 3)
        with self.store.transaction():
            self.store.runs.add_steps(self.run_id, self.steps)
            self.store.runs.finish(rec)
        self._finished = True
        return rec
