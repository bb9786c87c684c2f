"""The package is typed: mypy finds no error in it, and its public names are typed as what
they are (``from memstrata import Memory`` is the class, not the lazy loader's ``object``).

mypy runs over the package laid out as installed (``tests/typecheck.py``; the same check
as ``python tests/typecheck.py``), with the ``[tool.mypy]`` settings of pyproject.toml.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.typecheck import package_dirs, run_mypy

#: For a snippet: the package's own errors are the first test's, not the snippet's.
SNIPPET = ["--follow-imports=silent"]


def test_the_package_has_no_type_error() -> None:
    done = run_mypy()
    assert done.returncode == 0, f"mypy found errors:\n{done.stdout}{done.stderr}"
    assert "Success: no issues found" in done.stdout


def test_every_mapped_folder_is_checked_under_its_package_name() -> None:
    # The layout must reach every folder pyproject maps, or mypy would pass vacuously.
    names = [name for name in package_dirs() if "." in name]
    assert {"memstrata.memory", "memstrata.programs", "memstrata.bench"} <= set(names)
    imports = "\n".join(f"import {name}" for name in names)
    done = run_mypy(SNIPPET, targets=["-c", imports])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("code", "revealed"), [
    ('from memstrata import Memory\nm = Memory.open("x.db")\nreveal_type(m)',
     "memstrata.api.Memory"),
    # Memory and Retriever take any backend: the MemoryStore protocol, not SQLite's Store.
    ("import memstrata\nreveal_type(memstrata.Memory)",
     "def (store: memstrata.memory.store.protocol.MemoryStore, *"),
    ("from memstrata.memory import Retriever\nreveal_type(Retriever.__init__)",
     "def (self: memstrata.memory.retrieval.Retriever, store: "
     "memstrata.memory.store.protocol.MemoryStore,"),
    ("from memstrata import AsyncMemory\nasync def main() -> None:\n"
     "    reveal_type(await AsyncMemory.open('x.db'))", "memstrata.aio.AsyncMemory"),
    ("from memstrata import MemstrataError, StoreError\n"
     "def caught(e: StoreError) -> MemstrataError:\n    reveal_type(e)\n    return e",
     "memstrata.memory.locking.StoreError"),
])
def test_public_names_are_typed_as_what_they_are(code: str, revealed: str) -> None:
    done = run_mypy(SNIPPET, targets=["-c", code])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f'Revealed type is "{revealed}' in done.stdout, done.stdout + done.stderr


def test_an_unknown_name_is_a_type_error() -> None:
    # The lazy loader is hidden from type checkers: a typo is reported, not typed object.
    done = run_mypy(SNIPPET, targets=["-c", "import memstrata\nmemstrata.Memroy"])
    assert 'Module has no attribute "Memroy"' in done.stdout, done.stdout


def test_memory_is_documented_and_loads_lazily() -> None:
    code = ("import sys, memstrata\n"
            "assert 'memstrata.api' not in sys.modules and 'dspy' not in sys.modules\n"
            "help(memstrata.Memory)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "class Memory" in done.stdout
