"""Extraction at ingest on a scripted model: call cap, grounding, hierarchy, cache, errors."""

from __future__ import annotations

import re

import pytest

from memstrata.bench.locomo import load_locomo, read_locomo
from memstrata.memory import Store
from memstrata.memory.chunking import ChunkSettings
from memstrata.programs.ingest import IngestError, IngestSettings, ingest_conversation
from tests.conftest import field

SESSIONS = {
    1: [{"speaker": "Ana" if i % 2 else "Tom", "dia_id": f"D1:{i}", "text": t} for i, t in
        enumerate(["I live in Oslo with my sister.", "Nice, I work as a baker in Bergen.",
                   "I adopted a beagle named Rex yesterday.", "Rex sounds adorable!",
                   "He loves the fjord walks.", "I bake sourdough bread every morning.",
                   "My sister paints landscapes.", "Do you sell your bread?",
                   "Only at the Saturday market.", "I should visit your stall.",
                   "Please do, bring Rex too.", "Deal."], start=1)],
    2: [{"speaker": "Ana" if i % 2 else "Tom", "dia_id": f"D2:{i}", "text": t} for i, t in
        enumerate(["I moved to Lyon last month for a new job.", "Lyon! Big change.",
                   "I work in a museum now.", "Do you miss Oslo?",
                   "Sometimes, but Lyon has great food.", "I opened my own bakery.",
                   "Congratulations on the bakery!", "Thanks, it was a long dream.",
                   "Rex likes the Lyon parks.", "Send me photos of Rex.",
                   "I will.", "Talk soon."], start=1)],
}
FACTS = {  # what the scripted model proposes, by a word of the chunk's first turn
    "Oslo": [{"subject": "I", "predicate": "lives in", "object": "Oslo with my sister"},
             {"subject": "Ana", "predicate": "lives in", "object": "Oslo"},  # fuzzy twin
             {"subject": "Ana", "predicate": "adopted", "object": "a beagle named Rex",
              "time": "yesterday"},
             {"subject": "D1:3", "predicate": "D1:4", "object": "D1:5"}],   # junk
    "Lyon": [{"subject": "Ana", "predicate": "lives in", "object": "Lyon",
              "time": "last month"},
             {"subject": "Tom", "predicate": "opened", "object": "his own bakery"}],
}


def reply(system: str, user: str, schema):
    turns = field(user, "turns")
    first = next(line for line in turns.splitlines() if not line.startswith("--"))
    key = "Lyon" if "Lyon" in first else "Oslo"
    return {"facts": FACTS[key], "entities": [{"name": "Rex", "role": "Ana's dog", "state": ""}],
            "qa": [{"question": "Where does Ana live?", "answer": key}]}


@pytest.fixture
def loaded(make_record, write_json) -> Store:
    path = write_json("conv.json", [make_record(
        "conv-9", speakers=("Ana", "Tom"), sessions=SESSIONS,
        dates={1: "1:56 pm on 8 May, 2023", 2: "10:00 am on 20 August, 2023"})])
    store = Store.open(":memory:")
    load_locomo(store, read_locomo(path))
    yield store
    store.close()


