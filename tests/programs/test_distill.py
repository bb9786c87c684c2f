"""The extraction policy on scripted models: polarity from the verdict, at most N items,
noise dropped with its reason, contrastive extraction, the model-free trace method, and
loud failures."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.programs import ProgramParseError
from memstrata.programs.distill import Attempt, ExtractionPolicy
from memstrata.programs.judging import Verdict
from tests.conftest import field

U = "u1"
TASK = "Which zones does AHU-1 feed?"
WIN = Verdict(success=True, confidence=0.8, source="llm", rationale="the rows match")
LOSS = Verdict(success=False, confidence=1.0, source="checks",
               rationale="failed checks: runs: unknown prefix brick",
               failed_checks=["runs", "non_empty"])


def lesson(title: str, content: str, description: str = "") -> dict[str, str]:
    return {"title": title, "description": description or f"when {title.lower()}",
            "content": content}


GOOD = [
    lesson("Declare the brick prefix", "Always declare PREFIX brick: before using "
           "brick:feeds in a SPARQL query."),
    lesson("Walk feeds transitively", "Use the property path brick:feeds+ to reach zones "
           "fed through intermediate VAV boxes."),
    lesson("Filter zones by class", "Constrain the target with rdf:type/rdfs:subClassOf* "
           "brick:HVAC_Zone so terminal units are not counted."),
    lesson("Group by the air handler", "Use GROUP BY ?ahu with COUNT(?zone) when the "
           "question asks how many zones each AHU feeds."),
]


def _model(lessons: list[dict[str, str]] | None = None, *, do: list[dict[str, str]] | None = None,
           avoid: list[dict[str, str]] | None = None):
    """A scripted extractor: DistillRun answers ``lessons``, ContrastRuns ``do``/``avoid``;
    every request's program and inputs are kept in ``seen``."""
    seen: list[dict[str, Any]] = []

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        props = set((schema or {}).get("properties", {}))
        if props == {"lessons"} and "Attempts:" in user:
            seen.append({"program": "consistent", "outcome": field(user, "outcome"),
                         "attempts": field(user, "attempts")})
            return {"lessons": lessons or []}
        if props == {"lessons"}:
            seen.append({"program": "distill", "outcome": field(user, "outcome"),
                         "trajectory": field(user, "trajectory")})
            return {"lessons": lessons or []}
        assert props == {"do", "avoid"}, props
        seen.append({"program": "contrast", "successes": field(user, "successes"),
                     "failures": field(user, "failures")})
        return {"do": do or [], "avoid": avoid or []}

    return reply, seen


def attempt(verdict: Verdict, answer: str = "zone-1, zone-2", run_id: str = "run-1",
            trajectory: str = "SELECT ?z WHERE { :AHU-1 brick:feeds ?z }") -> Attempt:
    return Attempt(task=TASK, trajectory=trajectory, answer=answer, verdict=verdict,
                   run_id=run_id)


@pytest.mark.parametrize(("verdict", "polarity"), [(WIN, "success"), (LOSS, "failure")])
def test_llm_polarity_follows_the_verdict(scripted: Any, verdict: Verdict,
                                          polarity: str) -> None:
    reply, seen = _model(GOOD[:2])
    handle = scripted(reply)
    out = ExtractionPolicy().extract(user_id=U, attempts=[attempt(verdict)], handle=handle)
    assert out.method == "llm" and out.dropped == []
    assert [i.polarity for i in out.items] == [polarity, polarity]
    assert [i.title for i in out.items] == ["Declare the brick prefix",
                                             "Walk feeds transitively"]
    assert seen == [{"program": "distill", "outcome": polarity, "trajectory": seen[0][
        "trajectory"]}]
    assert "Final answer: zone-1, zone-2" in seen[0]["trajectory"]
    assert all(i.confidence == verdict.confidence for i in out.items)
    assert handle.meter.since(0).calls == 1


def test_at_most_max_items_are_kept_and_the_rest_reported(scripted: Any) -> None:
    reply, _ = _model(GOOD[:3])
    out = ExtractionPolicy(max_items=2).extract(user_id=U, attempts=[attempt(WIN)],
                                                handle=scripted(reply))
    assert [i.title for i in out.items] == [GOOD[0]["title"], GOOD[1]["title"]]
    assert out.dropped == [f"{GOOD[2]['title']}: over the limit of 2"]


