"""Every error the library defines is a MemstrataError and keeps its builtin base."""

from __future__ import annotations

import ast
import importlib
import sqlite3
from pathlib import Path

import pytest
from dspy.primitives.code_interpreter import CodeExecutionError, CodeInterpreterError

from memstrata.errors import MemstrataError

#: (module, class, the bases callers already catch it by)
FAMILY: list[tuple[str, str, tuple[type[BaseException], ...]]] = [
    ("memstrata.memory.locking", "StoreError", (sqlite3.DatabaseError,)),
    ("memstrata.memory.store.pg.connection", "PgStoreError", (sqlite3.DatabaseError,)),
    ("memstrata.memory.extras", "MissingExtraError", (ImportError, RuntimeError)),
    ("memstrata.formats.records", "ImportFormatError", (ValueError,)),
    ("memstrata.formats.locomo", "LoCoMoError", (ValueError,)),
    ("memstrata.tools.base", "ToolError", (ValueError,)),
    ("memstrata.tools.calculator", "CalculatorError", (ValueError,)),
    ("memstrata.programs.errors", "ModelSetupError", (RuntimeError,)),
    ("memstrata.programs.errors", "ProgramParseError", (RuntimeError,)),
    ("memstrata.programs.ingest", "IngestError", (RuntimeError,)),
    ("memstrata.programs.binding", "UnboundProgramError", (RuntimeError,)),
    ("memstrata.programs.models", "ModelInstallError", (RuntimeError,)),
    ("memstrata.programs.sandbox", "SandboxError", (RuntimeError,)),
    ("memstrata.programs.sandbox", "SandboxStartError", (RuntimeError, CodeInterpreterError)),
    ("memstrata.programs.sandbox", "SandboxLimitError", (CodeExecutionError,)),
    ("memstrata.bench.cognitive.scenarios", "ScenarioFileError", (ValueError,)),
    ("memstrata.server.errors", "ApiError", ()),
    ("memstrata.memory.store.jobs", "LeaseLost", (RuntimeError,)),
    ("memstrata.worker", "JobTimeoutError", (TimeoutError,)),
    ("memstrata.inspector.app", "BadRequest", (ValueError,)),
    ("memstrata.inspector.views", "NotFound", (LookupError,)),
    ("memstrata.api", "MemoryNotFoundError", (KeyError,)),
]


@pytest.mark.parametrize(("module", "name", "bases"), FAMILY, ids=[f[1] for f in FAMILY])
def test_every_library_error_is_a_memstrata_error(module, name, bases) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, MemstrataError), f"{module}.{name} is not a MemstrataError"
    for base in bases:
        assert issubclass(cls, base), f"{module}.{name} lost its base {base.__name__}"


def test_the_family_table_names_every_error() -> None:
    """errors.py's docstring lists the family; a class added to FAMILY is listed there."""
    import memstrata.errors

    doc = memstrata.errors.__doc__ or ""
    for module, name, _ in FAMILY:
        assert f"``{module}.{name}``" in doc


def test_no_other_error_class_is_defined() -> None:
    """A new exception class in the library joins FAMILY (and so the MemstrataError family).

    Scans the library's folders for classes whose name ends in Error or Exception; the
    reliability harness's ``Hang`` (a BaseException that must escape ``except Exception``)
    is not an error of the library and is not named so.
    """
    root = Path(__file__).resolve().parents[1]
    known = {name for _, name, _ in FAMILY}
    found: set[str] = set()
    for folder in ("memory", "formats", "tools", "programs", "packers", "trajectories",
                   "memstrata", "bench"):
        for path in (root / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found |= {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                      and node.name.endswith(("Error", "Exception"))}
    assert found - known - {"MemstrataError"} == set()


def test_errors_is_a_leaf_module() -> None:
    """memstrata.errors imports nothing of memstrata, so the lowest layer may import it."""
    import memstrata.errors

    tree = ast.parse(Path(memstrata.errors.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.module == "__future__" or not (node.module or "").startswith(
                "memstrata"), node.module
            assert node.level == 0
        elif isinstance(node, ast.Import):
            assert all(not a.name.startswith("memstrata") for a in node.names)


def test_memstrata_error_is_an_exception() -> None:
    assert issubclass(MemstrataError, Exception)
    assert str(MemstrataError("one line")) == "one line"
