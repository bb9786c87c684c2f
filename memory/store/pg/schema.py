"""The PostgreSQL store's schema: ordered migrations recorded in ``schema_migrations``,
the application role and its grants, and row-level security on every tenant table.

Same tables and columns as the SQLite schema (``memory/schema.py``) for what this backend
holds so far (conversations, sessions, turns, items, edges, embeddings, versions), with
PostgreSQL types:

- ``rowid``: a ``bigint`` identity column in ``turns``, ``items`` and ``conversations``,
  where SQLite has its implicit rowid: insertion order, and a ``Ref``'s integer.
- JSON columns (``metadata``, ``data``, ``tags``, ``evidence``, ``speakers``,
  ``snapshot``) are ``jsonb``: the kinds queries read fields with jsonb operators. jsonb
  keeps values, not the text: an object's keys come back in jsonb's order (dicts are
  equal; a JSON dump of one may order its keys differently from SQLite's).
- Times stay ISO-8601 UTC text, as in SQLite, not ``timestamptz``: the store's contract
  returns stored times as that text (``session_rows``, ``version_rows``, ``history``,
  ``kind_max``), compares them with ISO strings (``Cond("valid_to", ...)``, filters), and
  ``_ts`` writes every one in one form (``+00:00``), so text order is time order and every
  value reads back byte for byte. (A ``timestamptz`` column would read back a
  ``datetime`` and print ``+00:00`` the same way, but every comparison and result type
  would need converting at the boundary, for no gain in this milestone.)
- Every text column is ``COLLATE "C"``: bytewise order, SQLite's ``BINARY``, whatever the
  database's default collation, so ``ORDER BY id`` and text comparisons agree with SQLite.
- ``user_id <> ''``: the empty string is what ``current_setting('app.tenant', true)``
  reads once a transaction that set it has ended, so no row may belong to it.

Row-level security: every table with a ``user_id`` column has RLS enabled and one policy,
``user_id = current_setting('app.tenant', true)`` for reads and writes, which applies to
every role but the table owner and superusers. The store's queries run as a separate
role (``memstrata_app`` unless ``open`` is told otherwise: NOLOGIN, no BYPASSRLS, granted
DML on these tables only, reached by ``SET ROLE`` on each pooled connection), and each
transaction sets ``app.tenant`` (``SET LOCAL`` semantics). A query without the setting sees
no row and can write none. The tables are not ``FORCE``d: the owner (the role in the URL,
which runs the migrations) keeps full access for operations, and ``SECURITY DEFINER``
functions owned by it answer the questions that span tenants and return no content:
``memstrata_owner(id)`` (the tenant of an id: ``owner``, used by imports to refuse ids
that exist elsewhere), ``memstrata_counts()`` (row counts of all tenants: ``counts()``),
``memstrata_run_owner(run)`` (the tenant of a run id: ``runs.add_steps``),
``memstrata_run_tenants()`` (the tenants with runs: ``runs.list()`` over all tenants) and
``memstrata_vector_models()`` (vectors per model over all tenants: ``vector_models(None)``).
Migration 4 also created ``memstrata_index_rows(node)`` (every tenant's rows in the lexical
index, a count only): no code calls it any more, and it stays, since dropping it from a
live database would take a migration of its own.

pgvector (migration 6): where the server offers the ``vector`` extension and the URL's role
may create it, the migration creates it and adds ``embeddings.vec`` (a ``vector`` beside the
float32 ``bytea``), and dense search runs in SQL. pgvector is not a trusted extension: only
a superuser (or, on a managed server, its admin role) can create it, so there an admin runs
``CREATE EXTENSION vector`` in the database before memstrata first opens it. Without the
extension the migration changes nothing and dense search ranks the vectors in NumPy; a
database migrated so keeps doing that (the column is added by migration 6 only).

Migrations run on one direct connection as the URL's role, each in its own transaction
with its row in ``schema_migrations``, under a transaction-level advisory lock, so two
processes opening a new database at once apply each version once. DDL is transactional in
PostgreSQL: a failed migration leaves nothing behind.
"""

from __future__ import annotations

import re
from contextlib import suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

T = 'text COLLATE "C"'
"""Every text column's type: bytewise order, as SQLite's default ``BINARY`` collation."""

MIGRATION_LOCK = 0x6D656D73  # 'mems': the advisory lock key migrations run under

_RECORD_TABLES = ("conversations", "sessions", "turns", "items", "edges", "embeddings",
                  "versions")
