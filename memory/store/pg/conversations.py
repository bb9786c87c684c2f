"""Conversations, sessions and turns on PostgreSQL, with the embeddings every write keeps.

Holds ``PgConversations`` (the SQLite ``ConversationStore``'s methods, same contracts) and
the embedding writes (``set_embeddings``: float32 bytes in a ``bytea`` column, as on
SQLite, which ``search.py`` reads back as a tenant's matrix, cached; where the database has
pgvector's ``embeddings.vec`` (migration 6), the same values in it too, which
``search.py``'s ``dense_refs`` ranks in SQL).

Differences from SQLite: the lexical index rows are written by ``lexical.py``'s helpers
(``_index_turns``, ``_unindex_turn``, ``_unindex_conversation``, under the tenant's write
lock); ``= ANY(%s)`` with one array in place of chunks of ``?``; ``LIMIT NULL`` for "no
limit"; ``update_turn`` and ``delete_turn`` lock the turn's row (``FOR UPDATE``) where
SQLite relies on its single writer, so a version's number and the read-then-write stay
consistent under concurrent writers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from psycopg.types.json import Jsonb

from ... import text as textmod
from ...locking import stored_value
from ...models import Conversation, Session, Turn, utcnow, with_caption
from ..rows import TURN_PREFIX, _dt, _new_id, _ts
from ..shared import EmbeddingWrites
from ..vectors import long_passages
from .connection import PgConnection


class PgConversations(PgConnection, EmbeddingWrites):
    """Conversations, sessions, turns and embeddings (see the module)."""

    if TYPE_CHECKING:
        # The search index's upkeep, from ``PgLexical`` (every store combines the two).
        def _index_turns(self, turns: Sequence[Turn]) -> None: ...

        def _unindex_turn(self, turn: Turn, rowid: int) -> None: ...

        def _unindex_conversation(self, user_id: str, conversation_id: str) -> None: ...

    def add_conversation(self, conv: Conversation) -> None:
        """Insert or replace a conversation's header row (its insertion order kept)."""
        self._exec(
            conv.user_id,
            "INSERT INTO conversations (id, user_id, agent_id, title, speakers, metadata,"
            " recorded_at) VALUES (%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (user_id, id) DO UPDATE"
            " SET agent_id = excluded.agent_id, title = excluded.title,"
            " speakers = excluded.speakers, metadata = excluded.metadata,"
            " recorded_at = excluded.recorded_at",
            (conv.id, conv.user_id, conv.agent_id, conv.title, Jsonb(conv.speakers),
             Jsonb(conv.metadata), _ts(conv.recorded_at or utcnow())))

    def conversation(self, user_id: str, conversation_id: str) -> Conversation | None:
        """A conversation's header row, or None."""
        rows = self._q(user_id, "SELECT * FROM conversations WHERE user_id = %s AND id = %s",
                       (user_id, conversation_id))
        return None if not rows else Conversation(
            id=rows[0]["id"], user_id=user_id, agent_id=rows[0]["agent_id"],
            title=rows[0]["title"], speakers=rows[0]["speakers"],
            metadata=rows[0]["metadata"])

    def conversation_ids(self, user_id: str) -> list[str]:
        """The ids of a tenant's conversations, sorted."""
        return [r[0] for r in self._rows(
            user_id, "SELECT id FROM conversations WHERE user_id = %s ORDER BY id", (user_id,))]

    def session_ids(self, user_id: str, conversation_id: str) -> list[str]:
        """The ids of a conversation's sessions, in session order."""
        return [r[0] for r in self._rows(
            user_id, "SELECT id FROM sessions WHERE user_id = %s AND conversation_id = %s"
            " ORDER BY idx", (user_id, conversation_id))]

    def delete_conversation(self, user_id: str, conversation_id: str) -> int:
        """Delete a conversation's turns (with their vectors, edges and versions), sessions
        and header. Items derived from it are kept. Returns the number of turns deleted."""
        with self.transaction():
            self._unindex_conversation(user_id, conversation_id)
            ids = [r[0] for r in self._rows(
                user_id, "DELETE FROM turns WHERE user_id = %s AND conversation_id = %s"
                " RETURNING id", (user_id, conversation_id))]
            if ids:
                self._forget_nodes(user_id, ids)
            self._exec(user_id, "DELETE FROM sessions WHERE user_id = %s AND"
                       " conversation_id = %s", (user_id, conversation_id))
            self._exec(user_id, "DELETE FROM conversations WHERE user_id = %s AND id = %s",
                       (user_id, conversation_id))
        return len(ids)

    def _forget_nodes(self, user_id: str, ids: list[str]) -> None:
        """Delete the vectors, edges and kept versions of deleted turns or items."""
        self._exec(user_id, "DELETE FROM embeddings WHERE user_id = %s AND node_id = ANY(%s)",
                   (user_id, ids))
        self._exec(user_id, "DELETE FROM edges WHERE user_id = %s AND (src = ANY(%s) OR"
                   " dst = ANY(%s))", (user_id, ids, ids))
        self._exec(user_id, "DELETE FROM versions WHERE user_id = %s AND node_id = ANY(%s)",
                   (user_id, ids))

    def add_session(self, session: Session) -> None:
        """Insert or replace a session row."""
        self._exec(
            session.user_id,
            "INSERT INTO sessions (id, user_id, conversation_id, idx, started_at, metadata)"
            " VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT (user_id, conversation_id, id) DO UPDATE"
            " SET idx = excluded.idx, started_at = excluded.started_at,"
            " metadata = excluded.metadata",
            (session.id, session.user_id, session.conversation_id, session.index,
             _ts(session.started_at), Jsonb(session.metadata)))

    def add_turns(self, turns: Sequence[Turn], *, vectors: np.ndarray | None = None
                  ) -> list[str]:
        """Insert turns (embedded); returns their ids. ``vectors`` as on SQLite."""
        now = _ts(utcnow())
        ids = [t.id or _new_id(TURN_PREFIX) for t in turns]
        embedder = self.embedder
        if vectors is None and embedder is not None and turns:
            vectors = embedder.encode(self.contextual_texts(turns))
        with self.transaction():
            for user in dict.fromkeys(t.user_id for t in turns):  # RLS: one tenant at a time
                self._many(user, "INSERT INTO turns (id, user_id, agent_id, conversation_id,"
                           " session_id, turn_id, seq, speaker, text, event_time, recorded_at,"
                           " metadata) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                           [(i, t.user_id, t.agent_id, t.conversation_id, t.session_id,
                             t.turn_id, t.seq, t.speaker, t.text, _ts(t.event_time),
                             _ts(t.recorded_at) or now, Jsonb(t.metadata))
                            for i, t in zip(ids, turns, strict=True) if t.user_id == user])
            self._index_turns(turns)
            if vectors is not None and embedder is not None:
                self._put_vectors([t.user_id for t in turns], ids, vectors, embedder.name)
        return ids

    def turns(
        self,
        user_id: str,
        *,
        conversation_id: str | None = None,
        ids: Sequence[str] | None = None,
        limit: int | None = None,
        after_seq: int | None = None,
        newest: bool = False,
        offset: int = 0,
        labels: Sequence[str] | None = None,
    ) -> list[Turn]:
        """A tenant's turns in conversation order, optionally by conversation, store ids or
        ``labels`` (the conversation's own turn ids, ``Turn.turn_id``: ``D1:3``), only
        those after ``after_seq`` in their conversation; ``newest``: last recorded first."""
        query = "SELECT * FROM turns WHERE user_id = %s"
        args: list[Any] = [user_id]
        if conversation_id is not None:
            query += " AND conversation_id = %s"
            args.append(conversation_id)
        if after_seq is not None:
            query += " AND seq > %s"
            args.append(after_seq)
        if ids is not None:
            query += " AND id = ANY(%s)"
            args.append(list(ids))
        if labels is not None:
            query += " AND turn_id = ANY(%s)"
            args.append(list(labels))
        query += (" ORDER BY recorded_at DESC, rowid DESC" if newest
                  else " ORDER BY conversation_id, seq")
        if limit is not None or offset:
            query += " LIMIT %s OFFSET %s"
            args += [None if limit is None else int(limit), int(offset)]
        return [self._turn(r) for r in self._q(user_id, query, args)]

    def turn(self, user_id: str, turn_id: str) -> Turn | None:
        """One turn of the tenant by its store id, or None."""
        found = self.turns(user_id, ids=[turn_id])
        return found[0] if found else None

    def last_turn(self, user_id: str, conversation_id: str) -> Turn | None:
        """The latest turn of a conversation (highest ``seq``), or None."""
        rows = self._q(user_id, "SELECT * FROM turns WHERE user_id = %s AND conversation_id = %s"
                       " ORDER BY seq DESC LIMIT 1", (user_id, conversation_id))
        return self._turn(rows[0]) if rows else None

    def update_turn(self, user_id: str, turn_id: str, text: str) -> Turn:
        """Replace a turn's text, keeping the old version (see :meth:`history`); its vector
        and its successor's are rewritten. Raises ``KeyError`` when the tenant has no
        such turn."""
        now = utcnow()
        with self.transaction():
            # The row lock first: a concurrent update of this turn waits here, so the
            # version kept below is the one it replaces and its number is not taken twice.
            rows = self._q(user_id, "SELECT * FROM turns WHERE user_id = %s AND id = %s"
                           " FOR UPDATE", (user_id, turn_id))
            if not rows:
                raise KeyError(f"no turn {turn_id!r} for user {user_id!r}")
            if not text.strip():
                raise ValueError("a turn's text cannot be empty")
            current = self._turn(rows[0])
            if text == current.text:
                return current
            new = current.model_copy(update={"text": text})
            self._keep(user_id, turn_id, current.model_dump(mode="json"),
                       rows[0]["updated_at"] or rows[0]["recorded_at"], _ts(now) or "")
            self._exec(user_id, "UPDATE turns SET text = %s, updated_at = %s WHERE rowid = %s",
                       (text, _ts(now), rows[0]["rowid"]))
            self._index_turns([new])
            self._reembed([new, *self._next_turn(new)])
        return new

    def delete_turn(self, user_id: str, turn_id: str) -> bool:
        """Delete one turn with its vectors, edges and versions (the turn after it is
        re-embedded without it). True if it existed."""
        with self.transaction():
            rows = self._q(user_id, "DELETE FROM turns WHERE user_id = %s AND id = %s"
                           " RETURNING *", (user_id, turn_id))
            if not rows:
                return False
            self._forget_nodes(user_id, [turn_id])
            self._unindex_turn(self._turn(rows[0]), rows[0]["rowid"])
            self._reembed(self._next_turn(self._turn(rows[0])))
        return True

    def contextual_texts(self, turns: Sequence[Turn]) -> list[str]:
        """What to embed for each turn: the turn before it in its session, then the turn."""
        return [
            f"{prev}\n{t.search_text()}" if prev else t.search_text()
            for prev, t in zip(self._previous_texts(turns), turns, strict=True)
        ]

    def _previous_texts(self, turns: Sequence[Turn]) -> list[str]:
        """The text of the turn before each turn in its session ("" for a session's first)."""
        out: list[str] = []
        last: dict[tuple[str, str, str], tuple[int, str]] = {}
        with self._tx():
            for t in turns:
                key = (t.user_id, t.conversation_id, t.session_id)
                if key in last and last[key][0] < t.seq:
                    out.append(last[key][1])
                else:
                    rows = self._rows(
                        t.user_id, "SELECT speaker, text, metadata FROM turns WHERE user_id = %s"
                        " AND conversation_id = %s AND session_id = %s AND seq < %s"
                        " ORDER BY seq DESC LIMIT 1",
                        (t.user_id, t.conversation_id, t.session_id, t.seq))
                    said = with_caption(rows[0][1], rows[0][2]) if rows else ""
                    out.append(textmod.nearest(f"{rows[0][0]}: {said}", end=True)
                               if rows else "")
                last[key] = (t.seq, textmod.nearest(t.search_text(), end=True))
        return out

    def _next_turn(self, turn: Turn) -> list[Turn]:
        """The turn after ``turn`` in its session (its embedding reads ``turn``'s text)."""
        rows = self._q(turn.user_id, "SELECT * FROM turns WHERE user_id = %s AND"
                       " conversation_id = %s AND session_id = %s AND seq > %s ORDER BY seq"
                       " LIMIT 1", (turn.user_id, turn.conversation_id, turn.session_id,
                                    turn.seq))
        return [self._turn(r) for r in rows]

    def _reembed(self, turns: list[Turn]) -> None:
        embedder = self.embedder
        if embedder is not None and turns:
            self._put_vectors([t.user_id for t in turns], [t.id for t in turns],
                              embedder.encode(self.contextual_texts(turns)), embedder.name)

    @staticmethod
    def _turn(r: dict[str, Any]) -> Turn:
        with stored_value(f"turn {r.get('id')}"):
            return Turn(
                id=r["id"], user_id=r["user_id"], agent_id=r["agent_id"],
                conversation_id=r["conversation_id"], session_id=r["session_id"],
                turn_id=r["turn_id"], seq=r["seq"], speaker=r["speaker"], text=r["text"],
                event_time=_dt(r["event_time"]), recorded_at=_dt(r["recorded_at"]),
                metadata=r["metadata"],
            )

    # embeddings
    _vec: bool | None = None  # see _vec_column

    def _vec_column(self) -> bool:
        """Whether vectors are ranked in SQL: ``embeddings.vec`` exists (migration 6, where
        the server has pgvector) and is of the ``vector`` type the store's role resolves.

        Read once per store, at its first vector write or dense search (one catalog query).
        """
        if self._vec is None:
            self._vec = bool(self._rows(
                None, "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid ="
                " to_regclass('embeddings') AND attname = 'vec' AND NOT attisdropped"
                " AND atttypid = to_regtype('vector'))")[0][0])
        return self._vec

    def _put_vectors(self, users: Sequence[str], ids: Sequence[str], vectors: np.ndarray,
                     model: str) -> None:
        """Write one vector per node (replacing old ones); ``users`` is each node's tenant.

        The float32 bytes always; with pgvector, the same values in ``vec`` too."""
        vectors = np.asarray(vectors, dtype=np.float32)
        rows = list(zip(users, ids, vectors, strict=True))
        if self._vec_column():
            for user in dict.fromkeys(users):
                self._many(user, "INSERT INTO embeddings (node_id, model, user_id, dim, vector,"
                           " vec) VALUES (%s,%s,%s,%s,%s,%s::vector) ON CONFLICT (node_id, model)"
                           " DO UPDATE SET user_id = excluded.user_id, dim = excluded.dim,"
                           " vector = excluded.vector, vec = excluded.vec",
                           [(i, model, u, vectors.shape[1], v.tobytes(), vector_text(v))
                            for u, i, v in rows if u == user])
        else:
            for user in dict.fromkeys(users):
                self._many(user, "INSERT INTO embeddings (node_id, model, user_id, dim,"
                           " vector) VALUES (%s,%s,%s,%s,%s) ON CONFLICT (node_id, model) DO"
                           " UPDATE SET user_id = excluded.user_id, dim = excluded.dim,"
                           " vector = excluded.vector",
                           [(i, model, u, vectors.shape[1], v.tobytes())
                            for u, i, v in rows if u == user])
        self._put_passages(users, ids, model)

    def _put_passages(self, users: Sequence[str], ids: Sequence[str], model: str) -> None:
        """The long nodes' passage vectors, one row each under the passage model (no
        ``vec``: they are ranked in NumPy), and none for the others (as on SQLite,
        ``vectors.long_passages``)."""
        found = long_passages(self, users, ids, model)
        if found is None:
            return
        name, vectors, tenant = found
        for user in dict.fromkeys(users):
            short = [i for u, i in zip(users, ids, strict=True) if u == user and i not in vectors]
            if short:
                self._exec(user, "DELETE FROM embeddings WHERE user_id = %s AND model = %s AND"
                           " node_id = ANY(%s)", (user, name, short))
            mine = [(i, name, user, v.shape[1], v.tobytes()) for i, v in vectors.items()
                    if tenant[i] == user]
            if mine:
                self._many(user, "INSERT INTO embeddings (node_id, model, user_id, dim, vector)"
                           " VALUES (%s,%s,%s,%s,%s) ON CONFLICT (node_id, model) DO UPDATE SET"
                           " user_id = excluded.user_id, dim = excluded.dim,"
                           " vector = excluded.vector", mine)

    def _keep(self, user_id: str, node_id: str, node: dict[str, Any],
              recorded_at: str | None, now: str) -> None:
        """Close the current version of ``node_id`` into ``versions`` (see the SQLite
        ``versions.keep``). The caller holds the node's row lock or the tenant's write
        lock, so the count that numbers it cannot be read by a concurrent writer too."""
        count = self._rows(user_id, "SELECT count(*) FROM versions WHERE user_id = %s AND"
                           " node_id = %s", (user_id, node_id))[0][0]
        self._exec(user_id, "INSERT INTO versions (user_id, node_id, version, event, snapshot,"
                   " recorded_at, valid_to) VALUES (%s,%s,%s,%s,%s,%s,%s)",
                   (user_id, node_id, count + 1, "ADD" if count == 0 else "UPDATE",
                    Jsonb(node), recorded_at or now, now))


def vector_text(vector: np.ndarray) -> str | None:
    """One vector as pgvector's text form, ``'[x,y,...]'``, each float32 value exactly; None
    where pgvector cannot hold it (a value not finite, no dimension or over 16,000)."""
    values = np.asarray(vector, dtype=np.float32)
    if not 0 < values.size <= 16_000 or not np.isfinite(values).all():
        return None
    # repr of a float32 widened to a Python float: pgvector's strtof reads back the same value.
    return "[" + ",".join(map(repr, values.tolist())) + "]"
