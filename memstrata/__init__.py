"""memstrata: layered long-term memory for DSPy agents, in one SQLite file.

The packages: ``memstrata.memory`` (the store and retrieval), ``memstrata.tools``
(handle-based tools), ``memstrata.programs`` (DSPy modules), ``memstrata.packers``
(budgeted context), ``memstrata.trajectories`` (run records), ``memstrata.bench``
(loaders, metrics and benchmarks).

The names below load on first use, so ``import memstrata`` (and ``memstrata --help``)
starts without DSPy or NumPy; to a type checker they are the classes themselves.

- ``Memory`` (:mod:`memstrata.api`) and ``AsyncMemory`` (:mod:`memstrata.aio`);
- ``MemstrataError``, the base of every error memstrata raises (:mod:`memstrata.errors`),
  and the errors a ``Memory`` user meets most: ``StoreError``, ``MissingExtraError``,
  ``ImportFormatError``, ``IngestError``; ``MemstrataWarning``, the base of its warnings.
"""

import os
from typing import TYPE_CHECKING

from .errors import MemstrataError, MemstrataWarning

# Nothing leaves the machine unless the user configured it: litellm would otherwise fetch
# its model cost map from GitHub on import (its bundled copy is used instead).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .aio import AsyncMemory
    from .api import Memory
    from .formats.records import ImportFormatError
    from .memory.extras import MissingExtraError
    from .memory.locking import StoreError
    from .programs.ingest import IngestError

# Each lazily loaded name and the module that defines it.
_LAZY = {
    "Memory": "memstrata.api",
    "AsyncMemory": "memstrata.aio",
    "StoreError": "memstrata.memory.locking",
    "MissingExtraError": "memstrata.memory.extras",
    "ImportFormatError": "memstrata.formats.records",
    "IngestError": "memstrata.programs.ingest",
}

__all__ = [
    "AsyncMemory",
    "ImportFormatError",
    "IngestError",
    "Memory",
    "MemstrataError",
    "MemstrataWarning",
    "MissingExtraError",
    "StoreError",
    "__version__",
]

if not TYPE_CHECKING:
    # Runtime only: to a type checker an unknown name stays an error, not an ``Any``.
    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'memstrata' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
