"""Confidence intervals for benchmark figures: how far a mean over a few hundred questions
(or a ratio of two systems' means on the same questions) can be trusted.

Percentile bootstrap over questions (``scipy.stats.bootstrap``), seeded so a report is
reproducible. Two systems scored on the same questions are resampled together
(``paired``): the interval of their difference or ratio is then much narrower than the two
intervals side by side suggest.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ROUNDS = 2000
LEVEL = 0.95


def _bootstrap(data: tuple[np.ndarray, ...], statistic: object, *, paired: bool,
               seed: int) -> list[float]:
    from scipy.stats import bootstrap

    res = bootstrap(data, statistic, paired=paired, vectorized=True,
                    n_resamples=ROUNDS, confidence_level=LEVEL, method="percentile",
                    random_state=np.random.default_rng(seed))
    low, high = res.confidence_interval
    return [round(float(low), 4), round(float(high), 4)]


def mean_interval(values: Sequence[float], *, seed: int = 0) -> list[float] | None:
    """The 95% interval of the mean of ``values``; None for fewer than two values (no
    spread to resample) or when every value is the same (the interval is that value)."""
    arr = np.asarray(values, dtype=float)
    if len(arr) < 2:
        return None
    if np.all(arr == arr[0]):
        return [round(float(arr[0]), 4)] * 2
    return _bootstrap((arr,), lambda a, axis: a.mean(axis=axis), paired=False, seed=seed)


def paired_difference(a: Sequence[float], b: Sequence[float], *, seed: int = 0
                      ) -> tuple[float, list[float] | None]:
    """``mean(a) - mean(b)`` over the same questions (``a[i]`` and ``b[i]`` are one
    question's scores) and its 95% interval (None for fewer than two questions)."""
    x, y = _pair(a, b)
    diff = round(float(x.mean() - y.mean()), 4) if len(x) else 0.0
    if len(x) < 2 or np.all(x - y == (x - y)[0]):
        return diff, None if len(x) < 2 else [diff, diff]
    return diff, _bootstrap((x, y), lambda p, q, axis: p.mean(axis=axis) - q.mean(axis=axis),
                            paired=True, seed=seed)


def paired_ratio(a: Sequence[float], b: Sequence[float], *, seed: int = 0
                 ) -> tuple[float | None, list[float] | None]:
    """``mean(a) / mean(b)`` over the same questions and its 95% interval; None where
    ``b``'s mean is 0 (no ratio), the interval None for fewer than two questions."""
    x, y = _pair(a, b)
    if not len(x) or y.mean() == 0:
        return None, None
    ratio = round(float(x.mean() / y.mean()), 4)
    if len(x) < 2:
        return ratio, None

    def stat(p: np.ndarray, q: np.ndarray, axis: int) -> np.ndarray:
        den = q.mean(axis=axis)
        # A resample where b scored nothing has no ratio; count it as a ratio of a's mean
        # over the smallest nonzero score so the interval stays finite and conservative.
        floor = float(np.min(y[y > 0]))
        return np.asarray(p.mean(axis=axis) / np.maximum(den, floor / len(y)))

    return ratio, _bootstrap((x, y), stat, paired=True, seed=seed)


def _pair(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    if len(a) != len(b):
        raise ValueError(f"paired scores need one per question on both sides: "
                         f"{len(a)} vs {len(b)}")
    return np.asarray(a, dtype=float), np.asarray(b, dtype=float)
