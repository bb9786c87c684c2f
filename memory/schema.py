"""The store's schema as ordered migrations, each applied once and recorded.

A migration is (version, name, SQL), or (version, name, a function of the connection)
where a step needs Python (re-tokenising the full-text rows). ``migrate`` applies the
missing ones in order, each
in its own transaction together with its row in ``schema_migrations``, so a crash leaves
the database at a recorded version. New versions are appended; old ones never change.

Times are ISO-8601 UTC text (``2023-05-08T13:56:00+00:00``), so they sort as strings.
The FTS5 tables hold *normalised* text (see ``text.py``) and a per-tenant token, so the
tenant filter runs inside the full-text engine and bm25 ranks only that tenant's rows.
A turn's ``context`` column holds the turns just before and after it in its session:
an answer ("I loved Becoming Nicole") rarely repeats the words of the question that
prompted it ("Which book do you recommend?"), and bm25 weighs that column down, not out.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from typing import Any

from .locking import StoreError, stored_json

_PREFIXED = (
    "CASE WHEN coalesce({column}, '') = '' THEN {column} ELSE (SELECT group_concat("
    "tenant || 'x' || value, ' ') FROM json_each('[\"' || replace({column}, ' ', '\",\"') "
    "|| '\"]')) END"
)
"""SQL for one FTS column with each term prefixed by its row's tenant token."""

def _speakerless_turn_index(conn: sqlite3.Connection) -> None:
    """Rewrite every turn's full-text body and context from its text alone.

    Earlier versions indexed ``speaker: text``, so a role label ("user") or a speaker's
    name was a word of every turn that speaker said; it is a field now
    (``Turn.indexed_text``). The context column holds the nearest part of the turns on
    either side in the session (``text.context_of``), as ``Store._index_turns`` writes it.
    """
    from itertools import groupby

    from . import text as textmod
    from .models import with_caption
    from .store.rows import tenant_token

    rows = conn.execute(
        "SELECT rowid, id, user_id, conversation_id, session_id, text, metadata FROM turns"
        " ORDER BY user_id, conversation_id, session_id, seq").fetchall()
    updates = []
    for key, group in groupby(rows, key=lambda r: r[2:5]):
        session = list(group)
        texts = [with_caption(r[5], stored_json(r[6], f"turn {r[1]}", dict)) for r in session]
        prefix = tenant_token(key[0])
        updates += [(textmod.index_text(texts[n], prefix),
                     textmod.index_text(textmod.context_of(texts, n), prefix), row[0])
                    for n, row in enumerate(session)]
    conn.executemany("UPDATE turns_fts SET body = ?, context = ? WHERE rowid = ?", updates)


def _passage_vectors(conn: sqlite3.Connection) -> None:
    """Embed the passages of every long turn and item embedded with the shipped model
    (``store.passage_vectors.backfill_passages``): the dense channel scores a long message by its
    best passage too, and a store written before had only one vector a message."""
    from .store.passage_vectors import backfill_passages

    backfill_passages(conn)


Migration = tuple[int, str, "str | Callable[[sqlite3.Connection], None]"]