def test_ingest_grounds_reconciles_and_links(loaded: Store, scripted, tmp_path) -> None:
    handle = scripted(reply)
    report = ingest_conversation(loaded, "conv-9", "conv-9", handle,
                                 cache_path=tmp_path / "x.jsonl")
    assert report.chunks == 2 and report.llm_calls == 2  # 24 turns: one call per session
    assert report.llm_calls <= report.turns / 10
    assert report.rejected == {"id as value": 1}
    assert report.hierarchy.fuzzy_merged == 1  # "lives in Oslo" twice in session 1
    facts = {f.text: f for f in loaded.items("conv-9", kind="fact")}
    oslo = next(f for t, f in facts.items() if "Oslo" in t)
    lyon = next(f for t, f in facts.items() if "Lyon" in t)
    assert (oslo.speaker, oslo.about, oslo.evidence) == ("Ana", "Ana", ["D1:1"])
    # the contradiction supersedes: the Oslo fact ends when the Lyon one starts, kept
    assert oslo.valid_to == lyon.event_time and lyon.valid_to is None
    assert lyon.granularity == "month" and lyon.event_time.month == 7  # "last month"
    edges = {(e.src, e.relation) for e in loaded.edges("conv-9", src=lyon.id)}
    assert (lyon.id, "supersedes") in edges and (lyon.id, "derived_from") in edges
    bakery = next(f for f in facts.values() if "bakery" in f.text)
    assert (bakery.speaker, bakery.about) == ("Tom", "Tom")
    persona = loaded.items("conv-9", kind="persona")
    assert {p.person for p in persona} == {"Ana", "Tom"}
    assert not any("Oslo" in p.text for p in persona)  # superseded facts leave the persona
    entities = {e.name: e for e in loaded.items("conv-9", kind="entity")}
    assert set(entities) == {"Ana", "Tom", "Rex"}  # participants from the turns, Rex named
    assert entities["Rex"].roles == ["Ana's dog"] and entities["Rex"].evidence == [
        "D1:3", "D1:4", "D1:11", "D2:9", "D2:10"]  # the turns naming Rex, pooled
    run = loaded.runs.get("conv-9", report.run_id)
    assert run.status == "ok" and run.program == "ingest"

    again = ingest_conversation(loaded, "conv-9", "conv-9", handle,
                                cache_path=tmp_path / "x.jsonl")
    assert again.llm_calls == 0 and again.cached_chunks == 2
    assert len(loaded.items("conv-9", kind="fact")) == len(facts)  # replaced, not doubled


def test_parse_failures_are_reported_not_swallowed(loaded: Store, scripted) -> None:
    handle = scripted(lambda s, u, schema: "not json at all")
    report = ingest_conversation(loaded, "conv-9", "conv-9", handle)
    assert len(report.failed_chunks) == 2 and report.llm_calls == 4  # one retry each
    assert re.search(r"Extractor", report.failed_chunks[0])
    assert loaded.runs.get("conv-9", report.run_id).status == "error"
    assert loaded.turns("conv-9")  # raw turns are always kept


def test_the_call_cap_is_checked_before_any_call(loaded: Store, scripted) -> None:
    handle = scripted(reply)
    settings = IngestSettings(chunking=ChunkSettings(min_turns=4, max_turns=6))
    with pytest.raises(IngestError, match="cap"):
        ingest_conversation(loaded, "conv-9", "conv-9", handle, settings=settings)
    assert handle.meter.since(0).calls == 0


def test_a_model_that_proposes_nothing_is_flagged(loaded: Store, scripted) -> None:
    from memstrata.programs.ingest import weak_model_warning

    handle = scripted(lambda s, u, schema: {"facts": [], "entities": [], "qa": []})
    report = ingest_conversation(loaded, "conv-9", "conv-9", handle)
    assert report.empty_chunks == report.chunks == 2 and report.kept["facts"] == 0
    assert "too weak" in weak_model_warning(report.chunks, report.empty_chunks)
    assert weak_model_warning(10, 4) is None


def test_persona_command_prints_current_facts_with_citations(make_record, write_json,
                                                               scripted, tmp_path, capsys
                                                               ) -> None:
    from memstrata.cli import main

    path = write_json("conv.json", [make_record(
        "conv-9", speakers=("Ana", "Tom"), sessions=SESSIONS,
        dates={1: "1:56 pm on 8 May, 2023", 2: "10:00 am on 20 August, 2023"})])
    db = tmp_path / "m.db"
    with Store.open(db) as store:
        load_locomo(store, read_locomo(path))
        ingest_conversation(store, "conv-9", "conv-9", scripted(reply))
    assert main(["persona", "Ana", "--user", "conv-9", "--conversation", "conv-9",
                 "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "lives in: Lyon  [conv-9: D2:1" in out and "Oslo" not in out  # superseded
    assert main(["persona", "Zed", "--user", "conv-9", "--conversation", "conv-9",
                 "--db", str(db)]) == 0
    assert "no persona rows for Zed" in capsys.readouterr().out
