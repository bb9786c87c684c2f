"""Conversations, sessions and turns: writing, reading in order, editing and deleting one
turn, and the full-text rows (body and neighbours' context) each turn has.

Holds ``ConversationStore``.

SQLite-specific: the ``turns_fts`` FTS5 rows written, rewritten and deleted by rowid
(``_index_turns``, ``update_turn``, ``delete_turn``, ``delete_conversation``; PostgreSQL
would keep ``tsvector`` columns of body and context), with the tenant token written into
the indexed text; ``touched`` rowids for the posting-list row lengths; ``self.db[...].upsert``
(sqlite_utils); ``LIMIT -1`` for "no limit"; rowids. ``delete_conversation`` and
``delete_turn`` delete their turns' embeddings and edges themselves."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import text as textmod
from ..locking import stored_json, stored_value
from ..models import Conversation, Session, Turn, utcnow, with_caption
from . import versions as versionsmod
from .rows import TURN_PREFIX, _dt, _new_id, _ts, tenant_token
from .vectors import VectorStore


class ConversationStore(VectorStore):
    """Conversations, sessions and turns (see the module)."""

    def add_conversation(self, conv: Conversation) -> None:
        """Insert or replace a conversation's header row."""
        with self.transaction():
            self.db.table("conversations").upsert(
                {
                    "id": conv.id, "user_id": conv.user_id, "agent_id": conv.agent_id,
                    "title": conv.title, "speakers": json.dumps(conv.speakers),
                    "metadata": json.dumps(conv.metadata),
                    "recorded_at": _ts(conv.recorded_at or utcnow()),
                },
                pk=("user_id", "id"),
            )

    def conversation(self, user_id: str, conversation_id: str) -> Conversation | None:
        """A conversation's header row, or None."""
        rows = self._q("SELECT * FROM conversations WHERE user_id = ? AND id = ?",
                       (user_id, conversation_id))
        return None if not rows else Conversation(
            id=rows[0]["id"], user_id=user_id, agent_id=rows[0]["agent_id"],
            title=rows[0]["title"],
            speakers=stored_json(rows[0]["speakers"], f"conversation {conversation_id}", list),
            metadata=stored_json(rows[0]["metadata"], f"conversation {conversation_id}", dict))

    def conversation_ids(self, user_id: str) -> list[str]:
        """The ids of a tenant's conversations, sorted."""
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM conversations WHERE user_id = ? ORDER BY id", (user_id,))]

    def session_ids(self, user_id: str, conversation_id: str) -> list[str]:
        """The ids of a conversation's sessions, in session order."""
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM sessions WHERE user_id = ? AND conversation_id = ? ORDER BY idx",
            (user_id, conversation_id))]

    def delete_conversation(self, user_id: str, conversation_id: str) -> int:
        """Delete a conversation's turns (with their index rows, vectors and edges), sessions
        and header. Items derived from it are kept. Returns the number of turns deleted."""
        with self.transaction():
            rows = self.conn.execute(
                "SELECT rowid, id FROM turns WHERE user_id = ? AND conversation_id = ?",
                (user_id, conversation_id),
            ).fetchall()
            for chunk in (rows[i : i + 500] for i in range(0, len(rows), 500)):
                marks = ",".join("?" * len(chunk))
                rowids, ids = [r[0] for r in chunk], [r[1] for r in chunk]
                self.changing("turn", rowids)
                self.conn.execute(f"DELETE FROM turns_fts WHERE rowid IN ({marks})", rowids)
                self.conn.execute(f"DELETE FROM embeddings WHERE node_id IN ({marks})", ids)
                self.conn.execute(
                    f"DELETE FROM edges WHERE user_id = ? AND (src IN ({marks}) OR dst IN"
                    f" ({marks}))", [user_id, *ids, *ids],
                )
                self.conn.execute(f"DELETE FROM turns WHERE rowid IN ({marks})", rowids)
                versionsmod.forget(self, user_id, ids)
            self.conn.execute(
                "DELETE FROM sessions WHERE user_id = ? AND conversation_id = ?",
                (user_id, conversation_id),
            )
            self.conn.execute(
                "DELETE FROM conversations WHERE user_id = ? AND id = ?", (user_id, conversation_id)
            )
        return len(rows)

    def add_session(self, session: Session) -> None:
        """Insert or replace a session row."""
        with self.transaction():
            self.db.table("sessions").upsert(
                {
                    "id": session.id, "user_id": session.user_id,
                    "conversation_id": session.conversation_id, "idx": session.index,
                    "started_at": _ts(session.started_at),
                    "metadata": json.dumps(session.metadata),
                },
                pk=("user_id", "conversation_id", "id"),
            )

    def add_turns(self, turns: Sequence[Turn], *, vectors: np.ndarray | None = None
                  ) -> list[str]:
        """Insert turns (indexed for full-text search and embedded); returns their ids.

        ``vectors`` (one row per turn, from :meth:`contextual_texts` encoded by
        ``self.embedder``) skips encoding here, e.g. when it was done before a long
        transaction opened.
        """
        now = _ts(utcnow())
        ids = [t.id or _new_id(TURN_PREFIX) for t in turns]
        embedder = self.embedder
        if vectors is None and embedder is not None and turns:
            vectors = embedder.encode(self.contextual_texts(turns))
        rows = [
            (i, t.user_id, t.agent_id, t.conversation_id, t.session_id, t.turn_id, t.seq,
             t.speaker, t.text, _ts(t.event_time), _ts(t.recorded_at) or now,
             json.dumps(t.metadata))
            for i, t in zip(ids, turns, strict=True)
        ]
        with self.transaction():
            self.conn.executemany(
                "INSERT INTO turns (id, user_id, agent_id, conversation_id, session_id, turn_id,"
                " seq, speaker, text, event_time, recorded_at, metadata)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            self._index_turns(turns, set(ids))
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
        # With ids, "+user_id" keeps the planner on the unique id index (see nodes()).
        tenant = "user_id" if ids is None else "+user_id"
        sql = f"SELECT * FROM turns WHERE {tenant} = ?"
        args: list[Any] = [user_id]
        if conversation_id is not None:
            sql += " AND conversation_id = ?"
            args.append(conversation_id)
        if after_seq is not None:
            sql += " AND seq > ?"
            args.append(after_seq)
        if ids is not None:
            sql += f" AND id IN ({','.join('?' * len(ids))})"
            args += list(ids)
        if labels is not None:
            sql += f" AND turn_id IN ({','.join('?' * len(labels))})"
            args += list(labels)
        sql += (" ORDER BY recorded_at DESC, rowid DESC" if newest
                else " ORDER BY conversation_id, seq")
        if limit is not None or offset:
            sql += f" LIMIT {-1 if limit is None else int(limit)} OFFSET {int(offset)}"
        return [self._turn(r) for r in self._q(sql, args)]

    def turn(self, user_id: str, turn_id: str) -> Turn | None:
        """One turn of the tenant by its store id, or None."""
        found = self.turns(user_id, ids=[turn_id])
        return found[0] if found else None

    def last_turn(self, user_id: str, conversation_id: str) -> Turn | None:
        """The latest turn of a conversation (highest ``seq``), or None."""
        rows = self._q("SELECT * FROM turns WHERE user_id = ? AND conversation_id = ?"
                       " ORDER BY seq DESC LIMIT 1", (user_id, conversation_id))
        return self._turn(rows[0]) if rows else None

    def update_turn(self, user_id: str, turn_id: str, text: str) -> Turn:
        """Replace a turn's text, keeping the old version (see :meth:`history`).

        The turn is re-indexed and re-embedded, and so is the context its neighbours
        carry. Raises ``KeyError`` when the tenant has no such turn.
        """
        now = utcnow()
        with self.transaction():
            # Read under the write lock: a version kept from a read taken before another
            # process's update would drop that update from the history.
            current = self.turn(user_id, turn_id)
            if current is None:
                raise KeyError(f"no turn {turn_id!r} for user {user_id!r}")
            if not text.strip():
                raise ValueError("a turn's text cannot be empty")
            new = current.model_copy(update={"text": text})
            rowid, recorded, updated = self.conn.execute(
                "SELECT rowid, recorded_at, updated_at FROM turns WHERE id = ?",
                (turn_id,)).fetchone()
            if text == current.text:
                return current
            versionsmod.keep(self, user_id, turn_id, current.model_dump(mode="json"),
                             updated or recorded, _ts(now) or "")
            self.conn.execute("UPDATE turns SET text = ?, updated_at = ? WHERE rowid = ?",
                              (text, _ts(now), rowid))
            self.changing("turn", [rowid])
            self.conn.execute("DELETE FROM turns_fts WHERE rowid = ?", (rowid,))
            self._index_turns([new], {turn_id})
            self._reembed([new, *self._next_turn(new)])
        return new

    def delete_turn(self, user_id: str, turn_id: str) -> bool:
        """Delete one turn with its index row, vectors, edges and versions; its
        neighbours' context is rebuilt without it. True if it existed."""
        with self.transaction():
            # Read under the write lock: another process may delete or change the turn
            # between a read outside the transaction and the writes.
            current = self.turn(user_id, turn_id)
            if current is None:
                return False
            rowid = self.conn.execute("SELECT rowid FROM turns WHERE id = ?",
                                      (turn_id,)).fetchone()[0]
            self.changing("turn", [rowid])
            self.conn.execute("DELETE FROM turns_fts WHERE rowid = ?", (rowid,))
            self.conn.execute("DELETE FROM embeddings WHERE node_id = ?", (turn_id,))
            self.conn.execute("DELETE FROM edges WHERE user_id = ? AND (src = ? OR dst = ?)",
                              (user_id, turn_id, turn_id))
            versionsmod.forget(self, user_id, [turn_id])
            self.conn.execute("DELETE FROM turns WHERE rowid = ?", (rowid,))
            before = self._q(
                "SELECT * FROM turns WHERE user_id = ? AND conversation_id = ? AND"
                " session_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1",
                (user_id, current.conversation_id, current.session_id, current.seq))
            # Refresh the context of the turns on either side of the gap, through the turn
            # before it or, when the session's first turn went, the turn after it (whose
            # context would otherwise keep the deleted text searchable).
            beside = [self._turn(before[0])] if before else self._next_turn(current)
            if beside:
                self._index_turns(beside, set())
            self._reembed(self._next_turn(current))
        return True

    def _index_turns(self, turns: Sequence[Turn], new_ids: set[str]) -> None:
        """Write the FTS rows of new turns and refresh their stored neighbours' context.

        A turn's ``context`` column holds the turns just before and after it in its
        session (the question that prompted an answer, the answer a question got). A new
        turn changes the context of the stored turn on either side of it, so each touched
        session is read from two turns before the new ones to two turns after.
        """
        groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for t in turns:
            groups[(t.user_id, t.conversation_id, t.session_id)].append(t.seq)
        inserts, updates = [], []
        for (user, conv, session), seqs in groups.items():
            lo, hi = min(seqs), max(seqs)
            same = "user_id = ? AND conversation_id = ? AND session_id = ?"
            key = (user, conv, session)
            window = self.conn.execute(
                f"SELECT rowid, id, seq, speaker, text, metadata FROM turns WHERE {same}"
                f" AND seq BETWEEN coalesce((SELECT min(seq) FROM (SELECT seq FROM turns"
                f" WHERE {same} AND seq < ? ORDER BY seq DESC LIMIT 2)), ?)"
                f" AND coalesce((SELECT max(seq) FROM (SELECT seq FROM turns"
                f" WHERE {same} AND seq > ? ORDER BY seq LIMIT 2)), ?) ORDER BY seq",
                (*key, *key, lo, lo, *key, hi, hi),
            ).fetchall()
            texts = [with_caption(r[4], stored_json(r[5], f"turn {r[1]}", dict))
                     for r in window]
            before = [n for n, r in enumerate(window) if r[2] < lo]
            after = [n for n, r in enumerate(window) if r[2] > hi]
            touched = [n for n, r in enumerate(window) if lo <= r[2] <= hi]
            touched += before[-1:] + after[:1]  # the stored turn on either side
            prefix = tenant_token(user)
            for n in touched:
                rowid, node_id = window[n][0], window[n][1]
                context = textmod.index_text(textmod.context_of(texts, n), prefix)
                if node_id in new_ids:
                    inserts.append((rowid, textmod.index_text(texts[n], prefix), context))
                else:
                    updates.append((context, rowid))
        self.inserting("turn", [row[0] for row in inserts])
        self.conn.executemany(
            "INSERT INTO turns_fts (rowid, body, context) VALUES (?,?,?)", inserts
        )
        self.changing("turn", [rowid for _, rowid in updates])
        self.conn.executemany("UPDATE turns_fts SET context = ? WHERE rowid = ?", updates)

    def contextual_texts(self, turns: Sequence[Turn]) -> list[str]:
        """What to embed for each turn: the turn before it in its session, then the turn.

        An answer is often only meaningful next to its question; measured on LoCoMo dev,
        this raised the hybrid's recall@10 from 0.779 to 0.787 over embedding turns alone.
        """
        return [
            f"{prev}\n{t.search_text()}" if prev else t.search_text()
            for prev, t in zip(self._previous_texts(turns), turns, strict=True)
        ]

    def _previous_texts(self, turns: Sequence[Turn]) -> list[str]:
        """The end of the turn before each turn in its session (``text.nearest``; "" for a
        session's first)."""
        out: list[str] = []
        last: dict[tuple[str, str, str], tuple[int, str]] = {}
        for t in turns:
            key = (t.user_id, t.conversation_id, t.session_id)
            if key in last and last[key][0] < t.seq:
                out.append(last[key][1])
            else:
                row = self.conn.execute(
                    "SELECT speaker, text, metadata FROM turns WHERE user_id = ? AND"
                    " conversation_id = ? AND session_id = ? AND seq < ? ORDER BY seq DESC"
                    " LIMIT 1", (t.user_id, t.conversation_id, t.session_id, t.seq),
                ).fetchone()
                said = with_caption(row[1], stored_json(row[2], "a turn", dict)) if row else ""
                out.append(textmod.nearest(f"{row[0]}: {said}", end=True) if row else "")
            last[key] = (t.seq, textmod.nearest(t.search_text(), end=True))
        return out

    def _next_turn(self, turn: Turn) -> list[Turn]:
        """The turn after ``turn`` in its session (its embedding reads ``turn``'s text)."""
        rows = self._q("SELECT * FROM turns WHERE user_id = ? AND conversation_id = ? AND"
                       " session_id = ? AND seq > ? ORDER BY seq LIMIT 1",
                       (turn.user_id, turn.conversation_id, turn.session_id, turn.seq))
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
                metadata=json.loads(r["metadata"]),
            )
