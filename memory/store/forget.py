"""Forgetting a tenant completely: every row, index entry, vector, blob and run of it.

``forget_tenant`` deletes, in one transaction, the tenant's rows from every table of
memstrata's that has a ``user_id`` column (found in ``sqlite_master`` among the tables the
migrations make, so a table a migration adds is covered without a change here, and a table
another program added to the file is left alone), the FTS5 rows of its turns and items,
and the steps of its runs. SQLite would otherwise keep deleted text on free pages and in
FTS5's index segments until they are reused or merged: ``secure_delete`` zeroes freed
pages, FTS5's ``rebuild`` rewrites the index without the deleted entries, ``VACUUM``
rebuilds the file from the live rows (B-tree rebalancing leaves stale copies of moved
cells in the unused gaps of pages still in use, which ``secure_delete`` does not clear:
the crash bench found a forgotten tenant's turns there), and a WAL checkpoint moves the
result into the main file. The deletion is atomic (one transaction); the scrub after it is
not: a crash between the two leaves the tenant's rows gone but some of its bytes on disk
until the next ``VACUUM``. Nothing of any other tenant is read or changed.

``scrubbing`` does the same scrub around any other deletion (``Memory.delete`` of one turn
or item, an import that replaces a conversation): the deleted rows' text is also in FTS5
segments, in the ``context`` column of the turns beside a deleted turn (rewritten without
it, the old copy left behind) and in kept versions; each of those is deleted with the row,
and the scrub removes what the file still held of them. Its cost is ``VACUUM``'s: the
whole file is rewritten (about a second per 100 MB), under the store's lock.

Part of the store;
``Store.forget_user`` calls it. SQLite-specific throughout: ``sqlite_master`` and ``PRAGMA
table_info`` to find the tenant tables (PostgreSQL: ``information_schema.columns``), the
FTS5 rows by rowid and FTS5's ``rebuild``, ``PRAGMA secure_delete``, ``VACUUM`` and the
WAL checkpoint (a server backend deletes the rows and leaves the scrub to its own vacuum).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..locking import is_busy
from ..schema import migrated_columns

if TYPE_CHECKING:
    from .connection import StoreConnection as Store

_FTS = {"turns": "turns_fts", "items": "items_fts"}


def tenant_tables(store: Store) -> list[str]:
    """Every table memstrata's migrations make that has a ``user_id`` column, in creation
    order (a table another program added to the file is not memstrata's to empty)."""
    own = migrated_columns()
    names = [r[0] for r in store.conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
        " ORDER BY rowid") if r[0] in own]
    return [n for n in names if any(
        c[1] == "user_id" for c in store.conn.execute(f"PRAGMA table_info({n})"))]


def forget_tenant(store: Store, user_id: str) -> dict[str, int]:
    """Delete everything of ``user_id``; returns the rows deleted per table (non-zero only)."""
    deleted: dict[str, int] = {}
    store.conn.execute("PRAGMA secure_delete = ON")
    try:
        with store.transaction():
            for table, fts in _FTS.items():
                rowids = [r[0] for r in store.conn.execute(
                    f"SELECT rowid FROM {table} WHERE user_id = ?", (user_id,))]
                store.changing(table[:-1], rowids)
                for chunk in (rowids[i : i + 500] for i in range(0, len(rowids), 500)):
                    store.conn.execute(
                        f"DELETE FROM {fts} WHERE rowid IN ({','.join('?' * len(chunk))})", chunk)
            steps = store.conn.execute(
                "DELETE FROM run_steps WHERE run_id IN (SELECT id FROM runs WHERE user_id = ?)",
                (user_id,)).rowcount
            if steps:
                deleted["run_steps"] = steps
            for table in tenant_tables(store):
                count = store.conn.execute(f"DELETE FROM {table} WHERE user_id = ?",
                                           (user_id,)).rowcount
                if count:
                    deleted[table] = count
            _optimize(store)
    finally:
        store.conn.execute("PRAGMA secure_delete = OFF")
    _rebuild(store)
    store.forget_cached(user_id)
    return deleted


@contextmanager
def scrubbing(store: Store, user_id: str) -> Iterator[None]:
    """Deletions of ``user_id``'s rows inside leave no byte of them in the file.

    ``secure_delete`` zeroes the pages they free; once the block ends without an error,
    the FTS5 indexes are rewritten without their entries, the file is rebuilt from its
    live rows (``VACUUM``) and the write-ahead log checkpointed into it, and the tenant's
    cached values are dropped. Opened inside a transaction, the scrub is left to the next
    ``VACUUM`` (it cannot run before the commit). Another process holding the file: the
    rows are deleted and the rebuild skipped (as in ``forget_tenant``).
    """
    store.conn.execute("PRAGMA secure_delete = ON")
    try:
        yield
        with store.transaction():
            _optimize(store)
    finally:
        store.conn.execute("PRAGMA secure_delete = OFF")
    _rebuild(store)
    store.forget_cached(user_id)


def _optimize(store: Store) -> None:
    """Rebuild both FTS5 indexes from their rows: a deleted row's terms otherwise stay in
    the segments written before its delete marker until a merge. ``rebuild``, not
    ``optimize``: on SQLite 3.40 each ``optimize`` added a level to the index's structure
    record, and past 2,000 levels (after ~2,000 single deletes) the table could no longer
    be opened (the reliability bench's ``deleted_bytes`` found it)."""
    for fts in _FTS.values():
        store.conn.execute(f"INSERT INTO {fts} ({fts}) VALUES ('rebuild')")


def _rebuild(store: Store) -> None:
    """``VACUUM`` and a truncating checkpoint, unless in a transaction or the file is busy
    (another process reading or writing it: the rows are gone, the bytes go at the next
    ``VACUUM``)."""
    if store.path == ":memory:" or store.conn.in_transaction:
        return
    try:
        store.conn.execute("VACUUM")
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except Exception as exc:
        if not is_busy(exc):
            raise