"""The tenant tables of migrations 1-2 (frozen: a recorded migration never changes)."""

TENANT_TABLES: tuple[str, ...] = _RECORD_TABLES
"""Every table with a ``user_id`` column (RLS on each; ``forget_user`` empties each; the
app role is granted DML on each). A migration that adds one extends this tuple below it
and enables RLS with :func:`rls` in its own DDL."""
TENANT_TABLES += ("blobs", "runs", "run_steps", "events")
TENANT_TABLES += ("lexical_rows", "lexical_postings", "lexical_totals")
TENANT_TABLES += ("lexical_terms", "item_tags")
TENANT_TABLES += ("jobs",)

SHARED_TABLES: tuple[str, ...] = ("api_keys",)
"""Tables without a tenant column that the app role is granted DML on, with no row-level
security: their rows span tenants and hold no tenant's content (``api_keys``: key hashes,
each with the tenant it acts as)."""


def rls(tables: tuple[str, ...]) -> str:
    """DDL enabling row-level security keyed on ``app.tenant`` on ``tables``.

    A policy for every role (PUBLIC): the app role is bound by it, the owner is not (the
    tables are not FORCEd). ``current_setting(..., true)``: NULL when never set."""
    return "".join(f"""
        ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
        CREATE POLICY tenant ON {table}
            USING (user_id = current_setting('app.tenant', true))
            WITH CHECK (user_id = current_setting('app.tenant', true));
        """ for table in tables)


def _speakerless_turn_index(conn: psycopg.Connection[Any]) -> None:
    from .lexical_index import reindex_all_turns

    reindex_all_turns(conn)


def _passage_vectors(conn: psycopg.Connection[Any]) -> None:
    """The passage vectors of long turns and items embedded with the shipped model, as on
    SQLite (``store.passage_vectors.backfill_passages``)."""
    from ..passage_vectors import backfill_passages

    backfill_passages(conn, postgres=True)


