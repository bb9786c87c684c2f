"""Two-phase memory tools: search returns ids and one-liners; get and quote fetch, capped.

Turns and items are both memories here: a turn id (``t_...``) and an item id (``i_...``)
work alike in ``mem_get`` and ``mem_quote``.
"""

from __future__ import annotations

import json
from typing import Any

from memstrata.memory import ITEM_KINDS, Filters, Item, Retriever
from memstrata.memory.models import ITEM_ADAPTER
from memstrata.memory.store import node_type

from .base import Binding, ToolError, check_cap, clipped, one_line, shown

POLARITIES = ("success", "failure")
SEARCH_KINDS = ("turn", *ITEM_KINDS)
WRITABLE_KINDS = tuple(k for k in ITEM_KINDS if k != "consolidated")
# Over-fetch before filters that only the rows can answer (polarity lives in item data).
_OVERFETCH = 5
MAX_ID_CHARS = 64
"""Memory ids are ``t_``/``i_`` and 24 hex digits: a longer one is refused, not echoed."""


def _retriever(b: Binding) -> Retriever:
    if b.retriever is None:
        b.retriever = Retriever(b.store)
    return b.retriever


def _speaker(b: Binding, role: str | None) -> str | None:
    if role is None:
        return None
    if not isinstance(role, str):
        raise ToolError(f"mem_search: role must be a speaker's name, got {type(role).__name__}")
    speakers = b.store.speakers(b.user_id)
    for name in speakers:
        if name.casefold() == role.strip().casefold():
            return name
    shown = ", ".join(speakers[:10]) or "none recorded"
    raise ToolError(f"mem_search: role {role!r} is not a known speaker; speakers: {shown}")


def mem_search(b: Binding, query: str, k: int | None = None, kind: str | None = None,
               polarity: str | None = None, role: str | None = None) -> dict[str, Any]:
    """Search this user's memories. Returns ids, titles and one-line descriptions only;
    fetch what you need with ``mem_get`` (or ``mem_quote``).

    Args:
        query: what to look for, in plain words.
        k: how many results (default 6; at most the search cap, 20 by default).
        kind: only this kind: 'turn' (a conversation turn) or an item kind such as
            'fact', 'semantic', 'episodic', 'strategy'.
        polarity: for strategies, 'success' (what worked) or 'failure' (a guardrail).
        role: only memories of this speaker (a name as it appears in the conversation).
    """
    if not isinstance(query, str) or not query.strip():
        raise ToolError("mem_search: query must be a non-empty string")
    check_cap("mem_search", len(query), b.caps.max_query_chars, "a query of length")
    k = min(6, b.caps.max_search_k) if k is None else k
    check_cap("mem_search", k, b.caps.max_search_k, "k =")
    if k < 1:
        raise ToolError("mem_search: k must be at least 1")
    if kind is not None and kind not in SEARCH_KINDS:
        raise ToolError(f"mem_search: unknown kind {shown(kind)}; kinds: "
                        f"{', '.join(SEARCH_KINDS)}")
    if polarity is not None and polarity not in POLARITIES:
        raise ToolError(f"mem_search: polarity must be one of {POLARITIES}, got "
                        f"{shown(polarity)}")
    if polarity is not None and kind not in (None, "strategy"):
        raise ToolError("mem_search: polarity applies to kind 'strategy' only")
    speaker = _speaker(b, role)
    kinds = ["strategy"] if polarity else ([kind] if kind else None)
    nodes = ("turn",) if kind == "turn" else ("item",) if kinds else ("turn", "item")
    # A retired strategy (superseded or forgotten by the bank's policies) must not come
    # back through the tools either (as in L2's packer); other kinds keep their history
    # (a superseded fact still answers "before ...?"). With a kind, the search leaves
    # them out; without one a filter would read every row of the tenant, so they are
    # dropped below, as are strategies of the other polarity: those searches ask for more.
    filters = Filters(kinds=kinds, speaker=speaker, current=["strategy"] if kinds else None)
    wide = polarity is not None or kind is None
    hits = _retriever(b).search(b.user_id, query, k=k * _OVERFETCH if wide else k,
                                filters=filters, nodes=nodes)
    items = {i.id: i for i in b.store.get_many(b.user_id, [h.id for h in hits
                                                           if h.node == "item"])}
    hits = [h for h in hits if not (h.kind == "strategy" and getattr(
        items.get(h.id), "valid_to", None) is not None)]
    if polarity:
        hits = [h for h in hits if getattr(items.get(h.id), "polarity", None) == polarity]
    hits = hits[:k]
    titles = {i: item.title for i, item in items.items() if item.title}
    results = []
    for h in hits:
        when = h.event_time.date().isoformat() if h.event_time else None
        title = titles.get(h.id) or (f"{h.turn_id} {h.speaker}" if h.node == "turn" else h.kind)
        results.append({"id": h.id, "kind": h.kind, "title": one_line(title, 60),
                        "description": one_line(h.text, b.caps.description_chars),
                        "speaker": clipped(h.speaker, 60), "when": when})
    return {"query": query, "results": results}


