"""Experiments E1-E12 of issue 7: configs, suites, the runner, reports and comparison.

``memstrata experiment E9 --suite ontology --lm local/smollm2 --out runs/e9`` runs one
config over a suite; ``memstrata experiment compare runs/e1 runs/e9`` puts runs side by
side. In code:

    >>> from memstrata.bench.experiments import load_config
    >>> load_config("E9").learn
    True

The names below load on first use (PEP 562), so importing ``names`` for the command's
help does not import DSPy.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "compare_runs": "compare", "load_run": "compare", "EXPERIMENTS": "names",
    "ExperimentConfig": "config", "load_config": "config", "MemoryHealth": "records",
    "RunSummary": "records", "TaskResult": "records", "Runner": "runner",
    "LocomoSuite": "locomo_suite", "OntologySuite": "ontology_suite", "Suite": "suites",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