MIGRATIONS: list[tuple[int, str, Any]] = [
    (
        1,
        "conversations, sessions, turns, items, edges, embeddings, versions",
        f"""
        CREATE TABLE conversations (
            rowid bigint GENERATED ALWAYS AS IDENTITY,
            id {T} NOT NULL,
            user_id {T} NOT NULL CHECK (user_id <> ''),
            agent_id {T},
            title {T} NOT NULL DEFAULT '',
            speakers jsonb NOT NULL DEFAULT '[]',
            metadata jsonb NOT NULL DEFAULT '{{}}',
            recorded_at {T} NOT NULL,
            PRIMARY KEY (user_id, id)
        );
        CREATE TABLE sessions (
            id {T} NOT NULL,
            user_id {T} NOT NULL CHECK (user_id <> ''),
            conversation_id {T} NOT NULL,
            idx integer NOT NULL,
            started_at {T},
            metadata jsonb NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (user_id, conversation_id, id)
        );
        CREATE TABLE turns (
            rowid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id {T} NOT NULL UNIQUE,
            user_id {T} NOT NULL CHECK (user_id <> ''),
            agent_id {T},
            conversation_id {T} NOT NULL,
            session_id {T} NOT NULL,
            turn_id {T} NOT NULL,
            seq integer NOT NULL,
            speaker {T} NOT NULL,
            text {T} NOT NULL,
            event_time {T},
            recorded_at {T} NOT NULL,
            updated_at {T},
            metadata jsonb NOT NULL DEFAULT '{{}}'
        );
        CREATE INDEX turns_tenant_conv ON turns (user_id, conversation_id, seq);
        CREATE INDEX turns_tenant_time ON turns (user_id, event_time);
        CREATE INDEX turns_tenant_speaker ON turns (user_id, speaker);
        CREATE TABLE items (
            rowid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id {T} NOT NULL UNIQUE,
            user_id {T} NOT NULL CHECK (user_id <> ''),
            agent_id {T},
            kind {T} NOT NULL,
            text {T} NOT NULL,
            title {T} NOT NULL DEFAULT '',
            tags jsonb NOT NULL DEFAULT '[]',
            confidence double precision NOT NULL DEFAULT 1.0,
            source {T} NOT NULL DEFAULT '',
            speaker {T},
            about {T},
            conversation_id {T},
            evidence jsonb NOT NULL DEFAULT '[]',
            event_time {T},
            valid_to {T},
            recorded_at {T} NOT NULL,
            updated_at {T} NOT NULL,
            content_hash {T} NOT NULL,
            data jsonb NOT NULL DEFAULT '{{}}'
        );
        CREATE UNIQUE INDEX items_dedup ON items (user_id, kind, content_hash);
        CREATE INDEX items_tenant_kind ON items (user_id, kind, event_time);
        CREATE INDEX items_tenant_speaker ON items (user_id, speaker);
        CREATE INDEX items_tenant_source ON items (user_id, kind, source, rowid);
        CREATE TABLE edges (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            user_id {T} NOT NULL CHECK (user_id <> ''),
            src {T} NOT NULL,
            dst {T} NOT NULL,
            relation {T} NOT NULL,
            weight double precision NOT NULL DEFAULT 1.0,
            metadata jsonb NOT NULL DEFAULT '{{}}',
            recorded_at {T} NOT NULL,
            UNIQUE (user_id, src, dst, relation)
        );
        CREATE INDEX edges_dst ON edges (user_id, dst);
        CREATE TABLE embeddings (
            node_id {T} NOT NULL,
            model {T} NOT NULL,
            user_id {T} NOT NULL CHECK (user_id <> ''),
            dim integer NOT NULL,
            vector bytea NOT NULL,
            PRIMARY KEY (node_id, model)
        );
        CREATE INDEX embeddings_tenant ON embeddings (user_id, model);
        CREATE TABLE versions (
            user_id {T} NOT NULL CHECK (user_id <> ''),
            node_id {T} NOT NULL,
            version integer NOT NULL,
            event {T} NOT NULL,
            snapshot jsonb NOT NULL,
            recorded_at {T} NOT NULL,
            valid_to {T} NOT NULL,
            PRIMARY KEY (node_id, version)
        );
        CREATE INDEX versions_tenant ON versions (user_id);
        """,
    ),
    (
        2,
        "row-level security and the cross-tenant functions",
        rls(_RECORD_TABLES)
        + """
        CREATE FUNCTION memstrata_owner(node text) RETURNS text
            LANGUAGE sql STABLE SECURITY DEFINER
            AS $$ SELECT user_id FROM turns WHERE id = node
                  UNION ALL SELECT user_id FROM items WHERE id = node LIMIT 1 $$;
        CREATE FUNCTION memstrata_counts() RETURNS TABLE (name text, n bigint)
            LANGUAGE sql STABLE SECURITY DEFINER
            AS $$ SELECT 'conversations', count(*) FROM conversations
                  UNION ALL SELECT 'sessions', count(*) FROM sessions
                  UNION ALL SELECT 'turns', count(*) FROM turns
                  UNION ALL SELECT 'items', count(*) FROM items
                  UNION ALL SELECT 'edges', count(*) FROM edges
                  UNION ALL SELECT 'embeddings', count(*) FROM embeddings $$
        """,
    ),
    (
        3,
        "the tag channel's index on items.tags",
        # The tag channel (memory/store/pg/search.py) finds a tag's items with `tags ?|`
        # on the jsonb column itself, so item writes stay untouched (SQLite keeps a side
        # table, item_tags, that its write paths maintain).
        "CREATE INDEX items_tags ON items USING gin (tags)",
    ),
    (
        4,
        "the lexical index: postings, row lengths and per-tenant totals",
        # bm25 in SQL (memory/store/pg/lexical.py). A term's postings for a tenant are one
        # range of the primary key, which covers the counts and the row's length (kept on
        # every posting: scoring reads no other table); lexical_postings_row finds a row's.
        # node is 'turn' or 'item'; row_id the rowid of turns or items.
        f"""
        CREATE TABLE lexical_rows (
            user_id {T} NOT NULL CHECK (user_id <> ''),
            node {T} NOT NULL,
            row_id bigint NOT NULL,
            length integer NOT NULL,
            PRIMARY KEY (user_id, node, row_id)
        );
        CREATE TABLE lexical_postings (
            user_id {T} NOT NULL CHECK (user_id <> ''),
            node {T} NOT NULL,
            term {T} NOT NULL,
            row_id bigint NOT NULL,
            body_tf integer NOT NULL,
            context_tf integer NOT NULL,
            length integer NOT NULL,
            PRIMARY KEY (user_id, node, term, row_id) INCLUDE (body_tf, context_tf, length)
        );
        CREATE INDEX lexical_postings_row ON lexical_postings (user_id, node, row_id);
        CREATE TABLE lexical_totals (
            user_id {T} NOT NULL CHECK (user_id <> ''),
            node {T} NOT NULL,
            rows bigint NOT NULL,
            tokens bigint NOT NULL,
            PRIMARY KEY (user_id, node)
        );
        CREATE INDEX turns_tenant_rowid ON turns (user_id, rowid);
        CREATE INDEX items_tenant_rowid ON items (user_id, rowid);
        """
        + rls(("lexical_rows", "lexical_postings", "lexical_totals"))
        # The rows of every tenant's index, a count only (no longer called; see the module).
        + """
        CREATE FUNCTION memstrata_index_rows(which text) RETURNS bigint
            LANGUAGE sql STABLE SECURITY DEFINER
            AS $$ SELECT coalesce(sum(rows), 0)::bigint FROM lexical_totals WHERE node = $1 $$;
        DO $$ BEGIN
            EXECUTE format('ALTER FUNCTION memstrata_index_rows(text)'
                           || ' SET search_path = %I, pg_temp', current_schema());
        END $$
        """,
    ),
    (
        5,
        "blobs, runs, run steps, events",
        # As SQLite's (memory/schema.py) but: run_steps carries its run's tenant (RLS needs
        # a user_id; the foreign key on (user_id, run_id) keeps it the run's), JSON columns
        # are jsonb, integers bigint (SQLite's are 64-bit), blobs and events number their
        # rows with an identity (SQLite's rowid; events.id is the id log_event returns), and
        # events are indexed by (user_id, id), the order events() reads them in.
        f"""
        CREATE TABLE blobs (
            rowid bigint GENERATED ALWAYS AS IDENTITY,
            user_id {T} NOT NULL CHECK (user_id <> ''),
            key {T} NOT NULL,
            text {T} NOT NULL,
            chars bigint NOT NULL,
            lines bigint NOT NULL,
            sha256 {T} NOT NULL,
            metadata jsonb NOT NULL DEFAULT '{{}}',
            recorded_at {T} NOT NULL,
            PRIMARY KEY (user_id, key)
        );
        CREATE TABLE runs (
            id {T} PRIMARY KEY,
            user_id {T} NOT NULL CHECK (user_id <> ''),
            agent_id {T},
            program {T} NOT NULL,
            task {T} NOT NULL DEFAULT '',
            config jsonb NOT NULL DEFAULT '{{}}',
            layers jsonb NOT NULL DEFAULT '[]',
            git_commit {T},
            db_state jsonb NOT NULL DEFAULT '{{}}',
            output jsonb,
            verdict jsonb,
            usage jsonb NOT NULL DEFAULT '{{}}',
            leakage jsonb NOT NULL DEFAULT '{{}}',
            status {T} NOT NULL DEFAULT 'running',
            error {T},
            started_at {T} NOT NULL,
            finished_at {T},
            wall_s double precision,
            UNIQUE (user_id, id)
        );
        CREATE INDEX runs_tenant ON runs (user_id, started_at);
        CREATE TABLE run_steps (
            user_id {T} NOT NULL CHECK (user_id <> ''),
            run_id {T} NOT NULL,
            idx bigint NOT NULL,
            kind {T} NOT NULL,
            name {T} NOT NULL DEFAULT '',
            input {T} NOT NULL DEFAULT '',
            output {T} NOT NULL DEFAULT '',
            output_chars bigint NOT NULL DEFAULT 0,
            data jsonb NOT NULL DEFAULT '{{}}',
            ms double precision,
            at {T} NOT NULL,
            PRIMARY KEY (run_id, idx),
            FOREIGN KEY (user_id, run_id) REFERENCES runs (user_id, id) ON DELETE CASCADE
        );
        CREATE TABLE events (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            user_id {T} NOT NULL CHECK (user_id <> ''),
            agent_id {T},
            run_id {T},
            payload jsonb NOT NULL,
            recorded_at {T} NOT NULL
        );
        CREATE INDEX events_tenant ON events (user_id, id);
        """
        + rls(("blobs", "runs", "run_steps", "events"))
        # Two lookups that span tenants and return no content (memory/store/pg/aux.py): a
        # run's tenant (add_steps takes a run id alone) and the tenants with runs
        # (runs.list() of every tenant). Their search path pinned as migrate pins the others.
        + """
        CREATE FUNCTION memstrata_run_owner(run text) RETURNS text
            LANGUAGE sql STABLE SECURITY DEFINER
            AS $$ SELECT user_id FROM runs WHERE id = run $$;
        CREATE FUNCTION memstrata_run_tenants() RETURNS SETOF text
            LANGUAGE sql STABLE SECURITY DEFINER
            AS $$ SELECT DISTINCT user_id FROM runs ORDER BY 1 $$;
        DO $$ BEGIN
            EXECUTE format('ALTER FUNCTION memstrata_run_owner(text) SET search_path = %I, pg_temp',
                           current_schema());
            EXECUTE format('ALTER FUNCTION memstrata_run_tenants() SET search_path = %I, pg_temp',
                           current_schema());
        END $$
        """,
    ),
    (
        6,
        "pgvector: embeddings.vec, where the server offers the extension",
        # Dense search in SQL (memory/store/pg/search.py). Creating the extension needs a
        # superuser or an admin (pgvector is not trusted); without it, or on a server
        # that lacks pgvector, nothing changes and the store ranks vectors in NumPy. The
        # bytea column stays the vectors' record (vectors() reads it); vec is filled here
        # from it, decoding each little-endian float32 in SQL (sign, exponent, mantissa:
        # exact), and written beside it from now on. Non-finite values stay NULL (pgvector
        # refuses them). No ANN index: a tenant's rows are ranked exactly.
        """
        DO $$
        DECLARE
            home text;
        BEGIN
            BEGIN
                CREATE EXTENSION IF NOT EXISTS vector;
            EXCEPTION
                WHEN insufficient_privilege OR feature_not_supported OR undefined_file
                     OR undefined_object THEN
                    RAISE NOTICE 'pgvector not created (%): dense search runs in NumPy',
                        SQLERRM;
            END;
            SELECT n.nspname INTO home FROM pg_extension x
                JOIN pg_namespace n ON n.oid = x.extnamespace WHERE x.extname = 'vector';
            IF home IS NULL THEN
                RETURN;
            END IF;
            EXECUTE format('ALTER TABLE embeddings ADD COLUMN vec %I.vector', home);
            EXECUTE format('
                UPDATE embeddings e SET vec = (
                    SELECT CAST(array_agg(
                        CASE WHEN f.ex = 0 THEN f.m * power(2::float8, -149)
                             ELSE (f.m + 8388608) * power(2::float8, f.ex - 150) END
                        * (1 - 2 * f.s) ORDER BY f.i)::real[] AS %I.vector)
                    FROM (SELECT b.i, b.bits >> 31 AS s, (b.bits >> 23) & 255 AS ex,
                                 b.bits & 8388607 AS m
                          FROM (SELECT i, get_byte(e.vector, 4 * i)::bigint
                                      | (get_byte(e.vector, 4 * i + 1)::bigint << 8)
                                      | (get_byte(e.vector, 4 * i + 2)::bigint << 16)
                                      | (get_byte(e.vector, 4 * i + 3)::bigint << 24) AS bits
                                FROM generate_series(0, e.dim - 1) AS i) b) f)
                WHERE e.dim BETWEEN 1 AND 16000 AND length(e.vector) = 4 * e.dim
                  AND NOT EXISTS (
                      SELECT 1 FROM generate_series(0, e.dim - 1) AS i
                      WHERE get_byte(e.vector, 4 * i + 3) & 127 = 127
                        AND get_byte(e.vector, 4 * i + 2) & 128 = 128)', home);
        END $$
        """,
    ),
    (
        7,
        "lexical document counts per term",
        # What FTS5's vocabulary table gives SQLite: a term's document count without
        # counting its posting list (a common term's is ~10^5 rows at 1M items).
        f"""
        CREATE TABLE lexical_terms (
            user_id {T} NOT NULL CHECK (user_id <> ''),
            node {T} NOT NULL,
            term {T} NOT NULL,
            docs bigint NOT NULL,
            body_docs bigint NOT NULL,
            PRIMARY KEY (user_id, node, term)
        );
        INSERT INTO lexical_terms (user_id, node, term, docs, body_docs)
            SELECT user_id, node, term, count(*), count(*) FILTER (WHERE body_tf > 0)
            FROM lexical_postings GROUP BY user_id, node, term;
        """ + rls(("lexical_terms",)),
    ),
    (
        8,
        "item tags by tenant and tag, newest first",
        # The tag channel asks for the newest items of a tag: one index range here, where
        # a GIN lookup on items.tags collected every item of a common tag and sorted them
        # (~330 ms a search at 1M items); that GIN index (migration 3) goes. Rows written
        # before this migration are folded
        # by SQL's lower(); the store folds with Python's casefold() (they differ on a few
        # letters, such as German sharp s).
        f"""
        CREATE TABLE item_tags (
            user_id {T} NOT NULL CHECK (user_id <> ''),
            tag {T} NOT NULL,
            item_rowid bigint NOT NULL,
            PRIMARY KEY (user_id, tag, item_rowid)
        );
        CREATE INDEX item_tags_rowid ON item_tags (user_id, item_rowid);
        DROP INDEX items_tags;
        INSERT INTO item_tags (user_id, tag, item_rowid)
            SELECT DISTINCT i.user_id, lower(t.tag), i.rowid
            FROM items i, jsonb_array_elements_text(i.tags) AS t(tag);
        """ + rls(("item_tags",)),
    ),
    (
        9,
        "subject index",
        # The people items are about, one index seek each (PgTenants.speakers), where
        # reading them walked every item of the tenant. Partial: most items name nobody.
        "CREATE INDEX items_tenant_about ON items (user_id, about) WHERE about IS NOT NULL",
    ),
    # A Python step: every turn re-tokenised without its speaker (see reindex_all_turns).
    (10, "speaker-free turn index", _speakerless_turn_index),
    (
        11,
        "extraction jobs",
        # The durable queue of background extraction (as SQLite's migration 11; see
        # memory/store/jobs.py and pg/jobs.py), with RLS like every tenant table. Workers
        # take jobs of every tenant: memstrata_claim_job parks expired jobs with no attempt
        # left, then leases the oldest claimable one (FOR UPDATE SKIP LOCKED: concurrent
        # workers skip each other's rows instead of waiting) and returns its id and tenant,
        # no content. memstrata_job_owner, _job_counts and _job_tenants answer the other
        # questions that span tenants, with ids, counts and tenants only.
        f"""
        CREATE TABLE jobs (
            rowid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id {T} NOT NULL UNIQUE,
            user_id {T} NOT NULL CHECK (user_id <> ''),
            conversation_id {T} NOT NULL,
            kind {T} NOT NULL,
            status {T} NOT NULL DEFAULT 'pending',
            params jsonb NOT NULL DEFAULT '{{}}',
            attempts integer NOT NULL DEFAULT 0,
            max_attempts integer NOT NULL,
            error {T},
            lease_owner {T},
            lease_until {T},
            run_after {T} NOT NULL,
            result jsonb,
            facts integer NOT NULL DEFAULT 0,
            created_at {T} NOT NULL,
            updated_at {T} NOT NULL
        );
        CREATE INDEX jobs_status ON jobs (status, rowid);
        CREATE INDEX jobs_tenant ON jobs (user_id, conversation_id, rowid);
        """ + rls(("jobs",)) + """
        CREATE FUNCTION memstrata_claim_job(worker text, now_at text, until_at text,
                                            due_at text, tenant text, conv text,
                                            parked text)
            RETURNS TABLE (job_id text, job_user text)
            LANGUAGE plpgsql VOLATILE SECURITY DEFINER
            AS $$
            BEGIN
                UPDATE jobs SET status = 'failed',
                                error = replace(parked, '{attempts}', attempts::text),
                                lease_owner = NULL, lease_until = NULL, updated_at = now_at
                    WHERE status = 'running' AND lease_until < now_at
                      AND attempts >= max_attempts
                      AND (tenant IS NULL OR user_id = tenant)
                      AND (conv IS NULL OR conversation_id = conv);
                RETURN QUERY
                UPDATE jobs j SET status = 'running', lease_owner = worker,
                                  lease_until = until_at, attempts = j.attempts + 1,
                                  updated_at = now_at
                    WHERE j.rowid = (
                        SELECT c.rowid FROM jobs c
                        WHERE ((c.status = 'pending' AND c.run_after <= due_at)
                               OR (c.status = 'running' AND c.lease_until < now_at))
                          AND c.attempts < c.max_attempts
                          AND (tenant IS NULL OR c.user_id = tenant)
                          AND (conv IS NULL OR c.conversation_id = conv)
                          AND NOT EXISTS (
                              SELECT 1 FROM jobs e
                              WHERE e.user_id = c.user_id
                                AND e.conversation_id = c.conversation_id
                                AND e.rowid < c.rowid
                                AND e.status IN ('pending', 'running'))
                        ORDER BY c.rowid LIMIT 1
                        FOR UPDATE SKIP LOCKED)
                    RETURNING j.id::text, j.user_id::text;
            END $$;
        CREATE FUNCTION memstrata_job_owner(job text) RETURNS text
            LANGUAGE sql STABLE SECURITY DEFINER
            AS $$ SELECT user_id FROM jobs WHERE id = job $$;
        CREATE FUNCTION memstrata_job_counts() RETURNS TABLE (status text, n bigint)
            LANGUAGE sql STABLE SECURITY DEFINER
            AS $$ SELECT status, count(*) FROM jobs GROUP BY status $$;
        CREATE FUNCTION memstrata_job_tenants() RETURNS SETOF text
            LANGUAGE sql STABLE SECURITY DEFINER
            AS $$ SELECT DISTINCT user_id FROM jobs ORDER BY 1 $$;
        DO $$ BEGIN
            EXECUTE format('ALTER FUNCTION memstrata_claim_job(text, text, text, text, text,'
                           || ' text, text) SET search_path = %I, pg_temp', current_schema());
            EXECUTE format('ALTER FUNCTION memstrata_job_owner(text)'
                           || ' SET search_path = %I, pg_temp', current_schema());
            EXECUTE format('ALTER FUNCTION memstrata_job_counts()'
                           || ' SET search_path = %I, pg_temp', current_schema());
            EXECUTE format('ALTER FUNCTION memstrata_job_tenants()'
                           || ' SET search_path = %I, pg_temp', current_schema());
        END $$
        """,
    ),
    (
        12,
        "api keys",
        # The keys of ``memstrata serve`` (memory/store/keys.py), hashed. Not a tenant
        # table: a key is looked up before its tenant is known, so no row-level security
        # (the app role is granted DML on it: SHARED_TABLES); ``tenant``, not ``user_id``,
        # so ``forget_user`` leaves a tenant's keys.
        f"""
        CREATE TABLE api_keys (
            id {T} PRIMARY KEY,
            hash {T} NOT NULL,
            tenant {T} CHECK (tenant <> ''),
            admin boolean NOT NULL DEFAULT false,
            name {T} NOT NULL DEFAULT '',
            created_at {T} NOT NULL,
            last_used {T},
            revoked_at {T},
            CHECK (admin = (tenant IS NULL))
        );
        CREATE INDEX api_keys_tenant ON api_keys (tenant)
        """,
    ),
    (13, "passage vectors of long messages", _passage_vectors),
    (
        14,
        "the store's vector models",
        # Which model embedded the store, for an opener that was not told (``open_store``'s
        # ``embedder="auto"``): a count per model name over every tenant, no content.
        """
        CREATE FUNCTION memstrata_vector_models() RETURNS TABLE (model text, n bigint)
            LANGUAGE sql STABLE SECURITY DEFINER
            AS $$ SELECT model, count(*) FROM embeddings GROUP BY model $$;
        DO $$ BEGIN
            EXECUTE format('ALTER FUNCTION memstrata_vector_models()'
                           || ' SET search_path = %I, pg_temp', current_schema());
        END $$
        """,
    ),
]