def test_generic_noise_is_dropped_with_its_reason_before_counting(scripted: Any) -> None:
    noisy = [lesson("Caution", "Be careful."), lesson("Short", "Use FILTER."),
             lesson("Words", "it is the one that was there"), *GOOD[:2]]
    reply, _ = _model(noisy)
    out = ExtractionPolicy(max_items=2).extract(user_id=U, attempts=[attempt(LOSS)],
                                                handle=scripted(reply))
    # Noise did not use up the two slots: both good lessons are kept.
    assert [i.title for i in out.items] == [GOOD[0]["title"], GOOD[1]["title"]]
    assert len(out.dropped) == 3
    assert out.dropped[0].startswith("Caution: generic advice ('be careful')")
    assert out.dropped[1] == "Short: text shorter than 20 characters"
    assert out.dropped[2] == "Words: fewer than 3 content words"
    assert not any("over the limit" in d for d in out.dropped)


def test_items_carry_tags_evidence_source_and_tenant(scripted: Any) -> None:
    reply, _ = _model(GOOD[:1])
    out = ExtractionPolicy().extract(user_id=U, attempts=[attempt(WIN, run_id="run-42")],
                                     handle=scripted(reply), tags=["ontology", "extracted",
                                                                   "level-3"])
    [item] = out.items
    assert item.tags == ["extracted", "ontology", "level-3"]
    assert item.evidence == ["run-42"] and item.user_id == U
    assert item.source == "extract.llm" and item.kind == "strategy"
    assert item.text == GOOD[0]["content"] and item.description == GOOD[0]["description"]


def test_no_run_id_means_no_evidence(scripted: Any) -> None:
    reply, _ = _model(GOOD[:1])
    out = ExtractionPolicy().extract(user_id=U, attempts=[attempt(WIN, run_id="")],
                                     handle=scripted(reply))
    assert out.items[0].evidence == []


def test_contrastive_with_mixed_verdicts_contrasts_the_rollouts(scripted: Any) -> None:
    reply, seen = _model(GOOD, do=GOOD[:1], avoid=[lesson(
        "Undeclared prefix fails", "Queries using brick: without a PREFIX line fail to "
        "parse; declare every prefix first.")])
    handle = scripted(reply)
    attempts = [attempt(LOSS, answer="error", run_id="r0", trajectory="bad query"),
                attempt(WIN, answer="zone-1", run_id="r1", trajectory="good query")]
    out = ExtractionPolicy(contrastive=True).extract(user_id=U, attempts=attempts,
                                                     selected=1, handle=handle)
    assert [(i.title, i.polarity) for i in out.items] == [
        (GOOD[0]["title"], "success"), ("Undeclared prefix fails", "failure")]
    [call] = seen
    assert call["program"] == "contrast"
    assert "good query" in call["successes"] and "bad query" not in call["successes"]
    assert "bad query" in call["failures"] and "good query" not in call["failures"]
    assert all(i.evidence == ["r1"] for i in out.items)  # the selected attempt
    assert handle.meter.since(0).calls == 1


@pytest.mark.parametrize(("verdict", "polarity"), [(WIN, "success"), (LOSS, "failure")])
def test_contrastive_with_one_outcome_reads_every_rollout(scripted: Any, verdict: Verdict,
                                                          polarity: str) -> None:
    reply, seen = _model(GOOD[:1], do=GOOD[1:2])
    attempts = [attempt(verdict, run_id="r0", trajectory="first try"),
                attempt(verdict, run_id="r1", trajectory="second try")]
    out = ExtractionPolicy(contrastive=True).extract(user_id=U, attempts=attempts,
                                                     selected=1, handle=scripted(reply))
    [call] = seen
    assert call["program"] == "consistent" and call["outcome"] == polarity
    assert "first try" in call["attempts"] and "second try" in call["attempts"]
    assert [(i.title, i.polarity, i.evidence) for i in out.items] == [
        (GOOD[0]["title"], polarity, ["r1"])]


def test_one_rollout_or_contrast_off_distils_the_selected_attempt(scripted: Any) -> None:
    for policy, attempts in (
            (ExtractionPolicy(contrastive=True), [attempt(WIN, trajectory="only try")]),
            (ExtractionPolicy(), [attempt(WIN, run_id="r0", trajectory="first try"),
                                  attempt(LOSS, run_id="r1", trajectory="only try")])):
        reply, seen = _model(GOOD[:1])
        policy.extract(user_id=U, attempts=attempts, selected=len(attempts) - 1,
                       handle=scripted(reply))
        assert [s["program"] for s in seen] == ["distill"]
        assert "only try" in seen[0]["trajectory"] and "first" not in seen[0]["trajectory"]


