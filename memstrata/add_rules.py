"""What ``Memory.add`` stores of a batch of messages: which are not memories (system
prompts, tool plumbing, messages without text) and which repeat a turn already stored.

The repeat rule (``Memory.add`` documents it for callers): a message repeats a turn stored
before the call in its conversation when they have the same speaker, role, text and caption
(and source id, ``metadata["source_id"]``, when the message has one) and either

* the message is in the **re-sent prefix**: the batch's first messages (those not
  skipped) equal the conversation's first turns, in order, from its start; the message
  then repeats the turn at its position (a message with a timestamp must also have that
  turn's event time). Apps send the whole growing history on every call: this is it.
* or the message has its own ``timestamp`` and a turn of the conversation has that
  event time;
* or the message has a source id and the conversation has a turn of that id (the id a
  source gave the message: an importer's, as ChatGPT's and Claude's exports and LoCoMo
  carry; one id names one message, wherever it sits in the conversation).

Each stored turn is repeated by at most one message of a batch: two equal messages in one
batch are two turns (a user may say "ok" twice), and sent again they repeat both.

A message without a timestamp outside the re-sent prefix is always new: a user who says
"ok" twice, in two calls, gets two turns (unless "ok" is the conversation's first turn
and is sent again alone, which reads as a re-sent prefix).
"""

from __future__ import annotations

from collections.abc import Iterable

from memstrata.formats.records import PARTS_SKIPPED, TOOL_ROLES, Message
from memstrata.memory import Filters, MemoryStore, Turn

DEFAULT_SKIP_ROLES = frozenset({"system", "developer", "tool", "function"})
"""Roles ``Memory.add`` does not store by default: system prompts and tool plumbing."""
LABELS_PER_QUERY = 500
"""Source ids looked up per statement (SQLite bounds a statement's parameters)."""
SYSTEM_ROLES = frozenset({"system", "developer"})
ROLE = "role"
"""Turn metadata key: the message's chat role, where it differs from its speaker."""


def skip_roles(roles: Iterable[str] | None) -> frozenset[str]:
    """The roles not to store: ``roles`` lower-cased, :data:`DEFAULT_SKIP_ROLES` for None.

    Raises:
        ValueError: ``roles`` is a string, not a collection, or holds anything but strings.
    """
    if roles is None:
        return DEFAULT_SKIP_ROLES
    valid = isinstance(roles, Iterable) and not isinstance(roles, str)
    names = list(roles) if valid else []
    if not valid or not all(isinstance(r, str) for r in names):
        raise ValueError("skip_roles must be a collection of role names, e.g. {'system'}")
    return frozenset(r.strip().lower() for r in names)


def skip_reason(message: Message, roles: frozenset[str]) -> str | None:
    """Why a message is not stored, or None when it is: ``"system"`` (a ``system`` or
    ``developer`` message), ``"tool"`` (``tool``/``function`` role or tool plumbing),
    ``"role"`` (another role in ``roles``), ``"no_text"`` (only parts that are not text,
    named in ``metadata["parts_skipped"]``) or ``"blank"`` (no text, no caption)."""
    if message.role is not None and message.role in roles:
        return ("system" if message.role in SYSTEM_ROLES
                else "tool" if message.role in TOOL_ROLES else "role")
    if message.blank:
        return "no_text" if message.metadata.get(PARTS_SKIPPED) else "blank"
    return None


def role_field(message: Message) -> dict[str, str]:
    """The turn metadata that keeps a message's role where its speaker does not say it
    (``{"role": "user"}`` for ``{"role": "user", "name": "Ana"}``)."""
    if message.role and message.role != message.speaker:
        return {ROLE: message.role}
    return {}


def repeats(store: MemoryStore, user_id: str, conversation_id: str, messages: list[Message],
            start: list[Turn] | None = None) -> dict[int, Turn]:
    """The messages that repeat a turn stored before (see the module), by position, with
    the turn each repeats; a turn is repeated by at most one message.

    Reads at most ``len(messages)`` turns from the conversation's start (``start``: those
    turns read already, or more), the turns whose event time lies between the
    timestamps of the other timed messages, and the turns named by the other messages'
    source ids."""
    out: dict[int, Turn] = {}
    if start is None:
        start = store.turns(user_id, conversation_id=conversation_id, limit=len(messages))
    if not start:  # a new conversation: nothing to repeat
        return out
    n = 0
    while n < min(len(start), len(messages)) and _same(messages[n], start[n]):
        out[n] = start[n]
        n += 1
    timed = [p for p in range(n, len(messages)) if messages[p].timestamp is not None]
    times = [t for p in timed if (t := messages[p].timestamp) is not None]
    if times:
        ids = store.allowed_ids(user_id, Filters(kinds=["turn"],
                                                 conversation_id=conversation_id,
                                                 start=min(times), end=max(times)))
        ids -= {t.id for t in out.values()}
        _match(out, messages, timed, store.turns(user_id, ids=sorted(ids)) if ids else [])
    sourced = [p for p in range(n, len(messages))
               if p not in out and messages[p].metadata.get("source_id")]
    if sourced:
        labels = sorted({str(messages[p].metadata["source_id"]) for p in sourced})
        taken = {t.id for t in out.values()}
        named = [t for i in range(0, len(labels), LABELS_PER_QUERY)
                 for t in store.turns(user_id, conversation_id=conversation_id,
                                      labels=labels[i:i + LABELS_PER_QUERY])]
        _match(out, messages, sourced, [t for t in named if t.id not in taken])
    return out


def _match(out: dict[int, Turn], messages: list[Message], positions: list[int],
           turns: list[Turn]) -> None:
    """Add to ``out`` each message of ``positions`` that repeats one of ``turns`` (each
    turn taken once)."""
    candidates: dict[tuple[str, str], list[Turn]] = {}
    for turn in turns:
        candidates.setdefault((turn.speaker, turn.text), []).append(turn)
    for p in positions:
        same = candidates.get((messages[p].speaker, messages[p].content), [])
        if found := next((t for t in same if _same(messages[p], t)), None):
            out[p] = found
            same.remove(found)


def _same(m: Message, t: Turn) -> bool:
    """Whether a message repeats a turn: speaker, role, text and caption, the event time
    when the message has a timestamp, and the source id when it has one."""
    if (m.speaker, m.content, m.metadata.get("caption"), role_field(m).get(ROLE)) != (
            t.speaker, t.text, t.metadata.get("caption"), t.metadata.get(ROLE)):
        return False
    if m.timestamp is not None and m.timestamp != t.event_time:
        return False
    source_id = m.metadata.get("source_id")
    return not source_id or str(source_id) == t.turn_id
