"""The optional LLM rerank stage: one listwise call, picks first, the rest in order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from memstrata.memory import Hit, Retriever, Store, Turn
from memstrata.programs.errors import ProgramParseError
from memstrata.programs.rerank import RerankingRetriever, reorder
from tests.conftest import field


def _hit(n: int) -> Hit:
    return Hit(id=f"t{n}", node="turn", kind="turn", text=f"passage {n}", score=1.0 / n)


def test_reorder_puts_the_picks_first_and_ignores_bad_numbers() -> None:
    hits = [_hit(n) for n in range(1, 6)]
    assert [h.id for h in reorder(hits, [3, 9, 0, 3, 1])] == ["t3", "t1", "t2", "t4", "t5"]
    assert reorder(hits, []) == hits


@pytest.fixture
def store() -> Store:
    s = Store.open(":memory:", embedder=None)
    texts = ["I adopted a cat named Oscar.", "We went hiking in the Alps.",
             "My cat Oscar loves the garden.", "I started the violin."]
    s.add_turns([Turn(user_id="u", conversation_id="c", session_id="1", turn_id=f"D1:{n}",
                      seq=n, speaker="Ana", text=t) for n, t in enumerate(texts, 1)])
    return s


def test_the_model_reorders_the_top_hits(store: Store, scripted: Callable[..., Any]) -> None:
    seen: list[str] = []

    def reply(system: str, user: str, schema: Any) -> dict[str, list[int]]:
        seen.append(field(user, "passages"))
        lines = seen[-1].splitlines()
        violin = next(n for n, line in enumerate(lines, 1) if "violin" in line)
        return {"useful": [violin]}

    handle = scripted(reply)
    retriever = RerankingRetriever(Retriever(store, None), handle, depth=3)
    hits = retriever.search("u", "cat violin", k=2)
    assert "violin" in hits[0].text and len(hits) == 2
    assert handle.meter.since(0).calls == 1
    assert seen[0].startswith("[1] Ana: ") and seen[0].count("\n") == 2  # depth 3
    assert retriever.replies[0]["query"] == "cat violin"


def test_a_reply_that_never_parses_fails_loudly(store: Store,
                                                scripted: Callable[..., Any]) -> None:
    handle = scripted(lambda system, user, schema: "the second one")
    retriever = RerankingRetriever(Retriever(store, None), handle, depth=3)
    with pytest.raises(ProgramParseError, match="rerank"):
        retriever.search("u", "cat", k=2)
    assert handle.meter.since(0).calls == 2  # the retry, then the error


def test_depth_must_leave_something_to_reorder(store: Store,
                                               scripted: Callable[..., Any]) -> None:
    with pytest.raises(ValueError, match="depth"):
        RerankingRetriever(Retriever(store, None), scripted(lambda *a: {}), depth=1)
