"""Run records: the ``runs``, ``run_steps`` and ``events`` tables.

The trajectories package decides what a run records; this module only stores it. Every
run carries its tenant; steps belong to a run and leave with it. JSON-valued fields are
stored as JSON (text on SQLite, ``jsonb`` on PostgreSQL).

What is written here is redacted here (:func:`redact`), whoever the caller: run records,
their steps and the event log are records of what happened, and a key or token never
belongs in them (``trajectories.redact`` states the whole promise). The rules live in
this module, not in ``trajectories``, because ``memory`` imports nothing of the project
and the event log is written from ``memory`` (the bank), ``tools`` (``event_log``) and
``programs`` (the reconciler) alike.

``Runs`` is a part of the store (reached only as ``store.runs``) whose SQL lives here, not
in ``memory/store/``: most of this module is redaction and the record models, which are
not the store's, and the class is kept beside them. Its queries, all over ``runs``,
``run_steps`` and ``events`` and all filtered by tenant: ``start`` (INSERT a run),
``finish`` and ``set_verdict`` (UPDATE a run), ``add_steps`` (INSERT steps), ``get``,
``list`` (newest first; every tenant when exporting a whole database), ``steps`` (JOIN
runs for the tenant), ``log_event`` (INSERT, returning the new id), ``restore_events``
(INSERT of exported events), ``events`` and
``prune`` (one SELECT of the candidates with a step count and whether a current item
cites the run, then DELETE of steps and runs). Forgetting a tenant (``store/forget.py``)
deletes its runs and steps too.

The SQL is written once, with ``?`` placeholders, and runs through the hooks of
``StoreTables`` (``memory/store/blobs.py``: rows, row counts, JSON values in and out) and
a few of its own (``_new_id``, ``_steps_owner``, ``_limit``) and class attributes
(``STARTED_BEFORE``, ``CITED_IDS``): SQLite's here (``julianday`` for comparing stored
times, ``json_each`` over an item's evidence, ``lastrowid``), PostgreSQL's in
``memory/store/pg/aux.py``. Redaction happens here, before any hook, so both backends
store the same redacted values.
"""

from __future__ import annotations

import builtins
import os
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from .models import UTCDateTime, as_utc, utcnow
from .store.blobs import StoreTables

RunStatus = Literal["running", "ok", "error"]

# -- secrets -------------------------------------------------------------------------------

MASK = "[REDACTED]"
SECRET_KEY = re.compile(r"(api[_-]?key|secret|token|password|passwd|authorization|"
                        r"credential|private[_-]?key|access[_-]?key)", re.I)
SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)$", re.I)
PATTERNS = [
    re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bBearer\s+[A-Za-z0-9._\-+/=]{12,}", re.I),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bxox[abpr]-[A-Za-z0-9\-]{10,}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}\b"),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"),
    re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),  # user:password in a URL
]
# Counts, flags and budgets named like secrets ("max_tokens") are not secrets.
_NOT_SECRET = re.compile(r"(max_|_count$|^n_|tokens$|tokenizer)", re.I)
# A secret-named key inside text: ``"api_key": "..."``, ``'password': '...'``,
# ``token=...``, and the same with escaped quotes (JSON inside a JSON string); the value
# is what follows the separator, up to a quote, a space or a delimiter.
_KEYED = re.compile(  # a key name starts where a name starts and runs at most 100 chars
    # either side of the keyword: unbounded, a long run of letters cost O(n^2) (hostile input)
    r"""(?P<key>(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{0,100}?"""
    r"""(?:api[_-]?key|secret|token|password|passwd|authorization|"""
    r"""credential|private[_-]?key|access[_-]?key)[A-Za-z0-9_\-]{0,100})"""
    r"""(?P<sep>\\?["']?\s*[:=]\s*\\?["']?)(?P<value>[^\s"'\\,;:}\])]+)""", re.I)
_MAX_DEPTH = 64


def env_secrets() -> list[str]:
    """Values (8+ chars) of environment variables whose names say they hold a secret,
    longest first (so a value that contains another is masked whole)."""
    return sorted((v for k, v in os.environ.items() if SECRET_ENV.search(k) and len(v) >= 8),
                  key=len, reverse=True)


def _keyed(m: re.Match[str]) -> str:
    if _NOT_SECRET.search(m["key"]) or m["value"] == MASK:
        return m[0]
    return f"{m['key']}{m['sep']}{MASK}"


