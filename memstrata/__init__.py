"""memstrata: layered long-term memory for DSPy agents, in one SQLite file.

The packages: ``memstrata.memory`` (the store and retrieval), ``memstrata.tools``
(handle-based tools), ``memstrata.programs`` (DSPy modules), ``memstrata.packers``
(budgeted context), ``memstrata.trajectories`` (run records), ``memstrata.bench``
(loaders, metrics and benchmarks).
"""

__version__ = "0.1.0"
