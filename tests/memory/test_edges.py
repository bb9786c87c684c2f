"""Edges: insertion, upserts, 1- and 2-hop neighbours, relation filters, tenants."""

from __future__ import annotations

import pytest

from memstrata.memory import Edge, Store

U = "graph-user"


def _e(src: str, dst: str, relation: str = "rel", weight: float = 1.0, user: str = U) -> Edge:
    return Edge(user_id=user, src=src, dst=dst, relation=relation, weight=weight)


@pytest.fixture
def chain(store: Store) -> Store:
    """a -0.5-> b -0.4-> c -0.9-> d, plus x -0.8-> a (pointing *into* a), and e --other--> a."""
    added = store.add_edges([
        _e("a", "b", weight=0.5),
        _e("b", "c", weight=0.4),
        _e("c", "d", weight=0.9),
        _e("x", "a", weight=0.8),
        _e("e", "a", relation="other", weight=0.7),
        # the same node names in another tenant
        _e("a", "z", weight=1.0, user="other-user"),
        _e("z", "y", weight=1.0, user="other-user"),
    ])
    assert added == 7
    return store


def test_one_hop_follows_both_directions(chain: Store) -> None:
    assert chain.neighbors(U, ["a"], hops=1) == {
        "b": (1, pytest.approx(0.5), "a"),
        "x": (1, pytest.approx(0.8), "a"),
        "e": (1, pytest.approx(0.7), "a"),
    }
    # reverse direction: c reaches b (its source) and d (its target)
    assert set(chain.neighbors(U, ["c"])) == {"b", "d"}


def test_two_hops_multiplies_weights_and_reports_distance(chain: Store) -> None:
    reached = chain.neighbors(U, ["a"], hops=2)
    assert set(reached) == {"b", "x", "e", "c"}
    assert reached["c"] == (2, pytest.approx(0.5 * 0.4), "a")
    assert reached["b"][0] == 1
    assert "d" not in reached  # three hops away
    from_d = chain.neighbors(U, ["d"], hops=2)
    assert from_d == {"c": (1, pytest.approx(0.9), "d"), "b": (2, pytest.approx(0.36), "d")}


def test_relation_filter(chain: Store) -> None:
    assert set(chain.neighbors(U, ["a"], relations=["other"])) == {"e"}
    assert set(chain.neighbors(U, ["a"], hops=2, relations=["rel"])) == {"b", "x", "c"}
    assert chain.neighbors(U, ["a"], relations=["missing"]) == {}


def test_seeds_are_excluded_and_each_node_keeps_its_seed(chain: Store) -> None:
    reached = chain.neighbors(U, ["a", "c"], hops=1)
    assert "a" not in reached and "c" not in reached
    assert set(reached) == {"b", "x", "e", "d"}
    assert reached["d"][2] == "c"
    assert reached["x"][2] == "a"


def test_no_cross_tenant_walks(chain: Store) -> None:
    assert "z" not in chain.neighbors(U, ["a"], hops=2)
    assert chain.neighbors("other-user", ["a"], hops=2) == {
        "z": (1, pytest.approx(1.0), "a"), "y": (2, pytest.approx(1.0), "a"),
    }
    assert chain.neighbors("nobody", ["a", "b", "c"], hops=2) == {}


def test_empty_seeds_and_bad_hops(chain: Store) -> None:
    assert chain.neighbors(U, [], hops=2) == {}
    assert chain.neighbors(U, ["unknown"], hops=2) == {}
    with pytest.raises(ValueError):
        chain.neighbors(U, ["a"], hops=3)
    with pytest.raises(ValueError):
        chain.neighbors(U, ["a"], hops=0)


def test_existing_edge_keeps_the_higher_weight(store: Store) -> None:
    store.add_edges([_e("p", "q", weight=0.3)])
    store.add_edges([_e("p", "q", weight=0.8)])
    store.add_edges([_e("p", "q", weight=0.5)])
    assert store.neighbors(U, ["p"]) == {"q": (1, pytest.approx(0.8), "p")}
    assert store.counts(U)["edges"] == 1
    # a different relation is a different edge
    store.add_edges([_e("p", "q", relation="other", weight=0.1)])
    assert store.counts(U)["edges"] == 2


def test_cycle_does_not_return_the_seed(store: Store) -> None:
    store.add_edges([_e("a", "b"), _e("b", "c"), _e("c", "a")])
    reached = store.neighbors(U, ["a"], hops=2)
    assert set(reached) == {"b", "c"}
    assert all(distance == 1 for distance, _, _ in reached.values())


def test_neighbors_reports_weight_and_seed_of_nearest_reach(store: Store) -> None:
    """The docstring promises (distance, weight product, seed) of the *nearest* reach."""
    # b is one hop from a (weight 0.2) and two hops via c (0.9 * 0.9 = 0.81)
    store.add_edges([_e("a", "b", weight=0.2), _e("a", "c", weight=0.9),
                     _e("c", "b", weight=0.9)])
    reached = store.neighbors(U, ["a"], hops=2)
    assert reached["b"] == (1, pytest.approx(0.2), "a")


def test_neighbors_seed_matches_the_reported_distance(store: Store) -> None:
    """y is one hop from seed x, two hops from seed a: it must be reported as x's neighbour."""
    store.add_edges([_e("a", "m"), _e("m", "y"), _e("x", "y", weight=0.5)])
    reached = store.neighbors(U, ["a", "x"], hops=2)
    assert reached["y"] == (1, pytest.approx(0.5), "x")
