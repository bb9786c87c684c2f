"""``Memory``: one object for an application's memory — mem0's verbs, with provenance,
history and real forgetting, over memstrata's layers.

Example:
    >>> from memstrata import Memory
    >>> m = Memory.open(":memory:")
    >>> _ = m.add("I moved to Lisbon last spring", user_id="ana", infer=False)
    >>> m.search("where does she live?", user_id="ana", k=1)[0].text
    'I moved to Lisbon last spring'

Turns are stored as said (embedded and indexed on write). With an LM and ``infer=True``,
new turns of a conversation accumulate until they fill an extraction chunk, then one LLM
call extracts their facts, which are grounded, deduplicated against what the
conversation already holds and superseded where a single-valued fact changed
(``flush`` extracts a partial chunk). That call runs in the background by default: the
chunk is recorded as a job in the store, in the transaction that stores its turns, and a
worker runs it (see :mod:`memstrata.worker`; ``wait``, ``jobs`` and ``job`` follow it).
Every method takes the tenant (``user_id``) or an id that names its tenant; nothing
reads across tenants.

What comes in is checked at the door, the same for SQLite and PostgreSQL, so whatever is
stored can be exported and read back: text (a message with its speaker, a query, an
update) and ids must be valid Unicode without NUL characters (``\x00``: PostgreSQL cannot
store one), a message at most :data:`MAX_MESSAGE_BYTES` and a query at most
:data:`MAX_QUERY_BYTES` of UTF-8, and metadata JSON of the same text, at most
:data:`MAX_METADATA_DEPTH` levels deep and :data:`MAX_METADATA_BYTES` long. Anything else
is a ``ValueError`` naming the argument (and, on an import, the conversation, session and
message); nothing is stored then.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from memstrata import add_rules
from memstrata.errors import MemstrataError
from memstrata.formats.records import (
    PARTS_SKIPPED,
    ConversationRecord,
    Message,
    parse_time,
    to_messages,
)
from memstrata.memory import Filters, Hit, Item, MemoryStore, Retriever, Store, Turn
from memstrata.memory.models import ITEM_KINDS, Conversation, Edge, Session, utcnow
from memstrata.memory.retrieval import DEFAULT_MIN_SCORE
from memstrata.memory.store import node_type
from memstrata.memory.store.forget import scrubbing
from memstrata.memory.store.jobs import STATUSES as JOB_STATUSES
from memstrata.memory.store.opener import open_store
from memstrata.memory.store.versions import Version
from memstrata.programs.errors import ModelSetupError
from memstrata.worker import (
    EXTRACT,
    ExtractionSettings,
    JobTimeoutError,
    Worker,
    job_dict,
    new_owner,
    open_jobs,
)

if TYPE_CHECKING:
    import dspy

    from memstrata.formats.dump import ExportFile
    from memstrata.memory.cognitive import ReadReport
    from memstrata.memory.reembed import ReembedReport
    from memstrata.packers.memory_context import ContextSettings, MemoryContext
    from memstrata.programs.expectation import Expectation
    from memstrata.programs.ingest import IngestSettings
    from memstrata.programs.learning import Lesson
    from memstrata.programs.lm import ModelHandle
    from memstrata.programs.routed_answer import RouteChoice, RoutedAnswer
    from memstrata.programs.voe import VoESettings
    from memstrata.tools import ToolSession

DEFAULT_CONVERSATION = "default"
SESSION_GAP = timedelta(hours=2)
"""A message this long after the last one of a conversation starts a new session."""
EXTRACTED = "extracted_seq"
"""Conversation metadata key: the last turn (``seq``) whose facts were extracted."""
MAX_MESSAGE_BYTES = 256 * 1024
"""Most UTF-8 bytes of one message (its speaker and text) or an update's text: 256 KiB,
about 60k words. Each turn's text is indexed and copied, bounded, into its neighbours'
context; larger documents belong in ``store.blobs``, which reads them back in pieces."""
MAX_QUERY_BYTES = 16 * 1024
"""Most UTF-8 bytes of a search query: 16 KiB. A query's cost grows with its terms, and a
search holds the store's lock while it runs (another tenant's call waits for it)."""
MAX_METADATA_BYTES = 64 * 1024
"""Most bytes of one metadata object (or a message's own) as JSON."""
MAX_METADATA_DEPTH = 20
"""Most levels of nesting in metadata (an object or list inside another is one level)."""
KINDS = ("turn", *ITEM_KINDS)
"""What ``get_all``'s ``kind`` and the ``kinds`` filter may name."""


class MemoryNotFoundError(MemstrataError, KeyError):
    """No turn or item of that id for this tenant (``Memory.update``)."""

    def __str__(self) -> str:  # KeyError's would quote the message
        return str(self.args[0]) if self.args else ""


class Memory:
    """A tenant-scoped memory over one store; safe to share between threads.

    Build with :meth:`open`. ``lm`` is a :class:`~memstrata.programs.lm.ModelHandle`
    (or None: turns are stored and searched, nothing is extracted or answered).
    ``extraction`` is as :meth:`open` takes it.
    """

    def __init__(self, store: MemoryStore, *, lm: ModelHandle | None = None,
                 ingest: IngestSettings | None = None,
                 programs: dict[str, str | Path] | None = None,
                 extraction: str | ExtractionSettings = "background") -> None:
        self.store = store
        self.lm = lm
        self.retriever = Retriever(store, store.embedder)
        self._ingest = ingest
        self._lock = threading.RLock()
        self.extraction = ExtractionSettings.of(extraction)
        self._worker: Worker | None = None  # built on first use (see _jobs_worker)
        self._worker_guard = threading.Lock()
        self._answerer: Any = None  # a PersonalAnswerer, built on the first answer
        self._qa, self.programs = _compiled_programs(programs or {})
        self._files = {name: str(path) for name, path in (programs or {}).items()}

    @classmethod
    def open(cls, path: str | Path = "memstrata.db", *, lm: str | dspy.BaseLM | ModelHandle
             | None = None, embedder: Any = "auto",
             ingest: IngestSettings | None = None,
             programs: dict[str, str | Path] | None = None,
             durability: Literal["normal", "full"] = "normal",
             extraction: str | ExtractionSettings = "background") -> Memory:
        """Open (creating if needed) a memory in one SQLite file or a PostgreSQL database.

        Args:
            path: the file (``":memory:"`` for a throwaway one; ``~`` is expanded; its
                folder must exist), or a ``postgresql://user:password@host/db`` URL (needs
                the ``postgres`` extra; the schema is created and migrated on first use).
                No other URL is served: ``mysql://``, ``postgresql+psycopg://``,
                ``sqlite:///x.db`` and the like are refused.
            lm: a model choice as ``setup_lm`` takes it (``local/qwen2.5-coder-1.5b``,
                ``openai/gpt-4o-mini``, ...), a ``dspy.LM``, a ``ModelHandle``, or None
                (no extraction and no answers; never an error here).
            embedder: ``"auto"`` (the default: the model that embedded most of the
                store's vectors when that is ``minilm`` or ``mpnet``, else the static model
                shipped in the package; a new store gets the static model),
                ``"default"`` or ``"static"`` (the shipped static model), ``"minilm"`` or
                ``"mpnet"`` (the transformers, extras of those names: better dense recall on
                chat data, ingest far slower; see the retrieval guide), the folder of a
                model2vec static model, any ``Embedder``, or None (no dense channel). A
                store is searched with the model that embedded it: a store written with a
                model2vec folder is opened with that folder named.
            ingest: chunking and call-cap settings of extraction.
            programs: compiled programs to use, by name, each a program file of
                ``memstrata compile``: ``{"qa": "qa.json"}`` (``answer`` answers with that
                ``QA``, in the answer style it was compiled for), ``{"extractor":
                "extractor.json"}`` (extraction at ingest uses it). ``Memory.programs``
                then names each file and its SHA-256, for run records.
            durability: ``"normal"`` (SQLite ``synchronous=NORMAL``: a commit survives
                the process crashing; a power loss may take the last commits, never the
                file's consistency) or ``"full"`` (``synchronous=FULL``: every commit is
                on the disk when ``add`` returns, at a cost on writes the README gives).
                PostgreSQL: the server's own setting either way.
            extraction: how fact extraction runs (with an LM and ``add(infer=True)``).
                ``"background"`` (the default): ``add`` stores the turns, records an
                extraction job in the same transaction once a chunk is full, and returns
                at once; a worker thread of this memory, started on first use, runs the
                jobs (``wait`` blocks until they are done; ``jobs``/``job`` show them).
                ``"sync"``: ``add`` runs the job itself and returns the facts with the
                turns. ``"queue"``: jobs are only recorded, for ``memstrata worker``
                processes to run (no LM is needed here then). Or an
                :class:`~memstrata.worker.ExtractionSettings` (mode, attempts before a
                job is parked, lease, retry delays, and ``nice``: the worker thread's
                lower OS priority, its model calls' included, 10 by default).

        Raises:
            ValueError: a program this memory does not use, or a file that is not that
                program (or fails its hash check); a URL of a scheme memstrata does not
                serve (the message names the scheme, never the password); an unknown
                ``durability``, ``extraction`` or embedder name. Nothing is opened then.
            StoreError: the file or the database cannot be opened (a folder that does not
                exist; an unreachable server or a refused login: the message names the
                server without its password; nothing is written).
            MissingExtraError: a URL without the ``postgres`` extra installed, or a named
                embedder without its extra.
        """
        _compiled_programs(programs or {})  # a bad file fails before the store opens
        settings = ExtractionSettings.of(extraction)
        store = open_store(path, embedder=embedder, durability=durability)
        return cls(store, lm=_handle(lm), ingest=ingest, programs=programs,
                   extraction=settings)

    def close(self) -> None:
        """Stop the worker thread, then close the store. Jobs not run yet stay in the
        store for the next worker; a job in flight is given back (its writes, should its
        model call still return, roll back). Closing twice does nothing; any other call
        after it raises a ``StoreError`` that says the store was closed."""
        if self._worker is not None:
            self._worker.stop()
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ------------------------------------------------------------------------

    def add(self, messages: Any, *, user_id: str, agent_id: str | None = None,
            conversation_id: str | None = None, session_id: str | None = None,
            timestamp: datetime | str | float | None = None,
            metadata: dict[str, Any] | None = None, infer: bool = True,
            skip_roles: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Store messages as turns and, with an LM and ``infer``, extract their facts (in
        the background by default: see ``open``'s ``extraction``).

        LLM calls: none in this call, unless ``infer`` with an LM in ``"sync"`` mode: then
        one per extraction chunk the call fills (two on a parse retry; at most one per
        ``IngestSettings.calls_per_turns`` turns, 10 by default), each a step of the job's
        ``ingest`` run. In the background the worker makes those calls.

        What is stored: the messages that say something. By default a system prompt
        (role ``system`` or ``developer``) and tool plumbing (role ``tool`` or
        ``function``, and messages made only of tool calls or results) are not memories:
        ``skip_roles`` names the roles not stored (pass ``()`` to store every message).
        Roles are read from ``role`` only: a message that names just its ``speaker`` is
        never skipped for its role. A message without text (blank, or only images, audio,
        files or reasoning: see :func:`~memstrata.formats.records.to_message`) is not
        stored either.

        Sending the same history again stores nothing twice, so an app may send the whole
        conversation on every call. A message repeats a turn stored before the call in
        the conversation when they have the same speaker, role, text and caption (and
        ``metadata["source_id"]``, when the message has one) and either (1) it is in the
        re-sent prefix: the batch's messages (those not skipped) from the first, as long
        as they equal the conversation's turns from its first, in order (a message with
        a timestamp must also match that turn's event time); or (2) it has its own
        ``timestamp`` and a turn of the conversation has that event time; or (3) it has a
        source id and the conversation has a turn of that id (an importer's message ids:
        ChatGPT's, Claude's, LoCoMo's). A stored turn is repeated by at most one message
        of a batch. Any other message is new: a user
        who says "ok" twice, in one call or in two, gets two turns, unless "ok" is the
        conversation's first turn and is sent again alone (a re-sent prefix).

        Args:
            messages: a string (said by ``user``), a message dict (``role`` or
                ``speaker``, ``content``, optional ``timestamp``/``metadata``: messages of
                the OpenAI Chat and Responses APIs and of Anthropic's Messages API as they
                are), or a list of them.
            user_id: the tenant.
            agent_id: recorded on the turns.
            conversation_id: default ``"default"``.
            session_id: default: the conversation's last session, or a new one when the
                first message comes more than two hours after its last turn.
            timestamp: event time of messages without their own (default: now).
            metadata: merged into every turn's metadata. A turn's metadata also keeps its
                message's ``role`` where it differs from the speaker (``"user"`` for a
                message said by ``Ana`` as the user) and ``parts_skipped``.
            infer: extract facts once the conversation's unextracted turns fill a chunk:
                a job recorded with the turns, in one transaction, run by the worker
                (``"background"``, ``"queue"``) or here (``"sync"``).
            skip_roles: roles not stored; default ``{"system", "developer", "tool",
                "function"}``.

        Returns:
            One event per message, in message order: ``{"id", "memory", "event": "ADD",
            "kind": "turn"}`` for a stored turn, or ``"event": "NONE"`` with ``"reason"``
            for one not stored: ``"duplicate"`` (``id`` is the turn it repeats),
            ``"system"`` or ``"tool"`` (its role, named in ``"role"``, is skipped;
            ``"role"`` for another role of ``skip_roles``), ``"no_text"`` (only parts that
            are not text) or ``"blank"`` (``id`` is None for these). An event whose
            message had parts not read names them in ``"parts_skipped"``. In ``"sync"``
            mode, then one event per proposed fact (``ADD``, ``UPDATE`` with
            ``previous``, or ``NONE`` when it was already known), with ``"kind":
            "fact"``; in the background they are the job's (:meth:`job`).

        Raises:
            ValueError: bad messages (a refused content part: its message and type named),
                ids or ``skip_roles``; nothing is stored.
            IngestError: ``"sync"`` mode, the extraction failed (the turns are stored;
                the job stays queued for the next add or ``flush``, or is parked).
        """
        _check_id("user_id", user_id)
        msgs = to_messages(messages)
        _check_json("metadata", [metadata, [m.metadata for m in msgs]])
        roles = add_rules.skip_roles(skip_roles)
        if not msgs:
            return []
        when = parse_time(timestamp) if timestamp is not None else None
        conv = conversation_id or DEFAULT_CONVERSATION
        _check_id("conversation_id", conv)
        if session_id is not None:
            _check_id("session_id", session_id)
        extracting = infer and (self.lm is not None or self.extraction.mode == "queue")
        job = None
        with self._lock, self.store.transaction():  # the turns and their job, or neither
            outcomes = self._write_turns(user_id, agent_id, conv, session_id, msgs, when,
                                         metadata or {}, skip_roles=roles, dedupe=True)
            events = [_turn_event(m, turn, reason)
                      for m, (turn, reason) in zip(msgs, outcomes, strict=True)]
            if extracting and any(r is None for _, r in outcomes):
                job = self._extract(user_id, conv, full_only=True)
        if job is not None:
            events += self._started(user_id, conv)
        return events

    def flush(self, user_id: str, conversation_id: str | None = None) -> list[dict[str, Any]]:
        """Extract the facts of every conversation's (or one's) unextracted turns now,
        even a partial chunk, in this thread; none without an LM. LLM calls: one per
        chunk extracted (two on a parse retry), each a step of the job's ``ingest`` run.

        The tenant's jobs of those conversations not finished yet are run here too, in
        order, and its parked (``failed``) ones get another try; a job another worker is
        running is waited for, never run twice. Returns the fact events of every job it
        ran or waited for, in job order (those of jobs finished before the call are in
        :meth:`job`). In ``"queue"`` mode without an LM, the partial chunk is recorded
        as a job for the workers and nothing is returned.

        Raises:
            IngestError: a job failed (its error recorded on it; the turns kept). The
                events of the other jobs are in :meth:`job`.
        """
        _check_id("user_id", user_id)
        if self.lm is None and self.extraction.mode != "queue":
            return []
        with self._lock, self.store.transaction():
            convs = ([conversation_id] if conversation_id
                     else self.store.conversation_ids(user_id))
            # With an LM this call runs (and reports) the retry itself: the jobs are held
            # from the workers, which would otherwise race it for them.
            self.store.jobs.retry_failed(
                user_id, conversation_id,
                hold_s=self.extraction.lease_s if self.lm is not None else 0.0)
            for conv in convs:
                self._extract(user_id, conv, full_only=False)
        if self.lm is None:
            self._jobs_worker().wake()
            return []
        return self._run_here(user_id, conversation_id)

    def wait(self, user_id: str | None = None, timeout: float | None = None
             ) -> dict[str, Any]:
        """Block until every extraction job of ``user_id`` (or of every tenant) is done
        or parked ``failed``; returns ``{"done", "failed", "pending", "running"}`` (the
        jobs per status then) and ``"seconds"`` waited.
        No LLM call here (the jobs' calls are the worker's).

        ``"background"`` mode starts the worker thread if it is not running yet;
        ``"sync"`` runs the jobs here (a failing one until it is parked); ``"queue"``
        waits for ``memstrata worker`` processes.

        Raises:
            JobTimeoutError: ``timeout`` seconds passed first (a ``TimeoutError``; the
                jobs go on).
            ValueError: a bad ``user_id`` or ``timeout``.
        """
        if user_id is not None:
            _check_id("user_id", user_id)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(
                timeout, int | float) or timeout != timeout or timeout < 0):
            raise ValueError(f"timeout must be a number of seconds >= 0, not {timeout!r}")
        started = time.monotonic()
        deadline = None if timeout is None else started + float(timeout)
        worker = self._jobs_worker() if self.lm is not None else None
        while True:
            counts = self.store.jobs.counts(user_id)
            if not counts["pending"] and not counts["running"]:
                return {**counts, "seconds": round(time.monotonic() - started, 3)}
            if self.extraction.mode == "sync" and worker is not None:
                # Run them here; a failure is recorded on its job, and retried until parked.
                with contextlib.suppress(MemstrataError):
                    if worker.run_once(user_id=user_id, due_only=False) is not None:
                        continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise JobTimeoutError(
                    f"wait: {counts['pending']} job(s) pending and {counts['running']} "
                    f"running after {timeout} s" + (f" (user {user_id!r})" if user_id else "")
                    + ("; extraction='queue' needs `memstrata worker` processes running"
                       if self.extraction.mode == "queue" else ""))
            pause = 0.02 if left is None else max(min(0.02, left), 0.0)
            if worker is not None:
                worker.wait_change(pause)
            else:
                time.sleep(pause)

    def jobs(self, user_id: str | None = None, *, status: str | None = None,
             limit: int = 100) -> list[dict[str, Any]]:
        """Extraction jobs, newest first: of ``user_id`` (or of every tenant, for an
        operator), of one ``status`` (``pending``, ``running``, ``done``, ``failed``) or
        all; at most ``limit``. Each is a JSON-serialisable dict with ``id``,
        ``user_id``, ``conversation_id``, ``kind``, ``status``, ``attempts``, ``error``
        (the last one), ``created_at``, ``updated_at`` (ISO-8601 UTC record times) and
        ``facts`` (how many fact events it produced). No LLM call.

        Raises:
            ValueError: a bad ``user_id``, an unknown ``status``, a ``limit`` that is not
                a whole number.
        """
        if user_id is not None:
            _check_id("user_id", user_id)
        if status is not None and status not in JOB_STATUSES:
            raise ValueError(f"status must be one of {', '.join(JOB_STATUSES)}, not "
                             f"{status!r}")
        limit = _count("limit", limit, 10_000)
        with self._lock:
            return [job_dict(j) for j in self.store.jobs.list(user_id, status=status,
                                                               limit=limit)]

    def job(self, id: str, *, user_id: str | None = None) -> dict[str, Any] | None:
        """One job as :meth:`jobs` gives it, plus ``events`` (its fact events, once
        done: as ``add`` returns them in ``"sync"`` mode), ``params`` (the turns it
        covers), ``max_attempts``, ``run_after`` and its lease; None when there is no
        such job (of ``user_id``, when given: another tenant's reads as missing). No LLM call.

        A ``done`` job is kept ``ExtractionSettings.keep_done_days`` (30 by default) after
        it finished, then a worker prunes it (:meth:`prune_jobs`): this returns None for
        it from then on. The facts it wrote stay, with their versions (:meth:`history`).
        A ``failed`` job is kept until it is retried (:meth:`flush`) or pruned by name."""
        if not isinstance(id, str) or not id:
            raise ValueError("a job id is a non-empty string")
        _check_text("id", id, limit=1024)
        if user_id is not None:
            _check_id("user_id", user_id)
        with self._lock:
            owner = self.store.jobs.owner(id)
            if owner is None or (user_id is not None and owner != user_id):
                return None
            found = self.store.jobs.get(owner, id)
            return None if found is None else job_dict(found, events=True)

    def prune_jobs(self, user_id: str | None = None, *, older_than_days: float | None = None,
                   before: datetime | date | str | float | None = None,
                   status: str | Sequence[str] = "done", dry_run: bool = False
                   ) -> dict[str, int]:
        """Delete finished extraction jobs: of ``user_id`` (or of every tenant), of
        ``status`` (``"done"``, ``"failed"`` or both), finished (last changed) more than
        ``older_than_days`` days ago or before ``before`` (ISO text, Unix seconds, a date
        or a datetime), or, with neither, every one of them. Returns the jobs deleted per
        status (``dry_run``: that would be; nothing is deleted). No LLM call.

        A job not finished (``pending``, ``running``) is never pruned. The facts a done
        job wrote stay, with their versions; its record and its fact events go (:meth:`job`
        returns None for it). Workers prune ``done`` jobs by themselves (see
        ``ExtractionSettings.keep_done_days``).

        Raises:
            ValueError: a bad ``user_id``, a status other than ``done``/``failed``, both
                rules or a negative ``older_than_days``.
        """
        from datetime import date as day

        from memstrata.memory.store.jobs import prunable

        if user_id is not None:
            _check_id("user_id", user_id)
        prunable(status)
        if older_than_days is not None and before is not None:
            raise ValueError("give older_than_days or before, not both")
        if older_than_days is not None:
            if (isinstance(older_than_days, bool) or not isinstance(older_than_days, int | float)
                    or not 0 <= older_than_days < 1e6):
                raise ValueError(f"older_than_days must be a number of days >= 0, not "
                                 f"{older_than_days!r}")
            cutoff = utcnow() - timedelta(days=float(older_than_days))
        elif before is None:
            cutoff = utcnow()
        elif isinstance(before, datetime):
            cutoff = before
        elif isinstance(before, day):
            cutoff = datetime(before.year, before.month, before.day, tzinfo=UTC)
        else:
            parsed = parse_time(before)
            if parsed is None:
                raise ValueError(f"before must be a time, not {before!r}")
            cutoff = parsed
        with self._lock:
            return self.store.jobs.prune(user_id, before=cutoff, status=status,
                                         dry_run=dry_run)

    def _write_turns(self, user_id: str, agent_id: str | None, conv: str,
                     session_id: str | None, msgs: list[Message], when: datetime | None,
                     metadata: dict[str, Any], *, skip_roles: frozenset[str], dedupe: bool
                     ) -> list[tuple[Turn | None, str | None]]:
        """Per message, in order: its new turn and None, the stored turn it repeats and
        ``"duplicate"`` (``dedupe`` only; see :mod:`memstrata.add_rules`), or None and
        why it is not stored."""
        # A system prompt or tool output would rank for words the user never said, and a
        # message with no text would only be an empty search hit.
        outcomes: list[tuple[Turn | None, str | None]] = [
            (None, add_rules.skip_reason(m, skip_roles)) for m in msgs]
        kept = [n for n, (_, reason) in enumerate(outcomes) if reason is None]
        if not kept:
            return outcomes
        now = utcnow()
        store = self.store
        for n in kept:
            _check_text("a message", msgs[n].speaker + msgs[n].content)
        with store.transaction():  # the write lock up front: seq is read and used atomically
            same = (add_rules.repeats(store, user_id, conv, [msgs[n] for n in kept])
                    if dedupe else {})
            fresh = [n for p, n in enumerate(kept) if p not in same]
            turns = self._insert(user_id, agent_id, conv, [(session_id, [msgs[n] for n in fresh],
                                                             when)], metadata, now)[0]
            for n, turn in zip(fresh, turns, strict=True):
                outcomes[n] = (turn, None)
            for p, turn in same.items():
                outcomes[kept[p]] = (turn, "duplicate")
        return outcomes

    @staticmethod
    def _storable(msgs: list[Message]) -> list[Message]:
        """The messages ``add`` would store without deduplication (not of
        :data:`~memstrata.add_rules.DEFAULT_SKIP_ROLES`, with text), each checked.

        Raises:
            ValueError: a message's text is not storable (see ``_check_text``).
        """
        kept = [m for m in msgs if add_rules.skip_reason(m, add_rules.DEFAULT_SKIP_ROLES) is None]
        for m in kept:
            _check_text("a message", m.speaker + m.content)
        return kept

    def _record_header(self, user_id: str, record: ConversationRecord) -> None:
        """The record's title, speakers and metadata on its conversation's stored header
        (in the caller's transaction): the record's speakers first, then the others the
        turns named; what the record leaves empty is kept."""
        header = self.store.conversation(user_id, record.id)
        if header is None or not (record.title or record.speakers or record.metadata):
            return
        self.store.add_conversation(header.model_copy(update={
            "title": record.title or header.title,
            "speakers": list(dict.fromkeys([*record.speakers, *header.speakers])),
            "metadata": {**header.metadata, **record.metadata}}))

    def _insert(self, user_id: str, agent_id: str | None, conv: str,
                batches: Sequence[tuple[str | None, Sequence[Message], datetime | None]],
                metadata: dict[str, Any], now: datetime) -> list[list[Turn]]:
        """Append each batch ``(session_id, messages, when)`` to ``conv`` in order, as turns
        of its session (``None``: the last one, or a new one after :data:`SESSION_GAP`),
        with their sessions, speakers and ``follows`` edges, in the caller's transaction;
        the turns of each batch. One ``add_turns`` writes (and embeds) them all."""
        if not any(msgs for _, msgs, _ in batches):
            return [[] for _ in batches]
        store = self.store
        header = store.conversation(user_id, conv)
        last = store.last_turn(user_id, conv)
        seq = last.seq + 1 if last else 0
        sessions = store.session_ids(user_id, conv)
        speakers = header.speakers if header else []
        new_speakers = [m.speaker for _, msgs, _ in batches for m in msgs
                        if m.speaker not in speakers]
        if header is None or new_speakers:
            store.add_conversation(Conversation(
                id=conv, user_id=user_id, agent_id=header.agent_id if header else agent_id,
                title=header.title if header else "",
                speakers=list(dict.fromkeys([*speakers, *new_speakers])),
                metadata=header.metadata if header else {}))
        written: list[list[Turn]] = []
        chains: list[list[Turn]] = []
        for session_id, msgs, when in batches:
            turns: list[Turn] = []
            written.append(turns)
            if not msgs:
                continue
            first_time = msgs[0].timestamp or when or now
            if session_id is None:
                session_id = _session_for(last, sessions, first_time)
            if session_id not in sessions:
                store.add_session(Session(id=session_id, user_id=user_id, conversation_id=conv,
                                          index=len(sessions) + 1, started_at=first_time))
                sessions.append(session_id)
            for m in msgs:
                extra = dict(m.metadata)
                source_id = str(extra.pop("source_id", "") or f"t{seq}")
                turns.append(Turn(
                    user_id=user_id, agent_id=agent_id, conversation_id=conv,
                    session_id=session_id, turn_id=source_id, seq=seq, speaker=m.speaker,
                    text=m.content, event_time=m.timestamp or when or now, recorded_at=now,
                    metadata={**metadata, **extra, **add_rules.role_field(m)}))
                seq += 1
            chains.append(([last] if last and last.session_id == session_id else []) + turns)
            last = turns[-1]
        new = [turn for turns in written for turn in turns]
        for turn, tid in zip(new, store.add_turns(new), strict=True):
            turn.id = tid
        store.add_edges(Edge(user_id=user_id, src=a.id, dst=b.id, relation="follows")
                        for chain in chains for a, b in pairwise(chain))
        return written

    def _extract(self, user_id: str, conv: str, *, full_only: bool) -> str | None:
        """Record an extraction job for the conversation's turns not yet covered by one
        (only once they fill a chunk, with ``full_only``), in the caller's transaction;
        its id, or None. The conversation's :data:`EXTRACTED` mark moves to the job's last
        turn in the same transaction, so each turn is in exactly one job."""
        from memstrata.programs.ingest import IngestSettings

        settings = self._ingest or IngestSettings()
        header = self.store.conversation(user_id, conv)
        if header is None:
            return None
        done = int(header.metadata.get(EXTRACTED, -1))
        need = settings.chunking.max_turns if full_only else 1
        # At most a chunk's worth read: enough to know whether one is full.
        if len(self.store.turns(user_id, conversation_id=conv, after_seq=done,
                                limit=need)) < need:
            return None
        last = self.store.last_turn(user_id, conv)
        if last is None or last.seq <= done:
            return None
        job = self.store.jobs.enqueue(user_id, conv, EXTRACT,
                                      {"after_seq": done, "upto_seq": last.seq},
                                      max_attempts=self.extraction.max_attempts)
        header.metadata[EXTRACTED] = last.seq
        self.store.add_conversation(header)
        return job

    def _jobs_worker(self) -> Worker:
        """This memory's worker (built once; its thread started in ``"background"`` mode
        with an LM)."""
        with self._worker_guard:
            if self._worker is None:
                self._worker = Worker(self, self.extraction)
            if self.extraction.mode == "background" and self.lm is not None:
                self._worker.start()
            return self._worker

    def _started(self, user_id: str, conv: str) -> list[dict[str, Any]]:
        """After ``add`` recorded a job: run the conversation's jobs here (``"sync"``: their
        fact events), or wake the worker."""
        if self.extraction.mode == "sync" and self.lm is not None:
            return self._run_here(user_id, conv)
        self._jobs_worker().wake()
        return []

    def _run_here(self, user_id: str, conversation_id: str | None) -> list[dict[str, Any]]:
        """Run the tenant's unfinished jobs (of one conversation, or all) in this thread,
        in order, waiting for any another worker holds; the fact events of them all.

        Raises:
            IngestError: one failed (no later job of its conversation ran).
        """
        # A worker of its own (its own lease name): the memory's thread may run jobs now.
        worker = Worker(self, self.extraction, owner=new_owner("caller"))
        targets = [j.id for j in open_jobs(self, user_id, conversation_id)]
        while True:
            # A failed job raises IngestError here: later jobs of its conversation would
            # extract out of order, so none runs after it.
            ran = worker.run_once(user_id=user_id, conversation_id=conversation_id,
                                  raise_errors=True, due_only=False)
            if ran is not None:
                continue
            if not open_jobs(self, user_id, conversation_id):
                break
            time.sleep(0.05)  # another worker holds one: wait for its end (or its lease's)
        events: list[dict[str, Any]] = []
        for job_id in targets:
            job = self.store.jobs.get(user_id, job_id)
            if job is not None and job.result:
                events += job.result
        return events

    def import_conversations(self, records: Iterable[ConversationRecord], *, user_id: str,
                             agent_id: str | None = None,
                             progress: Callable[[int], None] | None = None,
                             replace: bool = False) -> dict[str, int]:
        """Write whole conversations (from a format adapter) as turns, all or nothing. No LLM call.

        A conversation already stored under the same id keeps its turns: the record's
        sessions are appended to it (a session of the same id continues), as ``add``
        would, and as ``add`` does, the record's messages that repeat its turns are not
        stored again (:mod:`memstrata.add_rules`: a re-sent start of the conversation, or a
        timestamped message with a turn of that time and text), so importing a file
        again, or a newer export of the same conversations, adds only what is new (counted
        as ``"duplicates"``). The record's ``title``, ``speakers`` (first, in its order)
        and ``metadata`` go on the conversation's header once a turn of it is written. With
        ``replace=True`` its turns, sessions and index rows are deleted first (and
        scrubbed from the file, as :meth:`delete` does); the counts then include
        ``"replaced"``, the turns deleted. No extraction runs (``flush`` extracts
        afterwards). System prompts, tool plumbing and messages without text are
        skipped, as by :meth:`add`. Returns counts of the conversations, sessions and turns
        written, and, when there are any, ``"skipped"`` (the messages not stored),
        ``"duplicates"`` (those already stored) and ``"unrecognisable"``: the messages
        written without a timestamp or a ``metadata["source_id"]`` after turns that are
        not the record's own start (a conversation that had other turns), which an
        import of the same record again would store again.

        Raises:
            ValueError: a bad ``user_id``, or a record :meth:`add` would refuse (the
                message names the conversation, the session and the message); nothing is
                written.
        """
        _check_id("user_id", user_id)
        records = list(records)
        for record in records:
            _check_record(record)
        counts = {"conversations": 0, "sessions": 0, "turns": 0}
        replaced = skipped = duplicates = repeated = blind = 0
        with self._lock, self._scrub(user_id, replace), self.store.transaction():
            for record in records:
                if replace:
                    replaced += self.store.delete_conversation(user_id, record.id)
                batches = [(session.id, self._storable(session.messages), session.started_at)
                           for session in record.sessions]
                if not replace:
                    batches, repeated, unnamed = _without_repeats(self.store, user_id,
                                                                  record.id, batches)
                    duplicates += repeated
                    blind += unnamed
                turns = self._insert(user_id, agent_id, record.id, batches, {}, utcnow())
                written = sum(map(len, turns))
                counts["sessions"] += sum(map(bool, turns))
                if written:
                    self._record_header(user_id, record)
                counts["turns"] += written
                counts["conversations"] += bool(written)
                given = sum(len(s.messages) for s in record.sessions)
                skipped += given - sum(len(b[1]) for b in batches) - repeated
                if progress is not None:
                    progress(given)
        if skipped:
            counts["skipped"] = skipped
        if duplicates:
            counts["duplicates"] = duplicates
        if blind:
            counts["unrecognisable"] = blind
        return {**counts, "replaced": replaced} if replace else counts

    # -- reading -----------------------------------------------------------------------

    def search(self, query: str, *, user_id: str, k: int = 10,
               filters: Filters | dict[str, Any] | None = None,
               min_score: float = DEFAULT_MIN_SCORE, limit: int | None = None) -> list[Hit]:
        """The ``k`` best turns and items of ``user_id`` for ``query`` (hybrid search),
        best first, leaving out hits that score under ``min_score``. No LLM call.

        ``limit`` is another name for ``k`` (mem0's): give one or the other, or both with
        the same value. :func:`memstrata.compat.to_mem0` turns the hits into mem0's
        ``{"results": [{"id", "memory", "score", ...}]}``.

        ``score`` is in [0, 1]: the best hit scores how well the query matches this
        memory at all (the share of its words a hit holds, or its meaning's closeness),
        the others that times their share of the best hit's ranking score; so a query
        nothing here answers (``"xyzzy plugh"``) returns no hit at the default
        ``min_score`` (:data:`~memstrata.memory.retrieval.DEFAULT_MIN_SCORE`, 0.1), and
        ``min_score=0`` returns every hit any channel found.

        ``filters`` narrows by ``kinds``, ``speaker``, ``conversation_id``, ``start``,
        ``end`` (a :class:`Filters` or a dict of those). Each hit has ``id``, ``text``,
        ``score``, ``kind``, ``speaker``, ``conversation_id``, ``event_time`` and the
        score each channel gave it. ``k`` is a whole number (at most 1,000 hits are
        returned; a negative one returns none). A question's "I"/"my" is the ``user``
        of a user/assistant chat and its "you" the ``assistant``.

        Raises:
            ValueError: a bad ``user_id``; a query that is not valid Unicode text, holds a
                NUL or is longer than :data:`MAX_QUERY_BYTES`; a ``k`` that is not a whole
                number (``None``, ``inf``, ``2.5``); an unknown or mistyped filter, or a
                kind that does not exist; ``limit`` and ``k`` both given and different.
            TypeError: ``query`` is not a string, ``filters`` neither Filters nor a dict.
        """
        if limit is not None:
            if k != 10 and k != limit:
                raise ValueError(f"k={k!r} and limit={limit!r}: limit is another name for "
                                 "k; give one of them")
            k = limit
        _check_id("user_id", user_id)
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, not {type(query).__name__}")
        _check_text("query", query, limit=MAX_QUERY_BYTES)
        if isinstance(filters, dict):
            filters = _filters(filters)
        elif filters is not None and not isinstance(filters, Filters):
            raise TypeError(f"filters must be a Filters or a dict, not {type(filters).__name__}")
        if filters is not None:
            _check_kinds("filter 'kinds'", filters.kinds or [])
        k = _count("k", k, 1000)
        if isinstance(min_score, bool) or not isinstance(min_score, int | float) or not (
                0.0 <= min_score <= 1.0):
            raise ValueError(f"min_score must be a number from 0 to 1, not {min_score!r}")
        with self._lock:
            return self.retriever.search(user_id, query, k=k, filters=filters,
                                         min_score=float(min_score))

    def get(self, id: str, *, user_id: str | None = None) -> dict[str, Any] | None:
        """A turn or item by id (as a dict with ``node`` and ``user_id``), or None. No LLM call.

        Ids are unique across tenants; pass ``user_id`` to have a wrong tenant read as
        missing."""
        with self._lock:
            owner = self._owner(id, user_id)
            if owner is None:
                return None
            node = (self.store.turn(owner, id) if node_type(id) == "turn"
                    else self.store.get(owner, id))
            return None if node is None else {"node": node_type(id),
                                              **node.model_dump(mode="json")}

    def get_all(self, user_id: str, *, kind: str | None = None, limit: int = 100,
                offset: int = 0) -> list[dict[str, Any]]:
        """A page of the tenant's memories, newest record first: its turns and items of
        every kind when ``kind`` is None, only its turns with ``kind="turn"``, or only
        items of that kind. Each row has ``node`` (``"turn"`` or ``"item"``). No LLM call.

        Raises:
            ValueError: a bad ``user_id``, a ``kind`` that does not exist (see
                :data:`KINDS`), or a ``limit``/``offset`` that is not a whole number.
        """
        _check_id("user_id", user_id)
        if kind is not None:
            _check_kinds("kind", [kind])
        limit = _count("limit", limit, 10_000)
        offset = _count("offset", offset, 2**62)  # SQLite's integers stop at 2**63
        with self._lock:
            if kind == "turn":
                return [_row(t) for t in self.store.turns(user_id, newest=True, limit=limit,
                                                          offset=offset)]
            if kind is not None:
                return [_row(i) for i in self.store.items(user_id, kind=kind, limit=limit,
                                                          offset=offset)]
            # Both, merged by record time: the page after ``offset`` rows of the two.
            counts = self.store.counts(user_id)
            if offset >= counts["turns"] + counts["items"]:
                return []
            nodes: list[Any] = [*self.store.turns(user_id, newest=True, limit=offset + limit),
                                *self.store.items(user_id, limit=offset + limit)]
            nodes.sort(key=lambda n: n.recorded_at or _EPOCH, reverse=True)
            return [_row(n) for n in nodes[offset:offset + limit]]

    def history(self, id: str, *, user_id: str | None = None) -> list[Version]:
        """Every version of a turn or item, oldest first (its current text last), each
        with its record time (``recorded_at``, ``valid_to``) and event time. No LLM call."""
        with self._lock:
            owner = self._owner(id, user_id)
            return [] if owner is None else self.store.history(owner, id)

    # -- changing and forgetting --------------------------------------------------------

    def update(self, id: str, text: str, *, user_id: str | None = None) -> dict[str, Any]:
        """Give a turn or item new text as a new version (the old one is kept, closed by
        ``valid_to``; see :meth:`history`). Returns ``{"id", "memory", "event":
        "UPDATE", "previous"}``, or ``"event": "NONE"`` when ``text`` is the memory's text
        already (no version is written). No LLM call.

        Raises:
            MemoryNotFoundError: no such id for this tenant (a ``KeyError``).
            ValueError: empty text.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("the new text is empty")
        _check_text("the new text", text)
        with self._lock:
            owner = self._owner(id, user_id)
            if owner is None:
                raise MemoryNotFoundError(f"no memory {id!r}")
            old: Turn | Item | None
            if node_type(id) == "turn":
                old = self.store.turn(owner, id)
                self.store.update_turn(owner, id, text)
            else:
                old = self.store.get(owner, id)
                self.store.update(owner, id, text=text)
            unchanged = old is not None and old.text == text  # the store wrote nothing
            return {"id": id, "memory": text, "event": "NONE" if unchanged else "UPDATE",
                    "previous": old.text if old else None}

    def delete(self, id: str, *, user_id: str | None = None) -> bool:
        """Delete one turn or item with its versions, vectors, index rows and edges, and
        (a turn) the copies of its text in its neighbours' search context. True if it
        existed. No LLM call.

        On SQLite the deleted text is also scrubbed from the file, as by
        :meth:`delete_all`: freed pages zeroed, the full-text index rewritten without it,
        the file rebuilt (``VACUUM``) and its write-ahead log checkpointed, so no byte of
        it stays on disk. That rewrites the whole file (about a second per 100 MB), under
        the store's lock; another process holding the file defers the rebuild to the next
        delete or ``VACUUM`` (``store.vacuum()``). PostgreSQL: the rows are deleted; the
        server's ``VACUUM`` frees their space.
        """
        with self._lock:
            owner = self._owner(id, user_id)
            if owner is None:
                return False
            with self._scrub(owner, True):
                if node_type(id) == "turn":
                    return self.store.delete_turn(owner, id)
                return self.store.delete(owner, id)

    def _scrub(self, user_id: str, deleting: bool) -> AbstractContextManager[Any]:
        """Around a deletion: the SQLite scrub (``forget.scrubbing``), else nothing."""
        if deleting and isinstance(self.store, Store):
            return scrubbing(self.store, user_id)
        return nullcontext()

    def delete_all(self, user_id: str) -> dict[str, int]:
        """Forget a tenant completely: turns, items of every kind, edges, vectors, FTS
        rows, blobs, runs, versions and cached values; nothing of any other tenant.
        Returns the rows deleted per table. No LLM call."""
        _check_id("user_id", user_id)
        with self._lock:
            deleted = self.store.forget_user(user_id)
            if self._answerer is not None:
                self._answerer.router.forget(user_id)
            # A local model's KV cache may still hold the tenant's prompts.
            engine = getattr(getattr(self.lm, "lm", None), "_engine_spec", None)
            if engine is not None and hasattr(engine, "clear_cache"):
                engine.clear_cache()
            return deleted

    # -- answering and tools ------------------------------------------------------------

    def answer(self, question: str, *, user_id: str, conversation_id: str | None = None,
               route: RouteChoice = "auto") -> RoutedAnswer:
        """Answer from the tenant's whole memory on the path the question calls for, with
        its evidence ids and why.

        The adaptive reasoner's intent check routes it (``programs.routed_answer``): a
        simple recall goes to the personal answerer (routed by the people it names,
        checked for who-said-what, answered by ``QA`` over the block :meth:`context`
        packs: what was read, procedures, strategies and the VoE loop's facts beside
        the answerer's own hits of what was said); a
        computation, a temporal comparison, a multi-source synthesis, a contradiction or
        an update goes to the adaptive reasoner over the same memory (what was said and
        what was read: its calculator, its date order, both sides of a contradiction).
        Either way the result is a :class:`~memstrata.programs.routed_answer.RoutedAnswer`
        (an ``AnswerWithProvenance``: ``answer``, ``evidence`` — store ids, which
        :meth:`get` reads; ``sources`` add each turn's id in its conversation —
        ``reason``, ...) that
        also names the ``path``, the ``intent`` and the ``llm_calls`` it took, and the
        ``run_id`` of its run record (program ``memory.answer``). The model is never
        called under this memory's lock: another tenant's call is not kept waiting.

        LLM calls (``route``): ``"auto"`` one to classify, then one for the answerer
        (none when the verifier abstains) or the reasoner's allowance (two to about ten);
        ``"rules"`` routes on the question's words alone (no call to classify);
        ``"answerer"`` (one call, as before routing) or ``"reasoner"`` force a path. A
        parse retry adds one.

        Raises:
            ModelSetupError: the memory was opened without an LM (a ``RuntimeError``).
            ValueError: a bad ``user_id``, an empty or oversized question, an unknown
                ``route``.
            ProgramParseError: the model's output did not parse after the retry.
        """
        from memstrata.programs.answer import PersonalAnswerer
        from memstrata.programs.reasoning import AdaptiveReasoner
        from memstrata.programs.routed_answer import answer_routed
        from memstrata.programs.verb_calls import record_verb, run_clock

        _check_id("user_id", user_id)
        if self.lm is None:
            raise ModelSetupError("answer needs an LM: Memory.open(path, lm=...)")
        if not isinstance(question, str):
            raise TypeError(f"question must be a string, not {type(question).__name__}")
        _check_text("question", question, limit=MAX_QUERY_BYTES)
        if conversation_id is not None:
            _check_id("conversation_id", conversation_id)
        began = run_clock()
        with self._lock:
            if self._answerer is None:
                self._answerer = PersonalAnswerer(self.store, retriever=self.retriever,
                                                  count_tokens=self.lm.count_tokens,
                                                  qa=self._qa)
            if getattr(self, "_reasoner", None) is None:
                self._reasoner = AdaptiveReasoner()
            answerer, reasoner = self._answerer, self._reasoner
        result = answer_routed(question, user_id, store=self.store, answerer=answerer,
                               reasoner=reasoner, retriever=self.retriever,
                               router=answerer.router, lm=self.lm.lm,
                               count_tokens=self.lm.count_tokens, lock=self._lock,
                               route=route, conversation_id=conversation_id)
        self._store_evidence(user_id, result)
        result.run_id = record_verb(
            self.store, user_id, "answer", task=question, llm_calls=result.llm_calls,
            output={"answer": result.answer, "evidence": result.evidence},
            data={"path": result.path, "intent": result.intent, "route": route},
            began=began, lock=self._lock)
        return result

    def _store_evidence(self, user_id: str, result: RoutedAnswer) -> None:
        """Name each evidence turn of ``result`` by its store id, which :meth:`get` reads
        (the answerer cites turns by their ids within a conversation, ``D1:3``, which
        repeat across conversations); ``sources`` keep that id as ``turn_id``. Item ids
        and store ids stay as they are."""
        sources = {s.id: s for s in result.sources}
        evidence = []
        for ev in result.evidence:
            source = sources.get(ev)
            conv = source.conversation_id if source else result.conversation_id
            with self._lock:
                found = self.store.turns(user_id, conversation_id=conv, labels=[ev], limit=2)
            if len(found) != 1:  # not a turn's label, or one that names two turns
                evidence.append(ev)
                continue
            turn = found[0]
            evidence.append(turn.id)
            if source is not None:
                source.id, source.turn_id = turn.id, ev
                source.conversation_id = turn.conversation_id
                source.speaker = source.speaker or turn.speaker
        result.evidence = evidence

    def context(self, query: str, *, user_id: str, budget: int = 600,
                layers: Iterable[str] | None = None, conversation_id: str | None = None,
                settings: ContextSettings | None = None) -> MemoryContext:
        """The tenant's memory for ``query`` as one budgeted block to put in a prompt
        (seed 002's "Mode 1: auto-inject"), every line with its provenance. No LLM call.

        ``layers`` (default all): ``conversation`` (the turns and the facts, QA pairs
        and personas extracted from them, routed as ``answer`` routes), ``semantic``
        (facts and episodes read with :meth:`read`), ``procedures`` (read too),
        ``strategies`` (learned with :meth:`learn`), ``voe`` (the expectation
        :meth:`expect` left and the facts its surprises taught) and ``intentions``
        (fired, unresolved). What was said and what was read are shown only where they
        score at least ``settings.min_score`` (search's default cut, 0.1): a query
        nothing in memory answers gets none of their lines. Each layer with lines takes
        its share of ``budget`` (see
        :mod:`memstrata.packers.memory_context`); the block, headers included, is at
        most ``budget`` tokens by this memory's model's counter (about four characters a
        token without a model). Lines open with ``[id · speaker or source · date]``; the
        result's ``ids`` are every store id in the block (:meth:`get` reads each),
        ``layers`` what each layer packed, ``tokens`` the block's size. Writes nothing
        but a use of each procedure shown (as cognitive recall counts them).

        Raises:
            ValueError: a bad ``user_id`` or query, a ``budget`` that is not a whole
                number, an unknown layer.
        """
        from memstrata.memory.route import Router
        from memstrata.packers.memory_context import LAYERS, build_context, rough_tokens

        _check_id("user_id", user_id)
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, not {type(query).__name__}")
        _check_text("query", query, limit=MAX_QUERY_BYTES)
        budget = _count("budget", budget, 1_000_000)
        chosen = LAYERS if layers is None else tuple([layers] if isinstance(layers, str)
                                                     else layers)
        if conversation_id is not None:
            _check_id("conversation_id", conversation_id)
        count = self.lm.count_tokens if self.lm is not None else rough_tokens
        with self._lock:
            return build_context(self.store, user_id, query, budget=budget, layers=chosen,
                                 retriever=self.retriever, router=Router(self.store),
                                 count_tokens=count, settings=settings,
                                 conversation_id=conversation_id)

    def read(self, text: str, *, user_id: str, title: str | None = None,
             source: str | None = None, when: datetime | date | str | float | None = None,
             progress: Callable[[int], object] | None = None) -> ReadReport:
        """Read a document (an article, a tutorial, a report) into the tenant's cognitive
        memory, so :meth:`answer`, :meth:`context` and :meth:`search` find it beside what
        was said. No LLM call.

        It is buffered as a sensory observation, recorded as an episode ("read TITLE
        (SOURCE) on WHEN"), split into semantic facts (one a sentence, derived from the
        episode, ``similar_to``/``contradicts`` edges computed as each is written), a
        numbered list of steps becomes a procedure, and pending intentions whose keywords
        it holds fire (``memory.cognitive.reading``). ``when`` is the document's date
        (ISO text, Unix seconds, a date or a datetime); ``source`` who published it. A
        run record (program ``memory.read``, 0 LLM calls) names what was written.
        ``progress`` is called with 1 as each fact is written (each is compared with the
        nearest facts already held, so a long document takes seconds); the count to expect
        is ``len(memstrata.memory.cognitive.reading.sentences(text))``.

        Returns:
            The :class:`~memstrata.memory.cognitive.ReadReport`: the sensory, episode,
            fact and procedure ids and the intentions that fired.

        Raises:
            ValueError: a bad ``user_id``; empty text, text or a title or source that is
                not valid Unicode or longer than :data:`MAX_MESSAGE_BYTES`.
        """
        from datetime import date as day

        from memstrata.memory.cognitive import CognitiveMemory
        from memstrata.programs.verb_calls import record_verb, run_clock

        _check_id("user_id", user_id)
        if not isinstance(text, str) or not text.strip():
            raise ValueError("nothing to read: the text is empty")
        _check_text("text", text)
        for name, value in (("title", title), ("source", source)):
            if value is not None:
                _check_text(name, value, limit=4096)
        at = when if isinstance(when, day) or when is None else parse_time(when)
        began = run_clock()
        with self._lock:
            report = CognitiveMemory(self.store, user_id).read(
                text, title=title or "", source=source or "", when=at, progress=progress)
        record_verb(self.store, user_id, "read", task=title or source or text[:80],
                    llm_calls=0, output=report.model_dump(), began=began, lock=self._lock)
        return report

    def learn(self, run: Any, *, user_id: str, success: bool, task: str | None = None,
              used: Iterable[str] = (), rationale: str = "",
              method: Literal["llm", "trace"] | None = None,
              tags: Iterable[str] = ()) -> Lesson:
        """Distil a judged agent run into strategies (a success) or guardrails (a
        failure) that the next :meth:`context` shows in its ``strategies`` layer: the
        ReasoningBank loop for any agent, a ``dspy.ReAct`` over :meth:`tools` say.

        ``run`` is a ``dspy.Prediction`` of ``dspy.ReAct`` (its ``trajectory``; pass the
        ``task``, which a prediction does not carry), a run recorded in this store (its
        id or ``RunRecord``), a dict with ``trajectory`` (and ``task``, ``answer``), or
        the trajectory as text. ``success`` is your judgement of the run (a judge's or a
        check's; never the gold answer if the loop is to learn as it will be used).
        ``used`` are the strategy ids the run was shown (a :meth:`context`'s ``ids``):
        each counts a use, and a win when the run succeeded. New strategies are
        consolidated into the bank (merge, supersede, discard or add, each logged).

        LLM calls: one with ``method="llm"`` (the default with an LM; two on a parse
        retry), none with ``"trace"`` (the default without one: the run's answer, or what
        failed, is kept as it is). Counted in the run record (program ``memory.learn``).

        Raises:
            ValueError: a bad ``user_id``; no task; a run of no known form; ``"llm"``
                without an LM.
            ProgramParseError: the model's output did not parse after the retry.
        """
        from memstrata.programs.learning import learn_from
        from memstrata.programs.verb_calls import record_verb, run_clock

        _check_id("user_id", user_id)
        if task is not None:
            _check_text("task", task, limit=MAX_QUERY_BYTES)
        chosen = method or ("llm" if self.lm is not None else "trace")
        if chosen not in ("llm", "trace"):
            raise ValueError(f"method must be 'llm' or 'trace', not {method!r}")
        began = run_clock()
        lesson = learn_from(run, store=self.store, user_id=user_id, success=bool(success),
                            task=task, used=[str(i) for i in used], rationale=rationale,
                            method=chosen, handle=self.lm, tags=list(tags),
                            lock=self._lock)
        lesson.run_id = record_verb(
            self.store, user_id, "learn", task=lesson.task, llm_calls=lesson.llm_calls,
            output={"strategies": lesson.strategies, "success": lesson.success},
            data={"decisions": lesson.decisions, "dropped": lesson.dropped}, began=began,
            lock=self._lock)
        return lesson

    def expect(self, user_id: str, *, conversation_id: str | None = None,
               settings: VoESettings | None = None, predictor: Any = None) -> Expectation:
        """The violation-of-expectation loop's step for an app that brings its own model:
        call it after the assistant speaks (its messages stored with :meth:`add`).

        It checks the first user message said since the conversation's pending
        expectation against it (locally: a rapidfuzz ratio under the settings'
        ``fuzzy_threshold`` is a surprise), predicts the user's next move and the
        keywords of what would help answer them, and, after a surprise, distils in the
        same call what it taught into a fact with tags (kept in a ring buffer of
        ``max_facts`` per tenant). The new expectation replaces the pending one; the next
        :meth:`context` shows it and the facts its keywords match (layer ``voe``).
        :meth:`add` checks nothing and calls no model: a surprise is found and distilled
        here, and its fact reaches the context of the turn after. See
        :mod:`memstrata.programs.expectation`.

        LLM calls: one (two on a parse retry), counted in its run record (program
        ``memory.expect``). ``predictor`` is a (compiled) ``VoEPredictor`` to use.

        Raises:
            ModelSetupError: the memory was opened without an LM (a ``RuntimeError``).
            ValueError: a bad id, or a conversation with no turn yet.
            ProgramParseError: the model's output did not parse after the retry.
        """
        from memstrata.programs.expectation import expect
        from memstrata.programs.verb_calls import record_verb, run_clock

        _check_id("user_id", user_id)
        conv = conversation_id or DEFAULT_CONVERSATION
        _check_id("conversation_id", conv)
        if self.lm is None:
            raise ModelSetupError("expect needs an LM: Memory.open(path, lm=...)")
        began = run_clock()
        result = expect(self.store, user_id, conversation_id=conv, lm=self.lm.lm,
                        predictor=predictor, settings=settings, lock=self._lock)
        result.run_id = record_verb(
            self.store, user_id, "expect", task=f"expect in {conv}",
            llm_calls=result.llm_calls,
            output={"prediction": result.prediction, "fact": result.fact},
            data={"checked": result.checked.model_dump() if result.checked else None},
            began=began, lock=self._lock)
        return result

    def tool_session(self, user_id: str, *, agent_id: str | None = None) -> ToolSession:
        """The tool session :meth:`tools` binds for one tenant: its ``log`` holds every
        call (ids read, characters returned), ``bind(fn)`` adds a tool of one's own that
        is logged the same way, and ``handle_tools()`` are the tools :meth:`tools`
        returns, without the lock: they are not serialised with this memory's other
        calls, so use them where nothing else calls the memory meanwhile (an agent
        runner's single thread) and :meth:`tools` everywhere else. Its tools make no LLM call."""
        from memstrata.tools import ToolSession

        _check_id("user_id", user_id)
        return ToolSession(self.store, user_id, agent_id=agent_id, retriever=self.retriever)

    def tools(self, user_id: str, *, agent_id: str | None = None) -> list[Callable[..., Any]]:
        """The handle tools bound to one tenant (``mem_search``, ``mem_get``, ``ctx_*``,
        ...), each call serialised with this memory's other calls: ready for
        ``dspy.ReAct(signature, tools=...)`` or ``dspy.RLM``. The tools make no LLM call."""
        import functools

        session = self.tool_session(user_id, agent_id=agent_id)

        def locked(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def call(*args: Any, **kwargs: Any) -> Any:
                with self._lock:
                    return fn(*args, **kwargs)
            return call

        return [locked(fn) for fn in session.handle_tools()]

    # -- moving a tenant -------------------------------------------------------------------

    def export(self, user_id: str, path: str | Path) -> int:
        """Write everything the verbs wrote for the tenant as JSONL; returns the lines
        written. :meth:`import_` reads it back, ids and record times kept. No LLM call.

        The file holds the conversations (turns with their sessions and times), items of
        every kind (facts, personas; what :meth:`read` wrote: episodes, semantic facts,
        procedures, intentions; :meth:`learn`'s strategies; :meth:`expect`'s expectations
        and VoE facts) with their edges and earlier versions, blobs, the recorded runs
        with their steps (LLM calls included), the event log (the strategy bank's
        decisions) and the extraction jobs (a done job's fact events included). Not in
        it: what the store derives from those rows (search indexes, vectors: rebuilt on
        import), the lease of a running job (it is imported ``pending``), and API keys
        (a server's credentials). See :mod:`memstrata.formats.dump`.

        The file appears whole or not at all (written beside it, then renamed).

        Raises:
            ValueError: a bad ``user_id`` or an empty path; a path that is the store's own
                file (or its ``-wal``, ``-shm`` or ``-journal``) or another SQLite database,
                which the export would replace (nothing is written).
            OSError: ``path`` is a folder, or cannot be written (nothing is left behind).
        """
        from memstrata.formats.dump import export_tenant

        _check_id("user_id", user_id)
        with self._lock:
            return export_tenant(self.store, user_id, _file_path("path", path))

    def import_(self, path: str | Path | ExportFile, *,
                user_id: str | None = None) -> dict[str, int]:
        """Read a file written by :meth:`export` (into ``user_id``, or the tenant it was
        exported from), all or nothing, ids and record times (``updated_at`` too) as the
        file holds them. Returns counts of what was written per line type. No LLM call.

        ``path`` may also be the file already read by
        :func:`memstrata.formats.dump.read_export` (which checks every line without a
        store: the CLI reads a file before it opens one); it was bound to its tenant
        then, so ``user_id`` must be None or that tenant.

        Raises:
            ImportFormatError: a line that is not valid (the file and line named), or an
                id the store already holds.
            ValueError: a bad ``user_id``.
        """
        from memstrata.formats.dump import ExportFile, read_export, write_export

        if user_id is not None:
            _check_id("user_id", user_id)
        if isinstance(path, ExportFile):
            if user_id not in (None, path.user_id):
                raise ValueError(f"user_id: {user_id!r}, but the export was read into "
                                 f"{path.user_id!r}")
            export = path
        else:
            export = read_export(_file_path("path", path), user_id)
        _check_id("user_id", export.user_id)
        with self._lock:
            return write_export(self.store, export)

    def reembed(self, *, user_id: str,
                progress: Callable[[int], object] | None = None) -> ReembedReport:
        """Give every turn and item of the tenant without a vector of this memory's
        embedder one, so a store written with another embedder searches fully with this
        one (the first search of such a tenant warns: see
        :mod:`~memstrata.memory.reembed`). ``progress`` is called with the rows looked at
        after each batch. Vectors of other models stay. No LLM call.

        Raises:
            ValueError: a bad ``user_id``, or a memory opened with ``embedder=None``.
        """
        from memstrata.memory.reembed import reembed

        _check_id("user_id", user_id)
        embedder = self.store.embedder
        if embedder is None:
            raise ValueError("this memory was opened with embedder=None: there is no model "
                             "to embed with (open it with the embedder to use)")
        with self._lock:
            return reembed(self.store, user_id, embedder, progress=progress)

    def _owner(self, id: str, user_id: str | None) -> str | None:
        if not isinstance(id, str) or not id:
            raise ValueError("an id is a non-empty string")
        _check_text("id", id, limit=1024)
        owner = self.store.owner(id)
        if owner is None or (user_id is not None and owner != user_id):
            return None
        return owner


def _turn_event(m: Message, turn: Turn | None, reason: str | None) -> dict[str, Any]:
    """``add``'s event for one message (see its Returns)."""
    event: dict[str, Any] = {"id": turn.id if turn is not None else None,
                             "memory": m.content, "event": "ADD" if reason is None else "NONE",
                             "kind": "turn"}
    if reason is not None:
        event["reason"] = reason
    if reason in ("system", "tool", "role"):
        event["role"] = m.role
    if skipped := m.metadata.get(PARTS_SKIPPED):
        event[PARTS_SKIPPED] = skipped
    return event


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _row(node: Turn | Any) -> dict[str, Any]:
    """A turn or an item as ``get_all`` returns it (``node``: ``"turn"`` or ``"item"``)."""
    return {"node": "turn" if isinstance(node, Turn) else "item", **node.model_dump(mode="json")}


def _session_for(last: Turn | None, sessions: list[str], when: datetime) -> str:
    """The last turn's session, or a new one after a gap of ``SESSION_GAP``: the Nth
    session of a conversation is ``session_N`` (as an imported LoCoMo session N is)."""
    if last is not None and (last.event_time is None or when - last.event_time <= SESSION_GAP):
        return last.session_id
    return f"session_{len(sessions) + 1}"


def _check_id(name: str, value: Any) -> None:
    """Refuse an id that is not a non-blank string of at most 256 characters of valid
    Unicode without NUL (``name`` is the argument, named in the error)."""
    if not isinstance(value, str) or not value.strip() or len(value) > 256:
        raise ValueError(f"{name} must be a non-empty string of at most 256 characters")
    _check_text(name, value)


def _check_text(name: str, value: str, *, limit: int = MAX_MESSAGE_BYTES) -> None:
    """Refuse text that UTF-8 cannot encode (lone surrogates, from undecodable bytes),
    text with a NUL character (PostgreSQL stores none; SQLite would, and the backends
    would differ), and text of more than ``limit`` UTF-8 bytes."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not valid Unicode text: {exc.reason} at "
                         f"{exc.start}") from None
    if "\x00" in value:
        raise ValueError(f"{name} holds a NUL character (\\x00) at {value.index(chr(0))}")
    if size > limit:
        raise ValueError(f"{name} is {size:,} bytes of UTF-8; at most {limit:,} are taken")


def _check_json(name: str, value: Any) -> None:
    """Refuse metadata that cannot be stored the same on every backend and exported: not
    JSON (bytes, objects, NaN), a key or string that :func:`_check_text` refuses (a lone
    surrogate, a NUL), nesting deeper than :data:`MAX_METADATA_DEPTH`, or an object of
    more than :data:`MAX_METADATA_BYTES` as JSON. ``value`` is one object, or lists of
    them (each object is then checked on its own); the error names the key."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{name} must be JSON-serialisable: {type(exc).__name__}: "
                         f"{str(exc)[:100]}") from None
    # (node, where, level): level None while still in the lists that carry the objects.
    stack: list[tuple[Any, str, int | None]] = [(value, name, None)]
    while stack:
        node, where, level = stack.pop()
        if isinstance(node, str):
            _check_text(where, node, limit=MAX_METADATA_BYTES)
        elif level is None and isinstance(node, list | tuple):
            stack.extend((child, where, None) for child in node)
        elif isinstance(node, dict | list | tuple):
            if level is None:
                size = len(json.dumps(node, ensure_ascii=False).encode("utf-8", "surrogatepass"))
                if size > MAX_METADATA_BYTES:
                    raise ValueError(f"{where} is {size:,} bytes as JSON; at most "
                                     f"{MAX_METADATA_BYTES:,} are taken")
            level = (level or 0) + 1
            if level > MAX_METADATA_DEPTH:
                raise ValueError(f"{where} is nested more than {MAX_METADATA_DEPTH} levels "
                                 "deep")
            if isinstance(node, dict):
                for key, child in node.items():
                    label = f"{where}[{key!r}]"
                    if isinstance(key, str):
                        _check_text(f"{where}: key {key!r}", key, limit=MAX_METADATA_BYTES)
                    stack.append((child, label, level))
            else:
                stack.extend((child, f"{where}[{n}]", level) for n, child in enumerate(node))


def _check_record(record: ConversationRecord) -> None:
    """Refuse a record that :meth:`Memory.add` would refuse, naming where in it."""
    where = f"conversation {record.id!r}"
    try:
        _check_id("its id", record.id)
        for session in record.sessions:
            where = f"conversation {record.id!r}, session {session.id!r}"
            _check_id("its id", session.id)
            for n, m in enumerate(session.messages, 1):
                where = f"conversation {record.id!r}, session {session.id!r}, message {n}"
                _check_text("the message", m.speaker + m.content)
                _check_json("its metadata", m.metadata)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _check_kinds(name: str, kinds: Iterable[Any]) -> None:
    if unknown := [k for k in kinds if k not in KINDS]:
        raise ValueError(f"{name}: no kind {', '.join(map(repr, unknown))}; kinds: "
                         f"{', '.join(KINDS)}")


def _without_repeats(store: MemoryStore, user_id: str, conversation_id: str,
                     batches: list[tuple[str, list[Message], datetime | None]]
                     ) -> tuple[list[tuple[str, list[Message], datetime | None]], int, int]:
    """``batches`` without the messages that repeat a turn the conversation holds (the
    whole record read as one batch of ``add``), how many those were, and how many of
    the others a later import of the same record could not tell from new ones: with no
    timestamp and no source id, stored after turns that are not the record's own start
    (the re-sent-start rule then fails, and nothing else names them)."""
    flat = [m for _, msgs, _ in batches for m in msgs]
    if not flat:
        return batches, 0, 0
    # One turn past the record's length: a conversation longer than the record is not
    # the record's own start, whatever of it the record repeats.
    before = store.turns(user_id, conversation_id=conversation_id, limit=len(flat) + 1)
    same = add_rules.repeats(store, user_id, conversation_id, flat, before)
    start = next((n for n, turn in enumerate(before)
                  if n not in same or same[n].id != turn.id), len(before))
    blind = 0 if start == len(before) else sum(
        1 for p, m in enumerate(flat) if p not in same and m.timestamp is None
        and not m.metadata.get("source_id"))
    if not same:
        return batches, 0, blind
    out, position = [], 0
    for session_id, msgs, started in batches:
        kept = [m for p, m in enumerate(msgs, position) if p not in same]
        position += len(msgs)
        out.append((session_id, kept, started))
    return out, len(same), blind


def _count(name: str, value: Any, most: int) -> int:
    """``value`` as a whole number in ``[0, most]`` (clamped); ``ValueError`` naming the
    argument when it is not a whole number (``None``, ``inf``, ``nan``, ``2.5``, ``"3"``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{name} must be a whole number, not {value!r}")
    return max(0, min(int(value), most))


def _file_path(name: str, value: Any) -> Path:
    if not isinstance(value, str | Path) or not str(value).strip():
        raise ValueError(f"{name} must be a file path")
    _check_text(name, str(value), limit=4096)
    return Path(value).expanduser()


FILTER_KEYS = ("kinds", "speaker", "conversation_id", "start", "end")


def _filters(raw: dict[str, Any]) -> Filters:
    """``Filters`` from a dict of :data:`FILTER_KEYS`; times may be ISO text or Unix
    seconds. Raises ValueError naming the key that is unknown or of the wrong type."""
    if unknown := set(raw) - set(FILTER_KEYS):
        raise ValueError(f"unknown filter(s) {sorted(map(str, unknown))}; filters: "
                         f"{', '.join(FILTER_KEYS)}")
    kinds = raw.get("kinds")
    if isinstance(kinds, str):
        kinds = [kinds]
    if kinds is not None and not (isinstance(kinds, list | tuple)
                                  and all(isinstance(k, str) for k in kinds)):
        raise ValueError("filter 'kinds' must be a list of kind names")
    for key in ("speaker", "conversation_id"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ValueError(f"filter {key!r} must be a string")
    start, end = (parse_time(raw[key]) if raw.get(key) is not None else None
                  for key in ("start", "end"))
    return Filters(kinds=kinds, speaker=raw.get("speaker"),
                   conversation_id=raw.get("conversation_id"), start=start, end=end)


#: The compiled programs ``Memory`` can use, by name (see ``Memory.open``'s ``programs``).
MEMORY_PROGRAMS = ("qa", "extractor")


def _compiled_programs(files: dict[str, str | Path]) -> tuple[Any, dict[str, dict[str, str]]]:
    """The compiled ``QA`` of ``files`` (None without one), and each file's reference
    (every file's hash and program checked; the extractor is loaded where it is used)."""
    if not files:  # nothing to load: no DSPy import on this path
        return None, {}
    from memstrata.programs.compiled import load_program, program_ref

    if unknown := sorted(set(files) - set(MEMORY_PROGRAMS)):
        raise ValueError(f"programs: Memory uses no program {', '.join(unknown)}; it uses "
                         f"{', '.join(MEMORY_PROGRAMS)}")
    refs = {name: program_ref(path, name).model_dump() for name, path in files.items()}
    qa = load_program("qa", files["qa"]) if "qa" in files else None
    return qa, refs


def _handle(lm: Any) -> ModelHandle | None:
    """A metered ``ModelHandle`` from whatever ``Memory.open`` was given."""
    if lm is None:
        return None
    from memstrata.programs.lm import ModelHandle, setup_lm, wrap_lm

    if isinstance(lm, ModelHandle):
        return lm
    if isinstance(lm, str):
        return setup_lm(lm)
    return wrap_lm(lm)


__all__ = ["Memory"]
