"""mem0 compatibility: ``search(limit=...)`` and hits in mem0's shape."""

from __future__ import annotations

import json

import pytest

from memstrata import Memory
from memstrata.compat import to_mem0


def test_limit_is_k_and_hits_serialise_to_mem0s_shape() -> None:
    with Memory.open(":memory:", embedder=None) as m:
        for n in range(5):
            m.add(f"note {n} about the lighthouse", user_id="ana", infer=False)
        assert len(m.search("lighthouse", user_id="ana", limit=2)) == 2
        assert len(m.search("lighthouse", user_id="ana", k=3, limit=3)) == 3
        with pytest.raises(ValueError, match="limit is another name for k"):
            m.search("lighthouse", user_id="ana", k=2, limit=3)
        with pytest.raises(ValueError, match="whole number"):
            m.search("lighthouse", user_id="ana", limit=2.5)  # type: ignore[arg-type]
        hits = m.search("lighthouse", user_id="ana", limit=4)
    shaped = to_mem0(hits, user_id="ana")
    assert list(shaped) == ["results"] and len(shaped["results"]) == 4
    first = shaped["results"][0]
    assert {"id", "memory", "score", "user_id", "created_at", "updated_at",
            "metadata"} <= set(first)
    assert (first["id"], first["memory"], first["score"]) == (hits[0].id, hits[0].text,
                                                              hits[0].score)
    assert first["metadata"]["kind"] == "turn" and first["metadata"]["channels"]
    json.dumps(shaped)  # JSON as it is
