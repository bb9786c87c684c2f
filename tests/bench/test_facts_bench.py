"""``bench facts`` on a scripted extractor: ingest cost, recall through facts, coverage."""

from __future__ import annotations

from memstrata.bench.facts import facts_table, run_facts_bench
from tests.conftest import field, locomo_record

QA = [{"question": "What did Alice adopt?", "answer": "a guinea pig", "evidence": ["D1:1"],
       "category": 4},
      {"question": "Where did Bob go hiking?", "answer": "the Alps", "evidence": ["D2:1"],
       "category": 4}]


def reply(system: str, user: str, schema):
    turns = field(user, "turns")
    facts = []
    if "guinea pig" in turns:
        facts.append({"subject": "Alice", "predicate": "adopted", "object": "a guinea pig",
                      "time": "last week", "location": ""})
    return {"facts": facts, "entities": [], "qa": []}


def test_recall_through_facts_and_ingest_cost(write_json, scripted, tmp_path) -> None:
    data = write_json("l.json", [locomo_record("conv-1", qa=QA)])
    doc = run_facts_bench(data, scripted(reply), tmp_path / "out", progress=False)
    ing = doc["ingest"]
    assert ing["turns"] == 5 and ing["chunks"] == ing["llm_calls"] == 1
    assert ing["facts"] == 1 and ing["empty_chunks"] == 0
    assert ing["evidence_turns_covered"] == 0.5  # D1:1 is cited, D2:1 is not
    facts = doc["systems"]["facts"]["recall@5"]
    assert facts["overall"] == 0.5  # only the adoption question reaches its turn via a fact
    assert doc["systems"]["facts+turns"]["recall@5"]["overall"] == 1.0
    assert "1 LLM calls" in facts_table(doc)
    again = run_facts_bench(data, scripted(reply), tmp_path / "out", progress=False)
    assert again["ingest"]["llm_calls"] == 0 and again["ingest"]["cached_chunks"] == 1
