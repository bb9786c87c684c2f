"""Naive tools, for the leakage ablation only (E7): the same names, signatures and
docstrings as the handle tools, but no caps and full payloads, plus ``ctx_read`` (the
whole blob). The only difference between the two arms is then the contract itself.

They break the tool contract on purpose, to measure what the contract buys. Nothing but
``memstrata bench leakage`` hands them to an agent.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import regex

from . import context, memory_tools
from .base import Binding, ToolError
from .context import blob_text
from .memory_tools import _full, _retriever


def _same_doc(handle: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def apply(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__doc__ = handle.__doc__
        return fn
    return apply


def ctx_read(b: Binding, ref: str) -> dict[str, Any]:
    """The whole text of a blob.

    Args:
        ref: the blob's key (or its BlobRef).
    """
    key, text = blob_text(b, ref)
    return {"key": key, "chars": len(text), "text": text}


@_same_doc(context.ctx_peek)
def ctx_peek(b: Binding, ref: str, n: int | None = None) -> dict[str, Any]:
    key, text = blob_text(b, ref)
    return {"key": key, "text": text if n is None else text[:n]}


@_same_doc(context.ctx_slice)
def ctx_slice(b: Binding, ref: str, start: int, end: int) -> dict[str, Any]:
    key, text = blob_text(b, ref)
    return {"key": key, "start": start, "end": end, "text": text[start:end]}


@_same_doc(context.ctx_find)
def ctx_find(b: Binding, ref: str, pattern: str, k: int | None = None) -> dict[str, Any]:
    key, text = blob_text(b, ref)
    try:
        compiled = regex.compile(pattern, regex.IGNORECASE)
    except regex.error as exc:
        raise ToolError(f"ctx_find: invalid regular expression {pattern!r}: {exc}") from None
    lines = text.splitlines()
    hits = []
    for m in compiled.finditer(text):  # every match, with its whole line and neighbours
        line = text.count("\n", 0, m.start())
        hits.append({"offset": m.start(), "line": line + 1,
                     "context": "\n".join(lines[max(0, line - 1): line + 2])})
    return {"key": key, "pattern": pattern, "matches": hits, "total": len(hits)}


@_same_doc(memory_tools.mem_search)
def mem_search(b: Binding, query: str, k: int | None = None, kind: str | None = None,
               polarity: str | None = None, role: str | None = None) -> dict[str, Any]:
    retriever = _retriever(b)
    analysis = retriever.analyse(b.user_id, query)
    hits = retriever.search(b.user_id, query, k=k or 6)
    full = _full(b, [h.id for h in hits], None)["items"]
    verbose = json.loads(json.dumps(dataclasses.asdict(analysis), default=str))
    return {"query": query, "analysis": verbose,
            "results": [h.model_dump(mode="json") | {"record": r}
                        for h, r in zip(hits, full, strict=False)]}


@_same_doc(memory_tools.mem_get)
def mem_get(b: Binding, ids: list[str]) -> dict[str, Any]:
    return _full(b, [ids] if isinstance(ids, str) else list(ids), None)


@_same_doc(memory_tools.mem_quote)
def mem_quote(b: Binding, id: str, max_chars: int | None = None) -> dict[str, Any]:
    got = _full(b, [id], None)["items"]
    if not got:
        raise ToolError(f"mem_quote: no memory {id!r} for this user")
    return got[0]


@_same_doc(memory_tools.mem_add)
def mem_add(b: Binding, text: str, kind: str = "semantic", title: str = "",
            tags: list[str] | None = None, polarity: str | None = None) -> dict[str, Any]:
    added = memory_tools.mem_add(b, text, kind, title, tags, polarity)
    return added | _full(b, [added["id"]], None)["items"][0]


@_same_doc(memory_tools.event_log)
def event_log(b: Binding, obj: dict[str, Any]) -> dict[str, Any]:
    return memory_tools.event_log(b, obj) | {"event": obj, "recent": b.store.runs.events(
        b.user_id, limit=5)}
