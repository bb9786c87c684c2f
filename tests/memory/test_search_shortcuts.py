"""Shortcuts a search takes on a big tenant give what the full computation gives: kept
nearest words of the query expansion, the session prior scaling only the turns that can
reach the top k, term counts read off the posting lists a query read, and BLAS held to
one thread for the query's products."""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import numpy as np
import pytest

from memstrata.memory import FactItem, Retriever, SearchWeights, Store, Turn
from memstrata.memory import text as textmod
from memstrata.memory.blas import one_blas_thread
from memstrata.memory.expand import TermExpander
from memstrata.memory.store import Facets, Ref
from memstrata.memory.store.postings import INDEXES
from memstrata.memory.store.rows import tenant_token

U = "shortcut-user"
WORDS = ["rome", "paris", "city", "town", "river", "lake", "puppy", "kitten", "dog", "cat",
         "violin", "cello", "piano", "drum", "bread", "cake", "soup", "tea", "coffee",
         "train", "plane", "boat", "bike", "car"]


class HashEmbedder:
    """A fixed random unit vector per text (seeded by the text), so nearest words are
    arbitrary but repeatable."""

    name = "hash"
    dim = 32

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.stack([np.random.default_rng([ord(c) for c in t] or [0]).standard_normal(
            self.dim) for t in texts]).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _turns(store: Store, texts: list[str], session: str = "s1", start: int = 0) -> list[str]:
    return store.add_turns([
        Turn(user_id=U, conversation_id="c", session_id=session, turn_id=f"D{start + n}:1",
             seq=start + n, speaker="Ann", text=text,
             event_time=datetime(2023, 5, 8, tzinfo=UTC))
        for n, text in enumerate(texts)])


def test_kept_nearest_words_follow_new_words_as_a_fresh_expander_finds_them(
        store: Store) -> None:
    rng = random.Random(3)
    kept = TermExpander(store, HashEmbedder())
    queries = [["city", "puppy"], ["violin"], ["bread", "train", "lake"], ["city"]]
    made_up = [f"{a}{b}" for a in ("zor", "quel", "brin", "tas") for b in ("ax", "um", "ol")]
    for round_ in range(4):
        _turns(store, [" ".join(rng.sample(WORDS + made_up, 5)) for _ in range(6)],
               start=10 * round_)
        fresh = TermExpander(store, HashEmbedder())
        for words in queries:
            for per_word, min_sim in ((2, -1.0), (3, 0.1), (12, -1.0)):
                assert kept.expand(U, words, min_sim=min_sim, per_word=per_word) == \
                    fresh.expand(U, words, min_sim=min_sim, per_word=per_word)
    vocab = kept._vocab[U]
    assert set(vocab.near) >= {"city", "puppy", "violin"}  # kept between searches
    assert vocab.matrix is not None and vocab.matrix.shape == (len(vocab.words), 32)


def test_new_words_found_in_one_product_are_each_words_own_nearest(store: Store) -> None:
    # Several new words' cosines come from one matrix product; each word's nearest words
    # are those a product of its own finds.
    _turns(store, [" ".join(WORDS[n:n + 6]) for n in range(0, len(WORDS), 3)])
    together = TermExpander(store, HashEmbedder())
    together.expand(U, ["city", "puppy", "violin", "bread"], min_sim=-1.0, per_word=3)
    alone = TermExpander(store, HashEmbedder())
    for word in ("city", "puppy", "violin", "bread"):
        alone.expand(U, [word], min_sim=-1.0, per_word=3)
    near, apart = together._vocab[U].near, alone._vocab[U].near
    assert set(near) == set(apart) == {"city", "puppy", "violin", "bread"}
    for word in near:
        assert near[word].order.tolist() == apart[word].order.tolist()
        assert np.allclose(near[word].sims, apart[word].sims, atol=1e-6)


def _top(scores: dict[Ref, float], k: int) -> list[tuple[Ref, float]]:
    """The top ``k`` as a search takes them (``Retriever._search``)."""
    return heapq.nlargest(k, ((r, v) for r, v in scores.items() if v > 0), key=itemgetter(1))


class _Facets:
    """``store.facets`` over fixed sessions, counting the refs asked for."""

    def __init__(self, sessions: dict[Ref, str]) -> None:
        self.sessions = sessions
        self.asked: list[Ref] = []

    def facets(self, user_id: str, refs: Sequence[Ref]) -> dict[Ref, Facets]:
        self.asked += refs
        return {r: Facets("Ann", None, "c", self.sessions[r]) for r in refs
                if r in self.sessions}


