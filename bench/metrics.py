"""Metrics shared by the benchmarks: evidence recall@k and latency percentiles."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def recall_at_k(retrieved: Sequence[str], relevant: Sequence[str], k: int) -> float:
    """Fraction of ``relevant`` ids found among the first ``k`` of ``retrieved``.

    Example:
        >>> recall_at_k(["D1:3", "D2:1", "D4:4"], ["D1:3", "D4:4"], 2)
        0.5
    """
    if not relevant:
        raise ValueError("recall is undefined without relevant ids")
    top = set(retrieved[:k])
    return sum(1 for r in set(relevant) if r in top) / len(set(relevant))


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50 and p95 of a list of milliseconds (rounded to 3 decimals)."""
    if not samples_ms:
        return {"p50": float("nan"), "p95": float("nan")}
    arr = np.asarray(samples_ms, dtype=float)
    return {"p50": round(float(np.percentile(arr, 50)), 3),
            "p95": round(float(np.percentile(arr, 95)), 3)}
