"""Forgetting a tenant completely: moved to ``memory/store/forget.py``.

Deleting a tenant's rows, index entries and vectors and scrubbing the file is the SQLite
backend's own work, so it lives in the store package. This module keeps the old import
path working and re-exports its names.
"""

from __future__ import annotations

from .store.forget import _FTS, forget_tenant, tenant_tables

__all__ = ["_FTS", "forget_tenant", "tenant_tables"]