LATEST_VERSION = MIGRATIONS[-1][0]


def migrate(conn: psycopg.Connection[Any]) -> list[int]:
    """Apply every missing migration in order on ``conn`` (autocommit, the owner's role);
    return the versions applied now.

    Raises:
        RuntimeError: the database was written by a newer memstrata (unknown versions).
    """
    from psycopg import sql

    conn.execute(
        f"CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY,"
        f" name {T} NOT NULL, applied_at {T} NOT NULL)")
    done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
    unknown = done - {v for v, _, _ in MIGRATIONS}
    if unknown:
        raise RuntimeError(
            f"database schema has versions {sorted(unknown)} that this memstrata does not "
            f"know (latest known: {LATEST_VERSION}); upgrade memstrata to open it")
    applied: list[int] = []
    schema = conn.execute("SELECT current_schema()").fetchone()
    for version, name, ddl in MIGRATIONS:
        if version in done:
            continue
        with conn.transaction():
            # A second look under the lock: another process may have applied it since.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            if conn.execute("SELECT 1 FROM schema_migrations WHERE version = %s",
                            (version,)).fetchone() is not None:
                continue
            if callable(ddl):
                ddl(conn)
            else:
                for statement in _statements(ddl):
                    conn.execute(statement)  # our own DDL
            if not callable(ddl) and "SECURITY DEFINER" in ddl and schema is not None:
                # A definer function runs with the owner's rights: pin its search path, so
                # no object of another schema can stand in for ours.
                for fn in ("memstrata_owner(text)", "memstrata_counts()"):
                    conn.execute(sql.SQL("ALTER FUNCTION {} SET search_path = {}, pg_temp")
                                 .format(sql.SQL(fn), sql.Identifier(schema[0])))
            conn.execute("INSERT INTO schema_migrations (version, name, applied_at)"
                         " VALUES (%s, %s, %s)", (version, name, datetime.now(UTC).isoformat()))
        applied.append(version)
    return applied


