"""Tenant isolation: no read path ever returns another tenant's turns, items or vectors."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata.memory import (
    Edge,
    FactItem,
    Filters,
    PersonaItem,
    Retriever,
    SemanticItem,
    Store,
    StrategyItem,
    Turn,
)
from memstrata.memory.text import tokens

VOCAB = [
    "sweden", "pottery", "guinea", "pig", "violin", "concert", "adoption", "rome", "necklace",
    "marley", "flooring", "Ann", "Bob", "Ann's", "sunset", "painting", "car",
]
ODD_IDS = [
    "o'brien", 'say "hi"', "two words", "  padded  ", "ünïcødé", "用户", "🙂🙂", "NEAR",
    "a*", "x; DROP TABLE items; --", "tenant : \"u\"", "conv-26", "",
]
KINDS = (FactItem, SemanticItem, StrategyItem, PersonaItem)

phrases = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6).map(" ".join)
user_ids = st.one_of(st.sampled_from(ODD_IDS), st.text(max_size=12))


@dataclass
class TenantData:
    """What one tenant gets written."""

    user_id: str
    items: list[tuple[int, str, str | None, list[str]]] = field(default_factory=list)
    turns: list[tuple[str, str]] = field(default_factory=list)
    edges: list[tuple[int, int, float]] = field(default_factory=list)


@st.composite
def worlds(draw: st.DrawFn) -> list[TenantData]:
    ids = draw(st.lists(user_ids, min_size=2, max_size=4, unique=True))
    out = []
    for user in ids:
        data = TenantData(user)
        data.items = draw(st.lists(st.tuples(
            st.integers(0, len(KINDS) - 1), phrases, st.sampled_from([None, "Ann", "Bob"]),
            st.lists(st.sampled_from(VOCAB[:6]), max_size=2),
        ), max_size=4))
        data.turns = draw(st.lists(st.tuples(st.sampled_from(["Ann", "Bob", "Cy"]), phrases),
                                   max_size=5))
        data.edges = draw(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50),
                                             st.floats(0.1, 1.0)), max_size=6))
        out.append(data)
    return out


def _populate(store: Store, world: list[TenantData], embedder) -> dict[str, set[str]]:
    owned: dict[str, set[str]] = {}
    for tenant in world:
        user = tenant.user_id
        items = [
            KINDS[k](user_id=user, text=text, speaker=speaker, tags=tags)
            for k, text, speaker, tags in tenant.items
        ]
        item_ids = store.add_many(items)
        turns = [
            Turn(user_id=user, conversation_id="conv", session_id="s1", turn_id=f"D1:{n}",
                 seq=n, speaker=speaker, text=text)
            for n, (speaker, text) in enumerate(tenant.turns)
        ]
        turn_ids = store.add_turns(turns)
        nodes = list(dict.fromkeys(item_ids)) + turn_ids
        if nodes:
            texts = [store.nodes(user, [n])[n]["text"] for n in nodes]
            store.set_embeddings(user, nodes, embedder.encode(texts), embedder.name)
            store.add_edges(
                Edge(user_id=user, src=nodes[a % len(nodes)], dst=nodes[b % len(nodes)],
                     relation="rel", weight=w)
                for a, b, w in tenant.edges if a % len(nodes) != b % len(nodes)
            )
        owned[user] = set(nodes)
    return owned


@settings(
    max_examples=30,
    deadline=None,
    # the embedder fixture is stateless: sharing it between examples is fine
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(world=worlds(), queries=st.lists(st.one_of(phrases, user_ids, st.text(max_size=20)),
                                        min_size=1, max_size=3))
def test_every_read_path_stays_inside_its_tenant(
    embedder, world: list[TenantData], queries: list[str]
) -> None:
    with Store.open(":memory:") as store:
        owned = _populate(store, world, embedder)
        users = list(owned)
        for a in users:
            for b in users:
                if a != b:
                    assert not owned[a] & owned[b]
        everything = set().union(*owned.values())
        retriever = Retriever(store, embedder)
        # other tenants' ids and raw texts are queries too
        queries = [*queries, *users, *(t[1] for w in world for t in w.turns[:1])]
        for user in users:
            mine = owned[user]
            for query in queries:
                for nodes in (("turn", "item"), ("turn",), ("item",)):
                    hits = retriever.search(user, query, k=20, nodes=nodes)
                    assert isinstance(hits, list)
                    for hit in hits:
                        assert hit.id in mine
                        assert hit.node in nodes
                        if hit.node == "item":
                            got = store.get(user, hit.id)
                            assert got is not None and got.user_id == user
                        else:
                            got_turns = store.turns(user, ids=[hit.id])
                            assert len(got_turns) == 1 and got_turns[0].user_id == user
                filtered = retriever.search(user, query, k=20,
                                            filters=Filters(speaker="Ann", kinds=["turn", "fact"]))
                assert {h.id for h in filtered} <= mine
                for node in ("turn", "item"):
                    for context in (0.0, 0.4):
                        found = store.lexical(user, tokens(query), node=node, k=100,
                                              context_weight=context)
                        assert {i for i, _ in found} <= mine
            ids, matrix = store.vectors(user, embedder.name)
            assert set(ids) == mine
            assert len(matrix) == len(mine)
            if mine:
                assert matrix.shape == (len(mine), embedder.dim)
            reached = store.neighbors(user, sorted(everything), hops=2)
            assert set(reached) <= mine
            assert {seed for _, _, seed in reached.values()} <= mine
            assert set(store.nodes(user, sorted(everything))) == mine
            assert store.allowed_ids(user, Filters(speaker="Ann")) <= mine
            assert {i.id for i in store.items(user, limit=1000)} <= mine
            assert {t.id for t in store.turns(user)} <= mine
            got_items = store.get_many(user, sorted(everything))
            assert {i.id for i in got_items} <= mine
            assert all(i.user_id == user for i in got_items)
            counts = store.counts(user)
            assert counts["turns"] == len([i for i in mine if i.startswith("t_")])
            assert counts["items"] == len([i for i in mine if i.startswith("i_")])


def test_cross_tenant_edge_does_not_leak_the_other_tenants_node(store: Store) -> None:
    [secret] = store.add_turns([Turn(user_id="bob", conversation_id="c", session_id="s",
                                     turn_id="D1:1", seq=0, speaker="Bob",
                                     text="my bank password is hunter2")])
    mine = store.add(FactItem(user_id="alice", text="my bank is nearby"))
    # an edge recorded for alice that (wrongly) points at bob's turn
    store.add_edges([Edge(user_id="alice", src=mine, dst=secret, relation="oops")])
    hits = Retriever(store).search("alice", "bank password hunter2", k=10)
    assert [h.id for h in hits] == [mine]
    assert store.nodes("alice", [secret]) == {}
    assert store.turns("alice", ids=[secret]) == []


def test_same_user_id_prefix_or_case_is_a_different_tenant(store: Store) -> None:
    store.add(FactItem(user_id="Alice", text="violin lessons"))
    store.add(FactItem(user_id="alice ", text="violin concert"))
    assert Retriever(store).search("alice", "violin", k=10) == []
    assert store.lexical("ALICE", tokens("violin"), node="item", k=10) == []
    assert [h.text for h in Retriever(store).search("Alice", "violin", k=10)] == [
        "violin lessons"
    ]
