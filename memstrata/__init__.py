"""memstrata: layered long-term memory for DSPy agents, in one SQLite file.

The packages: ``memstrata.memory`` (the store and retrieval), ``memstrata.tools``
(handle-based tools), ``memstrata.programs`` (DSPy modules), ``memstrata.packers``
(budgeted context), ``memstrata.trajectories`` (run records), ``memstrata.bench``
(loaders, metrics and benchmarks).
"""

import os

# Nothing leaves the machine unless the user configured it: litellm would otherwise fetch
# its model cost map from GitHub on import (its bundled copy is used instead).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # ``Memory`` loads on first use, so ``memstrata --help`` starts without DSPy or NumPy.
    if name == "Memory":
        from .api import Memory

        return Memory
    raise AttributeError(f"module 'memstrata' has no attribute {name!r}")


__all__ = ["Memory", "__version__"]
