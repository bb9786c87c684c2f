"""Lexical retrieval on the shared LoCoMo dev split finds the evidence of known questions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.bench.locomo import LoCoMoConversation, apply_audit, load_locomo, read_locomo
from memstrata.memory import Retriever, Store

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "locomo"
DEV = DATA / "locomo_dev.json"
AUDIT = DATA / "locomo_dev_audit_errors.json"

# (conversation, question, evidence turn, a phrase of that turn, answer) checked by hand
KNOWN = [
    ("conv-26", "When did Caroline go to the LGBTQ support group?", "D1:3",
     "LGBTQ support group", "7 May 2023", 5),
    ("conv-26", "What country is Caroline's grandma from?", "D4:3",
     "my home country, Sweden", "Sweden", 10),
    ("conv-26", "Which song motivates Caroline to be courageous?", "D15:23",
     '"Brave" by Sara Bareilles', "Brave by Sara Bareilles", 10),
    ("conv-30", "What kind of flooring is Jon looking for in his dance studio?", "D2:8",
     "Marley flooring", "Marley flooring", 10),
    ("conv-30", "What book is Jon currently reading?", "D12:6",
     '"The Lean Startup"', "The Lean Startup", 10),
    ("conv-41", "What did Maria donate to a homeless shelter in December 2023?", "D2:1",
     "donated my old car to a homeless shelter", "old car", 10),
]


@pytest.fixture(scope="module")
def dev() -> Iterator[tuple[Store, dict[str, LoCoMoConversation]]]:
    assert DEV.is_file(), f"the shared LoCoMo dev split is missing at {DEV}"
    convs = read_locomo(DEV)
    store = Store.open(":memory:", embedder=None)
    stats = load_locomo(store, convs)  # no embedder: lexical channels only
    assert stats.embedded == 0
    try:
        yield store, {c.sample_id: c for c in convs}
    finally:
        store.close()


def test_dev_split_shape(dev) -> None:
    store, convs = dev
    assert sorted(convs) == ["conv-26", "conv-30", "conv-41", "conv-43", "conv-47"]
    assert sum(len(c.questions) for c in convs.values()) == 929
    assert store.counts()["turns"] == sum(c.turn_count for c in convs.values())
    assert store.counts()["embeddings"] == 0


def test_dev_split_known_quirks_are_parsed(dev) -> None:
    _, convs = dev
    q37 = convs["conv-26"].questions[37]
    assert q37.evidence_raw == ["D8:6; D9:17"] and q37.evidence == ["D8:6", "D9:17"]
    q18 = convs["conv-43"].questions[18]
    assert "D:11:26" in q18.evidence_raw and "D11:26" in q18.evidence
    assert convs["conv-47"].questions[38].unknown_evidence == ["D4:36"]
    empty = [q for c in convs.values() for q in c.questions if not q.evidence_raw]
    assert empty and all(q.category == 3 for q in empty)
    adversarial = [q for c in convs.values() for q in c.questions if q.category == 5]
    assert adversarial
    no_answer = [q for q in adversarial if q.answer is None]
    assert len(no_answer) > len(adversarial) // 2
    assert all(q.adversarial_answer for q in no_answer)
    unknown = [e for c in convs.values() for q in c.questions for e in q.unknown_evidence]
    for c in convs.values():
        for q in c.questions:
            assert set(q.evidence) <= c.turn_ids
    assert unknown


@pytest.mark.parametrize(("sample", "question", "evidence", "phrase", "answer", "k"), KNOWN,
                         ids=[f"{s}:{e}" for s, _, e, *_ in KNOWN])
def test_known_question_retrieves_its_evidence(dev, sample, question, evidence, phrase, answer,
                                               k) -> None:
    store, convs = dev
    q = next(q for q in convs[sample].questions if q.question == question)
    assert q.evidence == [evidence]
    assert q.answer == answer
    [turn] = [t for t in store.turns(sample) if t.turn_id == evidence]
    assert phrase in turn.text
    hits = Retriever(store).search(sample, question, k=k, nodes=("turn",))
    assert len(hits) == k
    assert evidence in [h.turn_id for h in hits]
    assert all(h.conversation_id == sample for h in hits)


def test_audit_file_applies_to_the_dev_split(dev) -> None:
    _, convs = dev
    fresh = read_locomo(DEV)
    applied = apply_audit(fresh, AUDIT)
    assert applied > 0
    q = next(c for c in fresh if c.sample_id == "conv-26").questions[1]
    assert q.question == "When did Melanie paint a sunrise?"
    assert q.evidence == ["D1:12"]
    assert q.corrected_evidence == ["D1:14"]
    assert q.corrected_answer == "2022"
    assert len(convs["conv-26"].questions) == len(fresh[0].questions)
