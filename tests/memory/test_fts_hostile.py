"""FTS5-hostile queries: user text never speaks FTS5 syntax and never raises."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata.memory import FactItem, Retriever, Store, Turn
from memstrata.memory.text import tokens

U = "fts-user"

HOSTILE = [
    "",
    " ",
    "   \t\n  ",
    '"',
    '""',
    '"unbalanced quote',
    "'single' quotes'",
    "*",
    "violin*",
    "* OR *",
    "NEAR",
    "NEAR(a b)",
    "NEAR(violin pottery, 2)",
    "near violin",
    "(",
    ")",
    "((violin)",
    "-violin",
    "violin -pottery",
    "^violin",
    "body:violin",
    "tenant:anything",
    "{body context}: violin",
    ":",
    "AND OR NOT",
    "violin AND",
    "OR violin",
    "NOT",
    "violin NOT pottery",
    "+",
    "col : \"x\" AND",
    "🎻🎻🎻",
    "🙂 violin 🙂",
    "über café naïve",
    "用户 的 小提琴",
    "the and of a is it",
    "what when who where why how",
    "\x00",
    "a\x00violin",
    "\u200b\u200d",
    "%_%",
    "'; DROP TABLE items; --",
    "Caroline's",
    "violin's NEAR/2 pottery",
    "x" * 5000,
    " ".join(f"w{i}" for i in range(2000)),
]


def _fill(store: Store, embedder) -> None:
    item_id = store.add(FactItem(user_id=U, text="Caroline plays the violin", tags=["music"]))
    turn_ids = store.add_turns([
        Turn(user_id=U, conversation_id="c", session_id="s", turn_id="D1:1", seq=0,
             speaker="Caroline", text="I took a pottery class NEAR the river"),
        Turn(user_id=U, conversation_id="c", session_id="s", turn_id="D1:2", seq=1,
             speaker="Melanie", text='She said "AND OR NOT" and laughed (a lot) - café time'),
    ])
    ids = [item_id, *turn_ids]
    texts = [n["text"] for n in store.nodes(U, ids).values()]
    store.set_embeddings(U, ids, embedder.encode(texts), embedder.name)


@pytest.mark.parametrize("query", HOSTILE, ids=[repr(q)[:30] for q in HOSTILE])
def test_hostile_query_never_raises(store: Store, embedder, query: str) -> None:
    _fill(store, embedder)
    for retriever in (Retriever(store), Retriever(store, embedder)):
        hits = retriever.search(U, query, k=5)
        assert isinstance(hits, list)
        assert all(h.id for h in hits)
    for node in ("turn", "item"):
        for context in (0.0, 0.5):
            found = store.lexical(U, tokens(query), node=node, k=5, context_weight=context)
            assert isinstance(found, list)
            # raw text passed straight in as "tokens" is quoted too (NUL is no token char)
            raw_tokens = [query, *query.split()]
            raw = store.lexical(U, [t.replace("\x00", "") for t in raw_tokens], node=node, k=5,
                                context_weight=context)
            assert isinstance(raw, list)


def test_fts_operators_in_text_are_matched_as_plain_words(store: Store, embedder) -> None:
    _fill(store, embedder)
    near = store.lexical(U, tokens("NEAR"), node="turn", k=5)
    assert len(near) == 1
    assert store.turns(U, ids=[near[0][0]])[0].turn_id == "D1:1"
    assert store.lexical(U, tokens("violin*"), node="item", k=5) != []
    assert store.lexical(U, tokens("violi*"), node="item", k=5) == []  # no prefix queries


def test_stop_word_and_empty_queries_return_empty_lists(store: Store, embedder) -> None:
    _fill(store, embedder)
    for query in ("", "   ", "the of and", "what is it"):
        assert store.lexical(U, tokens(query), node="turn", k=5) == []
        assert Retriever(store).search(U, query, k=5) == []
    assert Retriever(store).search(U, "violin", k=0) == []
    assert store.lexical(U, tokens("violin"), node="item", k=0) == []


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=40))
def test_search_never_raises_on_random_text(store: Store, embedder, query: str) -> None:
    if not store.items(U):
        _fill(store, embedder)
    hits = Retriever(store, embedder).search(U, query, k=5)
    assert isinstance(hits, list)
    assert len(hits) <= 5
