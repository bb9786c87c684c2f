"""API keys on PostgreSQL: ``store.keys``.

``PgKeys`` is the SQLite store's ``Keys`` (``memory/store/keys.py``): the same methods,
contracts and SQL, run through the PostgreSQL hooks of ``tables.py`` (``%s`` placeholders).
``api_keys`` has no row-level security (a key is looked up before its tenant is known:
``schema.SHARED_TABLES``), so every statement runs with no tenant set. Several server
processes sharing one database see one set of keys: a key revoked through one is refused
by every other at its next request.
"""

from __future__ import annotations

from ..keys import Keys
from .tables import _PgTables


class PgKeys(_PgTables, Keys):
    """The ``api_keys`` table (see the module)."""

