"""The store: conversations, turns, items, edges, embeddings and their indexes, blobs,
kept versions and run records, in one SQLite file. Everything above it (``memory/``,
``tools/``, ``programs/``, ``formats/``, ``trajectories/``, the CLI) reaches the file only
through this package's methods, and its SQL lives here, except two modules: the run
tables' (``memory/runs.py``: ``Runs``, reached only as ``store.runs``; its docstring lists
its queries) and the schema's migrations (``memory/schema.py``, run by ``open``). The
benchmarks' reliability checks (``bench/``) open the file with ``sqlite3`` on purpose: they
test this backend's file itself.

Every row carries its tenant (``user_id``) and every read filters by it. Writes keep the
FTS5 index, the tag index and the embeddings in step with the rows inside one transaction.

Example:
    >>> from memstrata.memory import Store, FactItem
    >>> store = Store.open(":memory:")
    >>> fid = store.add(FactItem(user_id="u1", text="Ana moved from Sweden", tags=["move"]))
    >>> store.get("u1", fid).text
    'Ana moved from Sweden'

``Store`` is composed of mixins, one module for each thing the store holds:

- ``rows``: ids, refs, facets, the tenant token, stored timestamps, the duplicate key
  (no SQL);
- ``connection``: opening the file, transactions, the cache keyed on the data version,
  read snapshots, the ``_q`` row helper;
- ``nodes``: turn and item rows by id or rowid (refs, facets, summaries), speakers, counts;
- ``vectors``: embeddings and a tenant's vector matrix;
- ``conversations``: conversations, sessions and turns, with each turn's index rows;
- ``items``: items of every kind, exact-duplicate merging, updates, deletes, tag rows;
- ``edges``: edges and the recursive graph walk;
- ``filters``: search filters as SQL and the rows that pass them;
- ``lexical``: bm25 over the full-text index and the posting lists, and the tag channel;
- ``postings``: the FTS5 posting-list reader and bm25 in NumPy (``lexical`` uses it);
- ``kinds``: items of one kind selected by their kind-specific fields (``Cond``,
  ``Sort``; ``kind_items``, ``kind_values``, ``kind_max``, ``kind_sources``), what the
  cognitive lifecycles (``memory/cognitive/``) ask;
- ``tenants``: a tenant's rows for an export and its kept versions restored on an import
  (``formats/dump.py``);
- ``versions``, ``forget``, ``blobs``, ``jobs``, ``keys``: the kept versions of turns and
  items, forgetting a tenant in every table, ``store.blobs``, the extraction job queue
  (``store.jobs``) and the API keys (``store.keys``);
- this module: ``Store`` itself, with the two methods that span turns and items
  (``history``, ``forget_user``).

The mixins share one connection, one lock, one transaction depth and one cache, which is
why they are composed into one class rather than kept as separate objects. They form a
chain (``StoreConnection`` <- ``NodeLookups`` <- ``VectorStore`` <- ``ConversationStore``
and ``ItemStore`` <- ``KindQueries``; ``LexicalSearch`` on ``NodeLookups``; ``EdgeStore``,
``FilterQueries`` and ``TenantRows`` on ``StoreConnection``), so every method a mixin
calls on ``self`` is declared in one of its bases.

The backend interface is ``protocol.py`` (``MemoryStore``, in three parts); ``Store``
satisfies all of it, and so does the PostgreSQL backend in ``pg/`` (``Memory.open`` and
every ``--db`` take a ``postgresql://`` URL; it needs the ``postgres`` extra, and nothing
here imports it)."""

from __future__ import annotations

from ..models import Item, Turn
from . import versions as versionsmod
from .conversations import ConversationStore
from .edges import EdgeStore
from .filters import SAID_KINDS, FilterQueries, Filters
from .forget import forget_tenant
from .kinds import Cond, KindQueries, Sort
from .lexical import LexicalSearch
from .rows import ITEM_PREFIX, TURN_PREFIX, Facets, Ref, content_hash, node_type, tenant_token
from .tenants import TenantRows
from .versions import Version

__all__ = [
    "ITEM_PREFIX",
    "SAID_KINDS",
    "TURN_PREFIX",
    "Cond",
    "Facets",
    "Filters",
    "Ref",
    "Sort",
    "Store",
    "content_hash",
    "node_type",
    "tenant_token",
]


class Store(ConversationStore, KindQueries, EdgeStore, LexicalSearch, FilterQueries,
            TenantRows):
    """One SQLite file (WAL) holding conversations, turns, items, edges and embeddings.

    Open with :meth:`open`. Writes outside :meth:`transaction` commit one by one; inside
    it they commit together or not at all (transactions nest through savepoints).

    Every write path embeds what it writes with ``embedder`` (turns, new items, changed
    text), so dense search sees everything; ``embedder=None`` stores no vectors.

    Safe to share: threads share one connection, each statement, transaction and search
    under one lock (see ``locking.py``); processes share the file through WAL, write
    transactions taking the write lock up front and retrying while another holds it.
    """

    def history(self, user_id: str, node_id: str) -> list[Version]:
        """Every version of a turn or item of this tenant, oldest first, the current last
        (empty when there is no such node)."""
        node: Turn | Item | None
        with self._lock:
            if node_type(node_id) == "turn":
                row = self.conn.execute(
                    "SELECT coalesce(updated_at, recorded_at) FROM turns WHERE id = ? AND"
                    " user_id = ?", (node_id, user_id)).fetchone()
                node = self.turn(user_id, node_id)
            else:
                row = self.conn.execute(
                    "SELECT updated_at FROM items WHERE id = ? AND user_id = ?",
                    (node_id, user_id)).fetchone()
                node = self.get(user_id, node_id)
            current = None if node is None else node.model_dump(mode="json")
            return versionsmod.history(self, user_id, node_id, current,
                                       None if row is None else row[0])

    def forget_user(self, user_id: str) -> dict[str, int]:
        """Delete everything of one tenant, in every table (see ``forget.py``); returns
        the rows deleted per table. No other tenant's row is read or changed."""
        return forget_tenant(self, user_id)