MIGRATIONS: list[Migration] = [
    (
        1,
        "conversations, sessions, turns",
        """
        CREATE TABLE conversations (
            id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            title TEXT NOT NULL DEFAULT '',
            speakers TEXT NOT NULL DEFAULT '[]',
            metadata TEXT NOT NULL DEFAULT '{}',
            recorded_at TEXT NOT NULL,
            PRIMARY KEY (user_id, id)
        );
        CREATE TABLE sessions (
            id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            started_at TEXT,
            metadata TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (user_id, conversation_id, id)
        );
        CREATE TABLE turns (
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            conversation_id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            speaker TEXT NOT NULL,
            text TEXT NOT NULL,
            event_time TEXT,
            recorded_at TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX turns_tenant_conv ON turns (user_id, conversation_id, seq);
        CREATE INDEX turns_tenant_time ON turns (user_id, event_time);
        CREATE INDEX turns_tenant_speaker ON turns (user_id, speaker);
        CREATE VIRTUAL TABLE turns_fts USING fts5(tenant, body, context, tokenize = 'unicode61');
        """,
    ),
    (
        2,
        "items, edges",
        """
        CREATE TABLE items (
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            kind TEXT NOT NULL,
            text TEXT NOT NULL,
            title TEXT NOT NULL DEFAULT '',
            tags TEXT NOT NULL DEFAULT '[]',
            confidence REAL NOT NULL DEFAULT 1.0,
            source TEXT NOT NULL DEFAULT '',
            speaker TEXT,
            about TEXT,
            conversation_id TEXT,
            evidence TEXT NOT NULL DEFAULT '[]',
            event_time TEXT,
            valid_to TEXT,
            recorded_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            data TEXT NOT NULL DEFAULT '{}'
        );
        CREATE UNIQUE INDEX items_dedup ON items (user_id, kind, content_hash);
        CREATE INDEX items_tenant_kind ON items (user_id, kind, event_time);
        CREATE INDEX items_tenant_speaker ON items (user_id, speaker);
        CREATE VIRTUAL TABLE items_fts USING fts5(tenant, body, tokenize = 'unicode61');
        CREATE TABLE edges (
            id INTEGER PRIMARY KEY,
            user_id TEXT NOT NULL,
            src TEXT NOT NULL,
            dst TEXT NOT NULL,
            relation TEXT NOT NULL,
            weight REAL NOT NULL DEFAULT 1.0,
            metadata TEXT NOT NULL DEFAULT '{}',
            recorded_at TEXT NOT NULL,
            UNIQUE (user_id, src, dst, relation)
        );
        CREATE INDEX edges_dst ON edges (user_id, dst);
        CREATE TABLE item_tags (
            user_id TEXT NOT NULL,
            tag TEXT NOT NULL,
            item_rowid INTEGER NOT NULL REFERENCES items (rowid) ON DELETE CASCADE,
            PRIMARY KEY (user_id, tag, item_rowid)
        ) WITHOUT ROWID;
        CREATE INDEX item_tags_item ON item_tags (item_rowid);
        """,
    ),
    (
        3,
        "embeddings",
        """
        CREATE TABLE embeddings (
            node_id TEXT NOT NULL,
            model TEXT NOT NULL,
            user_id TEXT NOT NULL,
            dim INTEGER NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (node_id, model)
        );
        CREATE INDEX embeddings_tenant ON embeddings (user_id, model);
        """,
    ),
    (
        4,
        "blobs, runs, run steps, events",
        """
        CREATE TABLE blobs (
            user_id TEXT NOT NULL,
            key TEXT NOT NULL,
            text TEXT NOT NULL,
            chars INTEGER NOT NULL,
            lines INTEGER NOT NULL,
            sha256 TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}',
            recorded_at TEXT NOT NULL,
            PRIMARY KEY (user_id, key)
        );
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            program TEXT NOT NULL,
            task TEXT NOT NULL DEFAULT '',
            config TEXT NOT NULL DEFAULT '{}',
            layers TEXT NOT NULL DEFAULT '[]',
            git_commit TEXT,
            db_state TEXT NOT NULL DEFAULT '{}',
            output TEXT,
            verdict TEXT,
            usage TEXT NOT NULL DEFAULT '{}',
            leakage TEXT NOT NULL DEFAULT '{}',
            status TEXT NOT NULL DEFAULT 'running',
            error TEXT,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            wall_s REAL
        );
        CREATE INDEX runs_tenant ON runs (user_id, started_at);
        CREATE TABLE run_steps (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            kind TEXT NOT NULL,
            name TEXT NOT NULL DEFAULT '',
            input TEXT NOT NULL DEFAULT '',
            output TEXT NOT NULL DEFAULT '',
            output_chars INTEGER NOT NULL DEFAULT 0,
            data TEXT NOT NULL DEFAULT '{}',
            ms REAL,
            at TEXT NOT NULL,
            PRIMARY KEY (run_id, idx)
        );
        CREATE TABLE events (
            id INTEGER PRIMARY KEY,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            run_id TEXT,
            payload TEXT NOT NULL,
            recorded_at TEXT NOT NULL
        );
        CREATE INDEX events_tenant ON events (user_id, recorded_at);
        """,
    ),
    (
        5,
        "fts vocabularies",
        # Document frequencies straight from the FTS5 indexes: lets a query skip the
        # terms that match a large share of a big index (see Store.lexical).
        """
        CREATE VIRTUAL TABLE turns_vocab USING fts5vocab(turns_fts, 'row');
        CREATE VIRTUAL TABLE items_vocab USING fts5vocab(items_fts, 'row')
        """,
    ),
    (
        6,
        "tenant-prefixed fts terms",
        # Every indexed term becomes the tenant's own ("<tenant token>x<term>"), so a query
        # needs no "tenant : ... AND", which intersected a big tenant's whole posting list.
        # Index strings are our own tokens (letters and digits only), so building a JSON
        # array from them by replacing spaces is safe. The tenant column is no longer
        # read; it is emptied so it stops costing index space.
        f"""
        UPDATE turns_fts SET body = {_PREFIXED.format(column="body")},
                             context = {_PREFIXED.format(column="context")}, tenant = '';
        UPDATE items_fts SET body = {_PREFIXED.format(column="body")}, tenant = ''
        """,
    ),
    (
        7,
        "fts instance vocabularies",
        # Each term's rows and columns straight from the posting lists: bm25 from them and
        # cached row lengths skips FTS5's per-row length lookup (postings.py).
        """
        CREATE VIRTUAL TABLE turns_instances USING fts5vocab(turns_fts, 'instance');
        CREATE VIRTUAL TABLE items_instances USING fts5vocab(items_fts, 'instance')
        """,
    ),
    (
        8,
        "versions",
        # Earlier versions of turns and items (``Store.update`` writes a new version and
        # closes the old one here): ``snapshot`` is the node as it was, JSON; ``recorded_at``
        # when that version was written, ``valid_to`` when a newer one replaced it.
        """
        CREATE TABLE versions (
            user_id TEXT NOT NULL,
            node_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            event TEXT NOT NULL,
            snapshot TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            valid_to TEXT NOT NULL,
            PRIMARY KEY (node_id, version)
        );
        CREATE INDEX versions_tenant ON versions (user_id);
        ALTER TABLE turns ADD COLUMN updated_at TEXT
        """,
    ),
    (
        9,
        "subject index",
        # The people items are about, one index seek each (NodeLookups.speakers), where
        # reading them walked every item of the tenant. Partial: most items name nobody.
        """
        CREATE INDEX items_tenant_about ON items (user_id, about) WHERE about IS NOT NULL
        """,
    ),
    (10, "speaker-free turn index", _speakerless_turn_index),
    (
        11,
        "extraction jobs",
        # The durable queue of background extraction (store/jobs.py): one row a job, written
        # in the transaction that stores the turns it covers. rowid orders a conversation's
        # jobs; a lease (owner, expiry) marks the worker running one, so a killed worker's
        # job is taken again once its lease expires. params and result are JSON.
        """
        CREATE TABLE jobs (
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            user_id TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending',
            params TEXT NOT NULL DEFAULT '{}',
            attempts INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL,
            error TEXT,
            lease_owner TEXT,
            lease_until TEXT,
            run_after TEXT NOT NULL,
            result TEXT,
            facts INTEGER NOT NULL DEFAULT 0,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE INDEX jobs_status ON jobs (status, rowid);
        CREATE INDEX jobs_tenant ON jobs (user_id, conversation_id, rowid)
        """,
    ),
    (
        12,
        "api keys",
        # The keys of ``memstrata serve`` (memory/store/keys.py): only each key's SHA-256
        # is stored. ``tenant``, not ``user_id``: forgetting a tenant's memories leaves
        # its keys (a table with a ``user_id`` column is emptied by ``forget_user``).
        """
        CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            hash TEXT NOT NULL,
            tenant TEXT,
            admin INTEGER NOT NULL DEFAULT 0,
            name TEXT NOT NULL DEFAULT '',
            created_at TEXT NOT NULL,
            last_used TEXT,
            revoked_at TEXT,
            CHECK ((admin = 1) = (tenant IS NULL))
        );
        CREATE INDEX api_keys_tenant ON api_keys (tenant)
        """,
    ),
    (13, "passage vectors of long messages", _passage_vectors),
    (
        14,
        "turn facets by rowid",
        # What a search reads of each of its hundreds of candidates (``_ref_rows``), in
        # an index led by the rowid: a long message's row fills a page of its own, so
        # reading its speaker and time from the table touched a page per candidate.
        """
        CREATE INDEX turns_facets
            ON turns (rowid, user_id, speaker, event_time, conversation_id, session_id, id)
        """,
    ),
]

