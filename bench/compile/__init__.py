"""``memstrata compile`` and ``memstrata bench compile``: memstrata's programs compiled by
DSPy's optimizers on dev data and scored on data the compile never saw.

``core`` holds what every program shares (the split, the optimizers and their budgets,
the recorded compile, the bench and its reports); each program's data, metric and
held-out score is a ``ProgramTask`` in its own module, listed in :data:`TASKS` under the
name the commands take.
"""

from __future__ import annotations

from .core import (
    BUDGET_MEANS,
    BUDGETS,
    COMPILE_TENANT,
    DEFAULT_LIMIT,
    OPTIMIZERS,
    Budget,
    CompileJob,
    CompileResult,
    CompileSets,
    HeldoutScore,
    Models,
    Optimizer,
    ProgramTask,
    Split,
    SplitData,
    budget_help,
    compile_program,
    compile_table,
    optimize,
    reusable,
    run_compile_bench,
    write_compile_outputs,
)
from .extractor import ExtractorTask
from .qa import AnswererTask, QATask, compile_sets, qa_examples, read_split
from .sparql import SparqlTask
from .voe import VoETask

TASKS: dict[str, type[ProgramTask]] = {"qa": QATask, "answerer": AnswererTask,
                                        "extractor": ExtractorTask, "voe": VoETask,
                                        "sparql": SparqlTask}
"""The programs the commands compile, by the name they take."""

__all__ = ["BUDGETS", "BUDGET_MEANS", "COMPILE_TENANT", "DEFAULT_LIMIT", "OPTIMIZERS", "TASKS",
           "AnswererTask", "Budget", "CompileJob", "CompileResult", "CompileSets",
           "HeldoutScore", "Models", "Optimizer", "ProgramTask", "QATask", "Split",
           "SplitData", "budget_help", "compile_program", "compile_sets", "compile_table",
           "optimize", "qa_examples", "read_split", "reusable", "run_compile_bench",
           "write_compile_outputs"]
