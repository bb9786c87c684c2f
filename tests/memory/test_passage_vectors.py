"""The dense channel scores a long message by its passages too, not only by one vector
averaged over the whole message; older stores gain passage vectors on upgrade."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from memstrata.memory import Retriever, SearchWeights, Store
from memstrata.memory.models import Turn
from memstrata.memory.store.passage_vectors import PASSAGE_SUFFIX, backfill_passages, passage_model
from tests.conftest import FakeEmbedder as _Fake


class FakeEmbedder(_Fake):
    """The tests' bag-of-words embedder with buckets enough that words rarely collide."""

    dim = 4096

MIDDLE = "Staging database password rotates every Thursday at noon."
# Thirty paragraphs on other matters, no word shared with the middle one or each other.
FILLER = [" ".join(f"topic{n}w{j}" for j in range(10)) + "." for n in range(30)]
LONG = "\n\n".join([*FILLER[:15], MIDDLE, *FILLER[15:]])
SHORT = ["Thursday works for me.", "Noon is lunch time.", "The password manager is fine.",
         "Our staging box is slow.", "Database backups finished.", "Every week feels long."]
# Cosine alone: no lexical channel, prior or expansion that could find the message.
DENSE_ONLY = SearchWeights(lexical=0, speaker_channels=0, tags=0, speaker_boost=0,
                           role_boost=0, time_boost=0, when_boost=0, where_boost=0, asking=0,
                           graph=0, session=0)


def _store(path: Path | str, embedder: FakeEmbedder) -> Store:
    store = Store.open(path, embedder=embedder)
    texts = [*SHORT[:3], LONG, *SHORT[3:]]
    store.add_turns([Turn(user_id="dev", conversation_id="c", session_id="s", turn_id=f"t{n}",
                          seq=n, speaker="assistant" if t == LONG else "user", text=t)
                     for n, t in enumerate(texts)])
    return store


def _dense(store: Store, embedder: FakeEmbedder) -> list[str]:
    hits = Retriever(store, embedder, DENSE_ONLY).search("dev", MIDDLE, k=3, nodes=("turn",))
    return [h.text for h in hits]


def _passage_rows(path: Path) -> list[tuple[str, int, bytes]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT node_id, dim, vector FROM embeddings WHERE model = ?"
                            " ORDER BY node_id", (passage_model(FakeEmbedder.name),)).fetchall()


def test_a_long_message_is_found_by_a_sentence_in_its_middle_through_the_dense_channel(
        tmp_path: Path) -> None:
    embedder = FakeEmbedder()
    store = _store(tmp_path / "m.db", embedder)
    assert _dense(store, embedder)[0] == LONG
    # One row holds the long message's passages; the short turns have none.
    rows = _passage_rows(tmp_path / "m.db")
    assert len(rows) == 1 and len(rows[0][2]) // (4 * rows[0][1]) > 1
    # Its whole vector alone ranks it below short turns that share a word with the query.
    with sqlite3.connect(tmp_path / "m.db") as conn:  # another process's commit
        conn.execute("DELETE FROM embeddings WHERE model LIKE ?", (f"%{PASSAGE_SUFFIX}",))
    assert _dense(store, embedder)[0] != LONG
    store.close()


def test_a_message_edited_short_or_deleted_keeps_no_passage_vectors(tmp_path: Path) -> None:
    embedder = FakeEmbedder()
    store = _store(tmp_path / "m.db", embedder)
    (node,) = [r[0] for r in _passage_rows(tmp_path / "m.db")]
    store.set_embeddings("dev", [node], embedder.encode([LONG]), embedder.name)
    assert len(_passage_rows(tmp_path / "m.db")) == 1  # rewritten, not doubled
    store.conn.execute("UPDATE turns SET text = 'Short now.' WHERE id = ?", (node,))
    store.set_embeddings("dev", [node], embedder.encode(["Short now."]), embedder.name)
    assert _passage_rows(tmp_path / "m.db") == []
    store.close()


def test_an_older_store_gains_passage_vectors_and_the_same_ranking(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    embedder = FakeEmbedder()
    store = _store(path, embedder)
    before, rows = _dense(store, embedder), _passage_rows(path)
    store.close()
    # The store as an earlier memstrata wrote it: one vector a message.
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM embeddings WHERE model LIKE ?", (f"%{PASSAGE_SUFFIX}",))
        conn.execute("DELETE FROM schema_migrations WHERE version = 13")
    with sqlite3.connect(path) as conn:
        # The migration embeds with the shipped model, which has no vectors here.
        assert backfill_passages(conn) == 0
        assert backfill_passages(conn, embedder) == 1
        assert backfill_passages(conn, embedder) == 0  # once
    assert _passage_rows(path) == rows
    store = Store.open(path, embedder=embedder)
    assert _dense(store, embedder) == before
    store.close()


def test_the_upgrade_embeds_the_default_models_long_messages(tmp_path: Path) -> None:
    path = tmp_path / "default.db"
    _store(path, FakeEmbedder()).close()
    store = Store.open(path)  # the shipped static model
    encoder = store.embedder
    assert encoder is not None
    model, turns = encoder.name, store.turns("dev")
    store.set_embeddings("dev", [t.id for t in turns], encoder.encode([t.text for t in turns]),
                         model)
    store.close()
    with sqlite3.connect(path) as conn:
        wrote = conn.execute("SELECT vector FROM embeddings WHERE model = ?",
                             (passage_model(model),)).fetchall()
        conn.execute("DELETE FROM embeddings WHERE model = ?", (passage_model(model),))
        conn.execute("DELETE FROM schema_migrations WHERE version = 13")
    Store.open(path, embedder=None).close()  # migration 13 runs
    with sqlite3.connect(path) as conn:
        again = conn.execute("SELECT vector FROM embeddings WHERE model = ?",
                             (passage_model(model),)).fetchall()
    assert len(wrote) == 1 and np.allclose(np.frombuffer(again[0][0], np.float32),
                                           np.frombuffer(wrote[0][0], np.float32))
