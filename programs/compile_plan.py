"""What a compile is asked to do, without DSPy: the optimizers by name, their budgets and
the split of the data into train, validation and held-out units. ``programs.compiler``
runs it; the command line reads these to build its ``--help`` (no DSPy import there).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

Optimizer = Literal["bootstrap", "mipro", "gepa", "simba"]
OPTIMIZERS: tuple[Optimizer, ...] = ("bootstrap", "mipro", "gepa", "simba")
DEFAULT_LIMIT = 40
"""Examples per train and validation set unless told: what the budgets below were sized
for (MIPROv2 summarises the train set, GEPA evaluates its seed on the validation set)."""


class Budget(BaseModel):
    """How much one optimizer may do. ``main`` is the knob ``--budget N`` sets (see
    :data:`BUDGET_MEANS`); the others are fixed small settings."""

    model_config = ConfigDict(frozen=True)

    main: int
    max_bootstrapped_demos: int = 2
    max_labeled_demos: int = 0
    num_candidates: int = 3
    minibatch_size: int = 8

    @model_validator(mode="after")
    def _positive(self) -> Budget:
        if self.main < 1:
            raise ValueError("the budget must be at least 1")
        return self


BUDGETS: dict[Optimizer, Budget] = {
    "bootstrap": Budget(main=30, max_bootstrapped_demos=3, max_labeled_demos=1),
    "mipro": Budget(main=6, max_bootstrapped_demos=2, max_labeled_demos=1, num_candidates=3,
                    minibatch_size=8),
    "gepa": Budget(main=100, minibatch_size=3),
    "simba": Budget(main=2, max_bootstrapped_demos=2, num_candidates=3, minibatch_size=8),
}
BUDGET_MEANS: dict[Optimizer, str] = {
    "bootstrap": "train examples tried, one teacher run each (it stops at 3 demos that "
                 "pass): at most ~30 calls for qa",
    "mipro": "trials, each on a minibatch of 8 validation examples, after 3 demo sets and "
             "3 instructions are proposed, then one pass over the validation set: ~100 calls",
    "gepa": "metric calls in all, the seed's pass over the validation set included, plus one "
            "reflection call per ~6 of them: ~115 calls",
    "simba": "steps, each 3 candidates on a batch of 8 train examples (~50 calls), then up "
             "to 3 programs on every train example: ~200 calls",
}


def budget_help() -> str:
    """The budgets as ``--help`` states them."""
    return "; ".join(f"{name}: {BUDGETS[name].main} {BUDGET_MEANS[name]}" for name in OPTIMIZERS)


class Split(BaseModel):
    """Which units (conversations, or a suite's levels) train, validate and test a compile
    (leave-units-out).

    Raises (on construction, ``ValueError``): an empty train or validation set, or a
    unit named in two sets. :meth:`check` refuses ids the data lacks.
    """

    model_config = ConfigDict(frozen=True)

    train: tuple[str, ...]
    val: tuple[str, ...]
    heldout: tuple[str, ...] = ()
    unit: str = "conversation"
    """What the ids name, for the errors."""

    @model_validator(mode="after")
    def _disjoint(self) -> Split:
        if not self.train or not self.val:
            raise ValueError(f"--train and --val must each name at least one {self.unit}")
        sets = {"--train": self.train, "--val": self.val, "--heldout": self.heldout}
        for name, ids in sets.items():
            if len(set(ids)) != len(ids):
                raise ValueError(f"{name} names a {self.unit} twice: {','.join(ids)}")
        seen: dict[str, str] = {}
        for name, ids in sets.items():
            for unit in ids:
                if unit in seen:
                    raise ValueError(f"{self.unit} {unit} is in both {seen[unit]} and {name}: "
                                     f"the sets must be disjoint (nothing of a {self.unit} "
                                     "used in compiling may be scored as held-out)")
                seen[unit] = name
        return self

    @classmethod
    def parse(cls, train: str, val: str, heldout: str | None = None, *,
              unit: str = "conversation") -> Split:
        """A split from comma-separated ids (``conv-26,conv-30``)."""

        def ids(raw: str | None) -> tuple[str, ...]:
            return tuple(x.strip() for x in (raw or "").split(",") if x.strip())

        return cls(train=ids(train), val=ids(val), heldout=ids(heldout), unit=unit)

    def check(self, available: Iterable[str], data: str | Path) -> None:
        """Raise ``ValueError`` naming every id of the split that ``data`` lacks."""
        known = set(available)
        missing = [c for c in (*self.train, *self.val, *self.heldout) if c not in known]
        if missing:
            raise ValueError(f"no {self.unit} {', '.join(missing)} in {data} (it holds "
                             f"{', '.join(sorted(known))})")
