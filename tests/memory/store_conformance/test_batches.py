"""``add_many`` as one batch: duplicates stored and within the batch merge, ids come back
in input order, the rows are searchable and embedded, on both backends alike."""

from __future__ import annotations

from typing import Any

import numpy as np

from memstrata.memory import FactItem, SemanticItem
from tests.conftest import FakeEmbedder


def test_a_batch_merges_stored_and_repeated_duplicates_in_order(backend: Any) -> None:
    stored = backend.add(FactItem(user_id="u", text="Ana moved to Lisbon", tags=["move"]))
    batch = [
        FactItem(user_id="u", text="Ana plays the cello", tags=["music"]),
        FactItem(user_id="u", text="ana moved  to LISBON", tags=["city"], confidence=0.4),
        FactItem(user_id="u", text="Ana plays the cello", tags=["cello"], evidence=["t1"]),
        SemanticItem(user_id="u", text="Ana plays the cello"),  # another kind: its own row
        FactItem(user_id="v", text="Ana plays the cello"),  # another tenant: its own row
    ]
    ids = backend.add_many(batch)
    assert ids[1] == stored and ids[2] == ids[0]
    assert len({ids[0], ids[3], ids[4]}) == 3
    merged = backend.get("u", ids[0])
    assert merged.tags == ["music", "cello"] and merged.evidence == ["t1"]
    assert backend.get("u", stored).tags == ["move", "city"]
    assert backend.get("u", stored).confidence == 1.0
    assert backend.counts("u")["items"] == 3 and backend.counts("v")["items"] == 1
    hits = backend.lexical("u", ["cello"], node="item", k=10)
    assert {i for i, _ in hits} == {ids[0], ids[3]}
    assert backend.add_many([]) == []


def test_a_batch_embeds_each_new_row_once(backend: Any) -> None:
    backend.embedder = FakeEmbedder()
    ids = backend.add_many([FactItem(user_id="u", text=f"fact number {n}") for n in range(30)]
                           + [FactItem(user_id="u", text="fact number 3")])
    assert ids[-1] == ids[3] and len(set(ids)) == 30
    found, matrix = backend.vectors("u", backend.embedder.name)
    assert sorted(found) == sorted(set(ids)) and matrix.shape[0] == 30
    want = backend.embedder.encode(["fact number 7"])[0]
    assert np.allclose(matrix[found.index(ids[7])], want)


def test_tags_follow_batches_merges_updates_and_deletes(backend: Any) -> None:
    ids = backend.add_many([FactItem(user_id="u", text="Ana plays the cello", tags=["Music"]),
                            FactItem(user_id="u", text="Ana hikes", tags=["outdoors"]),
                            FactItem(user_id="u", text="ana plays the CELLO", tags=["Cello"])])
    assert backend.tag_vocabulary("u") == ["cello", "music", "outdoors"]
    cello, hikes = backend.refs("u", ids[:2])[ids[0]], backend.refs("u", ids[:2])[ids[1]]
    assert backend.tagged("u", ["music", "cello"], 10) == [cello]  # merged: both tags
    backend.update("u", ids[1], tags=["mountains"])
    assert backend.tagged("u", ["outdoors"], 10) == []
    assert backend.tagged("u", ["mountains", "music"], 10) == [hikes, cello]  # newest first
    backend.delete("u", ids[0])
    assert backend.tagged("u", ["music", "cello"], 10) == []
    assert backend.tag_vocabulary("u") == ["mountains"]
    backend.forget_user("u")
    assert backend.tag_vocabulary("u") == [] and backend.tagged("u", ["mountains"], 5) == []