def table_names() -> list[str]:
    """The tables memstrata's migrations make, in the order they make them."""
    ddl = " ".join(d for _, _, d in MIGRATIONS if isinstance(d, str))
    return ["schema_migrations", *dict.fromkeys(re.findall(r"CREATE TABLE (\w+)", ddl))]


def foreign(conn: psycopg.Connection[Any]) -> str | None:
    """Why the connection's current schema cannot take memstrata's tables, or None.

    A PostgreSQL database is shared with other programs by design (memstrata's tables
    beside theirs), but not under the same names: a ``schema_migrations`` of another
    shape (Rails and other frameworks make one), or, before memstrata has recorded a
    version, a table named as one of memstrata's (``items``, ``jobs``, ``runs``...).
    """
    # The catalog, not information_schema: it lists tables the role has no rights on too.
    rows = conn.execute(
        "SELECT c.relname, a.attname FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_attribute a ON a.attrelid = c.oid"
        " WHERE n.nspname = current_schema() AND c.relname = ANY(%s)"
        " AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND a.attnum > 0 AND NOT a.attisdropped"
        " ORDER BY c.relname, a.attnum", (table_names(),)).fetchall()
    columns: dict[str, list[str]] = {}
    for table, column in rows:
        columns.setdefault(table, []).append(column)
    ours = ["version", "name", "applied_at"]
    if "schema_migrations" in columns:
        if columns["schema_migrations"] != ours:
            return ("its schema_migrations table is not memstrata's (columns: "
                    f"{', '.join(columns['schema_migrations'])})")
        return None
    if columns:
        return f"it holds tables named as memstrata's ({', '.join(sorted(columns)[:5])})"
    return None


