"""Reference retrievers measured beside memstrata: rank-bm25 on two tokenisations.

``bm25_whitespace`` is LongMemEval's BM25 baseline (raw text split on white space);
``bm25_tokens`` uses memstrata's own normalisation (lower case, stop-words, Snowball
stems). Both rebuild their index in memory, which is what rank-bm25 always has to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from memstrata.memory.extras import require
from memstrata.memory.text import tokens

TOKENIZERS: dict[str, Callable[[str], list[str]]] = {
    "bm25_whitespace": str.split,
    "bm25_tokens": tokens,
}


class BM25Index:
    """rank-bm25 Okapi over a list of (id, text) documents (the ``bench`` extra)."""

    def __init__(self, ids: Sequence[str], texts: Sequence[str],
                 tokenizer: Callable[[str], list[str]]) -> None:
        self.ids = list(ids)
        self.tokenizer = tokenizer
        bm25 = require("rank_bm25", "bench", "the BM25 baselines")
        # rank-bm25 divides by the corpus size: an empty document list is not an index.
        self._bm25 = bm25.BM25Okapi([tokenizer(t) or [""] for t in texts]) if self.ids else None

    def search(self, query: str, k: int) -> list[str]:
        """The ids of the ``k`` best documents."""
        if self._bm25 is None:
            return []
        scores = self._bm25.get_scores(self.tokenizer(query))
        k = min(k, len(self.ids))
        top = np.argpartition(-scores, k - 1)[:k]
        return [self.ids[i] for i in top[np.argsort(-scores[top])]]
