"""Large texts kept whole in the store: moved to ``memory/store/blobs.py``.

The ``blobs`` table is the store's (reach it as ``store.blobs``), so its SQL lives in the
store package. This module keeps the old import path working and re-exports its names.
"""

from __future__ import annotations

from .store.blobs import BlobInfo, Blobs, _lines

__all__ = ["BlobInfo", "Blobs", "_lines"]
