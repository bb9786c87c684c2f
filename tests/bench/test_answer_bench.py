"""The memstrata answer path inside ``bench locomo``, and ``bench verify`` (no LLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstrata.bench.qa import answer_cache, run_locomo_bench
from memstrata.bench.qa_personal import path_fingerprint
from memstrata.bench.verify import run_verify_bench
from memstrata.cli import main
from memstrata.memory import Store
from memstrata.memory.verify import VerifySettings
from memstrata.programs.answer import AnswerSettings, PersonalAnswerer
from tests.conftest import field, locomo_record

QA_ITEMS = [
    {"question": "Where did Bob go hiking?", "answer": "the Alps", "evidence": ["D2:1"],
     "category": 4},
    {"question": "What pet did Alice adopt?", "answer": "a guinea pig", "evidence": ["D1:1"],
     "category": 4},
    {"question": "Where did Alice go hiking in the Alps?", "adversarial_answer": "the Alps",
     "evidence": ["D2:1"], "category": 5},
]


def reader(system: str, user: str, schema):
    """Answers from the memories it is shown (the Alps, the guinea pig), else abstains."""
    memories = field(user, "memories")
    for cue, answer, asked in (("Alps", "the Alps", "hiking"), ("guinea pig", "a guinea pig",
                                                                  "pet")):
        if cue in memories and asked in field(user, "question").lower():
            return {"answer": answer, "evidence": []}
    return {"answer": "the Alps" if "Alps" in memories else "Not mentioned", "evidence": []}


@pytest.fixture
def data(write_json) -> Path:
    return write_json("locomo.json", [locomo_record("conv-1", qa=QA_ITEMS)])


def test_memstrata_abstains_on_the_swapped_person_without_a_model_call(data, tmp_path,
                                                                       scripted) -> None:
    handle = scripted(reader)
    doc = run_locomo_bench(data, handle, tmp_path / "out", systems=("memstrata", "naive_rag"),
                           progress=False)
    mem, naive = doc["systems"]["memstrata"], doc["systems"]["naive_rag"]
    assert mem["abstention_cat5"] == 1.0 and mem["abstention_cat1_4"] == 0.0
    assert naive["abstention_cat5"] == 0.0  # the baseline answers "the Alps" for Alice
    assert mem["llm_calls"] == 2  # the two answerable questions only
    records = answer_cache(tmp_path / "out" / "answers.jsonl").records.values()
    swapped = next(r for r in records if r.system == "memstrata" and r.qid == "conv-1#2")
    prov = swapped.provenance
    assert prov is not None and prov.answered_by == "verifier"
    assert prov.reason.startswith("Not mentioned for Alice: it was Bob's")
    assert prov.evidence == ["D2:1"] and prov.about == ["Bob"] and prov.speakers == ["Bob"]
    assert all(r.provenance is not None for r in records if r.system == "memstrata")
    assert all(r.provenance is None for r in records if r.system == "naive_rag")
    with Store.open(tmp_path / "out" / "locomo.db") as store:
        run = next(r for r in store.runs.list("conv-1", limit=20)
                   if r.program == "qa.memstrata" and r.task == QA_ITEMS[2]["question"])
        steps = {s.kind: s for s in store.runs.steps("conv-1", run.id)}
        assert set(steps) == {"route", "retrieve", "verify"}  # no pack, no inject
        assert steps["verify"].data["other"]["person"] == "Bob"
        assert run.output["answered_by"] == "verifier" and run.usage["calls"] == 0
    again = run_locomo_bench(data, handle, tmp_path / "out", systems=("memstrata",),
                             progress=False)
    assert again["systems"]["memstrata"] == mem  # all from the cache


def test_old_cache_lines_without_provenance_still_parse(tmp_path) -> None:
    path = tmp_path / "answers.jsonl"
    path.write_text(json.dumps({"key": "k", "system": "memstrata", "qid": "conv-1#0",
                                "answer": "x"}) + "\n", encoding="utf-8")
    record = answer_cache(path).get("k")
    assert record is not None and record.provenance is None


def test_the_memstrata_key_follows_the_answer_path(data, tmp_path, scripted) -> None:
    with Store.open(":memory:") as store:
        base = path_fingerprint(PersonalAnswerer(store))
        stricter = AnswerSettings(verify=VerifySettings(margin=0.5))
        assert path_fingerprint(PersonalAnswerer(store, settings=stricter)) != base
    run_locomo_bench(data, scripted(reader), tmp_path / "out",
                     systems=("memstrata", "naive_rag"), progress=False)
    keys = {r.system: r.key for r in answer_cache(tmp_path / "out" / "answers.jsonl")
            .records.values()}
    assert "+" in keys["memstrata"] and "+" not in keys["naive_rag"]


def test_bench_verify_reports_rates_without_a_model(data, tmp_path, capsys) -> None:
    doc = run_verify_bench(data, tmp_path / "v")
    assert doc["overall"]["abstention_cat5"] == 1.0
    assert doc["overall"]["false_abstention_cat1_4"] == 0.0
    assert set(doc["per_conversation"]) == {"conv-1"}
    assert doc["cat5_kinds"]["person_swap"] == {"questions": 1, "abstained": 1.0}
    assert doc["oracle"]["abstention_cat5"] == 1.0 and doc["sweep"]
    lines = (tmp_path / "v" / "verdicts.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["abstained"] is True
    assert main(["bench", "verify", "--data", str(data), "--out", str(tmp_path / "cli"),
                 "--margin", "0.2"]) == 0
    assert "cat-5 abstention" in capsys.readouterr().out
    assert json.loads((tmp_path / "cli" / "verify.json").read_text())["settings"]["margin"] \
        == 0.2


def test_facts_are_extracted_first_and_change_the_key(data, tmp_path, scripted) -> None:
    from memstrata.programs.ingest import IngestSettings

    def reply(system: str, user: str, schema):
        if "turns" in (schema or {}).get("properties", {}) or field(user, "turns"):
            return {"facts": [{"subject": "Bob", "predicate": "went hiking in",
                               "object": "the Alps", "time": "yesterday", "location": ""}],
                    "entities": [], "qa": []}
        return reader(system, user, schema)

    handle = scripted(reply)
    plain = run_locomo_bench(data, handle, tmp_path / "out", systems=("memstrata",),
                             progress=False)
    doc = run_locomo_bench(data, handle, tmp_path / "out", systems=("memstrata",),
                           progress=False, ingest=IngestSettings())
    assert plain["ingest"] is None
    assert doc["ingest"]["llm_calls"] == 1 and doc["ingest"]["facts"] == 1
    keys = {r.key for r in answer_cache(tmp_path / "out" / "answers.jsonl").records.values()}
    assert any("+facts" in k for k in keys) and any("+facts" not in k for k in keys)
    with Store.open(tmp_path / "out" / "locomo.db") as store:
        (fact,) = store.items("conv-1", kind="fact")
    assert fact.about == "Bob" and fact.evidence == ["D2:1"]