def _full(b: Binding, ids: list[str], cap_text: int | None) -> dict[str, Any]:
    """Full records for ids of this tenant; ``cap_text`` cuts long texts (None: never)."""
    found: dict[str, dict[str, Any]] = {}
    for item in b.store.get_many(b.user_id, [i for i in ids if node_type(i) == "item"]):
        found[item.id] = item.model_dump(mode="json", exclude_none=True)
    turn_ids = [i for i in ids if node_type(i) == "turn"]
    for node_id, row in b.store.nodes(b.user_id, turn_ids).items():
        found[node_id] = {
            "id": node_id, "kind": "turn", "speaker": row["speaker"], "text": row["text"],
            "turn_id": row["turn_id"], "conversation_id": row["conversation_id"],
            "session_id": row["session_id"], "event_time": row["event_time"],
            **({"metadata": json.loads(row["metadata"])} if row["metadata"] not in (None, "{}")
               else {}),
        }
    out = []
    for node_id in ids:
        record = found.get(node_id)
        if record is None:
            continue
        if cap_text is not None:
            # The text has its own cap; any other field (a name, metadata) only a short one.
            text = record["text"]
            record = {k: clipped(v) for k, v in record.items()}
            record["text"] = text[:cap_text] + "…" if len(text) > cap_text else text
            if len(text) > cap_text:
                record["text_truncated"] = True
        out.append(record)
    return {"items": out, "missing": [i for i in ids if i not in found]}


def mem_get(b: Binding, ids: list[str]) -> dict[str, Any]:
    """Full records for ids from ``mem_search`` (at most the get cap, 5 by default).

    Args:
        ids: memory ids, e.g. ['t_...', 'i_...'] (one id as a string also works).
    """
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ToolError("mem_get: ids must be a list of id strings")
    check_cap("mem_get", len(ids), b.caps.max_get, "a request for ids:")
    if any(len(i) > MAX_ID_CHARS for i in ids):
        raise ToolError(f"mem_get: a memory id is at most {MAX_ID_CHARS} characters "
                        "(ids look like 't_...' or 'i_...'; take them from mem_search)")
    return _full(b, list(dict.fromkeys(ids)), b.caps.max_item_chars)


def mem_quote(b: Binding, id: str, max_chars: int | None = None) -> dict[str, Any]:
    """A bounded excerpt of one memory's text (the start of it).

    Args:
        id: a memory id from ``mem_search``.
        max_chars: how many characters (default 300; at most the quote cap, 1000 by
            default).
    """
    if not isinstance(id, str):
        raise ToolError(f"mem_quote: id must be a memory id string, got {type(id).__name__}")
    max_chars = min(300, b.caps.max_quote_chars) if max_chars is None else max_chars
    check_cap("mem_quote", max_chars, b.caps.max_quote_chars, "max_chars =")
    if max_chars < 1:
        raise ToolError("mem_quote: max_chars must be at least 1")
    got = _full(b, [id], None)["items"]
    if not got:
        raise ToolError(f"mem_quote: no memory {id!r} for this user")
    text = got[0]["text"]
    return {"id": id, "text": text[:max_chars], "truncated": len(text) > max_chars,
            "chars": len(text)}


def mem_add(b: Binding, text: str, kind: str = "semantic", title: str = "",
            tags: list[str] | None = None, polarity: str | None = None) -> dict[str, Any]:
    """Remember something for this user. Returns the new id; an exact duplicate is merged.

    Args:
        text: the memory, one or a few sentences.
        kind: an item kind such as 'semantic', 'fact', 'episodic', 'procedural', 'strategy'.
        title: a short title.
        tags: a few keywords.
        polarity: for kind 'strategy': 'success' or 'failure'.
    """
    if not isinstance(text, str) or not text.strip():
        raise ToolError("mem_add: text must be a non-empty string")
    check_cap("mem_add", len(text), b.caps.max_add_chars, "a text of length")
    if kind not in WRITABLE_KINDS:
        raise ToolError(f"mem_add: kind must be one of {', '.join(WRITABLE_KINDS)}; got "
                        f"{shown(kind)}")
    if polarity is not None and (kind != "strategy" or polarity not in POLARITIES):
        raise ToolError("mem_add: polarity is 'success' or 'failure', for kind 'strategy' only")
    if not isinstance(title, str):
        raise ToolError(f"mem_add: title must be a string, got {type(title).__name__}")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str)
                                                                for t in tags)):
        raise ToolError("mem_add: tags must be a list of strings")
    fields: dict[str, Any] = {"kind": kind, "user_id": b.user_id, "agent_id": b.agent_id,
                              "text": text.strip(), "title": title[:200],
                              "tags": [str(t)[:40] for t in (tags or [])][:10],
                              "source": f"tool:mem_add{':' + b.run_id if b.run_id else ''}"}
    if polarity is not None:
        fields["polarity"] = polarity
    item: Item = ITEM_ADAPTER.validate_python(fields)
    merged = b.store.duplicate_of(item) is not None
    return {"id": b.store.add(item), "status": "merged" if merged else "added"}


def event_log(b: Binding, obj: dict[str, Any]) -> dict[str, Any]:
    """Write an event (any JSON object) to this user's event log. Prints nothing.

    Args:
        obj: the event, e.g. {"type": "note", "text": "..."}.
    """
    try:
        size = len(json.dumps(obj))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ToolError(f"event_log: obj must be JSON-serialisable and at most a few hundred "
                        f"levels deep ({type(exc).__name__}: {exc})") from None
    check_cap("event_log", size, b.caps.max_event_chars, "an event of serialised length")
    event_id = b.store.runs.log_event(b.user_id, obj, agent_id=b.agent_id, run_id=b.run_id)
    return {"event_id": event_id, "written": True}