def redact_text(text: str, env: list[str] | None = None) -> str:
    """``text`` with every secret-env value, credential-shaped substring and value under
    a secret-named key masked."""
    for value in env_secrets() if env is None else env:
        if value in text:
            text = text.replace(value, MASK)
    for pattern in PATTERNS:
        text = pattern.sub(MASK, text)
    return _KEYED.sub(_keyed, text)


def redact(obj: Any, env: list[str] | None = None, _depth: int = 0) -> Any:
    """A copy of a JSON-like value with secrets masked: strings by :func:`redact_text`;
    under a secret-named key (``api_key``, ``Authorization``...) the whole value,
    whatever its type (a list of keys, a numeric PIN); dict keys too. A structure nested
    deeper than 64 levels is masked below that, rather than recursed into."""
    secrets = env_secrets() if env is None else env
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if _depth >= _MAX_DEPTH and isinstance(obj, dict | list | tuple):
        return MASK
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            name = str(key)
            clean = redact_text(key, secrets) if isinstance(key, str) else key
            if (SECRET_KEY.search(name) and not _NOT_SECRET.search(name)
                    and value not in (None, "", [], {}) and not isinstance(value, bool)):
                out[clean] = MASK
            else:
                out[clean] = redact(value, secrets, _depth + 1)
        return out
    if isinstance(obj, list | tuple):
        return [redact(v, secrets, _depth + 1) for v in obj]
    return obj


class RunRecord(BaseModel):
    """One run of a program or executor."""

    id: str
    user_id: str
    agent_id: str | None = None
    program: str
    task: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    layers: list[str] = Field(default_factory=list)
    git_commit: str | None = None
    db_state: dict[str, Any] = Field(default_factory=dict)
    output: Any = None
    verdict: Any = None
    usage: dict[str, Any] = Field(default_factory=dict)
    leakage: dict[str, Any] = Field(default_factory=dict)
    status: RunStatus = "running"
    error: str | None = None
    started_at: UTCDateTime
    finished_at: UTCDateTime | None = None
    wall_s: float | None = None


class StepRecord(BaseModel):
    """One step of a run: a retrieval, a packing, an iteration, code, a tool call, an LLM
    call or a verdict. ``input``/``output`` are bounded previews; ``output_chars`` is the
    full size of what the step produced."""

    run_id: str = ""
    idx: int = 0
    kind: str
    name: str = ""
    input: str = ""
    output: str = ""
    output_chars: int = 0
    data: dict[str, Any] = Field(default_factory=dict)
    ms: float | None = None
    at: UTCDateTime | None = None


class PruneReport(BaseModel):
    """What ``Runs.prune`` removed (or, in a dry run, would remove)."""

    runs: int = 0
    steps: int = 0
    kept_running: int = Field(0, description="matching runs left alone: still running")
    kept_evidence: int = Field(
        0, description="matching runs left alone: a current item cites them as evidence")
    dry_run: bool = False


_JSON_RUN_FIELDS = ("config", "layers", "db_state", "output", "verdict", "usage", "leakage")
# What a run or step says (redacted on write); ids, tenants and times are left alone.
_RUN_CONTENT = ("task", "config", "layers", "output", "verdict", "usage", "leakage", "error")
_STEP_CONTENT = ("kind", "name", "input", "output", "data")


def _redacted(row: dict[str, Any], fields: tuple[str, ...], env: list[str] | None = None
              ) -> dict[str, Any]:
    env = env_secrets() if env is None else env
    return {k: redact(v, env) if k in fields else v for k, v in row.items()}


