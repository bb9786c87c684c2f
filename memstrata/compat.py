"""mem0's result shapes, for code ported from mem0.

``to_mem0(hits, user_id=...)`` turns :meth:`memstrata.Memory.search`'s hits into what
mem0's ``Memory.search`` returns: ``{"results": [{"id", "memory", "score", "user_id",
"created_at", "updated_at", "metadata"}, ...]}``, best first. ``memory`` is the hit's
text, ``score`` its score in [0, 1] (higher is better, as mem0's), ``created_at`` its
event time as ISO text (memstrata's hits carry no record time), ``updated_at`` None, and
``metadata`` what memstrata adds: the hit's ``kind``, ``node``, ``speaker``,
``conversation_id``, ``turn_id``, the score of each ``channels`` and its ``quote``.

Example:
    >>> from memstrata.memory.models import Hit
    >>> to_mem0([Hit(id="t_1", node="turn", kind="turn", text="I live in Lisbon",
    ...              score=0.8)], user_id="ana")["results"][0]["memory"]
    'I live in Lisbon'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memstrata.memory.models import Hit


def mem0_hit(hit: Hit, *, user_id: str) -> dict[str, Any]:
    """One hit in mem0's shape (see the module)."""
    data = hit.model_dump(mode="json")
    return {"id": hit.id, "memory": hit.text, "score": hit.score, "user_id": user_id,
            "created_at": data["event_time"], "updated_at": None,
            "metadata": {key: data[key] for key in ("kind", "node", "speaker",
                                                    "conversation_id", "turn_id",
                                                    "channels", "quote")}}


def to_mem0(hits: Iterable[Hit], *, user_id: str) -> dict[str, list[dict[str, Any]]]:
    """``{"results": [...]}``: the hits in mem0's shape, in their order (see the module)."""
    return {"results": [mem0_hit(h, user_id=user_id) for h in hits]}


__all__ = ["mem0_hit", "to_mem0"]
