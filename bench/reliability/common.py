"""What every reliability scenario shares: its result, its context, and its bounds.

A scenario is a function ``run(ctx: Context) -> Scenario``. It works only under
``ctx.work`` (a fresh folder of its own), sizes itself from ``ctx.quick`` (the fast slice
the tests run) or the full counts the issue asks for, and stops by itself when
``ctx.deadline`` passes (reporting what it managed). It never raises for a failure of the
system under test: each one is counted with :meth:`Scenario.fail` and kept, bounded, in
``details``. An exception that escapes a scenario is a bug in the scenario itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from memstrata.api import Memory
    from memstrata.memory import Store

HEADLINE = ("lost_writes", "integrity_failures", "crashes", "breaches", "escapes",
            "secrets_found", "deleted_bytes_found", "parity_mismatches", "imports_losing_rows",
            "imports_duplicating")
"""The counters the suite sums over scenarios; any non-zero one fails the run."""

MAX_DETAILS = 50
"""At most this many failure details are kept per scenario (the counts stay exact)."""


class Scenario(BaseModel):
    """One scenario's outcome.

    ``attempts`` counts the trials (kills, writes, fuzzed calls, injection attempts,
    escape attempts, planted secrets); ``failures`` the trials that broke a promise, each
    also counted under the headline counter it breaks (a lost write under ``lost_writes``,
    and so on). ``figures`` holds the scenario's measurements (throughput, wall time,
    peak memory), ``details`` the first failures and, where useful, one line per kind of
    attempt.
    """

    name: str
    attempts: int = 0
    failures: int = 0
    details: list[dict[str, Any]] = Field(default_factory=list)
    figures: dict[str, Any] = Field(default_factory=dict)
    seconds: float = 0.0
    stopped_early: bool = Field(False, description="the deadline came before the full count")
    lost_writes: int = 0
    integrity_failures: int = 0
    crashes: int = 0
    breaches: int = 0
    escapes: int = 0
    secrets_found: int = 0
    deleted_bytes_found: int = Field(0, description="removed text still in the file or "
                                     "readable (deleted_bytes)")
    parity_mismatches: int = Field(0, description="one input, different outcomes on SQLite "
                                   "and PostgreSQL (backend_parity)")
    imports_losing_rows: int = Field(0, description="an import without replace that lowered "
                                     "a conversation's rows (import_no_loss)")
    imports_duplicating: int = Field(0, description="a file imported again that stored any "
                                     "row a second time (import_no_loss)")

    def fail(self, counter: str | None, what: str, **detail: Any) -> None:
        """Count one failure (and ``counter``, one of :data:`HEADLINE`, if it breaks one)."""
        if counter is not None:
            if counter not in HEADLINE:
                raise ValueError(f"unknown counter {counter!r}; one of {HEADLINE}")
            setattr(self, counter, getattr(self, counter) + 1)
        self.failures += 1
        if len(self.details) < MAX_DETAILS:
            self.details.append({"failure": what, **{k: _short(v) for k, v in detail.items()}})

    def note(self, **detail: Any) -> None:
        """Keep one non-failure detail (a kind of attempt and its outcome), bounded."""
        if len(self.details) < MAX_DETAILS:
            self.details.append({k: _short(v) for k, v in detail.items()})


def _short(value: Any, limit: int = 300) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "…"
    return value


@dataclass
class Context:
    """Where and how long a scenario runs.

    Attributes:
        work: a fresh folder for this scenario's files (the suite greps every byte under
            its parent for planted secrets at the end).
        quick: the fast slice (a few kills, a few hundred fuzz cases, every kind once).
        seed: the seed of every random choice, so a run can be repeated.
        budget_s: wall-clock seconds this scenario may take; ``deadline`` is derived.
    """

    work: Path
    quick: bool = False
    seed: int = 0
    budget_s: float = 300.0
    started: float = field(default_factory=time.monotonic)

    @property
    def deadline(self) -> float:
        """``time.monotonic()`` value after which the scenario stops starting new trials."""
        return self.started + self.budget_s

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return time.monotonic() >= self.deadline

    def sized(self, quick: int, full: int) -> int:
        """``quick`` in the fast slice, ``full`` otherwise."""
        return quick if self.quick else full


def sqlite_store(memory: Memory) -> Store:
    """The SQLite store under ``memory``: the file these checks read directly.

    Raises:
        TypeError: ``memory`` runs on another backend.
    """
    from memstrata.memory import Store

    store = memory.store
    if not isinstance(store, Store):
        raise TypeError(f"this check reads an SQLite file, not a {type(store).__name__}")
    return store
