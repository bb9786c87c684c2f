"""``memstrata compile``'s programs and ``memstrata bench compile``: each program's data,
metric and held-out score as a ``ProgramTask`` (``programs.compiler``) in its own module,
listed in :data:`TASKS` under the name the commands take, and the benchmark that compiles
one with every optimizer and scores them on held-out units (``heldout``).
"""

from __future__ import annotations

from memstrata.programs.compiler import ProgramTask

from .extractor import ExtractorTask
from .heldout import compile_chart, compile_table, run_compile_bench, write_compile_outputs
from .qa import AnswererTask, QATask, compile_sets, qa_examples, read_split
from .sparql import SparqlTask
from .voe import VoETask

TASKS: dict[str, type[ProgramTask]] = {"qa": QATask, "answerer": AnswererTask,
                                        "extractor": ExtractorTask, "voe": VoETask,
                                        "sparql": SparqlTask}
"""The programs the commands compile, by the name they take."""

__all__ = ["TASKS", "AnswererTask", "ExtractorTask", "QATask", "SparqlTask", "VoETask",
           "compile_chart", "compile_sets", "compile_table", "qa_examples", "read_split",
           "run_compile_bench", "write_compile_outputs"]
