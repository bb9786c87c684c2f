"""The rollout policy (MaTTS, seed 002's E12): N attempts per task, best-of by the judge.

Rollout 0 runs at the model's own settings (temperature 0 by default, so a one-rollout
run repeats); later rollouts sample at ``temperature`` with their own ``rollout_id`` (so
no cache replays rollout 0) and, on the embedded model, their own seed. Selection never
looks at gold: the judge's verdict first, then its confidence, then fewer steps, then the
earlier rollout. Whether extraction contrasts the rollouts is the extraction policy's
``contrastive`` switch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pydantic import BaseModel, Field

from .judging import Verdict
from .lm import LOCAL_PREFIX, ModelHandle


class RolloutPolicy(BaseModel):
    """How many attempts each task gets, and how later ones sample."""

    n: int = Field(1, ge=1, le=8)
    temperature: float = Field(0.7, ge=0.0, le=2.0)

    def select(self, verdicts: Sequence[Verdict], steps: Sequence[int]) -> int:
        """The index of the best attempt by the judge (see the module docstring)."""
        if not verdicts or len(verdicts) != len(steps):
            raise ValueError("select needs one verdict and one step count per rollout")
        return min(range(len(verdicts)), key=lambda i: (
            not verdicts[i].success, -verdicts[i].confidence, steps[i], i))

    @contextmanager
    def sampling(self, handle: ModelHandle, rollout: int) -> Iterator[None]:
        """Within the block, ``handle``'s LM samples as rollout number ``rollout``."""
        if rollout == 0:
            yield
            return
        kwargs = handle.lm.kwargs
        saved = dict(kwargs)
        kwargs.update(temperature=self.temperature, rollout_id=rollout)
        if handle.name.startswith(LOCAL_PREFIX):
            kwargs["seed"] = rollout  # providers differ on seed; the local engine takes it
        try:
            yield
        finally:
            kwargs.clear()
            kwargs.update(saved)
