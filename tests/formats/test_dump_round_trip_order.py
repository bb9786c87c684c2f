"""An export imported back ranks as the original did: turns written in several
conversations in turn come back in the order they were recorded, not conversation by
conversation (bm25's ties go to the earlier row; the reliability bench's import_no_loss
found 2-4 queries a seed ranked otherwise)."""

from __future__ import annotations

import random

from memstrata import Memory


def test_a_round_trip_restores_the_same_hits_and_scores(tmp_path) -> None:
    rng = random.Random(1)
    words = ["trip", "work", "cat", "lisbon", "budget", "paper", "train", "coffee", "meeting",
             "garden", "violin", "recipe"]
    m = Memory.open(tmp_path / "a.db")
    for _ in range(60):
        conversation = rng.choice(["default", "trip", "work"])
        text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 8)))
        m.add(text, user_id="ann", conversation_id=conversation, infer=False)
    queries = ["trip budget", "coffee", "cat garden", "violin meeting", "train paper"]

    def results():
        return {q: [(h.id, h.score) for h in m.search(q, user_id="ann", k=5)]
                for q in queries}

    before = results()
    m.export("ann", tmp_path / "ann.jsonl")
    m.delete_all("ann")
    m.import_(tmp_path / "ann.jsonl")
    assert results() == before