def test_trace_success_keeps_the_answer_without_a_model() -> None:
    out = ExtractionPolicy(method="trace").extract(
        user_id=U, attempts=[attempt(WIN, answer="zone-1,\nzone-2", run_id="r7")],
        handle=None, tags=["ontology"])
    [item] = out.items
    assert out.method == "trace" and out.dropped == []
    assert item.polarity == "success" and "zone-1, zone-2" in item.text
    assert TASK in item.title and item.source == "extract.trace"
    assert item.tags == ["extracted", "ontology"] and item.evidence == ["r7"]


def test_trace_failure_names_the_failed_checks() -> None:
    out = ExtractionPolicy(method="trace").extract(
        user_id=U, attempts=[attempt(LOSS, answer="SELECT ?z { bad }")])
    [item] = out.items
    assert item.polarity == "failure"
    assert "runs, non_empty" in item.title
    assert "unknown prefix brick" in item.text and "SELECT ?z { bad }" in item.text


def test_trace_failure_without_checks_says_judged_wrong() -> None:
    judged = Verdict(success=False, confidence=0.8, source="llm", rationale="wrong zones")
    [item] = ExtractionPolicy(method="trace").extract(
        user_id=U, attempts=[attempt(judged)]).items
    assert "judged wrong" in item.title and "wrong zones" in item.text


def test_max_items_zero_extracts_nothing_and_calls_nothing(scripted: Any) -> None:
    reply, seen = _model(GOOD)
    handle = scripted(reply)
    out = ExtractionPolicy(max_items=0).extract(user_id=U, attempts=[attempt(WIN)],
                                                handle=handle)
    assert out.items == [] and out.dropped == [] and seen == []
    assert handle.meter.since(0).calls == 0


def test_llm_method_without_a_model_raises() -> None:
    with pytest.raises(ValueError, match="needs a model"):
        ExtractionPolicy().extract(user_id=U, attempts=[attempt(WIN)], handle=None)


def test_no_attempts_raises(scripted: Any) -> None:
    reply, _ = _model(GOOD)
    with pytest.raises(ValueError, match="at least one attempt"):
        ExtractionPolicy().extract(user_id=U, attempts=[], handle=scripted(reply))


def test_unparseable_model_output_is_loud(scripted: Any) -> None:
    handle = scripted(lambda system, user, schema: "Lesson 1: declare prefixes")
    with pytest.raises(ProgramParseError) as info:
        ExtractionPolicy().extract(user_id=U, attempts=[attempt(WIN)], handle=handle)
    assert info.value.program == "ExtractionPolicy"
    assert handle.meter.since(0).calls == 2


def test_contrast_keeps_each_attempts_final_answer(scripted: Any) -> None:
    reply, seen = _model(do=GOOD[:1])
    long = "step: probe the schema\n" * 200  # ~4,600 chars each
    attempts = [attempt(WIN, answer="ANSWER-W0", trajectory=long),
                attempt(WIN, answer="ANSWER-W1", trajectory=long),
                attempt(LOSS, answer="ANSWER-L0", trajectory=long)]
    ExtractionPolicy(contrastive=True).extract(user_id=U, attempts=attempts,
                                               handle=scripted(reply))
    [call] = seen
    assert "ANSWER-W0" in call["successes"] and "ANSWER-W1" in call["successes"]


def test_one_lesson_said_twice_takes_one_slot(scripted: Any) -> None:
    reply, _ = _model(lessons=[GOOD[0], GOOD[0]])
    out = ExtractionPolicy().extract(user_id=U, attempts=[attempt(WIN)],
                                     handle=scripted(reply))
    assert len(out.items) == 1 and "repeats another item" in out.dropped[0]


def test_a_draft_that_restates_the_question_is_dropped(scripted: Any) -> None:
    echo = lesson("The task", f"The task is: {TASK}")
    reply, _ = _model(lessons=[echo, GOOD[0]])
    out = ExtractionPolicy().extract(user_id=U, attempts=[attempt(LOSS)],
                                     handle=scripted(reply))
    assert [i.title for i in out.items] == [GOOD[0]["title"]]
    assert "restates the task" in out.dropped[0]
