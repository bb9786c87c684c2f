"""Where memstrata keeps its own files on this machine (no DSPy import: the CLI reads it)."""

from __future__ import annotations

import os
from pathlib import Path


def memstrata_home() -> Path:
    """``$MEMSTRATA_HOME``, default ``~/.cache/memstrata``: the sandbox, the models, the
    record of passed decode checks."""
    return Path(os.environ.get("MEMSTRATA_HOME") or Path.home() / ".cache" / "memstrata")