class Runs(StoreTables):
    """The run tables of one store (reach them as ``store.runs``; its SQL runs through
    ``StoreTables``' hooks, see the module)."""

    STARTED_BEFORE = "julianday(r.started_at) < julianday(?)"
    """``prune``'s ``before`` rule. julianday: stored times end in "Z" (pydantic),
    isoformat's in "+00:00"; as text they would compare wrongly within one second."""
    CITED_IDS = ("SELECT e.value FROM items i, json_each(i.evidence) e"
                 " WHERE i.user_id = ? AND i.valid_to IS NULL")
    """The ids a tenant's current items cite as evidence (``prune``'s ``keep_evidence``)."""
    STEP_COLUMNS = ("s.run_id, s.idx, s.kind, s.name, s.input, s.output, s.output_chars,"
                    " s.data, s.ms, s.at")
    """What ``steps`` reads of a step (a backend's table may hold more: its tenant)."""

    def _new_id(self, user_id: str, query: str, args: Sequence[Any]) -> int:
        """Run one INSERT into a table with an integer key; the new row's key."""
        return int(self._sqlite.conn.execute(query, args).lastrowid or 0)

    def _steps_owner(self, run_id: str) -> str | None:
        """The tenant column's value for a run's new steps (SQLite's steps have no tenant
        column: they are scoped through their run)."""
        return None

    def _limit(self, limit: int) -> int | None:
        """A ``LIMIT``'s argument (SQLite: as given, a negative one meaning no limit)."""
        return limit

    def _record(self, row: dict[str, Any]) -> RunRecord:
        for name in _JSON_RUN_FIELDS:
            row[name] = None if row[name] is None else self._parsed(row[name])
        for name, empty in (("config", {}), ("layers", []), ("db_state", {}), ("usage", {}),
                            ("leakage", {})):
            if row[name] is None:
                row[name] = empty
        return RunRecord.model_validate(row)

    def start(self, run: RunRecord) -> None:
        """Insert a new run row (redacted)."""
        row = _redacted(run.model_dump(mode="json"), _RUN_CONTENT)
        for name in _JSON_RUN_FIELDS:
            row[name] = self._json(row[name])
        cols = ", ".join(row)
        with self.store.transaction():
            self._change(run.user_id,
                         f"INSERT INTO runs ({cols}) VALUES ({', '.join('?' * len(row))})",
                         list(row.values()))

    def finish(self, run: RunRecord) -> None:
        """Write a run's outcome (output, verdict, usage, leakage, status, times), redacted."""
        data = _redacted(run.model_dump(mode="json"), _RUN_CONTENT)
        names = ("output", "verdict", "usage", "leakage", "status", "error", "finished_at",
                 "wall_s", "config", "layers")
        values = [self._json(data[n]) if n in _JSON_RUN_FIELDS else data[n] for n in names]
        with self.store.transaction():
            self._change(run.user_id,
                         f"UPDATE runs SET {', '.join(f'{n} = ?' for n in names)}"
                         " WHERE id = ? AND user_id = ?", [*values, run.id, run.user_id])

    def set_verdict(self, user_id: str, run_id: str, verdict: Any) -> bool:
        """Record a verdict reached after the run ended (a score against a gold answer, a
        later judge); True if the run exists for this tenant."""
        with self.store.transaction():
            changed = self._change(user_id,
                                   "UPDATE runs SET verdict = ? WHERE id = ? AND user_id = ?",
                                   (self._json(redact(verdict)), run_id, user_id))
        return changed > 0

    def add_steps(self, run_id: str, steps: list[StepRecord]) -> None:
        """Append steps to a run (their ``idx`` must be new for that run), redacted."""
        if not steps:
            return
        rows = []
        env = env_secrets()
        for step in steps:
            row = _redacted(step.model_dump(mode="json"), _STEP_CONTENT, env)
            row["run_id"] = run_id
            row["data"] = self._json(row["data"])
            row["at"] = row["at"] or utcnow().isoformat()
            rows.append(row)
        with self.store.transaction():
            owner = self._steps_owner(run_id)
            if owner is not None:
                rows = [{"user_id": owner, **r} for r in rows]
            cols = list(rows[0])
            self._change_many(
                owner,
                f"INSERT INTO run_steps ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [[r[c] for c in cols] for r in rows])

    def get(self, user_id: str, run_id: str) -> RunRecord | None:
        """One run of this tenant, or None."""
        rows = self._select(user_id, "SELECT * FROM runs WHERE user_id = ? AND id = ?",
                            (user_id, run_id))
        return self._record(rows[0]) if rows else None

    def list(self, user_id: str | None = None, limit: int = 50) -> list[RunRecord]:
        """The newest runs (of one tenant, or of all when exporting a whole database)."""
        return [self._record(r) for r in self._newest(user_id, limit)]

    # Below ``list`` (the method), the builtin is ``builtins.list``.
    def _newest(self, user_id: str | None, limit: int) -> builtins.list[dict[str, Any]]:
        """The rows of :meth:`list`, newest first (ties by id)."""
        where, args = ("WHERE user_id = ?", [user_id]) if user_id is not None else ("", [])
        return self._select(
            user_id, f"SELECT * FROM runs {where} ORDER BY started_at DESC, id LIMIT ?",
            [*args, self._limit(limit)])

    def steps(self, user_id: str, run_id: str) -> builtins.list[StepRecord]:
        """A run's steps in order (empty if the run is not this tenant's)."""
        rows = self._select(
            user_id, f"SELECT {self.STEP_COLUMNS} FROM run_steps s JOIN runs r ON"
            " r.id = s.run_id WHERE r.user_id = ? AND s.run_id = ? ORDER BY s.idx",
            (user_id, run_id))
        for row in rows:
            row["data"] = self._parsed(row["data"])
        return [StepRecord.model_validate(r) for r in rows]

    def log_event(self, user_id: str, payload: Any, *, agent_id: str | None = None,
                  run_id: str | None = None) -> int:
        """Append one event (any JSON value, redacted) for a tenant; returns its id."""
        with self.store.transaction():
            return self._new_id(
                user_id, "INSERT INTO events (user_id, agent_id, run_id, payload, recorded_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (user_id, agent_id, run_id, self._json(redact(payload)), utcnow().isoformat()))

    def restore_events(self, user_id: str, rows: Sequence[dict[str, Any]]) -> int:
        """Write events back as an export holds them (``agent_id``, ``run_id``,
        ``payload``, ``recorded_at``), oldest first, their record times kept; the store
        numbers them anew. Returns how many."""
        values = [(user_id, r.get("agent_id"), r.get("run_id"),
                   self._json(redact(r["payload"])), r["recorded_at"]) for r in rows]
        if values:
            with self.store.transaction():
                self._change_many(
                    user_id, "INSERT INTO events (user_id, agent_id, run_id, payload,"
                    " recorded_at) VALUES (?, ?, ?, ?, ?)", values)
        return len(values)

    def events(self, user_id: str, limit: int = 100) -> builtins.list[dict[str, Any]]:
        """A tenant's newest events."""
        rows = self._select(
            user_id, "SELECT id, agent_id, run_id, payload, recorded_at FROM events WHERE"
            " user_id = ? ORDER BY id DESC LIMIT ?", (user_id, self._limit(limit)))
        for row in rows:
            row["payload"] = self._parsed(row["payload"])
        return rows

    def prune(self, user_id: str, *, before: datetime | None = None, keep: int | None = None,
              keep_evidence: bool = True, dry_run: bool = False) -> PruneReport:
        """Delete one tenant's old runs and their steps; the run tables otherwise only grow.

        A run goes when it matches every rule given: started before ``before``, and not
        among the tenant's ``keep`` newest runs. Never pruned: runs still running (their
        recorder writes on finish), and, with ``keep_evidence``, runs that a current item
        (a learned strategy, a fact) cites as evidence, so provenance keeps resolving.
        The event log is left whole: it holds what agents chose to record and the bank's
        decisions, not traces.

        Raises:
            ValueError: neither rule given, or ``keep`` negative.
        """
        if before is None and keep is None:
            raise ValueError("prune needs a rule: before=DATETIME and/or keep=N")
        if keep is not None and keep < 0:
            raise ValueError(f"keep must be >= 0, not {keep}")
        rules = ["r.user_id = ?"]
        args: builtins.list[Any] = [user_id]
        if before is not None:
            stamp = as_utc(before)
            assert stamp is not None  # as_utc keeps a datetime a datetime
            rules.append(self.STARTED_BEFORE)
            args.append(stamp.isoformat())
        if keep is not None:
            rules.append("r.id NOT IN (SELECT id FROM runs WHERE user_id = ?"
                         " ORDER BY started_at DESC, id LIMIT ?)")
            args += [user_id, keep]
        # Uncorrelated, so SQLite builds the set of cited ids once, not once per run.
        # (Evidence lists hold turn ids too; only run ids can match.)
        cited, cited_args = (f"r.id IN ({self.CITED_IDS})", [user_id]) \
            if keep_evidence else ("1 = 0", [])
        rows = self._select(
            user_id, f"SELECT r.id, r.status = 'running' AS running, {cited} AS cited,"
            " (SELECT COUNT(*) FROM run_steps s WHERE s.run_id = r.id) AS steps"
            f" FROM runs r WHERE {' AND '.join(rules)}", [*cited_args, *args])
        gone = [r for r in rows if not r["running"] and not r["cited"]]
        report = PruneReport(runs=len(gone), steps=sum(r["steps"] for r in gone),
                             kept_running=sum(1 for r in rows if r["running"]),
                             kept_evidence=sum(1 for r in rows if r["cited"] and not r["running"]),
                             dry_run=dry_run)
        if dry_run or not gone:
            return report
        ids = [(r["id"], user_id) for r in gone]
        with self.store.transaction():
            # Steps explicitly, not by the foreign key's cascade: a connection opened
            # elsewhere may have foreign keys off.
            self._change_many(user_id, "DELETE FROM run_steps WHERE run_id IN"
                              " (SELECT id FROM runs WHERE id = ? AND user_id = ?)", ids)
            self._change_many(user_id, "DELETE FROM runs WHERE id = ? AND user_id = ?", ids)
        return report