LATEST_VERSION = MIGRATIONS[-1][0]


def foreign(conn: sqlite3.Connection) -> str | None:
    """Why the database is another program's, or None when it is memstrata's or empty.

    memstrata records its versions in ``schema_migrations`` before it makes any other
    table, so a file with tables and no such record is not its; nor is one whose
    ``schema_migrations`` has other columns (Rails and other frameworks use the name).
    Setting memstrata up in such a file would mix its tables with the program's (whose
    names, ``items`` or ``jobs``, may be memstrata's too).
    """
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "ORDER BY rowid")]
    if "schema_migrations" in tables:
        columns = tuple(c[0] for c in _table_columns(conn, "schema_migrations"))
        if columns != tuple(c[0] for c in migrated_columns()["schema_migrations"]):
            return f"its schema_migrations table is not memstrata's (columns: {', '.join(columns)})"
        return None
    if tables:
        return (f"it holds tables memstrata did not make ({', '.join(tables[:5])}"
                f"{', ...' if len(tables) > 5 else ''})")
    return None


def refuse_foreign(conn: sqlite3.Connection, path: str = "") -> None:
    """Raise ``StoreError`` (``SQLITE_SCHEMA``, naming ``path``) when the database is
    another program's (:func:`foreign`); run before anything is written to it."""
    if why := foreign(conn):
        raise StoreError(path, sqlite3.SQLITE_SCHEMA, "", fault=(
            f"another program's database: {why}; memstrata keeps its memory in a file of "
            "its own (name another file)"))


