"""``Memory.answer`` routes: a recall to the personal answerer, a computation, a temporal
comparison or a contradiction to the adaptive reasoner over the same memory; one answer
type either way, the calls counted, the model never called under the memory's lock."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from memstrata import Memory
from memstrata.programs.answer import AnswerSettings
from tests.door_script import DoorScript

ANA = "ana"


def _memory(scripted: Any, script: DoorScript) -> Memory:
    m = Memory.open(":memory:", embedder=None, lm=scripted(script))
    m.add([{"role": "user", "content": "I moved to Lisbon in May 2023"},
           {"role": "assistant", "content": "How do you like it?"}], user_id=ANA, infer=False)
    m.read("Team Aurora had 5 gold medals after day 7. Team Borealis had 3 gold medals.",
           user_id=ANA, title="Day 7 standings", source="Nordic Herald", when="2026-02-07")
    m.read("Team Aurora had 9 gold medals after day 10. Team Borealis had 4 gold medals.",
           user_id=ANA, title="Day 10 standings", source="Nordic Herald", when="2026-02-10")
    return m


def test_a_recall_takes_the_answerer_with_two_calls(scripted: Any) -> None:
    script = DoorScript("simple_recall", answer="Lisbon")
    m = _memory(scripted, script)
    out = m.answer("Where did I move in May?", user_id=ANA)
    assert out.path == "answerer" and out.intent == "simple_recall"
    assert out.answer == "Lisbon" and out.evidence  # the answerer's own fallback evidence
    # Store ids, which get reads; each source keeps the turn's id in its conversation.
    assert next(m.get(e, user_id=ANA)["text"] for e in out.evidence).startswith("I moved")
    assert [s.id for s in out.sources] == out.evidence
    assert [s.turn_id for s in out.sources] == ["t0", "t1"][:len(out.sources)]
    assert all(s.conversation_id == "default" for s in out.sources)
    assert script.asked == ["classify", "qa"] and out.llm_calls == 2
    record = m.store.runs.get(ANA, out.run_id)
    assert record is not None and record.program == "memory.answer"
    assert record.usage["calls"] == 2


def test_a_computation_takes_the_reasoner_and_its_calculator(scripted: Any) -> None:
    script = DoorScript("mathematical_computation", answer="4")
    m = _memory(scripted, script)
    out = m.answer("How many gold medals did Team Aurora gain between day 7 and day 10?",
                   user_id=ANA)
    assert out.path == "reasoner" and out.intent in ("mathematical_computation",
                                                     "temporal_comparison")
    assert script.asked[0] == "classify" and script.asked.count("classify") == 1
    assert "qa" not in script.asked and "reason" in script.asked
    assert out.llm_calls == len(script.asked) and out.llm_calls >= 3
    assert out.reasoning is not None and out.evidence  # the facts it used, by id
    assert all(m.get(e, user_id=ANA) is not None for e in out.evidence)
    assert m.store.runs.get(ANA, out.run_id).usage["calls"] == out.llm_calls


@pytest.mark.parametrize("intent", ["temporal_comparison", "contradiction_resolution",
                                    "multi_source_synthesis"])
def test_temporal_contradiction_and_synthesis_take_the_reasoner(scripted: Any,
                                                                 intent: str) -> None:
    script = DoorScript(intent, answer="Aurora")
    m = _memory(scripted, script)
    question = ("How did Team Aurora's gold medals change between day 7 and day 10?"
                if intent == "temporal_comparison" else
                "What do the reports say about Team Aurora's gold medals?")
    out = m.answer(question, user_id=ANA)
    assert out.path == "reasoner" and "qa" not in script.asked
    assert out.llm_calls == len(script.asked)


def test_rules_route_without_a_classifying_call_and_forced_paths(scripted: Any) -> None:
    script = DoorScript("mathematical_computation", answer="Lisbon")
    m = _memory(scripted, script)
    out = m.answer("Where did I move in May?", user_id=ANA, route="rules")
    assert out.path == "answerer" and script.asked == ["qa"] and out.llm_calls == 1
    script.asked.clear()
    out = m.answer("Where did I move?", user_id=ANA, route="answerer")
    assert script.asked == ["qa"] and out.model_intent == ""
    with pytest.raises(ValueError, match="route must be one of"):
        m.answer("Where?", user_id=ANA, route="psychic")


def test_read_content_is_answered_beside_what_was_said(scripted: Any) -> None:
    script = DoorScript("simple_recall", answer="9")
    m = _memory(scripted, script)
    m.answer("How many gold medals had Team Aurora after day 10?", user_id=ANA)
    shown = script.memories()
    assert "Team Aurora had 9 gold medals" in shown


def test_the_answerer_is_shown_the_block_context_packs(scripted: Any) -> None:
    """One packing path: the answerer's prompt is ``Memory.context``'s block, its
    conversation layer the answerer's own hits (turns by their ids in the conversation),
    what was read and what was learned in their own layers."""
    script = DoorScript("simple_recall", answer="9")
    m = _memory(scripted, script)
    m.learn({"task": "How many gold medals had Team Aurora?", "trajectory": [
        {"tool": "mem_search", "args": {"query": "Aurora gold medals"}}],
        "answer": "Count the gold medals of the latest standings"}, user_id=ANA, success=True,
        method="trace")
    question = "How many gold medals had Team Aurora after day 10, and where did I move?"
    m.answer(question, user_id=ANA, route="answerer")
    shown = script.memories()
    said, rest = shown.split("## What was said\n")[1].split("\n\n## What was read\n")
    read, learned = rest.split("\n\n## Strategies from past runs\n")
    assert said.startswith("[t0 · user · ") and "Lisbon" in said
    assert "Team Aurora had 9 gold medals" in read and "Team Aurora" not in said
    assert "Count the gold medals of the latest standings" in learned
    # The block Memory.context packs with the answerer's settings (the documents read
    # shown whole beside their facts).
    ctx = m.context(question, user_id=ANA, settings=AnswerSettings().context)
    assert read == ctx.text.split("## What was read\n")[1].split("\n\n")[0]
    [article] = [d for d in m.store.kind_items(ANA, "sensory") if "day 10" in d.text]
    assert f"[{article.id} · Nordic Herald · 2026-02-10] {article.text}" in read


def test_a_tenant_of_conversations_alone_is_shown_bare_lines(scripted: Any) -> None:
    script = DoorScript("simple_recall", answer="Lisbon")
    m = Memory.open(":memory:", embedder=None, lm=scripted(script))
    m.add([{"role": "user", "content": "I moved to Lisbon in May 2023"},
           {"role": "assistant", "content": "How do you like it?"}], user_id=ANA, infer=False)
    m.answer("Where did I move in May?", user_id=ANA, route="answerer")
    assert script.memories().startswith("[t0 · user · ") and "##" not in script.memories()


def test_the_model_is_not_called_under_the_memory_lock(scripted: Any) -> None:
    acquired: list[bool] = []
    holder: dict[str, Memory] = {}

    def probe() -> None:
        def other() -> None:
            got = holder["m"]._lock.acquire(timeout=2)
            acquired.append(got)
            if got:
                holder["m"]._lock.release()
        t = threading.Thread(target=other)
        t.start()
        t.join()

    script = DoorScript("mathematical_computation", answer="4", on_call=probe)
    holder["m"] = m = _memory(scripted, script)
    m.answer("How many gold medals did Team Aurora gain between day 7 and day 10?",
             user_id=ANA)
    script.intent = "simple_recall"
    m.answer("Where did I move in May?", user_id=ANA)
    assert acquired and all(acquired)  # another thread got the lock during every call


def test_answers_stay_in_their_tenant(scripted: Any) -> None:
    script = DoorScript("simple_recall", answer="Porto")
    m = _memory(scripted, script)
    m.add("My brother lives in Porto", user_id="ben", infer=False)
    out = m.answer("Where does my brother live?", user_id=ANA)
    assert "Porto" not in script.memories()
    assert all(m.get(e, user_id="ben") is None for e in out.evidence)


def test_answer_needs_an_lm_and_a_question() -> None:
    m = Memory.open(":memory:", embedder=None)
    with pytest.raises(RuntimeError, match="needs an LM"):
        m.answer("Where?", user_id=ANA)


def test_evidence_labels_that_repeat_across_conversations_resolve_to_their_own(
        scripted: Any) -> None:
    script = DoorScript("simple_recall", answer="Lisbon")
    m = _memory(scripted, script)
    # Another conversation whose turns carry the same ids (t0, t1): the evidence still
    # names the turns the answer rests on.
    m.add([{"role": "user", "content": "I adopted a cat"},
           {"role": "assistant", "content": "Lovely!"}], user_id=ANA,
          conversation_id="other", infer=False)
    out = m.answer("Where did I move in May?", user_id=ANA, conversation_id="default")
    rows = [m.get(e, user_id=ANA) for e in out.evidence]
    assert rows and all(r is not None and r["conversation_id"] == "default" for r in rows)


def test_the_run_record_times_the_whole_answer(scripted: Any) -> None:
    """The run's ``started_at`` and ``wall_s`` are the verb's, model calls included (it
    was recorded once the answer was done: ``wall_s`` was the record's own write)."""
    import time

    from memstrata.memory.models import utcnow

    script = DoorScript("simple_recall", answer="Lisbon", on_call=lambda: time.sleep(0.15))
    m = _memory(scripted, script)
    before = utcnow()
    out = m.answer("Where did I move in May?", user_id=ANA)
    record = m.store.runs.get(ANA, out.run_id)
    assert record is not None and record.wall_s is not None
    assert record.wall_s >= 0.3  # two calls of 0.15 s each
    assert before <= record.started_at <= record.finished_at
    (step,) = m.store.runs.steps(ANA, out.run_id)
    assert step.ms is not None and step.ms >= 300
