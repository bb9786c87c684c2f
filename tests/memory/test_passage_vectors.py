"""The dense channel scores a long message by its passages too, not only by one vector
averaged over the whole message; older stores gain passage vectors on upgrade."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

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


def _long_tenant(path: Path, embedder: FakeEmbedder, longs: int = 8) -> Store:
    """A tenant of short turns and ``longs`` long ones, each long one a different mix
    of the filler paragraphs around its own middle sentence."""
    store = Store.open(path, embedder=embedder)
    texts = list(SHORT)
    for n in range(longs):
        rest = FILLER[n:] + FILLER[:n]
        texts.append("\n\n".join([*rest[:10], f"{MIDDLE} Variant {n} word{n}.", *rest[10:20]]))
    store.add_turns([Turn(user_id="dev", conversation_id="c", session_id="s", turn_id=f"t{n}",
                          seq=n, speaker="user", text=t) for n, t in enumerate(texts)])
    return store


def _expected(store: Store, embedder: FakeEmbedder, query: np.ndarray, k: int, nearest: int
              ) -> list[tuple[str, float]]:
    """The dense ranking worked out by hand: every node by its whole vector, and the long
    ones among the ``nearest`` by it raised toward their best passage."""
    from memstrata.memory.store.passage_vectors import PASSAGE_SHARE

    ids, matrix = store.vectors("dev", embedder.name)
    pids, passages = store.vectors("dev", passage_model(embedder.name))
    whole = matrix @ query
    scores = {node: float(w) for node, w in zip(ids, whole.tolist(), strict=True)}
    near = {ids[i] for i in np.argsort(-whole, kind="stable")[:nearest]}
    best: dict[str, float] = {}
    for node, p in zip(pids, (passages @ query).tolist(), strict=True):
        if node in near:
            best[node] = max(best.get(node, -1.0), p)
    ranked = dict(sorted(scores.items(), key=lambda pair: -pair[1])[:k])
    for node, p in sorted(best.items(), key=lambda pair: -pair[1])[:k]:  # the k best by p
        if p > scores[node]:
            ranked[node] = scores[node] + PASSAGE_SHARE * (p - scores[node])
    return sorted(ranked.items(), key=lambda pair: -pair[1])[:k]


def test_passages_are_scored_for_the_nodes_nearest_by_their_own_vectors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.memory.store import vectors

    embedder = FakeEmbedder()
    store = _long_tenant(tmp_path / "m.db", embedder)
    query = embedder.encode([f"{MIDDLE} word3"])[0]
    nodes = len(store.vectors("dev", embedder.name)[0])
    gathered = []
    real = vectors.one_blas_thread  # entered only where passages are copied out

    def ranking(pairs: list[tuple[str, float]]) -> list[tuple[float, str]]:
        return sorted((-round(score, 6), node) for node, score in pairs)  # ties by id

    monkeypatch.setattr(vectors, "one_blas_thread", lambda: gathered.append(1) or real())
    # Every node (one pass over all passages); k nodes; 2 nodes (their passages copied
    # out). k = 8 holds every long node: no tie at the cut of the k best by passage.
    for nearest, k in ((nodes, 8), (1, 8), (1, 2)):
        monkeypatch.setattr(vectors, "PASSAGE_NODES", nearest)
        store._dense_memo = vectors.DenseMemo()  # no pass kept from the last round
        found = store.with_ids("dev", store.dense_refs("dev", embedder.name, query, k))
        assert len(found) == k
        assert ranking(found) == ranking(_expected(store, embedder, query, k, max(nearest, k)))
    assert gathered
    store.close()


def test_the_passage_index_follows_added_rows_as_a_fresh_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from memstrata.memory.store.vectors import PassageIndex

    embedder = FakeEmbedder()
    store = _long_tenant(tmp_path / "m.db", embedder, longs=3)
    query = embedder.encode([MIDDLE])[0]
    store.dense_refs("dev", embedder.name, query, 5)  # the index is kept
    first = store._passage_indexes[("dev", embedder.name)]
    mapped: list[tuple[int, int]] = []
    add = PassageIndex._add
    monkeypatch.setattr(PassageIndex, "_add", lambda self, ids, pids, done, pdone: (
        mapped.append((done, pdone)), add(self, ids, pids, done, pdone))[1])
    more = [f"{MIDDLE} again {n}\n\n" + "\n\n".join(FILLER[n:n + 25]) for n in range(2)]
    store.add_turns([Turn(user_id="dev", conversation_id="c", session_id="s", turn_id=f"x{n}",
                          seq=100 + n, speaker="user", text=t) for n, t in enumerate(more)])
    ids, _ = store.vectors("dev", embedder.name)
    pids, _ = store.vectors("dev", passage_model(embedder.name))
    kept = PassageIndex.of(store, ("dev", embedder.name), ids, pids)
    assert kept is not first and mapped == [(len(first.ids), len(first.pids))]  # new rows only
    fresh = PassageIndex.of(SimpleNamespace(), ("dev", embedder.name), ids, pids)
    assert mapped[-1] == (0, 0)
    assert kept.start.tolist() == fresh.start.tolist()
    assert kept.count.tolist() == fresh.count.tolist()
    assert sum(c > 0 for c in kept.count.tolist()) == 5
    store.close()


def test_a_speaker_channel_reuses_the_passages_its_query_scored_already(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.memory.store import vectors

    embedder = FakeEmbedder()
    store = _long_tenant(tmp_path / "m.db", embedder)  # every turn the user's
    query = embedder.encode([f"{MIDDLE} word3"])[0]
    gathered = []
    real = vectors.one_blas_thread  # entered only where passages are copied out
    monkeypatch.setattr(vectors, "one_blas_thread", lambda: gathered.append(1) or real())
    monkeypatch.setattr(vectors, "PASSAGE_NODES", 1)  # k nodes: copied out, not one pass
    store._dense_memo = vectors.DenseMemo()
    plain = store.dense_refs("dev", embedder.name, query, 3)
    assert len(gathered) == 1
    spoken = store.dense_refs("dev", embedder.name, query, 3, speaker="user")
    assert len(gathered) == 1 and spoken == plain  # the same nodes: nothing scored again
    store._dense_memo = vectors.DenseMemo()  # as a search of its own would score them
    assert store.dense_refs("dev", embedder.name, query, 3, speaker="user") == spoken
    assert len(gathered) == 2
    other = embedder.encode([f"{MIDDLE} word5"])[0]  # another query scores afresh
    store.dense_refs("dev", embedder.name, other, 3)
    assert len(gathered) == 3
    store.close()


def test_kept_best_passages_are_dropped_when_the_tenants_rows_change(tmp_path: Path) -> None:
    # The same query after a message is added: its rows map to a new matrix, so the
    # passages kept for the old one are not read by row number.
    from memstrata.memory.store import vectors

    embedder = FakeEmbedder()
    store = _long_tenant(tmp_path / "m.db", embedder, longs=3)
    query = embedder.encode([f"{MIDDLE} word1"])[0]
    store._dense_memo = vectors.DenseMemo()
    store.dense_refs("dev", embedder.name, query, 3)
    before = store._dense_memo._best
    store.add_turns([Turn(user_id="dev", conversation_id="c", session_id="s", turn_id="new",
                          seq=99, speaker="user", text="A short word1 note.")])
    after = store.dense_refs("dev", embedder.name, query, 3)
    assert store._dense_memo._best is not before
    fresh = vectors.DenseMemo()
    store._dense_memo = fresh
    assert store.dense_refs("dev", embedder.name, query, 3) == after
    store.close()


def _searched(path: Path) -> tuple[Store, Retriever]:
    """A tenant of long messages and a retriever over it with the shipped weights."""
    embedder = FakeEmbedder()
    store = _long_tenant(path, embedder)
    return store, Retriever(store, embedder)


def test_a_big_tenants_dense_pass_runs_ahead_on_its_own_thread_with_the_same_ranking(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from memstrata.memory.ahead import THREAD_NAME
    from memstrata.memory.store import vectors

    store, retriever = _searched(tmp_path / "m.db")
    # The last two name the tenant's speaker (its turns are all the user's): their
    # speaker channels' passes run ahead too.
    queries = [f"{MIDDLE} word3", "staging password", "topic4w2 topic9w1 Thursday",
               "What did I say about the staging password?", "user word5 Variant"]

    def run() -> list[list[tuple[str, float]]]:
        out = []
        for query in queries:
            store._dense_memo = vectors.DenseMemo()  # nothing kept from the other pass
            out.append([(h.id, h.score) for h in retriever.search("dev", query, k=5)])
        return out

    monkeypatch.setattr(vectors, "AHEAD_ROWS", 10**9)  # too small a tenant: inline
    inline = run()
    threads: list[str] = []
    cosines = vectors.DenseMemo.cosines

    def noted(memo: vectors.DenseMemo, matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
        threads.append(threading.current_thread().name)
        return cosines(memo, matrix, query)

    rows_of = vectors.DenseMemo.speaker_rows
    speakers: list[str] = []

    def rows_noted(memo: vectors.DenseMemo, said: np.ndarray, speaker: str) -> np.ndarray:
        speakers.append(threading.current_thread().name)
        return rows_of(memo, said, speaker)

    monkeypatch.setattr(vectors.DenseMemo, "cosines", noted)
    monkeypatch.setattr(vectors.DenseMemo, "speaker_rows", rows_noted)
    monkeypatch.setattr(vectors, "AHEAD_ROWS", 1)
    assert run() == inline
    # Each query's pass over the matrix ran ahead, on the dense thread; the search's own
    # dense channel found it done.
    ahead = [n for n in threads if n.startswith(THREAD_NAME)]
    assert len(ahead) >= len(queries)
    assert any(n.startswith(THREAD_NAME) for n in speakers)  # a speaker's pass too
    store.close()


def test_a_forked_process_starts_its_own_ahead_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.memory import ahead

    pool = ahead._executor()
    assert ahead._executor() is pool  # one a process
    monkeypatch.setattr(ahead.os, "getpid", lambda: -1)  # as a forked child sees itself
    child = ahead._executor()
    assert child is not pool and ahead.submit(lambda: 7).result(timeout=10) == 7
    child.shutdown()


def test_a_search_at_interpreter_shutdown_runs_its_dense_pass_inline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.memory import ahead
    from memstrata.memory.store import vectors

    store, retriever = _searched(tmp_path / "m.db")
    expected = [h.id for h in retriever.search("dev", MIDDLE, k=5)]

    def closed(fn: object) -> None:
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(vectors, "AHEAD_ROWS", 1)
    monkeypatch.setattr(ahead, "submit", closed)
    store._dense_memo = vectors.DenseMemo()
    assert [h.id for h in retriever.search("dev", MIDDLE, k=5)] == expected
    store.close()
