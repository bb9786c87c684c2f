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
(``flush`` extracts a partial chunk). Every method takes the tenant (``user_id``) or an
id that names its tenant; nothing reads across tenants.

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

import json
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstrata import add_rules
from memstrata.formats.records import (
    PARTS_SKIPPED,
    ConversationRecord,
    Message,
    parse_time,
    to_messages,
)
from memstrata.memory import Filters, Hit, Retriever, Store, Turn
from memstrata.memory.models import ITEM_KINDS, Conversation, Edge, Session, utcnow
from memstrata.memory.retrieval import DEFAULT_MIN_SCORE
from memstrata.memory.store import node_type
from memstrata.memory.store.forget import scrubbing
from memstrata.memory.store.opener import open_store
from memstrata.memory.versions import Version

if TYPE_CHECKING:
    import dspy

    from memstrata.programs.answer import AnswerWithProvenance
    from memstrata.programs.ingest import IngestSettings
    from memstrata.programs.lm import ModelHandle

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


class Memory:
    """A tenant-scoped memory over one store; safe to share between threads.

    Build with :meth:`open`. ``lm`` is a :class:`~memstrata.programs.lm.ModelHandle`
    (or None: turns are stored and searched, nothing is extracted or answered).
    """

    def __init__(self, store: Store, *, lm: ModelHandle | None = None,
                 ingest: IngestSettings | None = None,
                 programs: dict[str, str | Path] | None = None) -> None:
        self.store = store
        self.lm = lm
        self.retriever = Retriever(store, store.embedder)
        self._ingest = ingest
        self._lock = threading.RLock()
        self._answerer: Any = None  # a PersonalAnswerer, built on the first answer
        self._qa, self.programs = _compiled_programs(programs or {})
        self._files = {name: str(path) for name, path in (programs or {}).items()}

    @classmethod
    def open(cls, path: str | Path = "memstrata.db", *, lm: str | dspy.BaseLM | ModelHandle
             | None = None, embedder: Any = "default",
             ingest: IngestSettings | None = None,
             programs: dict[str, str | Path] | None = None,
             durability: str = "normal") -> Memory:
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
            embedder: ``"default"`` (the static model shipped in the package), any
                ``Embedder``, or None (no dense channel).
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

        Raises:
            ValueError: a program this memory does not use, or a file that is not that
                program (or fails its hash check); a URL of a scheme memstrata does not
                serve (the message names the scheme, never the password); an unknown
                ``durability``. Nothing is opened then.
            StoreError: the file or the database cannot be opened (a folder that does not
                exist; an unreachable server or a refused login: the message names the
                server without its password; nothing is written).
            MissingExtraError: a URL without the ``postgres`` extra installed.
        """
        _compiled_programs(programs or {})  # a bad file fails before the store opens
        store = open_store(path, embedder=embedder,
                           durability=durability)  # type: ignore[arg-type]
        return cls(store, lm=_handle(lm), ingest=ingest, programs=programs)

    def close(self) -> None:
        """Close the store."""
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
        """Store messages as turns and, with an LM and ``infer``, extract their facts.

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
        ``timestamp`` and a turn of the conversation has that event time. A stored turn
        is repeated by at most one message of a batch. Any other message is new: a user
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
            infer: extract facts once the conversation's unextracted turns fill a chunk.
            skip_roles: roles not stored; default ``{"system", "developer", "tool",
                "function"}``.

        Returns:
            One event per message, in message order: ``{"id", "memory", "event": "ADD",
            "kind": "turn"}`` for a stored turn, or ``"event": "NONE"`` with ``"reason"``
            for one not stored: ``"duplicate"`` (``id`` is the turn it repeats),
            ``"system"`` or ``"tool"`` (its role, named in ``"role"``, is skipped;
            ``"role"`` for another role of ``skip_roles``), ``"no_text"`` (only parts that
            are not text) or ``"blank"`` (``id`` is None for these). An event whose
            message had parts not read names them in ``"parts_skipped"``. Then one event
            per proposed fact (``ADD``, ``UPDATE`` with ``previous``, or ``NONE`` when it
            was already known), with ``"kind": "fact"``.

        Raises:
            ValueError: bad messages (a refused content part: its message and type named),
                ids or ``skip_roles``; nothing is stored.
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
        with self._lock:
            outcomes = self._write_turns(user_id, agent_id, conv, session_id, msgs, when,
                                         metadata or {}, skip_roles=roles, dedupe=True)
            events = [_turn_event(m, turn, reason)
                      for m, (turn, reason) in zip(msgs, outcomes, strict=True)]
            if infer and self.lm is not None and any(r is None for _, r in outcomes):
                events += self._extract(user_id, conv, full_only=True)
        return events

    def flush(self, user_id: str, conversation_id: str | None = None) -> list[dict[str, Any]]:
        """Extract the facts of every conversation's (or one's) unextracted turns now,
        even a partial chunk. Returns the fact events; none without an LM."""
        if self.lm is None:
            return []
        with self._lock:
            convs = ([conversation_id] if conversation_id
                     else self.store.conversation_ids(user_id))
            return [e for c in convs for e in self._extract(user_id, c, full_only=False)]

    def _write(self, user_id: str, agent_id: str | None, conv: str, session_id: str | None,
               msgs: list[Message], when: datetime | None, metadata: dict[str, Any]
               ) -> list[Turn]:
        """Store ``msgs`` as new turns of ``conv`` (none deduplicated; messages of
        :data:`~memstrata.add_rules.DEFAULT_SKIP_ROLES` and without text are not stored);
        returns the turns written, in order."""
        outcomes = self._write_turns(user_id, agent_id, conv, session_id, msgs, when,
                                     metadata, skip_roles=add_rules.DEFAULT_SKIP_ROLES,
                                     dedupe=False)
        return [turn for turn, reason in outcomes if turn is not None and reason is None]

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
            turns = self._insert(user_id, agent_id, conv, session_id,
                                 [msgs[n] for n in fresh], when, metadata, now) if fresh else []
            for n, turn in zip(fresh, turns, strict=True):
                outcomes[n] = (turn, None)
            for p, turn in same.items():
                outcomes[kept[p]] = (turn, "duplicate")
        return outcomes

    def _insert(self, user_id: str, agent_id: str | None, conv: str, session_id: str | None,
                msgs: list[Message], when: datetime | None, metadata: dict[str, Any],
                now: datetime) -> list[Turn]:
        """Append ``msgs`` to ``conv`` as turns (in the caller's transaction), with their
        session, speakers and ``follows`` edges."""
        store = self.store
        header = store.conversation(user_id, conv)
        last = store.last_turn(user_id, conv)
        seq = last.seq + 1 if last else 0
        first_time = msgs[0].timestamp or when or now
        sessions = store.session_ids(user_id, conv)
        if session_id is None:
            session_id = _session_for(last, sessions, first_time)
        speakers = header.speakers if header else []
        new_speakers = [m.speaker for m in msgs if m.speaker not in speakers]
        if header is None or new_speakers:
            store.add_conversation(Conversation(
                id=conv, user_id=user_id, agent_id=agent_id,
                speakers=list(dict.fromkeys([*speakers, *new_speakers])),
                metadata=header.metadata if header else {}))
        if session_id not in sessions:
            store.add_session(Session(id=session_id, user_id=user_id, conversation_id=conv,
                                      index=len(sessions) + 1, started_at=first_time))
        turns = []
        for n, m in enumerate(msgs):
            extra = dict(m.metadata)
            source_id = str(extra.pop("source_id", "") or f"t{seq + n}")
            turns.append(Turn(
                user_id=user_id, agent_id=agent_id, conversation_id=conv,
                session_id=session_id, turn_id=source_id, seq=seq + n, speaker=m.speaker,
                text=m.content, event_time=m.timestamp or when or now, recorded_at=now,
                metadata={**metadata, **extra, **add_rules.role_field(m)}))
        ids = store.add_turns(turns)
        for turn, tid in zip(turns, ids, strict=True):
            turn.id = tid
        chain = ([last.id] if last and last.session_id == session_id else []) + ids
        store.add_edges(Edge(user_id=user_id, src=a, dst=b, relation="follows")
                        for a, b in pairwise(chain))
        return turns

    def _extract(self, user_id: str, conv: str, *, full_only: bool) -> list[dict[str, Any]]:
        from memstrata.programs.ingest import IngestSettings, ingest_turns

        settings = self._ingest or IngestSettings()
        header = self.store.conversation(user_id, conv)
        if header is None:
            return []
        done = int(header.metadata.get(EXTRACTED, -1))
        pending = self.store.turns(user_id, conversation_id=conv, after_seq=done)
        if not pending or (full_only and len(pending) < settings.chunking.max_turns):
            return []
        facts: list[Any] = []
        report = ingest_turns(self.store, user_id, conv, pending, self.lm,  # type: ignore[arg-type]
                              settings=settings, events=facts,
                              program=self._files.get("extractor"))
        if report.failed_chunks:
            raise RuntimeError(f"extraction failed for {len(report.failed_chunks)} chunk(s) "
                               f"of {conv!r}: {report.failed_chunks[0]} (turns kept; "
                               f"retry with flush)")
        # Re-read: turns added meanwhile may have grown the speakers list.
        header = self.store.conversation(user_id, conv) or header
        header.metadata[EXTRACTED] = pending[-1].seq
        self.store.add_conversation(header)
        return [{**e.model_dump(exclude_none=True), "kind": "fact"} for e in facts]

    def import_conversations(self, records: Iterable[ConversationRecord], *, user_id: str,
                             agent_id: str | None = None,
                             progress: Callable[[int], None] | None = None,
                             replace: bool = False) -> dict[str, int]:
        """Write whole conversations (from a format adapter) as turns, all or nothing.

        A conversation already stored under the same id keeps its turns: the record's
        sessions are appended to it (a session of the same id continues), as ``add``
        would. With ``replace=True`` its turns, sessions and index rows are deleted first
        (and scrubbed from the file, as :meth:`delete` does); the counts then include
        ``"replaced"``, the turns deleted. No extraction runs (``flush`` extracts
        afterwards). Messages without text are skipped, as by :meth:`add`. Returns counts
        of the conversations, sessions and turns written.

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
        replaced = 0
        with self._lock, self._scrub(user_id, replace), self.store.transaction():
            for record in records:
                if replace:
                    replaced += self.store.delete_conversation(user_id, record.id)
                written = 0
                for session in record.sessions:
                    turns = self._write(user_id, agent_id, record.id, session.id,
                                        session.messages, session.started_at, {})
                    written += len(turns)
                    counts["sessions"] += bool(turns)
                counts["turns"] += written
                counts["conversations"] += bool(written)
                if progress is not None:
                    progress(sum(len(s.messages) for s in record.sessions))
        return {**counts, "replaced": replaced} if replace else counts

    # -- reading -----------------------------------------------------------------------

    def search(self, query: str, *, user_id: str, k: int = 10,
               filters: Filters | dict[str, Any] | None = None,
               min_score: float = DEFAULT_MIN_SCORE) -> list[Hit]:
        """The ``k`` best turns and items of ``user_id`` for ``query`` (hybrid search),
        best first, leaving out hits that score under ``min_score``.

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
                kind that does not exist.
            TypeError: ``query`` is not a string, ``filters`` neither Filters nor a dict.
        """
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
        """A turn or item by id (as a dict with ``node`` and ``user_id``), or None.

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
        items of that kind. Each row has ``node`` (``"turn"`` or ``"item"``).

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
        with its record time (``recorded_at``, ``valid_to``) and event time."""
        with self._lock:
            owner = self._owner(id, user_id)
            return [] if owner is None else self.store.history(owner, id)

    # -- changing and forgetting --------------------------------------------------------

    def update(self, id: str, text: str, *, user_id: str | None = None) -> dict[str, Any]:
        """Give a turn or item new text as a new version (the old one is kept, closed by
        ``valid_to``; see :meth:`history`). Returns ``{"id", "memory", "event":
        "UPDATE", "previous"}``.

        Raises:
            KeyError: no such id (for this tenant).
            ValueError: empty text.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("the new text is empty")
        _check_text("the new text", text)
        with self._lock:
            owner = self._owner(id, user_id)
            if owner is None:
                raise KeyError(f"no memory {id!r}")
            if node_type(id) == "turn":
                old = self.store.turn(owner, id)
                self.store.update_turn(owner, id, text)
            else:
                old = self.store.get(owner, id)
                self.store.update(owner, id, text=text)
            return {"id": id, "memory": text, "event": "UPDATE",
                    "previous": old.text if old else None}

    def delete(self, id: str, *, user_id: str | None = None) -> bool:
        """Delete one turn or item with its versions, vectors, index rows and edges, and
        (a turn) the copies of its text in its neighbours' search context. True if it
        existed.

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
        Returns the rows deleted per table."""
        _check_id("user_id", user_id)
        with self._lock:
            deleted = self.store.forget_user(user_id)
            if self._answerer is not None:
                self._answerer.router.forget(user_id)
            # A local model's KV cache may still hold the tenant's prompts.
            engine = getattr(getattr(self.lm, "lm", None), "_engine_spec", None)
            if hasattr(engine, "clear_cache"):
                engine.clear_cache()
            return deleted

    # -- answering and tools ------------------------------------------------------------

    def answer(self, question: str, *, user_id: str, conversation_id: str | None = None
               ) -> AnswerWithProvenance:
        """Answer from the tenant's memory with the personal answerer: routed, checked for
        who-said-what, and returned with its evidence ids and why.

        Raises:
            RuntimeError: the memory was opened without an LM.
        """
        import dspy

        from memstrata.programs.answer import PersonalAnswerer

        _check_id("user_id", user_id)
        if self.lm is None:
            raise RuntimeError("answer needs an LM: Memory.open(path, lm=...)")
        with self._lock:
            if self._answerer is None:
                self._answerer = PersonalAnswerer(self.store, retriever=self.retriever,
                                                  count_tokens=self.lm.count_tokens,
                                                  qa=self._qa)
            with dspy.context(lm=self.lm.lm):
                out = self._answerer(question=question, user_id=user_id,
                                     conversation_id=conversation_id)
            return out.provenance

    def tools(self, user_id: str, *, agent_id: str | None = None) -> list[Callable[..., Any]]:
        """The handle tools bound to one tenant (``mem_search``, ``mem_get``, ``ctx_*``,
        ...), each call serialised with this memory's other calls: ready for
        ``dspy.ReAct(signature, tools=...)`` or ``dspy.RLM``."""
        import functools

        from memstrata.tools import ToolSession

        _check_id("user_id", user_id)
        session = ToolSession(self.store, user_id, agent_id=agent_id, retriever=self.retriever)

        def locked(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def call(*args: Any, **kwargs: Any) -> Any:
                with self._lock:
                    return fn(*args, **kwargs)
            return call

        return [locked(fn) for fn in session.handle_tools()]

    # -- moving a tenant -------------------------------------------------------------------

    def export(self, user_id: str, path: str | Path) -> int:
        """Write the tenant's conversations (turns with their sessions and times) and items
        as JSONL; returns the lines written. :meth:`import_` reads it back.

        The file appears whole or not at all (written beside it, then renamed).

        Raises:
            ValueError: a bad ``user_id`` or an empty path.
            OSError: ``path`` is a folder, or cannot be written (nothing is left behind).
        """
        from memstrata.formats.dump import export_tenant

        _check_id("user_id", user_id)
        with self._lock:
            return export_tenant(self.store, user_id, _file_path("path", path))

    def import_(self, path: str | Path, *, user_id: str | None = None) -> dict[str, int]:
        """Read a file written by :meth:`export` (into ``user_id``, or the tenant it was
        exported from), all or nothing. Returns counts of what was written.

        Raises:
            ImportFormatError: a line that is not valid (the file and line named).
            ValueError: a bad ``user_id``.
        """
        from memstrata.formats.dump import import_tenant

        if user_id is not None:
            _check_id("user_id", user_id)
        with self._lock:
            return import_tenant(self.store, _file_path("path", path), user_id)

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
    """The last turn's session, or a new one after a gap of ``SESSION_GAP``."""
    if last is not None and (last.event_time is None or when - last.event_time <= SESSION_GAP):
        return last.session_id
    return f"s{len(sessions) + 1}"


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
    times = {key: parse_time(raw[key]) if raw.get(key) is not None else None
             for key in ("start", "end")}
    return Filters(kinds=kinds, speaker=raw.get("speaker"),
                   conversation_id=raw.get("conversation_id"), **times)


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
