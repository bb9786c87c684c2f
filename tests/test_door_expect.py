"""``Memory.expect``: the VoE loop for an app with its own model. ``add`` checks nothing;
``expect`` checks the user's message against the pending expectation, distils a surprise
and predicts again, in one call; ``context`` shows what it left; forget and export
cover it; tenants and conversations stay apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memstrata import Memory
from memstrata.memory.voe_facts import VoEFacts
from tests.door_script import DoorScript

ANA = "ana"


def _turn(m: Memory, role: str, text: str, user: str = ANA, conv: str = "chat") -> None:
    m.add({"role": role, "content": text}, user_id=user, conversation_id=conv, infer=False)


def test_expect_then_a_surprising_add_is_distilled_at_the_next_expect(scripted: Any,
                                                                      tmp_path: Path) -> None:
    script = DoorScript(prediction="I love hiking in the Alps", needed=("hiking",))
    m = Memory.open(tmp_path / "m.db", embedder=None, lm=scripted(script))
    _turn(m, "user", "Hi, I am Ana")
    _turn(m, "assistant", "Hello Ana! What do you like to do?")
    first = m.expect(ANA, conversation_id="chat")
    assert first.checked is None and first.prediction == "I love hiking in the Alps"
    assert first.llm_calls == 1 and script.asked == ["voe.predict"]
    assert "Hello Ana" in script.seen["voe.predict"][0]  # it saw the assistant's reply

    mark = m.lm.meter.mark()
    _turn(m, "user", "Actually I spent the weekend baking sourdough")
    assert m.lm.meter.since(mark).calls == 0  # add checks nothing, calls nothing
    _turn(m, "assistant", "Sourdough! How did it turn out?")
    second = m.expect(ANA, conversation_id="chat")
    assert second.checked is not None and second.checked.violation
    assert second.checked.actual == "Actually I spent the weekend baking sourdough"
    assert second.fact == "The user said: Actually I spent the weekend baking sourdough"
    assert second.llm_calls == 1 and script.asked == ["voe.predict", "voe.distil"]
    fact = m.get(second.fact_id, user_id=ANA)
    assert fact is not None and fact["evidence"] == [second.checked.turn]
    assert m.get(second.checked.turn, user_id=ANA)["text"].startswith("Actually")
    run = m.store.runs.get(ANA, second.run_id)
    assert run.program == "memory.expect" and run.usage == {"calls": 1}

    ctx = m.context("Any tips for my sourdough?", user_id=ANA, layers=["voe"])
    assert second.id in ctx.ids and second.fact_id in ctx.ids
    assert "Expected next: I love hiking in the Alps" in ctx.text

    _turn(m, "user", "I love hiking in the Alps!")
    third = m.expect(ANA, conversation_id="chat")
    assert third.checked is not None and not third.checked.violation and third.fact is None
    again = m.expect(ANA, conversation_id="chat")  # nothing new said: nothing checked
    assert again.checked is None and len(VoEFacts(m.store).facts(ANA)) == 1


def test_conversations_and_tenants_keep_their_own_expectations(scripted: Any) -> None:
    script = DoorScript(prediction="tell me about trains")
    m = Memory.open(":memory:", embedder=None, lm=scripted(script))
    _turn(m, "user", "hello", conv="a")
    _turn(m, "user", "hello", user="ben", conv="a")
    mine = m.expect(ANA, conversation_id="a")
    theirs = m.expect("ben", conversation_id="a")
    _turn(m, "user", "something else entirely about boats", conv="b")
    other = m.expect(ANA, conversation_id="b")
    assert other.checked is None  # conversation b had no expectation yet
    assert {mine.id, theirs.id, other.id} == {i for i in (mine.id, theirs.id, other.id) if i}
    assert m.get(theirs.id, user_id=ANA) is None
    assert m.get(mine.id, user_id=ANA) is not None  # b's expectation did not replace a's
    with pytest.raises(ValueError, match="holds no turn"):
        m.expect(ANA, conversation_id="empty")


def test_delete_all_and_export_cover_the_loop(scripted: Any, tmp_path: Path) -> None:
    m = Memory.open(tmp_path / "a.db", embedder=None, lm=scripted(DoorScript()))
    _turn(m, "user", "hello")
    m.expect(ANA, conversation_id="chat")
    _turn(m, "user", "I restore old motorbikes")
    out = m.expect(ANA, conversation_id="chat")
    assert out.fact_id and out.id
    m.export(ANA, tmp_path / "ana.jsonl")
    other = Memory.open(tmp_path / "b.db", embedder=None)
    other.import_(tmp_path / "ana.jsonl")
    assert other.get(out.fact_id, user_id=ANA)["text"] == out.fact
    assert VoEFacts(other.store).prediction(ANA) == out.prediction
    m.delete_all(ANA)
    assert m.get(out.fact_id) is None and m.get(out.id) is None
    assert VoEFacts(m.store).facts(ANA) == [] and m.store.runs.list(ANA) == []


def test_expect_needs_an_lm() -> None:
    m = Memory.open(":memory:", embedder=None)
    m.add("hello", user_id=ANA, infer=False)
    with pytest.raises(RuntimeError, match="needs an LM"):
        m.expect(ANA)