def test_session_prior_scales_only_what_can_reach_the_top_k_and_keeps_the_top_k() -> None:
    rng = random.Random(7)
    for trial in range(200):
        n = rng.randint(1, 300)
        scores: dict[Ref, float] = {}
        for i in range(n):
            ref: Ref = ("turn" if rng.random() < 0.8 else "item", i)
            # Ties and zeros too: scores from a few levels, or continuous.
            scores[ref] = (rng.choice([0.0, 0.5, 1.0, 2.0]) if trial % 3 == 0
                           else rng.random() ** 3)
        sessions = {r: f"s{rng.randint(0, 12)}" for r in scores if r[0] == "turn"}
        k = rng.choice([1, 3, 10, 50, 500])
        retriever = Retriever(_Facets(sessions), weights=SearchWeights(  # type: ignore[arg-type]
            session=rng.choice([0.2, 0.6, 3.0])))
        full, pruned = dict(scores), dict(scores)
        retriever._session_prior(U, full, {})
        retriever._session_prior(U, pruned, {}, k)

        assert _top(pruned, k) == _top(full, k)
    # A big candidate pool: the sessions of the few turns that can reach the top are read.
    scores = {("turn", i): 1.0 / (i + 1) for i in range(500)}
    store = _Facets({r: f"s{r[1] % 7}" for r in scores})
    Retriever(store, weights=SearchWeights()).\
        _session_prior(U, scores, {}, 10)  # type: ignore[arg-type]
    assert 10 <= len(store.asked) < 20


def test_a_search_returns_the_same_hits_with_the_session_shortcut(store: Store) -> None:
    rng = random.Random(11)
    for s in range(12):
        _turns(store, [" ".join(rng.sample(WORDS, 6)) for _ in range(8)], session=f"s{s}",
               start=10 * s)
    store.add(FactItem(user_id=U, text="the piano and the cello in Rome"))

    class FullSessionPrior(Retriever):
        def _session_prior(self, user_id: str, scores: dict[Ref, float],
                           info: dict[Ref, Facets], k: int | None = None) -> None:
            super()._session_prior(user_id, scores, info)

    weights = SearchWeights(session=0.6, dense=0, speaker_channels=0)
    for query in ("piano cello", "rome train", "cake with tea", "boat on the lake", "dog"):
        for k in (1, 3, 10):
            got = Retriever(store, weights=weights).search(U, query, k=k)
            want = FullSessionPrior(store, weights=weights).search(U, query, k=k)
            assert [(h.id, h.score) for h in got] == [(h.id, h.score) for h in want]


def test_one_blas_thread_limits_blas_inside_and_restores_it_after() -> None:
    import threadpoolctl

    def blas_threads() -> list[Any]:
        # NumPy's own BLAS: the one its products run on (a library another test loads
        # later, scipy's or sklearn's, is no part of a search).
        return [p["num_threads"] for p in threadpoolctl.threadpool_info()
                if p["user_api"] == "blas" and "numpy" in p["filepath"]]

    before = blas_threads()
    assert before, "NumPy's BLAS was not found: the limit would hold nothing"
    with one_blas_thread():
        assert set(blas_threads()) == {1}
        with one_blas_thread():  # nested (as another thread's search would be)
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {1}
    assert blas_threads() == before
    with pytest.raises(RuntimeError), one_blas_thread():
        raise RuntimeError("a failing block lifts the limit too")
    assert blas_threads() == before


def test_term_counts_come_from_the_lists_a_split_query_read(store: Store) -> None:
    store.add_many(FactItem(user_id=U, text=f"common filler note {i}") for i in range(40))
    store.add_many(FactItem(user_id=U, text=f"common zebra sighting {i}") for i in range(3))
    store.add(FactItem(user_id="other", text="zebra zebra common"))
    index, tenant = INDEXES["item"], tenant_token(U)

    def vocab_docs(token: str) -> int:
        term = textmod.tenant_term(tenant, token)
        return store.conn.execute("SELECT doc FROM items_vocab WHERE term = ?",
                                  (term,)).fetchone()[0]

    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    with store.reading():
        split = store.lexical_refs(U, ["common", "zebra", "note"], node="item", k=50,
                                   common_share=0.5, common_min_docs=10)
        assert not [s for s in statements if "items_vocab" in s]  # no walk of the lists
        store.conn.set_trace_callback(None)
        version = store.data_version()
        kept = {t: store._postings.docs(index, version, textmod.tenant_term(tenant, t))
                for t in ("common", "zebra", "note")}
        assert kept == {"common": 43, "zebra": 3, "note": 40}
        assert kept == {t: vocab_docs(t) for t in kept}
        assert store._term_docs(["common", "zebra"], "item", U) == {"common": 43, "zebra": 3}
    full = store.lexical_refs(U, ["common", "zebra", "note"], node="item", k=50)
    assert split == full[:3]
    store.add(FactItem(user_id=U, text="one more zebra"))
    # Lists not followed to the new version answer nothing; the count is read anew.
    assert store._postings.docs(index, store.data_version(),
                                textmod.tenant_term(tenant, "zebra")) is None
    assert store.term_docs(U, ["zebra"]) == {"zebra": 4}
