"""`bench retrieval`: the leave-one-conversation-out protocol (no held-out question ever
chooses a knob), the report, and extra encoders measured in the same run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from memstrata.bench.locomo import Question
from memstrata.bench.retrieval import run_retrieval_bench
from memstrata.bench.retrieval_cv import changed, cross_validate, mean_recall, tune
from memstrata.memory import SearchWeights

# Each conversation is served by one value of "dense" (c by the default, 0.4): whatever
# two conversations agree on misses the third.
BEST_DENSE = {"a": 0.7, "b": 0.2, "c": 0.4}
KNOBS = {"dense": (0.2, 0.4, 0.7)}


def _questions(per_conversation: int = 3) -> list[Question]:
    return [Question(sample_id=c, index=i, question=f"q{i}", category=1, evidence=["D1:1"])
            for c in BEST_DENSE for i in range(per_conversation)]


class Spy:
    """An evaluator that logs which conversations each call ranks, and with what weights."""

    def __init__(self) -> None:
        self.calls: list[tuple[frozenset[str], float]] = []

    def __call__(self, weights: SearchWeights, questions: Sequence[Question]
                 ) -> dict[str, list[str]]:
        self.calls.append((frozenset(q.sample_id for q in questions), weights.dense))
        return {q.qid: (["D1:1"] if weights.dense == BEST_DENSE[q.sample_id] else ["D9:9"])
                for q in questions}


def test_no_fold_chooses_a_knob_with_the_conversation_it_scores() -> None:
    spy = Spy()
    found = cross_validate(spy, _questions(), SearchWeights(), knobs=KNOBS, rounds=2)
    folds = [f["held_out"] for f in found["folds"]]
    assert folds == ["a", "b", "c"]
    # The log reads: fold a's choosing calls, fold a's scoring call, fold b's ... then the
    # in-sample search. A scoring call ranks exactly the held-out conversation, and no
    # call before it in its fold touched that conversation.
    segment: list[frozenset[str]] = []
    scored = []
    for convs, _ in spy.calls:
        if len(convs) == 1:
            (held,) = convs
            assert segment, "a fold scored without choosing"
            assert all(held not in s for s in segment), f"{held} chose its own knobs"
            scored.append(held)
            segment = []
        else:
            segment.append(convs)
    assert scored == folds
    assert segment and all(s == {"a", "b", "c"} for s in segment)  # the in-sample search


def test_held_out_figures_pay_for_a_knob_fitted_elsewhere() -> None:
    questions = _questions()
    found = cross_validate(Spy(), questions, SearchWeights(), knobs=KNOBS, rounds=2)
    by_fold = {f["held_out"]: f for f in found["folds"]}
    # b + c (a left out) tie at 0.5 for every value: the start (0.4) is kept; a + b: 0.2
    # wins b strictly first, 0.7 only ties it.
    assert by_fold["a"]["changed"] == {} and by_fold["c"]["changed"] == {"dense": 0.2}
    assert all(f["train_recall@10"] == 0.5 for f in found["folds"])
    assert all(f["held_out_recall@10"] == 0.0 for f in found["folds"])
    assert mean_recall(found["rankings"], questions, 10) == 0.0
    assert found["tuned"]["changed"] == {}
    assert mean_recall(found["tuned"]["rankings"], questions, 10) == pytest.approx(1 / 3)


def test_tune_keeps_the_start_on_ties_and_moves_on_a_strict_gain() -> None:
    flat = tune(lambda w, qs: {q.qid: ["D1:1"] for q in qs}, _questions(), SearchWeights(),
                knobs=KNOBS)
    assert flat[0] == SearchWeights() and flat[1] == 1.0
    only_b = [q for q in _questions() if q.sample_id == "b"]
    chosen, score = tune(Spy(), only_b, SearchWeights(), knobs=KNOBS)
    assert changed(SearchWeights(), chosen) == {"dense": 0.2} and score == 1.0


def test_cross_validation_needs_two_conversations() -> None:
    one = [q for q in _questions() if q.sample_id == "a"]
    with pytest.raises(ValueError, match="two conversations"):
        cross_validate(Spy(), one, SearchWeights(), knobs=KNOBS)


def _conversation(make_record: Any, sample_id: str, pet: str) -> dict[str, Any]:
    sessions = {1: [
        {"speaker": "Alice", "dia_id": "D1:1", "text": f"I adopted a {pet} last week."},
        {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! I started learning the violin."},
        {"speaker": "Alice", "dia_id": "D1:3", "text": "We went hiking in the Alps."},
    ]}
    qa = [{"question": "What pet did Alice adopt?", "answer": pet, "evidence": ["D1:1"],
           "category": 1},
          {"question": "What instrument is Bob learning?", "answer": "violin",
           "evidence": ["D1:2"], "category": 4}]
    return make_record(sample_id, sessions=sessions, qa=qa)


def test_bench_reports_cv_beside_the_in_sample_figure(make_record, write_json) -> None:
    data = write_json("three.json", [_conversation(make_record, f"conv-{n}", pet)
                                     for n, pet in enumerate(("guinea pig", "cat", "parrot"))])
    doc = run_retrieval_bench(data, cv=True, cv_rounds=1, cv_knobs={"session": (0.0, 0.3)},
                              progress=False)
    cv = doc["systems"]["memstrata"]["cv"]
    assert set(cv) >= {"recall@5", "recall@10", "folds", "tuned_in_sample"}
    assert [f["held_out"] for f in cv["folds"]] == ["conv-0", "conv-1", "conv-2"]
    assert cv["recall@10"]["overall"] == 1.0  # three turns: everything is in the top 10
    assert cv["knobs"] == {"session": [0.0, 0.3]}
    assert "cv" not in doc["systems"]["bm25_tokens"]


def test_bench_refuses_cv_on_one_conversation(make_record, write_json) -> None:
    data = write_json("one.json", [_conversation(make_record, "conv-0", "cat")])
    with pytest.raises(ValueError, match="two or more"):
        run_retrieval_bench(data, cv=True, progress=False)
    with pytest.raises(ValueError, match="cv-rounds"):
        run_retrieval_bench(data, cv=False, cv_rounds=0, progress=False)


def test_the_table_shows_the_cv_rows(make_record, write_json) -> None:
    from memstrata.bench.report import retrieval_table

    data = write_json("two.json", [_conversation(make_record, f"conv-{n}", pet)
                                   for n, pet in enumerate(("cat", "parrot"))])
    table = retrieval_table(run_retrieval_bench(
        data, cv=True, cv_rounds=1, cv_knobs={"graph": (0.0,)}, progress=False))
    assert "cv (held out)" in table and "tuned in-sample" in table
    assert "fold conv-0: recall@10 1.000 held out" in table
    assert table.count("cv (held out)") == 2  # k=5 and k=10, under memstrata only


def test_more_encoders_add_their_own_systems(make_record, write_json, embedder) -> None:
    data = write_json("two.json", [_conversation(make_record, f"conv-{n}", pet)
                                   for n, pet in enumerate(("cat", "parrot"))])
    doc = run_retrieval_bench(data, encoders=[embedder], progress=False)
    assert {"dense:fake-hash", "memstrata:fake-hash"} <= set(doc["systems"])
    assert doc["ingest"]["encoders"]["fake-hash"]["turns"] == 6
    assert doc["systems"]["memstrata:fake-hash"]["recall@10"]["overall"] == 1.0
    with pytest.raises(ValueError, match="already the bench's embedder"):
        run_retrieval_bench(data, embedder=embedder, encoders=[embedder], progress=False)


def test_the_rerank_system_reports_its_cost(make_record, write_json, scripted) -> None:
    data = write_json("two.json", [_conversation(make_record, f"conv-{n}", pet)
                                   for n, pet in enumerate(("cat", "parrot"))])
    handle = scripted(lambda system, user, schema: {"useful": [3, 1]})
    doc = run_retrieval_bench(data, rerank_lm=handle, rerank_depth=3, progress=False)
    system = doc["systems"]["memstrata+rerank"]
    questions = doc["questions"]["overall"]
    assert system["llm"]["calls"] == questions + 1 == handle.meter.since(0).calls
    assert system["llm"]["depth"] == 3 and len(system["llm"]["replies"]) == questions + 1
    assert system["llm"]["replies"][0]["picked"] == [3, 1]
    assert "llm" not in doc["systems"]["memstrata"]
