"""Passage vectors of long messages on both backends (``backend``, see ``conftest.py``):
written with the message's vector, read as one row per passage, ranked by the dense
channel, and gone with the message."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memstrata.memory.models import Conversation, Session, Turn
from memstrata.memory.store.passage_vectors import passage_model
from tests.memory.test_passage_vectors import LONG, MIDDLE, SHORT, FakeEmbedder


def _fill(store: Any) -> list[str]:
    return _fill_with(store, FakeEmbedder())


def _fill_with(store: Any, embedder: Any) -> list[str]:
    store.embedder = embedder
    store.add_conversation(Conversation(id="c", user_id="dev"))
    store.add_session(Session(id="s", user_id="dev", conversation_id="c", index=0))
    texts = [*SHORT[:3], LONG, *SHORT[3:]]
    return store.add_turns([Turn(user_id="dev", conversation_id="c", session_id="s",
                                 turn_id=f"t{n}", seq=n, speaker="user", text=t)
                            for n, t in enumerate(texts)])


def test_a_long_turn_ranks_by_its_passages_and_they_go_with_it(backend: Any) -> None:
    ids = _fill(backend)
    embedder = backend.embedder
    passages, matrix = backend.vectors("dev", passage_model(embedder.name))
    assert set(passages) == {ids[3]} and len(passages) == len(matrix) > 1
    query = embedder.encode([MIDDLE])[0]
    top = backend.dense_refs("dev", embedder.name, query, 3)
    assert backend.ids("dev", [top[0][0]])[top[0][0]] == ids[3]
    speaker = backend.dense_refs("dev", embedder.name, query, 3, speaker="user")
    assert speaker == top
    assert backend.delete_turn("dev", ids[3])
    assert backend.vectors("dev", passage_model(embedder.name))[0] == []
    assert ids[3] not in {backend.ids("dev", [r])[r] for r, _ in
                          backend.dense_refs("dev", embedder.name, query, 3)}


@pytest.mark.postgres
def test_an_older_postgres_store_gains_the_passage_vectors(pg_url: str) -> None:
    import psycopg

    from memstrata.memory.store.pg import PgStore

    store = PgStore.open(pg_url)  # the shipped static model
    _fill_with(store, store.embedder)
    model = passage_model(store.embedder.name)
    store.close()
    read = "SELECT node_id, vector FROM embeddings WHERE model = %s"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        wrote = conn.execute(read, (model,)).fetchall()
        conn.execute("DELETE FROM embeddings WHERE model = %s", (model,))
        conn.execute("DELETE FROM schema_migrations WHERE version = 13")
    PgStore.open(pg_url, embedder=None).close()  # migration 13 runs
    with psycopg.connect(pg_url, autocommit=True) as conn:
        again = conn.execute(read, (model,)).fetchall()
    assert len(wrote) == 1 and again[0][0] == wrote[0][0]
    assert np.allclose(np.frombuffer(again[0][1], np.float32),
                       np.frombuffer(wrote[0][1], np.float32))
