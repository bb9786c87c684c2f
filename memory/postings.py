"""FTS5's bm25 from the posting lists: moved to ``memory/store/postings.py``.

The posting-list reader is the SQLite backend's own (it reads FTS5's tables), so it lives
in the store package beside the lexical search that uses it. This module keeps the old
import path working and re-exports its names.
"""

from __future__ import annotations

from .store.postings import (
    K1,
    POSTINGS_BUDGET,
    B,
    Postings,
    RowLengths,
    Scored,
    TenantStats,
    _row_totals,
    _varints,
    averages,
    bm25_scores,
    read_postings,
    with_terms,
)

__all__ = [
    "K1",
    "POSTINGS_BUDGET",
    "B",
    "Postings",
    "RowLengths",
    "Scored",
    "TenantStats",
    "_row_totals",
    "_varints",
    "averages",
    "bm25_scores",
    "read_postings",
    "with_terms",
]
