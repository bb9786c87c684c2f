"""Every version of a turn or an item: moved to ``memory/store/versions.py``.

The versions table is the store's (its update and delete paths write it), so its SQL
lives in the store package. This module keeps the old import path working and re-exports
its names.
"""

from __future__ import annotations

from .store.versions import Version, _version, forget, history, keep, restore, rows

__all__ = ["Version", "_version", "forget", "history", "keep", "restore", "rows"]
