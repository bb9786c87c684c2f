"""The L3 packer: a materialised task artefact is stored whole, only a summary injected.

L3 holds what is expensive to create and cheap to reuse (a guide to an ontology, a
result set). Its full text goes to ``store.blobs`` under a key, where the ``ctx_*``
tools read it in bounded pieces; the prompt gets at most the L3 budget of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fit import MARK, cut_words, defuse_lines, fit_lines, flatten
from .layers import PackedLayer, packed_layer

if TYPE_CHECKING:
    from memstrata.memory.store.protocol import MemoryStore


# -- L3 -------------------------------------------------------------------------------------


def summarise_artefact(text: str, budget: int, head_share: float = 0.7) -> tuple[str, bool]:
    """An extractive summary of ``text`` within ``budget`` chars: its head and its tail.

    Whole text when it fits. Otherwise the first lines (``head_share`` of the room) and
    the last lines (the rest), on line boundaries, joined by a line holding the mark; a
    first or last line too long for its share is cut at a word boundary. Head + tail
    because a guide's opening states what it covers and its end its conclusions. The
    runner injects this one; a caller holding a better summary (one an LLM wrote) passes
    it to :func:`pack_l3` as ``summary``. Returns (summary, truncated).
    """
    if len(text) <= budget:
        return text, False
    lines = text.splitlines()
    room = budget - len(MARK) - 2  # "\n" + mark + "\n" between head and tail
    if room <= 0 or len(lines) < 2:
        return cut_words(flatten(text), budget), True
    head_room = int(room * head_share)
    head, _, _ = fit_lines(lines, head_room, mark="")
    head = head.rstrip("\n")
    used_head = len(head.split("\n")) if head else 0
    tail_lines: list[str] = []
    tail_room = room - len(head)
    used = 0
    for line in reversed(lines[used_head:]):
        cost = len(line) + (1 if tail_lines else 0)
        if used + cost > tail_room:
            break
        tail_lines.insert(0, line)
        used += cost
    if not tail_lines and tail_room > len(MARK) + 1:
        # The last line alone is too long: keep its end rather than nothing.
        last = lines[-1]
        tail_lines = [MARK + " " + last[len(last) - (tail_room - len(MARK) - 1):]]
    parts = [p for p in (head, MARK, "\n".join(tail_lines)) if p]
    return "\n".join(parts), True


def pack_l3(store: MemoryStore, user_id: str, key: str, text: str, *, budget: int,
            summary: str | None = None) -> PackedLayer:
    """Store the full artefact under ``key`` (``store.blobs``); inject a summary only.

    The summary is ``summary`` if given (cut on line boundaries to the budget), else
    :func:`summarise_artefact`. It is led by a pointer line naming the key, so the agent
    can read the rest with ``ctx_peek``/``ctx_slice``/``ctx_find``; the pointer is part
    of the budget, and is left off when it would take more than half of it.
    """
    info = store.blobs.put(user_id, key, text, {"layer": "L3"})
    pointer = f"[artefact {key!r}, {info.chars} chars; read more with ctx_slice/ctx_find]"
    if len(pointer) + 1 > budget // 2:
        pointer = ""
    room = budget - (len(pointer) + 1 if pointer else 0)
    # The artefact is task data: what is injected of it cannot open a block of its own
    # (``fit.defuse_lines``); the stored blob keeps it as it was.
    if summary is not None:
        body, _, truncated = fit_lines(defuse_lines(summary.splitlines()), room)
    else:
        body, truncated = summarise_artefact("\n".join(defuse_lines(text.splitlines())), room)
    out = "\n".join(p for p in (pointer, body) if p) if body else ""
    return packed_layer("L3", out, budget, ids=[key] if out else [], truncated=truncated,
                   dropped=0 if out else 1, left_out=[] if out else [key], blob_key=key)
