"""Every version of a turn or an item: what ``Store.update`` keeps and ``history`` reads.

The current version lives in its table (``turns``/``items``); each earlier one is a row
of ``versions`` holding the node as it was (JSON), when that version was recorded and
when a newer one replaced it (``valid_to``). Record time is ours (when memstrata learned
or changed the text); the node's own ``event_time`` (when the thing happened) travels in
the snapshot, so history answers both "what did we believe on day X" and "what happened".

Part of the store:
``ItemStore.update``/``delete``, ``ConversationStore.update_turn``/``delete_turn``/
``delete_conversation`` and ``Store.history`` call it, and ``TenantRows`` exports and
restores a tenant's versions through it (``rows``, ``restore``). Portable SQL but for the
``?`` placeholders; ``keep`` numbers a version by ``count(*)`` inside the update's
transaction, relying on SQLite's single writer (a server backend takes a row lock).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..locking import stored_json

if TYPE_CHECKING:
    from .connection import StoreConnection as Store


class Version(BaseModel):
    """One version of a node, oldest first in a history.

    ``event`` is what made it (``ADD`` for the first, ``UPDATE`` after); ``recorded_at``
    when it was written; ``valid_to`` when a newer version replaced it (None: current).
    """

    id: str
    version: int
    event: str
    text: str
    event_time: str | None = None
    recorded_at: str | None = None
    valid_to: str | None = None
    node: dict[str, Any]


def keep(store: Store, user_id: str, node_id: str, node: dict[str, Any],
         recorded_at: str | None, now: str) -> None:
    """Close the current version of ``node_id`` (as ``node``, recorded at ``recorded_at``)
    by copying it into ``versions`` with ``valid_to = now``. Call inside the update's
    transaction, before the row changes."""
    count = store.conn.execute("SELECT count(*) FROM versions WHERE node_id = ?",
                               (node_id,)).fetchone()[0]
    store.conn.execute(
        "INSERT INTO versions (user_id, node_id, version, event, snapshot, recorded_at,"
        " valid_to) VALUES (?,?,?,?,?,?,?)",
        (user_id, node_id, count + 1, "ADD" if count == 0 else "UPDATE",
         json.dumps(node, default=str), recorded_at or now, now),
    )


def history(store: Store, user_id: str, node_id: str, current: dict[str, Any] | None,
            current_recorded_at: str | None) -> list[Version]:
    """Every version of a node of this tenant, oldest first (the current one last).

    ``current`` is the node as it stands (None when it no longer exists: then nothing is
    returned, since deleting a node forgets its versions too).
    """
    if current is None:
        return []
    rows = store.conn.execute(
        "SELECT version, event, snapshot, recorded_at, valid_to FROM versions"
        " WHERE node_id = ? AND user_id = ? ORDER BY version", (node_id, user_id)).fetchall()
    out = [_version(node_id, v, e, stored_json(s, f"a version of {node_id}", dict), r, t)
           for v, e, s, r, t in rows]
    out.append(_version(node_id, len(rows) + 1, "UPDATE" if rows else "ADD", current,
                        current_recorded_at, None))
    return out


def _version(node_id: str, version: int, event: str, node: dict[str, Any],
             recorded_at: str | None, valid_to: str | None) -> Version:
    event_time = node.get("event_time")
    return Version(id=node_id, version=version, event=event, text=node.get("text", ""),
                   event_time=None if event_time is None else str(event_time),
                   recorded_at=recorded_at, valid_to=valid_to, node=node)


def forget(store: Store, user_id: str, node_ids: list[str]) -> None:
    """Drop the kept versions of these nodes (part of deleting them)."""
    for chunk in (node_ids[i : i + 500] for i in range(0, len(node_ids), 500)):
        store.conn.execute(
            f"DELETE FROM versions WHERE user_id = ? AND node_id IN ({','.join('?' * len(chunk))})",
            [user_id, *chunk])


def rows(store: Store, user_id: str) -> list[dict[str, Any]]:
    """Every kept version of the tenant as a dict (``node_id``, ``version``, ``event``,
    ``snapshot`` decoded, ``recorded_at``, ``valid_to``), by node then version."""
    return [{"node_id": n, "version": v, "event": e,
             "snapshot": stored_json(s, f"a version of {n}", dict),
             "recorded_at": r, "valid_to": t} for n, v, e, s, r, t in store.conn.execute(
        "SELECT node_id, version, event, snapshot, recorded_at, valid_to FROM versions"
        " WHERE user_id = ? ORDER BY node_id, version", (user_id,))]


def restore(store: Store, user_id: str, versions: Iterable[Mapping[str, Any]]) -> int:
    """Write kept versions back as :func:`rows` returns them (an import); returns how
    many. Call inside the import's transaction, after the turns. A turn's last edit time
    (``updated_at``, the current version's record time) is its newest kept version's
    ``valid_to``: set from it on the turns that have none yet."""
    batch = [(user_id, v["node_id"], v["version"], v["event"], json.dumps(v["snapshot"]),
              v["recorded_at"], v["valid_to"]) for v in versions]
    store.conn.executemany(
        "INSERT INTO versions (user_id, node_id, version, event, snapshot, recorded_at,"
        " valid_to) VALUES (?,?,?,?,?,?,?)", batch)
    store.conn.execute(TURN_EDITED, (user_id, user_id))
    return len(batch)


TURN_EDITED = (
    "UPDATE turns SET updated_at = (SELECT v.valid_to FROM versions v WHERE v.user_id ="
    " turns.user_id AND v.node_id = turns.id ORDER BY v.version DESC LIMIT 1)"
    " WHERE user_id = ? AND updated_at IS NULL AND id IN (SELECT node_id FROM versions"
    " WHERE user_id = ?)")
"""Restore the turns' ``updated_at`` from their kept versions (``?``: the tenant, twice)."""
