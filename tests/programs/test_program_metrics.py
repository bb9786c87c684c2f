"""Each program's metric on hand-made cases: the score, and the feedback GEPA reads."""

from __future__ import annotations

from datetime import datetime

import dspy
import pytest

from memstrata.memory.chunking import Chunk
from memstrata.memory.facts import ExtractedFact, Extraction
from memstrata.memory.models import Turn
from memstrata.programs.answer_scores import missed_tokens
from memstrata.programs.metrics import METRICS, as_score, extractor_metric, qa_metric, voe_metric

MEMORIES = ("[s1:2 · Ana · 2023-05-01] I live in Oslo with my black cat\n"
            "[s1:3 · Tom · 2023-05-01] Nice, I have a dog")


def _pred(answer: str, evidence: list[str] | None = None, abstained: bool = False
          ) -> dspy.Prediction:
    return dspy.Prediction(answer=answer, evidence=evidence or [], abstained=abstained)


def _gold(answer: str | None, **extra: object) -> dspy.Example:
    return dspy.Example(question="q", memories=MEMORIES, answer=answer, **extra
                        ).with_inputs("question", "memories")


def test_missed_tokens_match_by_stem_with_multiplicity() -> None:
    assert missed_tokens("a cat", "the black cats") == ["black"]
    assert missed_tokens("red", "red red") == ["red"]
    assert missed_tokens("anything", "") == []


def test_qa_right_answer_with_the_right_citation() -> None:
    out = qa_metric(_gold("Oslo", evidence=["s1:2"]), _pred("Oslo", ["s1:2"]))
    assert out.score == 1.0 and "Cited the evidence s1:2" in out.feedback
    assert "missed" not in out.feedback


def test_qa_partial_answer_names_the_missed_words_and_a_wrong_citation() -> None:
    out = qa_metric(_gold("her black cat", evidence=["s1:2"]), _pred("a cat", ["s1:3"]))
    assert 0 < out.score < 1
    assert "missed the gold words: her, black" in out.feedback
    assert "Cited s1:3, which do not hold the evidence (s1:2, shown in the memories)" in \
        out.feedback


def test_qa_abstention_right_and_wrong() -> None:
    assert qa_metric(_gold(None), _pred("I don't know", abstained=True)).score == 1.0
    wrong = qa_metric(_gold(None, category=5), _pred("Oslo"))
    assert wrong.score == 0.0 and "the right reply is an abstention" in wrong.feedback
    shown = qa_metric(_gold("Oslo", evidence=["s1:2"]), _pred("I don't know", abstained=True))
    assert shown.score == 0.0 and "hold the evidence (s1:2): answer from them" in shown.feedback
    honest = qa_metric(_gold("Paris", evidence=["s9:9"]), _pred("I don't know", abstained=True))
    assert "abstaining was the honest reply" in honest.feedback


def test_qa_uses_locomo_categories_and_the_answerers_own_memories() -> None:
    gold = dspy.Example(question="q", answer="Paris, Rome", category=1, evidence=["s1:2"])
    pred = dspy.Prediction(answer="Rome", evidence=[], abstained=False, memories=MEMORIES)
    out = qa_metric(gold, pred)
    assert out.score == 0.5
    assert "Cited no memory; the evidence is s1:2 (shown in the memories)" in out.feedback


def test_as_score_gives_optimizers_a_number_or_a_pass() -> None:
    gold, pred = _gold("Oslo"), _pred("in Oslo")
    assert as_score(qa_metric)(gold, pred) == pytest.approx(float(qa_metric(gold, pred)))
    assert as_score(qa_metric, threshold=0.5)(gold, pred) is True
    assert as_score(qa_metric, threshold=0.9)(gold, pred) is False


def _chunk() -> Chunk:
    when = datetime(2023, 5, 8)
    return Chunk(conversation_id="c", turns=[
        Turn(user_id="u", conversation_id="c", session_id="s1", turn_id="D1:1", seq=0,
             speaker="Ana", text="I moved to Oslo last month.", event_time=when),
        Turn(user_id="u", conversation_id="c", session_id="s1", turn_id="D1:2", seq=1,
             speaker="Tom", text="I started learning the violin.", event_time=when)])


def test_extractor_feedback_names_each_failed_fact_and_why() -> None:
    gold = dspy.Example(chunk=_chunk(), participants=["Ana", "Tom"], evidence=["D1:1", "D1:2"])
    extraction = Extraction(facts=[
        ExtractedFact(subject="Ana", predicate="moved to", object="Oslo", time="last month"),
        ExtractedFact(subject="Tom", predicate="owns", object="a red sailing boat"),
        ExtractedFact(subject="Ana", predicate="moved to", object="Oslo", location="Bergen"),
    ])
    out = extractor_metric(gold, dspy.Prediction(extraction=extraction))
    assert "2 of 3 proposed facts were grounded" in out.feedback
    assert "(Tom | owns | a red sailing boat) failed grounding: unsupported" in out.feedback
    assert "kept, but dropped: location not in turn" in out.feedback
    assert "D1:2 (Tom: I started learning the violin.)" in out.feedback
    assert out.score == pytest.approx((2 / 3 + 1 / 2) / 2, abs=1e-3)
    empty = extractor_metric(gold, dspy.Prediction(extraction=Extraction()))
    assert empty.score == 0.0 and "No fact was proposed" in empty.feedback


def test_voe_feedback_says_hit_or_miss_and_the_missed_words() -> None:
    gold = dspy.Example(actual="Can you recommend a good pasta recipe?")
    hit = voe_metric(gold, dspy.Prediction(next_prediction="can you recommend a pasta recipe"))
    assert hit.score >= 0.6 and "a hit" in hit.feedback
    miss = voe_metric(gold, dspy.Prediction(prediction="thanks, bye"))
    assert miss.score < 0.6 and "below the hit line 0.6" in miss.feedback
    assert "pasta" in miss.feedback


def test_sparql_feedback_gives_the_result_set_difference() -> None:
    pytest.importorskip("pyoxigraph")
    from memstrata.bench.compile.sparql import sparql_metric
    from memstrata.bench.ontology import load_tasks
    from memstrata.bench.ontology.tasks import Shape

    task = next(t for t in load_tasks() if t.shape is Shape.SET and len(t.expected) >= 2)
    gold = dspy.Example(task=task)
    assert sparql_metric(gold, dspy.Prediction(sparql=task.gold_sparql)).score == 1.0
    assert "No SELECT" in sparql_metric(gold, dspy.Prediction(sparql="")).feedback
    broken = sparql_metric(gold, dspy.Prediction(sparql="SELECT ?x WHERE { ?x"))
    assert broken.score == 0.0 and "did not run" in broken.feedback
    limited = task.gold_sparql.rstrip() + "\nLIMIT 1"
    partial = sparql_metric(gold, dspy.Prediction(answer=limited))
    assert 0 < partial.score < 1 and "Missing from the result" in partial.feedback


def test_every_program_the_library_rebuilds_has_its_metric() -> None:
    from memstrata.programs.compiled import BUILDERS

    assert set(METRICS) == set(BUILDERS)
