"""The paths across the six types: reading, recall, perceiving, maintenance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstrata.memory import Store
from memstrata.memory.cognitive import CognitiveMemory, CognitiveSettings
from memstrata.memory.cognitive.base import ATTENDED_TO, CONTRADICTS, DERIVES_FROM
from memstrata.memory.cognitive.reading import sentences

U = "reader"


class Clock:
    """A fake clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def mind(clock: Clock) -> CognitiveMemory:
    return CognitiveMemory(Store.open(":memory:", embedder=None), U,
                           settings=CognitiveSettings(consolidation_batch=2), clock=clock)


TUTORIAL = """To publish a site with tidectl:
Before you start, install tidectl 2.1 or later.
1. Run tidectl init NAME.
2. Run tidectl build.
3. Run tidectl push --prod.
The push step needs a token."""


def test_sentences_keep_decimals_and_drop_step_lines() -> None:
    assert sentences("It drew 4.1 million viewers. Then v2.3 came out!\n1. Run it.") == [
        "It drew 4.1 million viewers.", "Then v2.3 came out!"]


def test_read_writes_every_type_it_concerns(mind: CognitiveMemory) -> None:
    report = mind.read(TUTORIAL, title="Tidectl guide", source="Docs",
                       when=datetime(2026, 2, 1, tzinfo=UTC))
    store = mind.store
    sensory = store.get(U, report.sensory_id)
    assert sensory is not None and sensory.attended
    assert [e.dst for e in store.edges(U, src=report.sensory_id, relation=ATTENDED_TO)] == [
        report.episode_id]
    episode = store.get(U, report.episode_id)
    assert episode is not None and episode.text.startswith("Read Tidectl guide (Docs) on 2026")
    assert len(report.facts) == 3  # the heading, the prerequisite, the note
    for fact in report.facts:
        assert store.edges(U, src=fact, relation=DERIVES_FROM)[0].dst == report.episode_id
    procedure = store.get(U, report.procedure_id or "")
    assert procedure is not None
    assert procedure.steps == ["Run tidectl init NAME", "Run tidectl build",
                               "Run tidectl push --prod"]
    assert procedure.prerequisites and "tidectl 2.1" in procedure.prerequisites[0]


def test_a_procedure_after_a_statement_is_named_by_its_title(mind: CognitiveMemory) -> None:
    report = mind.read("Older guides use init; it was removed in 3.0. Step 1. Run tidectl new. "
                       "Step 2. Run tidectl serve.", title="Getting started")
    procedure = mind.store.get(U, report.procedure_id or "")
    assert procedure is not None and procedure.title == "Getting started"
    assert procedure.text.startswith("Getting started:\n1. Run tidectl new")


def test_read_refuses_empty_text(mind: CognitiveMemory) -> None:
    with pytest.raises(ValueError, match="empty"):
        mind.read("   ")


def test_recall_brings_both_sides_of_a_contradiction(mind: CognitiveMemory) -> None:
    mind.read("The Fjellheim Cup final drew 4.1 million viewers.", source="NRK",
              when=datetime(2026, 2, 3, tzinfo=UTC))
    mind.read("The Fjellheim Cup final drew 3.6 million viewers.", source="Medietall",
              when=datetime(2026, 2, 5, tzinfo=UTC))
    assert len(mind.store.edges(U, relation=CONTRADICTS)) == 1
    found = {r.source: r for r in mind.recall("Medietall viewers") if r.kind == "semantic"}
    assert set(found) == {"NRK", "Medietall"}
    assert found["Medietall"].conflicts[0].newer is True
    assert found["NRK"].conflicts[0].newer is False


def test_recall_counts_procedure_use_and_hides_task_episodes(mind: CognitiveMemory) -> None:
    mind.read(TUTORIAL, title="Tidectl guide", source="Docs")
    mind.working.push("t1", "question", "How do I publish with tidectl?")
    mind.working.complete("t1", outcome="tidectl push --prod")
    for _ in range(2):
        hits = mind.recall("publish a site with tidectl push")
    assert all(h.source != "task" for h in hits)
    procedure = next(h for h in hits if h.kind == "procedural")
    assert mind.store.get(U, procedure.id).usage_count == 2  # type: ignore[union-attr]
    assert any(h.source == "task" for h in mind.recall("tidectl push", include_tasks=True))


def test_recall_hops_walk_similar_facts(mind: CognitiveMemory) -> None:
    mind.semantic.learn("", "Ola Berg trains in Valmora with the national ski team.")
    mind.semantic.learn("", "The national ski team trains in Valmora every winter season.")
    plain = mind.recall("Ola Berg", k=1)
    walked = mind.recall("Ola Berg", k=1, hops=1)
    assert len(plain) == 1 and len(walked) == 2
    assert walked[1].via == "similar_to"
    with pytest.raises(ValueError, match="hops"):
        mind.recall("Ola", hops=3)


def test_recall_never_crosses_tenants(mind: CognitiveMemory) -> None:
    other = CognitiveMemory(mind.store, "someone-else")
    other.semantic.learn("", "Secret plan: the vault code is 4242.")
    assert mind.recall("vault code") == []


def test_perceive_surfaces_triggered_intentions_in_working_memory(
        mind: CognitiveMemory) -> None:
    mind.prospective.intend("Check variables first", keywords=["variables"],
                            action="check the student knows variables", priority=2)
    fired = mind.perceive("Today we look at Variables and loops", task_id="lesson")
    assert [i.status for i in fired] == ["triggered"]
    slots = mind.working.slots("lesson", "context")
    assert slots[0].text == "Reminder: check the student knows variables"
    assert slots[0].relevance == pytest.approx(0.8)


def test_maintain_runs_due_work_and_counts_its_calls(mind: CognitiveMemory,
                                                     clock: Clock) -> None:
    mind.sensory.observe("a passing noise", ttl_s=10)
    mind.working.push("t", "plan", "look it up", ttl_s=5)
    due = mind.prospective.intend("Call Ana", at=clock.now + timedelta(minutes=1))
    for n in range(3):
        mind.episodic.record(f"Episode number {n} happened.")
    quiet = mind.maintain()
    assert (quiet.pruned_sensory, quiet.consolidation_due, quiet.llm_calls) == (0, True, 0)
    clock.now += timedelta(minutes=2)
    seen: list[list[str]] = []
    report = mind.maintain(lambda texts: seen.append(texts) or f"{len(texts)} episodes")
    assert (report.pruned_sensory, report.expired_working) == (1, 1)
    assert report.triggered == [due]
    assert report.llm_calls == len(seen) == 1 and report.compressed_episodes == 2
    assert report.pending_episodes == 1 and not report.consolidation_due
