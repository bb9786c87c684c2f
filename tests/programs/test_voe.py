"""The VoE loop with a scripted model: calls, caching, facts, retrieval, persistence."""

from __future__ import annotations

import time
from typing import Any

import pytest

from memstrata.memory import Store
from memstrata.memory.voe_facts import VoEFacts
from memstrata.programs.voe import VoELoop, check_message, run_turn
from tests.conftest import field


class Script:
    """Scripted predictor/responder: records the order of calls."""

    def __init__(self, next_prediction: str = "I love hiking in the Alps",
                 needed: list[str] | None = None) -> None:
        self.calls: list[str] = []
        self.users: list[str] = []
        self.next_prediction = next_prediction
        self.needed = needed or ["hiking"]

    def __call__(self, system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        props = (schema or {}).get("properties", {})
        self.users.append(user)
        if "fact" in props:
            self.calls.append("predict+distil")
            return {"fact": f"The user said: {field(user, 'actual')}", "tags": ["cooking"],
                    "prediction": "more cooking", "needed_info": self.needed}
        if "prediction" in props:
            self.calls.append("predict")
            return {"prediction": "asks about hiking", "needed_info": self.needed}
        self.calls.append("respond")
        return {"reply": "Nice!", "next_prediction": self.next_prediction}


def test_two_calls_per_turn_prediction_cached_and_fact_only_on_mismatch(
        store: Store, scripted: Any) -> None:
    script = Script()
    handle = scripted(script)
    loop = VoELoop(store, "ana")
    first = run_turn(loop, handle, "Hello there")
    assert first.cached_prediction is None and not first.violation and first.llm_calls == 2
    assert script.calls == ["predict", "respond"]
    assert VoEFacts(store).prediction("ana") == "I love hiking in the Alps"

    matched = run_turn(loop, handle, "I love hiking in the Alps!")
    assert matched.cached_prediction == "I love hiking in the Alps"
    assert matched.score >= 60 and not matched.violation and matched.fact is None
    assert matched.llm_calls == 2 and script.calls[2:] == ["predict", "respond"]

    surprised = run_turn(loop, handle, "Actually I spent the weekend baking sourdough")
    assert surprised.violation and surprised.score < 60 and surprised.llm_calls == 2
    assert script.calls[4:] == ["predict+distil", "respond"]
    assert surprised.fact == "The user said: Actually I spent the weekend baking sourdough"
    facts = VoEFacts(store).facts("ana")
    assert [f.text for f in facts] == [surprised.fact] and facts[0].tags == ["cooking"]
    assert facts[0].evidence == ["C:5"]  # the turn that caused it
    assert facts[0].recorded_at is not None


def test_a_closing_turn_checks_and_distils_but_makes_no_prediction_or_reply(
        store: Store, scripted: Any) -> None:
    script = Script()
    handle = scripted(script)
    run_turn(VoELoop(store, "ana"), handle, "Hello there")
    matched = run_turn(VoELoop(store, "ana"), handle, "I love hiking in the Alps",
                       respond=False)
    assert not matched.violation and matched.llm_calls == 0 and matched.reply == ""
    assert VoEFacts(store).prediction("ana") is None  # nothing left for the next chat

    run_turn(VoELoop(store, "ana"), handle, "Hello again")
    surprised = run_turn(VoELoop(store, "ana"), handle, "I baked sourdough", respond=False)
    assert surprised.violation and surprised.llm_calls == 1
    assert script.calls[-1] == "predict+distil" and surprised.next_prediction == ""
    assert [f.text for f in VoEFacts(store).facts("ana")] == [surprised.fact]

    run_turn(VoELoop(store, "bo", use_facts=False), handle, "Hello")
    baseline = run_turn(VoELoop(store, "bo", use_facts=False), handle, "Boats", respond=False)
    assert baseline.violation and baseline.llm_calls == 0 and VoEFacts(store).facts("bo") == []


def test_retrieved_facts_reach_the_responder(store: Store, scripted: Any) -> None:
    facts = VoEFacts(store)
    facts.add("ana", "Ana is vegetarian", ["diet", "vegetarian"])
    facts.add("ana", "Ana hikes every weekend", ["hiking"])
    script = Script(needed=["vegetarian recipes"])
    result = run_turn(VoELoop(store, "ana"), scripted(script), "What should I cook?")
    assert result.retrieved[0]["text"] == "Ana is vegetarian"
    assert "Ana is vegetarian" in field(script.users[-1], "facts")


def test_retrieval_ranks_by_best_keyword_match_newest_first_on_ties(store: Store) -> None:
    facts = VoEFacts(store)
    old = facts.add("u", "Likes green tea", ["tea"])
    mid = facts.add("u", "Plays the cello", ["music", "cello"])
    new = facts.add("u", "Drinks black tea daily", ["tea"])
    ranked = facts.search(facts.facts("u"), ["tea"], k=3, min_score=50)
    assert [s.fact.id for s in ranked] == [new.id, old.id]  # equal scores: newest first
    assert facts.search(facts.facts("u"), ["cello"], k=1)[0].fact.id == mid.id
    assert facts.search(facts.facts("u"), [], k=3) == []
    assert len(facts.search(facts.facts("u"), ["tea"], k=1)) == 1


def test_ring_buffer_keeps_the_newest_max_facts(store: Store) -> None:
    facts = VoEFacts(store, max_facts=3)
    for i in range(5):
        facts.add("u", f"fact number {i}", [f"t{i}"])
    assert [f.text for f in facts.facts("u")] == ["fact number 2", "fact number 3",
                                                   "fact number 4"]
    with pytest.raises(ValueError, match="tags"):
        facts.add("u", "no tags", [])


def test_history_facts_and_prediction_survive_a_restart(tmp_path, scripted: Any) -> None:
    path = tmp_path / "chat.db"
    with Store.open(path) as store:
        loop = VoELoop(store, "ana")
        run_turn(loop, scripted(Script()), "Hello there")
        run_turn(loop, scripted(Script()), "I went sailing")
    with Store.open(path) as store:
        loop = VoELoop(store, "ana")
        assert [who for who, _ in loop.messages] == ["user", "assistant", "user", "assistant"]
        assert VoEFacts(store).prediction("ana") == "I love hiking in the Alps"
        assert len(VoEFacts(store).facts("ana")) == 1
        script = Script()
        run_turn(loop, scripted(script), "Tell me more")
        assert "I went sailing" in field(script.users[0], "history")


def test_users_are_isolated(store: Store, scripted: Any) -> None:
    run_turn(VoELoop(store, "ana"), scripted(Script()), "Hello")
    run_turn(VoELoop(store, "ana"), scripted(Script()), "Something unexpected entirely")
    bob = VoELoop(store, "bob")
    assert bob.messages == [] and VoEFacts(store).facts("bob") == []
    assert VoEFacts(store).prediction("bob") is None
    result = run_turn(bob, scripted(Script()), "Hi")
    assert result.cached_prediction is None and not result.violation


def test_bad_messages_are_refused_and_change_nothing(store: Store) -> None:
    loop = VoELoop(store, "ana")
    for bad in ("", "   ", "x" * 5000):
        with pytest.raises(ValueError):
            check_message(bad)
    with pytest.raises(ValueError, match="empty"):
        loop("  ")
    assert loop.messages == [] and store.turns("ana") == []


def test_baseline_arm_stores_and_shows_no_facts(store: Store, scripted: Any) -> None:
    script = Script()
    loop = VoELoop(store, "ana", use_facts=False)
    run_turn(loop, scripted(script), "Hello")
    result = run_turn(loop, scripted(script), "Something else entirely, about boats")
    assert result.violation and result.fact is None and result.llm_calls == 2
    assert script.calls == ["predict", "respond", "predict", "respond"]
    assert VoEFacts(store).facts("ana") == []


def test_local_check_and_retrieval_are_fast_at_max_facts(store: Store, scripted: Any) -> None:
    facts = VoEFacts(store)
    for i in range(200):
        facts.add("ana", f"Ana mentioned topic {i} about gardening and tomatoes", [f"topic{i}"])
    loop = VoELoop(store, "ana")
    started = time.perf_counter()
    result = run_turn(loop, scripted(Script(needed=["tomatoes", "garden", "topic 7"])), "Hi")
    assert result.local_ms < 1000 * (time.perf_counter() - started)
    assert len(result.retrieved) == 10  # TOP_K
