"""The PostgreSQL backend: the whole backend interface over one PostgreSQL database.

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
  (``set_embeddings``, ``vectors``) and, with pgvector, as ``vector`` values, written by
  every write path as on SQLite.
- The ``AuxStore`` part (``aux.py``): ``blobs`` and ``runs`` (run records, steps, the
  event log, ``prune``), the SQLite classes' own code and redaction over PostgreSQL hooks.
- The lexical channel (``lexical.py``): FTS5's bm25 computed in SQL over posting tables
  that every write path keeps in its transaction, with each tenant's own statistics.
- The rest of the ``SearchStore`` part (``search.py``): refs, ids and facets, summary
  rows, search filters, the tag channel (``item_tags``, kept with the lexical index), a
  tenant's vectors (read into NumPy, cached in the process), the dense channel
  (``dense_refs``), ``reading`` (a repeatable-read snapshot) and ``data_version`` (moving
  with the database snapshot: every process's commits).
- Tenancy: every query filters by ``user_id``, and row-level security keyed on the tenant
  (``app.tenant``, set in every transaction) is the second wall, on by default: the
  store's queries run as a role RLS binds (``schema.py``, ``connection.py``).
- Concurrency: threads and processes share the database; a read-then-write (the
  duplicate check, a version's number, ``kind_max`` numbering) holds the tenant's
  advisory write lock to the end of its transaction (``connection.py``).

Opened by URL wherever a store is opened: ``Memory.open("postgresql://...")``, ``--db URL``
on every command, ``memstrata migrate --db URL`` (``memory/store/opener.py``). Dense
search (``dense_refs``) runs in the database with pgvector where the server has the
extension (migration 6 adds ``embeddings.vec``; exact cosine, no ANN index); without it,
it reads a tenant's vectors into NumPy, as on SQLite (exact cosine, cached per process).
Needs the ``postgres`` extra (``pip install 'memstrata[postgres]'``): importing this
package without it raises ``MissingExtraError`` naming it; nothing in the core imports it.

Example (with a server at ``URL``):
    >>> store = PgStore.open(URL, embedder=None)  # doctest: +SKIP
    >>> store.add(FactItem(user_id="u1", text="Ana moved from Sweden"))  # doctest: +SKIP
"""

from __future__ import annotations

from .aux import PgAux
from .connection import PgStoreError, redacted
from .graph import PgEdges
from .items import PgItems
from .lexical import PgLexical
from .search import PgSearch
from .tenants import PgTenants

__all__ = ["PARTS_SATISFIED", "PgStore", "PgStoreError", "redacted"]

PARTS_SATISFIED = ("records", "search", "aux")
"""The parts of ``memory.store.protocol.MemoryStore`` this backend satisfies (all three)."""


class PgStore(PgSearch, PgLexical, PgItems, PgEdges, PgTenants, PgAux):
    """A store in one PostgreSQL database (schema), shared by threads and processes.

    Open with :meth:`open`. Writes outside :meth:`transaction` commit one by one; inside
    it they commit together or not at all (nested blocks are savepoints). A transaction
    belongs to the thread that opened it. Close with :meth:`close` (the pool).
    """
