"""Blobs, run records and API keys on PostgreSQL: ``store.blobs``, ``store.runs`` and
``store.keys`` (``keys.py``).

Holds ``PgAux`` (the ``AuxStore`` part: the ``blobs`` and ``runs`` properties), ``PgBlobs``
and ``PgRuns``. These are the SQLite store's ``Blobs`` (``memory/store/blobs.py``) and
``Runs`` (``memory/runs.py``): the same public methods, contracts and SQL, the same
redaction of everything a run, step or event records (``redact``, applied before the
hooks), run through the PostgreSQL versions of ``StoreTables``' hooks: ``%s`` placeholders,
the pool's transaction set to the statement's tenant (row-level security), JSON columns as
``jsonb`` (values in and out, not text). Where the SQL itself differs:

- ``Blobs.put``'s upsert is ``ON CONFLICT (user_id, key) DO UPDATE``, which, like
  SQLite's ``INSERT OR REPLACE``, gives the replaced blob a new ``rowid``.
- ``Runs.prune`` compares times as ``timestamptz`` (SQLite: ``julianday``) and reads an
  item's evidence with ``jsonb_array_elements_text`` (SQLite: ``json_each``).
- ``Runs.log_event`` returns the new event's id by ``RETURNING id``.
- A negative ``limit`` means no limit, as in SQLite (``LIMIT NULL``).
- Steps carry their run's tenant in ``run_steps.user_id`` (RLS binds every table on a
  tenant): ``add_steps``, which takes a run id alone, finds it with
  ``memstrata_run_owner``, a definer function returning a tenant, not content, and
  raises ``ValueError`` for a run that does not exist (SQLite: ``IntegrityError`` from
  the foreign key).

PostgreSQL refuses two values SQLite stores: a NUL character in text (a blob's text, a
step's input) and NaN or infinity in a JSON value (a verdict's score); either raises a
``psycopg.DataError`` and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...runs import RunRecord, Runs
from ..blobs import Blobs
from ..jobs import Jobs
from ..keys import Keys
from .connection import PgConnection
from .jobs import PgJobs
from .keys import PgKeys
from .tables import _pg, _PgTables


class PgBlobs(_PgTables, Blobs):
    """The ``blobs`` table (see the module)."""

    UPSERT = ("INSERT INTO blobs (user_id, key, text, chars, lines, sha256, metadata,"
              " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, key) DO"
              " UPDATE SET rowid = DEFAULT, text = EXCLUDED.text, chars = EXCLUDED.chars,"
              " lines = EXCLUDED.lines, sha256 = EXCLUDED.sha256,"
              " metadata = EXCLUDED.metadata, recorded_at = EXCLUDED.recorded_at")


class PgRuns(_PgTables, Runs):
    """The run tables (see the module)."""

    STARTED_BEFORE = "r.started_at::timestamptz < ?::timestamptz"
    CITED_IDS = ("SELECT e.value FROM items i, jsonb_array_elements_text(i.evidence) e(value)"
                 " WHERE i.user_id = ? AND i.valid_to IS NULL")

    def _new_id(self, user_id: str, query: str, args: Sequence[Any]) -> int:
        return int(self.store._rows(user_id, _pg(query) + " RETURNING id", args)[0][0])

    def _steps_owner(self, run_id: str) -> str | None:
        owner = self.store._rows(None, "SELECT memstrata_run_owner(%s)", (run_id,))[0][0]
        if owner is None:
            raise ValueError(f"no run {run_id!r}: its steps cannot be added")
        return str(owner)

    def _limit(self, limit: int) -> int | None:
        return None if limit < 0 else limit

    def list(self, user_id: str | None = None, limit: int = 50) -> list[RunRecord]:
        """The newest runs (of one tenant, or of all when exporting a whole database).

        Of all tenants: row-level security shows a query one tenant's rows, so this asks
        ``memstrata_run_tenants()`` (a definer function returning the tenants that have
        runs, no content) and reads each tenant's ``limit`` newest runs as that tenant,
        then keeps the ``limit`` newest of those, in SQLite's order (start time, newest
        first, then id; both bytewise). Costs one query per tenant with runs.
        """
        if user_id is not None:
            return super().list(user_id, limit)
        with self.store._tx():
            tenants = [r[0] for r in self.store._rows(
                None, "SELECT * FROM memstrata_run_tenants()")]
            rows = [r for t in tenants for r in self._newest(t, limit)]
        rows.sort(key=lambda r: r["id"])
        rows.sort(key=lambda r: r["started_at"], reverse=True)  # stable: ties stay by id
        return [self._record(r) for r in (rows if limit < 0 else rows[:limit])]


class PgAux(PgConnection):
    """Blobs and run records (the ``AuxStore`` part; see the module)."""

    @property
    def blobs(self) -> Blobs:
        """Large texts kept whole, read back in bounded pieces (see ``memory/store/blobs.py``)."""
        return PgBlobs(self)

    @property
    def runs(self) -> Runs:
        """Run records and the event log (see ``memory/runs.py``)."""
        return PgRuns(self)

    @property
    def jobs(self) -> Jobs:
        """The durable queue of background jobs (see ``pg/jobs.py``)."""
        return PgJobs(self)

    @property
    def keys(self) -> Keys:
        """API keys, stored hashed (see ``memory/store/keys.py``)."""
        return PgKeys(self)