def _statements(ddl: str) -> list[str]:
    """The statements of a migration (``;`` outside ``$$`` bodies ends one)."""
    out, current, quoted = [], "", False
    for part in ddl.split("$$"):
        if quoted:
            current += "$$" + part + "$$"
        else:
            pieces = part.split(";")
            current += pieces[0]
            for piece in pieces[1:]:
                out.append(current)
                current = piece
        quoted = not quoted
    out.append(current)
    return [s.strip() for s in out if s.strip()]


def _scalar(conn: psycopg.Connection[Any], query: str, args: tuple[Any, ...] = ()) -> Any:
    """The one value a query of one row and one column returns."""
    row = conn.execute(query, args).fetchone()
    assert row is not None  # a function call's SELECT always returns its row
    return row[0]


def grant(conn: psycopg.Connection[Any], role: str) -> None:
    """Create the application role if missing (NOLOGIN, no BYPASSRLS), let the URL's role
    ``SET ROLE`` to it, and grant it DML on the tenant tables and :data:`SHARED_TABLES`
    and nothing else.

    Looks first and writes only what is missing, so an ordinary open writes nothing.
    """
    from psycopg import errors, sql

    ident = sql.Identifier(role)
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if exists is None:
        # A savepoint: a failed CREATE ROLE must not abort the migration's transaction.
        with suppress(errors.DuplicateObject, errors.UniqueViolation), conn.transaction():
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN NOSUPERUSER NOBYPASSRLS")
                         .format(ident))  # another process may have created it just now
    if not _scalar(conn, "SELECT pg_has_role(current_user, %s, 'MEMBER')", (role,)):
        conn.execute(sql.SQL("GRANT {} TO {}").format(ident, sql.SQL("current_user")))
    # has_table_privilege with a list is true when any is held: ask for each.
    granted = (*TENANT_TABLES, *SHARED_TABLES)
    missing = [t for t in granted for p in ("SELECT", "INSERT", "UPDATE", "DELETE")
               if not _scalar(conn, "SELECT has_table_privilege(%s, %s, %s)", (role, t, p))]
    if missing:
        schema = _scalar(conn, "SELECT current_schema()")
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}")
                     .format(sql.Identifier(schema), ident))
        conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(
            sql.SQL(", ").join(map(sql.Identifier, granted)), ident))
