"""End-to-end checks with the real embedded models (marked slow; CI runs them)."""

from __future__ import annotations

import numpy as np
import pytest

from memstrata.memory import (
    MiniLMEmbedder,
    Retriever,
    SearchWeights,
    StaticMiniLMEmbedder,
    Store,
    Turn,
)

pytestmark = pytest.mark.slow

DENSE_ONLY = SearchWeights(lexical=0, speaker_channels=0, tags=0, speaker_boost=0, time_boost=0,
                           graph=0)


@pytest.mark.parametrize("make", [StaticMiniLMEmbedder, MiniLMEmbedder])
def test_real_embedder_gives_unit_vectors_that_rank_paraphrases_first(make: type) -> None:
    embedder = make()
    vecs = embedder.encode(["I adopted a puppy last week", "We got a new dog", "Tax forms due"])
    assert vecs.shape == (3, embedder.dim) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]


def test_dense_channel_finds_a_paraphrase_that_shares_no_word() -> None:
    embedder = StaticMiniLMEmbedder()
    store = Store.open(":memory:")
    texts = ["I adopted a puppy from the shelter", "The quarterly tax report is late",
             "My sister plays the violin"]
    turns = [Turn(user_id="u", conversation_id="c", session_id="s", turn_id=f"D1:{n}", seq=n,
                  speaker="Ann", text=t) for n, t in enumerate(texts)]
    ids = store.add_turns(turns)
    store.set_embeddings("u", ids, embedder.encode(store.contextual_texts(turns)), embedder.name)
    hits = Retriever(store, embedder, DENSE_ONLY).search("u", "new dog", k=1)
    assert hits and hits[0].turn_id == "D1:0"
