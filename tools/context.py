"""Bounded reads of a blob: stats, peek, slice, find. Inspect before you load.

``ref`` is a blob key, a ``BlobRef`` or a dict with a ``key``: whatever the agent holds.
"""

from __future__ import annotations

from typing import Any

import regex

from .base import Binding, ToolError, check_cap
from .blobref import BlobRef


def ref_key(ref: Any) -> str:
    """The blob key inside whatever form of reference the agent passed."""
    if isinstance(ref, BlobRef):
        return ref.key
    if isinstance(ref, dict) and isinstance(ref.get("key"), str):
        return ref["key"]
    if isinstance(ref, str) and ref:
        return ref
    raise ToolError(f"expected a blob reference (a BlobRef or its key), got {type(ref).__name__}")


def blob_text(b: Binding, ref: Any) -> tuple[str, str]:
    """(key, text) of the tenant's blob, or a ToolError naming the keys that exist."""
    key = ref_key(ref)
    text = b.store.blobs.text(b.user_id, key)
    if text is None:
        known = b.store.blobs.keys(b.user_id)
        shown = ", ".join(repr(k) for k in known[:10]) + (" ..." if len(known) > 10 else "")
        raise ToolError(f"no blob {key!r} for this user; blobs: {shown or 'none'}")
    return key, text


def ctx_stats(b: Binding, ref: str) -> dict[str, Any]:
    """Length, line count and checksum of a blob: call this before reading any of it.

    Args:
        ref: the blob's key (or its BlobRef).
    """
    key = ref_key(ref)
    info = b.store.blobs.info(b.user_id, key)
    if info is None:
        blob_text(b, key)  # raises with the list of known keys
        raise AssertionError("unreachable")
    return {"key": key, "chars": info.chars, "lines": info.lines, "sha256": info.sha256[:16]}


def ctx_peek(b: Binding, ref: str, n: int | None = None) -> dict[str, Any]:
    """The first ``n`` characters of a blob.

    Args:
        ref: the blob's key (or its BlobRef).
        n: how many characters (default 200; at most the slice cap, 2000 by default).
    """
    return ctx_slice(b, ref, 0, min(200, b.caps.max_slice_chars) if n is None else n)


def ctx_slice(b: Binding, ref: str, start: int, end: int) -> dict[str, Any]:
    """Characters ``start`` to ``end`` of a blob (end exclusive, at most the slice cap).

    Args:
        ref: the blob's key (or its BlobRef).
        start: first character offset (0-based).
        end: offset after the last character; past the end is clipped.
    """
    if not isinstance(start, int) or not isinstance(end, int):
        raise ToolError("ctx_slice: start and end must be integers")
    if start < 0 or end < start:
        raise ToolError(f"ctx_slice: need 0 <= start <= end, got start={start}, end={end}")
    check_cap("ctx_slice", end - start, b.caps.max_slice_chars, "a slice of")
    key, text = blob_text(b, ref)
    end = min(end, len(text))
    start = min(start, end)
    return {"key": key, "start": start, "end": end, "text": text[start:end],
            "more": end < len(text)}


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _snippet(text: str, start: int, end: int, width: int) -> str:
    # A match can be as long as the blob ("(?s).*"): keep at most 2*width of it.
    middle = text[start:end] if end - start <= 2 * width else text[start : start + 2 * width] + "…"
    piece = text[max(0, start - width) : start] + middle + text[end : end + width]
    return " ".join(piece.split())


def ctx_find(b: Binding, ref: str, pattern: str, k: int | None = None) -> dict[str, Any]:
    """Where a regular expression occurs in a blob: offsets, line numbers, short snippets.

    Matching ignores case. Read more around a hit with ``ctx_slice``.

    Args:
        ref: the blob's key (or its BlobRef).
        pattern: a Python regular expression (plain words work too).
        k: the most matches to return (default 20; at most the find cap, 50 by default).
    """
    caps = b.caps
    k = min(20, caps.max_find_k) if k is None else k
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("ctx_find: pattern must be a non-empty string")
    check_cap("ctx_find", len(pattern), caps.max_pattern_chars, "a pattern of length")
    check_cap("ctx_find", k, caps.max_find_k, "k =")
    if k < 1:
        raise ToolError("ctx_find: k must be at least 1")
    try:
        compiled = regex.compile(pattern, regex.IGNORECASE)
    except regex.error as exc:
        raise ToolError(f"ctx_find: invalid regular expression {pattern!r}: {exc}. "
                        "Escape special characters (e.g. \\( or \\?) or search plain words."
                        ) from None
    key, text = blob_text(b, ref)
    matches: list[dict[str, Any]] = []
    total = 0
    try:
        for m in compiled.finditer(text, timeout=caps.find_timeout_s):
            total += 1
            if len(matches) < k:
                matches.append({"offset": m.start(), "line": _line_of(text, m.start()),
                                "snippet": _snippet(text, m.start(), m.end(), caps.snippet_chars)})
            elif total >= 10 * k:
                break
    except TimeoutError:
        raise ToolError(f"ctx_find: pattern {pattern!r} took over {caps.find_timeout_s} s; "
                        "use a simpler pattern") from None
    return {"key": key, "pattern": pattern, "matches": matches,
            "total": total if total < 10 * k else f">={total}", "truncated": total > len(matches)}