def applied_versions(conn: sqlite3.Connection) -> list[int]:
    """Versions recorded in ``schema_migrations`` (empty for a new database)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    return [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]


def migrate(conn: sqlite3.Connection) -> list[int]:
    """Apply every missing migration in order; return the versions applied now.

    Raises:
        RuntimeError: the database was written by a newer memstrata (unknown versions).
        StoreError: the recorded versions are damaged (an unknown one beside a missing
            known one, or one below 1: no memstrata records them so).
    """
    done = set(applied_versions(conn))
    known = {v for v, _, _ in MIGRATIONS}
    unknown = done - known
    if unknown and (min(unknown) < 1 or not known <= done):
        # A newer memstrata applies every version this one knows before its own: an
        # unknown version beside a missing known one is the table's bytes altered.
        raise StoreError("", sqlite3.SQLITE_CORRUPT, f"schema_migrations records versions "
                         f"{sorted(done)}, as no memstrata does")
    if unknown:
        raise RuntimeError(
            f"database schema has versions {sorted(unknown)} that this memstrata does not "
            f"know (latest known: {LATEST_VERSION}); upgrade memstrata to open it"
        )
    applied: list[int] = []
    for version, name, sql in MIGRATIONS:
        if version in done:
            continue
        # The write lock up front, then a second look: another process opening the same
        # new file may have applied this version since ``done`` was read. (executescript
        # would COMMIT implicitly, so statements run one by one.)
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?",
                            (version,)).fetchone() is None:
                if callable(sql):
                    sql(conn)
                else:
                    for statement in filter(str.strip, sql.split(";")):
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, datetime.now(UTC).isoformat()),
                )
                applied.append(version)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return applied


def altered_tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """The tables the migrations made whose columns in ``conn``'s database are not as they
    made them, each with the columns missing or changed (name, type, NOT NULL, default,
    primary key; a missing table has them all). Empty for a sound file; columns another
    program added are not counted.

    Damage to the schema's stored text (a byte flipped in a column's name or type) opens
    and reads without an error from SQLite: every ``SELECT *`` would then name the column
    otherwise, and a ``rowid INTEGER PRIMARY KEY`` whose type no longer reads so is an
    ordinary column that may hold NULL.
    """
    out: dict[str, list[str]] = {}
    for table, columns in migrated_columns().items():
        found = set(_table_columns(conn, table))
        if missing := [c[0] for c in columns if c not in found]:
            out[table] = missing
    return out


@cache
def migrated_columns() -> dict[str, tuple[tuple[Any, ...], ...]]:
    """Every table the migrations make, with its columns in order (as ``PRAGMA
    table_info`` gives them, less the position), read off a new in-memory database once
    per process."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate(conn)
        return {t: _table_columns(conn, t) for (t,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
    finally:
        conn.close()


def _table_columns(conn: sqlite3.Connection, table: str) -> tuple[tuple[Any, ...], ...]:
    """A table's columns as ``PRAGMA table_info`` gives them, less the position (none:
    no such table)."""
    return tuple(tuple(c[1:]) for c in conn.execute(f'PRAGMA table_info("{table}")'))
