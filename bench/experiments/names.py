"""Where the experiment configs live and what they are called; imports nothing heavy,
so ``memstrata --help`` can list the experiments without loading DSPy."""

from __future__ import annotations

import json
from pathlib import Path

CONFIG_DIR = Path(__file__).parent / "configs"
SEEDS_DIR = Path(__file__).parent / "seeds"
EXPERIMENTS: tuple[str, ...] = tuple(f"E{n}" for n in range(1, 13))


def title(name: str) -> str:
    """The one-line title in experiment ``name``'s config file."""
    return str(json.loads((CONFIG_DIR / f"{name}.json").read_text())["title"])
