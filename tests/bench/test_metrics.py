"""Benchmark metrics (recall@k, latency percentiles) and the rank-bm25 baseline."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstrata.bench.baselines import TOKENIZERS, BM25Index
from memstrata.bench.metrics import percentiles, recall_at_k


def test_recall_at_k_basics() -> None:
    assert recall_at_k(["D1:3", "D2:1", "D4:4"], ["D1:3", "D4:4"], 2) == 0.5
    assert recall_at_k(["D1:3", "D2:1", "D4:4"], ["D1:3", "D4:4"], 3) == 1.0
    assert recall_at_k(["D1:3"], ["D1:3"], 10) == 1.0
    assert recall_at_k([], ["D1:3"], 5) == 0.0
    assert recall_at_k(["D1:3"], ["D1:3"], 0) == 0.0
    assert recall_at_k(["a", "b"], ["a", "a", "c"], 2) == 0.5  # duplicates count once
    with pytest.raises(ValueError):
        recall_at_k(["a"], [], 5)


@given(st.lists(st.sampled_from("abcdefgh"), max_size=8),
       st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=5),
       st.integers(0, 10))
def test_recall_at_k_is_a_monotone_fraction(retrieved: list[str], relevant: list[str],
                                            k: int) -> None:
    r = recall_at_k(retrieved, relevant, k)
    assert 0.0 <= r <= 1.0
    assert r <= recall_at_k(retrieved, relevant, k + 1)
    if set(relevant) <= set(retrieved[:k]):
        assert r == 1.0


def test_percentiles_basics() -> None:
    assert percentiles([5.0]) == {"p50": 5.0, "p95": 5.0}
    assert percentiles(list(range(1, 101))) == {"p50": 50.5, "p95": 95.05}
    assert percentiles([1.23456, 1.23456]) == {"p50": 1.235, "p95": 1.235}
    empty = percentiles([])
    assert set(empty) == {"p50", "p95"}
    assert math.isnan(empty["p50"]) and math.isnan(empty["p95"])


DOCS = {
    "D1:1": "Caroline went to the LGBTQ support group yesterday",
    "D1:2": "Melanie painted a lake sunrise last year",
    "D1:3": "My grandma gave me a necklace from Sweden",
    "D1:4": "",
}


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_bm25_index_returns_the_right_doc(name: str) -> None:
    index = BM25Index(list(DOCS), list(DOCS.values()), TOKENIZERS[name])
    assert index.search("necklace from Sweden", 1) == ["D1:3"]
    assert index.search("lake sunrise", 2)[0] == "D1:2"
    top = index.search("Caroline support group", 10)
    assert top[0] == "D1:1"
    assert sorted(top) == sorted(DOCS)  # k is capped at the corpus size


def test_bm25_tokens_baseline_matches_stems_whitespace_does_not() -> None:
    texts = ["she loves support groups", "he paints lakes", "nothing here at all"]
    stemmed = BM25Index(["a", "b", "c"], texts, TOKENIZERS["bm25_tokens"])
    assert stemmed.search("group painting", 1)[0] in {"a", "b"}
    assert stemmed.search("lake", 1) == ["b"]
    whitespace = BM25Index(["a", "b", "c"], texts, TOKENIZERS["bm25_whitespace"])
    assert whitespace.search("lakes", 1) == ["b"]


def test_bm25_empty_corpus_returns_nothing() -> None:
    assert BM25Index([], [], TOKENIZERS["bm25_tokens"]).search("anything", 5) == []
