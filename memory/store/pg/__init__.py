"""The PostgreSQL backend (issue 22), first milestone: records, not search yet.

``PgStore.open("postgresql://user:password@host/db")`` opens a store in a PostgreSQL
database (psycopg 3, a ``psycopg_pool.ConnectionPool``), bringing its schema up to date
with migrations recorded in its ``schema_migrations`` table. It satisfies the
``RecordStore`` part of the backend interface (``memory/store/protocol.py``) with the
SQLite store's contracts, checked by the same conformance tests
(``tests/memory/store_conformance/``):

- conversations, sessions and turns; items of every kind with exact-duplicate merging,
  ``get``/``get_many``/``items``/``update``/``delete`` with kept versions and ``history``;
  the kinds queries of the cognitive lifecycles (``kind_items``, ``kind_values``,
  ``kind_max``, ``kind_sources``) with jsonb operators; edges and ``neighbors`` (a
  recursive CTE); a tenant's export rows and restored versions; ``forget_user``;
  ``counts``, ``owner``, ``state_pointer``; embeddings as float32 bytes
  (``set_embeddings``, ``vectors``), written by every write path as on SQLite.
- Tenancy: every query filters by ``user_id``, and row-level security keyed on the tenant
  (``app.tenant``, set in every transaction) is the second wall, on by default: the
  store's queries run as a role RLS binds (``schema.py``, ``connection.py``).
- Concurrency: threads and processes share the database; a read-then-write (the
  duplicate check, a version's number, ``kind_max`` numbering) holds the tenant's
  advisory write lock to the end of its transaction (``connection.py``).

Not in this milestone (the next one, issue 22): the lexical channel (bm25 over
``tsvector`` or a bm25 formulation in SQL; ``lexical``, ``lexical_refs``, ``match_cost``,
``index_rows``, ``texts_since``), the tag channel (``tag_vocabulary``, ``tagged``), the
rest of the ``SearchStore`` part (refs and facets, filters, ``reading``,
``data_version``, pgvector for dense search), blobs and run records (``AuxStore``), and
the wiring: ``Memory.open("postgresql://...")`` and ``--db URL`` still refuse a URL.
Needs the ``postgres`` extra (``pip install 'memstrata[postgres]'``): importing this
package without it raises ``MissingExtraError`` naming it; nothing in the core imports it.

Example (with a server at ``URL``):
    >>> store = PgStore.open(URL, embedder=None)  # doctest: +SKIP
    >>> store.add(FactItem(user_id="u1", text="Ana moved from Sweden"))  # doctest: +SKIP
"""

from __future__ import annotations

from .connection import PgStoreError, redacted
from .graph import PgEdges
from .items import PgItems
from .tenants import PgTenants

__all__ = ["PARTS_SATISFIED", "PgStore", "PgStoreError", "redacted"]

PARTS_SATISFIED = ("records",)
"""The parts of ``memory.store.protocol.MemoryStore`` this backend satisfies so far."""


class PgStore(PgItems, PgEdges, PgTenants):
    """A store in one PostgreSQL database (schema), shared by threads and processes.

    Open with :meth:`open`. Writes outside :meth:`transaction` commit one by one; inside
    it they commit together or not at all (nested blocks are savepoints). A transaction
    belongs to the thread that opened it. Close with :meth:`close` (the pool).
    """
