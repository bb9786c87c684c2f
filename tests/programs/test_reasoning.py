"""The adaptive reasoner's control flow, per intent, with a scripted LM."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import dspy
import pytest

from memstrata.memory import Store
from memstrata.memory.cognitive import CognitiveMemory
from memstrata.programs.reasoning import (
    AdaptiveReasoner,
    ReasoningTrace,
    apply_calculation,
    question_anchors,
    render_facts,
    uncovered,
)

U = "reader"


def _when(day: int) -> datetime:
    return datetime(2026, 2, day, tzinfo=UTC)


@pytest.fixture
def mind() -> CognitiveMemory:
    store = Store.open(":memory:", embedder=None)
    mind = CognitiveMemory(store, U)
    mind.read("Team Aurora had 5 gold medals after day 7. Team Borealis had 3 gold medals.",
              title="Day 7 standings", source="Nordic Herald", when=_when(7))
    mind.read("Team Aurora had 9 gold medals after day 10. Team Borealis had 4 gold medals.",
              title="Day 10 standings", source="Nordic Herald", when=_when(10))
    return mind


class Script:
    """Replies per program (told apart by their instructions), and what each was shown."""

    def __init__(self, intent: str, *, answer: str = "9", expression: str = "",
                 sufficient: bool = True, queries: tuple[str, ...] = ("Aurora gold",),
                 operation: str = "difference", values: tuple[str, ...] = ("5", "9")
                 ) -> None:
        self.intent, self.answer, self.expression = intent, answer, expression
        self.sufficient, self.queries = sufficient, list(queries)
        self.operation, self.values = operation, list(values)
        self.seen: dict[str, list[str]] = {}

    def __call__(self, system: str, user: str, schema: Any) -> dict[str, Any]:
        reads = len(self.seen.get("Answer with the one number", []))
        for key, reply in (
                ("Classify what answering", {"intent": self.intent}),
                ("Write short keyword search queries", {"queries": self.queries}),
                ("Break the question into simple questions", {
                    "subquestions": [f"{q}?" for q in self.queries],
                    "operation": self.operation}),
                ("Answer with the one number", {
                    "value": self.values[reads % len(self.values)]}),
                ("Decide whether the numbered facts", {
                    "sufficient": self.sufficient, "missing": "", "queries": []}),
                ("Answer the question from the numbered facts", {
                    "operands": [], "expression": self.expression, "answer": self.answer,
                    "used": [1, 2]} if "First write" in system else {
                    "answer": self.answer, "used": [1, 2]})):
            if system.startswith(key):
                self.seen.setdefault(key, []).append(user)
                return reply
        raise AssertionError(f"unexpected program: {system[:60]}")


def _run(scripted: Callable[..., Any], mind: CognitiveMemory, script: Script,
         question: str) -> tuple[dspy.Prediction, int]:
    handle = scripted(script)
    with dspy.context(lm=handle.lm):
        pred = AdaptiveReasoner()(question=question, mind=mind)
    return pred, handle.meter.since(0).calls


def test_simple_recall_is_one_pass_with_two_calls(scripted: Callable[..., Any],
                                                  mind: CognitiveMemory) -> None:
    pred, calls = _run(scripted, mind, Script("simple_recall"),
                       "How many gold medals did Team Aurora have after day 10?")
    trace: ReasoningTrace = pred.trace
    assert (trace.steps, calls, pred.answer) == (1, 2, "9")
    assert trace.rounds[0].sufficient is None  # no evaluation on a one-pass question
    assert trace.slots_written >= 3  # question, retrieved facts, the step
    assert mind.working.tasks() == []  # cleared after the answer
    episodes = mind.episodic.episodes()
    assert any(e.source_label == "task" and "Aurora" in e.text for e in episodes)


def test_math_answer_is_computed_by_the_calculator(scripted: Callable[..., Any],
                                                   mind: CognitiveMemory) -> None:
    script = Script("mathematical_computation", answer="Team Aurora gained 5 golds",
                    expression="9 + 5", queries=("Aurora golds day 7", "Aurora golds day 10"))
    pred, calls = _run(scripted, mind, script,
                       "How many more gold medals did Team Aurora have after day 10 than "
                       "after day 7?")
    trace = pred.trace
    # The sub-questions' values, combined by the calculator, decide the number: the
    # model's own expression (9 + 5) and its stated 5 are overruled.
    assert trace.subquestions == ["Aurora golds day 7?", "Aurora golds day 10?"]
    assert trace.subvalues == ["5", "9"]
    assert pred.answer == "Team Aurora gained 4 golds"
    assert (trace.recomputed, trace.value, trace.expression) == (1, "4", "abs(9 - 5)")
    shown = script.seen["Answer the question from the numbered facts"][0]
    assert "abs(9 - 5) = 4" in shown  # the computation is handed to the answer step
    # intent, decompose, evaluate, two values, answer
    assert trace.steps == 1 and calls == 6


def test_a_missing_value_falls_back_to_the_models_expression(
        scripted: Callable[..., Any], mind: CognitiveMemory) -> None:
    script = Script("mathematical_computation", answer="7", expression="9 - 5",
                    queries=("Aurora day 7", "Aurora day 10"), values=("no idea",))
    pred, _ = _run(scripted, mind, script,
                   "How many more gold medals did Team Aurora have after day 10 than "
                   "after day 7?")
    assert pred.trace.subvalues == ["no idea"] and pred.answer == "4"


def test_a_combining_step_is_not_read_as_a_value(scripted: Callable[..., Any],
                                                mind: CognitiveMemory) -> None:
    # A small model's decomposition often ends with the arithmetic itself as a "question";
    # read as a value, its ".1" became an operand (abs(0.1 - 4100000)).
    script = Script("mathematical_computation", answer="4", expression="",
                    queries=("Aurora golds day 7", "Aurora golds day 10",
                             "Calculate the difference between the two"))
    pred, _ = _run(scripted, mind, script,
                   "How many more gold medals did Team Aurora have after day 10 than "
                   "after day 7?")
    trace = pred.trace
    assert trace.subvalues == ["5", "9"] and trace.expression == "abs(9 - 5)"
    assert len(script.seen["Answer with the one number"]) == 2


@pytest.mark.parametrize(("queries", "values"), [
    (("Aurora golds day 7", "Aurora golds day 8", "Aurora golds day 10"), ("5", "7", "9")),
    (("Aurora golds, first report", "Aurora golds, second report"), ("9", "9"))])
def test_a_difference_needs_two_different_values(
        scripted: Callable[..., Any], mind: CognitiveMemory, queries: tuple[str, ...],
        values: tuple[str, ...]) -> None:
    # Three values have no one gap, and two equal readings are one fact read twice: the
    # model's own answer stands rather than a computed 4 (of the first and last) or 0.
    script = Script("mathematical_computation", answer="4", expression="", queries=queries,
                    values=values)
    pred, _ = _run(scripted, mind, script,
                   "By how much did Team Aurora's gold count grow from day 7 to day 10?")
    assert pred.answer == "4" and pred.trace.recomputed == 0
    assert pred.trace.value is None


def test_uncovered_anchor_forces_another_round(scripted: Callable[..., Any]) -> None:
    store = Store.open(":memory:", embedder=None)
    mind = CognitiveMemory(store, U)
    mind.read("Team Aurora had 5 gold medals after day 7.", source="Herald", when=_when(7))
    mind.read("Ski jumper Ola Berg landed 140 metres.", source="Post", when=_when(8))
    script = Script("temporal_comparison", sufficient=True, queries=("Aurora medals",))
    pred, _ = _run(scripted, mind, script,
                   "How many gold medals did Team Aurora gain between day 7 and day 12?")
    trace = pred.trace
    first = trace.rounds[0]
    assert first.model_sufficient is True and first.uncovered == ["day 12"]
    assert first.sufficient is False  # the model said yes; the rule said no
    assert trace.steps == 2 and trace.refined_queries == 1
    assert trace.rounds[1].queries == ["day 12"]


def test_allowance_caps_the_rounds(scripted: Callable[..., Any],
                                   mind: CognitiveMemory) -> None:
    script = Script("multi_source_synthesis", sufficient=False, queries=("q1", "q2"))
    # The evaluation keeps asking for more but never names new queries: one refinement
    # comes from the rule alone (the uncovered anchor), then the allowance (2) ends it.
    pred, _ = _run(scripted, mind, script,
                   "Which team had more gold medals on day 99, Aurora or Borealis?")
    assert pred.trace.steps == pred.trace.allowance == 2


def test_contradiction_shows_both_sides_newer_marked(scripted: Callable[..., Any]) -> None:
    store = Store.open(":memory:", embedder=None)
    mind = CognitiveMemory(store, U)
    mind.read("The Fjellheim Cup final drew 4.1 million viewers.", source="NRK",
              when=_when(3))
    mind.read("The Fjellheim Cup final drew 3.6 million viewers.", source="Medietall",
              when=_when(5))
    script = Script("contradiction_resolution", answer="4.1 million (NRK), 3.6 million")
    pred, _ = _run(scripted, mind, script, "How many viewers watched the Fjellheim Cup final?")
    assert pred.trace.intent == "contradiction_resolution"
    shown = script.seen["Answer the question from the numbered facts"][0]
    assert "4.1 million" in shown and "3.6 million" in shown
    assert "this report is newer" in shown and "this report is older" in shown


def test_question_anchors_and_uncovered() -> None:
    anchors = question_anchors("How many golds did Team Aurora win between day 7 and day 10?")
    assert anchors == ["day 7", "day 10", "Team Aurora"]
    assert question_anchors("Which team had 5 golds on Day 3?") == ["5", "Day 3"]
    assert question_anchors("By how much did Eskerholt's total grow?") == ["Eskerholt"]
    store = Store.open(":memory:", embedder=None)
    mind = CognitiveMemory(store, U)
    mind.read("Team Aurora won on day 7.", source="Herald", when=_when(7))
    facts = mind.recall("Team Aurora day 7")
    assert uncovered(["day 7", "day 10", "Team Aurora"], facts) == ["day 10"]
    assert "Herald" in render_facts(facts)


def test_a_procedure_is_shown_with_its_steps_once() -> None:
    from memstrata.memory.cognitive import Recalled
    from memstrata.memory.cognitive.procedural import procedure_text

    steps = ["Stop the server", "Run the migration", "Start the server"]
    shown = render_facts([Recalled(id="p", kind="procedural", score=1.0, steps=steps,
                                   text=procedure_text("Upgrade the database", steps))])
    assert shown == ("[1] Upgrade the database: 1. Stop the server 2. Run the migration "
                     "3. Start the server")
    # A procedure whose text was rewritten keeps its steps after it.
    edited = render_facts([Recalled(id="p", kind="procedural", score=1.0, steps=steps,
                                    text="Upgrade with care")])
    assert edited == ("[1] Upgrade with care Steps: 1. Stop the server 2. Run the "
                      "migration 3. Start the server")


def test_a_bad_expression_keeps_the_answer() -> None:
    trace = ReasoningTrace(task_id="t", intent="mathematical_computation", allowance=3)
    assert apply_calculation("about 12", "__import__('os')", trace) == "about 12"
    assert trace.calculator_error and trace.recomputed == 0
    assert apply_calculation("12 and 3", "12 - 3", trace) == "12 and 3 (12 - 3 = 9)"
    assert trace.recomputed == 1


def test_empty_question_is_refused(mind: CognitiveMemory) -> None:
    with pytest.raises(ValueError, match="empty"):
        AdaptiveReasoner()(question="  ", mind=mind)


def test_incremental_update_sees_facts_in_date_order(scripted: Callable[..., Any]) -> None:
    store = Store.open(":memory:", embedder=None)
    mind = CognitiveMemory(store, U)
    mind.read("Sander Quist now holds the record alone with 10 titles.", source="Courier",
              when=_when(14))
    mind.read("Sander Quist equalled the record of 9 titles.", source="Wire", when=_when(8))
    script = Script("incremental_update", answer="10")
    pred, calls = _run(scripted, mind, script, "How many titles does Sander Quist hold?")
    shown = script.seen["Answer the question from the numbered facts"][0]
    assert shown.index("9 titles") < shown.index("10 titles")  # oldest first
    assert pred.trace.steps == 1 and calls == 4  # the names were found: one round
    assert "Answer with the newest value" in shown and pred.answer == "10"


def test_lifecycle_work_costs_no_llm_call(scripted: Callable[..., Any]) -> None:
    handle = scripted(Script("simple_recall"))
    with dspy.context(lm=handle.lm):
        mind = CognitiveMemory(Store.open(":memory:", embedder=None), U)
        mind.prospective.intend("Ask about skiing", keywords=["skiing"])
        mind.read("1. Wax the skis. 2. Clip in. The skiing season opened on Monday.",
                  source="Guide", when=_when(2))
        mind.recall("skiing season")
        mind.working.push("t", "plan", "check the season")
        mind.working.complete("t", outcome="done")
        mind.maintain()
    assert handle.meter.since(0).calls == 0


def test_the_intent_check_reads_the_questions_words() -> None:
    from memstrata.programs.effort import checked_intent

    then_now = "What was the record before May 3, and what is it now?"
    assert checked_intent(then_now, "simple_recall") == "temporal_comparison"
    assert checked_intent(then_now, "temporal_comparison") == "temporal_comparison"
    assert checked_intent("How many golds did Aurora win after day 5?",
                          "temporal_comparison") == "simple_recall"
    assert checked_intent("How many golds did Aurora gain between day 7 and day 10?",
                          "simple_recall") == "temporal_comparison"
    assert checked_intent("What is the total of both budgets?",
                          "simple_recall") == "mathematical_computation"
    assert checked_intent("Where do I live now?", "simple_recall") == "simple_recall"
    assert checked_intent("Where did I live before Lisbon?", "simple_recall") == (
        "simple_recall")
