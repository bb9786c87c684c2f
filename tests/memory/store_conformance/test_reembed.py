"""Vectors of another embedder, on both backends (``backend``, see ``conftest.py``):
``vector_models`` counts a tenant's node vectors per model, ``embedder_gap`` names a
tenant whose rows another model embedded, and ``reembed`` gives every turn and item the
vector the write paths would have given it (a turn with the turn before it, a strategy
with the bank's text), once, in its own tenant only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from memstrata.memory import FactItem, StrategyItem, embed
from memstrata.memory.bank import embedding_text
from memstrata.memory.extras import MissingExtraError
from memstrata.memory.models import Conversation, Session, Turn
from memstrata.memory.reembed import embedder_gap, reembed, stored_embedder
from tests.conftest import FakeEmbedder


class OtherEmbedder(FakeEmbedder):
    """Another model: its own name and a vector of another size."""

    name = "fake-other"
    dim = 32


class NamedMiniLM(FakeEmbedder):
    """Stands in for the transformer: its model name, none of its weights."""

    name = embed.MiniLMEmbedder.name


class NamedStatic(FakeEmbedder):
    """Stands in for the shipped static model by its model name."""

    name = embed.DEFAULT_MODEL


def _fill(store: Any, user: str, turns: int) -> tuple[list[str], list[str]]:
    """A tenant with ``turns`` turns over two sessions, a fact and a strategy, written
    with the store's embedder; their ids (turns, items)."""
    store.add_conversation(Conversation(id="c1", user_id=user))
    ids: list[str] = []
    for s in range(2):
        store.add_session(Session(id=f"s{s}", user_id=user, conversation_id="c1", index=s))
        ids += store.add_turns([
            Turn(user_id=user, conversation_id="c1", session_id=f"s{s}", turn_id=f"s{s}:{i}",
                 seq=s * 100 + i, speaker="user" if i % 2 == 0 else "assistant",
                 text=f"message {i} of session {s}: I take oat milk in my coffee {user}")
            for i in range(turns // 2)])
    items = store.add_many([
        FactItem(user_id=user, text=f"{user} lives in Lisbon"),
        StrategyItem(user_id=user, title="Read the guide first", description="when lost",
                     text="Open the city guide before asking")])
    return ids, items


def test_reembed_gives_each_row_the_vector_its_write_would_have(backend: Any) -> None:
    backend.embedder = FakeEmbedder()
    turn_ids, item_ids = _fill(backend, "ana", 6)
    _fill(backend, "bob", 2)
    assert backend.vector_models("ana") == {"fake-hash": 8}
    other = OtherEmbedder()
    gap = embedder_gap(backend, "ana", other)
    assert gap is not None and "fake-hash" in gap and "fake-other" in gap and "8 rows" in gap
    assert embedder_gap(backend, "ana", FakeEmbedder()) is None

    report = reembed(backend, "ana", other)
    assert (report.turns, report.items, report.already) == (6, 2, 0)
    assert backend.vector_models("ana") == {"fake-hash": 8, "fake-other": 8}
    assert backend.vector_models("bob") == {"fake-hash": 4}  # another tenant: untouched
    assert embedder_gap(backend, "ana", other) is None

    ids, matrix = backend.vectors("ana", "fake-other")
    got = dict(zip(ids, matrix, strict=True))
    turns = backend.turns("ana")
    assert [t.id for t in turns] == turn_ids
    want = other.encode(backend.contextual_texts(turns))
    for turn, vector in zip(turns, want, strict=True):
        np.testing.assert_array_equal(got[turn.id], vector)
    fact, strategy = backend.get_many("ana", item_ids)
    np.testing.assert_array_equal(got[fact.id], other.encode([fact.text])[0])
    np.testing.assert_array_equal(got[strategy.id], other.encode([embedding_text(strategy)])[0])

    again = reembed(backend, "ana", other)
    assert (again.turns, again.items, again.already) == (0, 0, 8)


def test_a_tenant_without_vectors_has_no_gap(backend: Any) -> None:
    _fill(backend, "ana", 2)  # the store has no embedder: no vectors at all
    assert backend.vector_models("ana") == {}
    assert embedder_gap(backend, "ana", FakeEmbedder()) is None
    assert reembed(backend, "ana", FakeEmbedder()).turns == 2
    assert backend.vector_models("ana") == {"fake-hash": 4}


def test_the_whole_store_s_vector_models_add_up_every_tenant(backend: Any) -> None:
    backend.embedder = FakeEmbedder()
    _fill(backend, "ana", 6)
    _fill(backend, "bob", 2)
    backend.embedder = OtherEmbedder()
    _fill(backend, "cy", 2)
    assert backend.vector_models(None) == {"fake-hash": 12, "fake-other": 4}
    assert backend.vector_models("cy") == {"fake-other": 4}


def test_the_stored_embedder_is_the_named_model_of_most_vectors(
        backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[int] = []

    def counted() -> NamedMiniLM:
        loads.append(1)
        return NamedMiniLM()

    monkeypatch.setitem(embed.EMBEDDERS, "minilm", counted)  # type: ignore[index]
    assert stored_embedder(backend) is None  # no vectors yet: the default
    backend.embedder = NamedMiniLM()
    _fill(backend, "ana", 6)
    found = stored_embedder(backend)
    assert found is not None and (found.name, found.dim) == ("all-MiniLM-L6-v2", 384)
    assert not loads  # named, not loaded: opening to count rows loads no transformer
    np.testing.assert_array_equal(found.encode(["oat milk"]), NamedMiniLM().encode(["oat milk"]))
    found.encode(["again"])
    assert isinstance(found.loaded(), NamedMiniLM) and len(loads) == 1
    backend.embedder = NamedStatic()
    _fill(backend, "bob", 10)  # 12 static vectors against 8
    assert stored_embedder(backend) is None
    backend.embedder = FakeEmbedder()
    _fill(backend, "cy", 20)  # most are a model no name loads: the default, and search warns
    assert stored_embedder(backend) is None


def test_a_stored_model_without_its_extra_says_how_to_open_it(
        backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Any:
        raise MissingExtraError("sentence_transformers", "minilm", "the MiniLM embedder")

    monkeypatch.setitem(embed.EMBEDDERS, "minilm", missing)  # type: ignore[index]
    backend.embedder = NamedMiniLM()
    _fill(backend, "ana", 2)
    found = stored_embedder(backend)
    assert found is not None
    with pytest.raises(MissingExtraError, match=r"memstrata\[minilm\].*vectors are "
                       r"all-MiniLM-L6-v2's.*embedder='static'"):
        found.encode(["coffee"])
