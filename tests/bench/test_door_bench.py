"""The seeds' experiments through the door: ``bench locomo``'s ``memory_routed`` system
(``Memory.answer`` with routing) and ``bench cognitive --through-memory``
(``Memory.read`` and ``Memory.answer``), on scripted models."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memstrata.bench.cognitive.run import run_cognitive_bench
from memstrata.bench.qa import run_locomo_bench
from memstrata.bench.qa_report import locomo_table
from memstrata.cli import main
from memstrata.memory import Store
from tests.bench.test_cognitive_bench import SCENARIOS
from tests.bench.test_cognitive_bench import _reply as cognitive_reply
from tests.bench.test_qa_bench import QA_ITEMS, reader
from tests.conftest import locomo_record


def _routing_reader(system: str, user: str, schema: Any) -> Any:
    """The QA bench's reader, plus a classifier that calls every question a recall but
    "When" ones (a synthesis, which the question's words do not overrule) and the
    reasoner's programs."""
    if system.startswith("Classify"):
        return {"intent": "multi_source_synthesis" if "When did" in user else "simple_recall"}
    if system.startswith("Write short keyword"):
        return {"queries": ["Bob hiking Alps"]}
    if system.startswith("Decide whether"):
        return {"sufficient": True, "missing": "", "queries": []}
    if system.startswith("Answer the question from the numbered facts"):
        return {"operands": [], "expression": "", "answer": "2023-05-08", "used": [1]}
    return reader(system, user, schema)


def test_memory_routed_answers_locomo_through_the_door(write_json: Callable[..., Path],
                                                       tmp_path: Path,
                                                       scripted: Callable[..., Any]) -> None:
    data = write_json("locomo.json", [locomo_record("conv-1", qa=QA_ITEMS)])
    doc = run_locomo_bench(data, scripted(_routing_reader), tmp_path / "out",
                           systems=("memstrata", "memory_routed"), progress=False)
    routed, plain = doc["systems"]["memory_routed"], doc["systems"]["memstrata"]
    assert routed["f1"]["4"] == plain["f1"]["4"] == 1.0  # recalls: the same answerer
    assert routed["llm_calls"] > plain["llm_calls"]  # a classifying call a question
    # The door's record counts its calls' prompts, not the memory block: not a 0.
    assert routed["context_tokens_per_question"] is None
    assert plain["context_tokens_per_question"] > 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "answers.jsonl").open()]
    when = [r for r in rows if r["system"] == "memory_routed"
            and r["provenance"]["question"].startswith("When did")]
    assert when and when[0]["provenance"]["path"] == "reasoner"
    assert when[0]["answer"] == "8 May 2023"  # the reasoner's ISO day in LoCoMo's style
    with Store.open(tmp_path / "out" / "locomo.db", embedder=None) as store:
        programs = {r.program for r in store.runs.list("conv-1")}
    assert {"qa.memory_routed", "memory.answer", "qa.memstrata"} <= programs
    # The door against the answerer it routes from, question by question and by path.
    against = doc["against"]["memstrata"]
    assert set(against) == {"memory_routed"}
    paths = against["memory_routed"]["by_path"]
    assert paths["reasoner"]["questions"] == 1 and paths["reasoner"]["f1"] == 1.0
    assert paths["answerer"]["questions"] == 3
    assert paths["answerer"]["f1"] == paths["answerer"]["baseline_f1"]
    assert "By the path each question took" in locomo_table(doc)
    again = run_locomo_bench(data, scripted(_routing_reader), tmp_path / "out",
                             systems=("memstrata", "memory_routed"), progress=False)
    assert again["against"] == doc["against"]  # the paths read back from the cache


def test_bench_cognitive_through_memory(scripted: Callable[..., Any], tmp_path: Path) -> None:
    scenarios = tmp_path / "tiny.json"
    scenarios.write_text(json.dumps(SCENARIOS))
    out = tmp_path / "out"

    def reply(system: str, user: str, schema: Any) -> Any:
        if system.startswith("Answer the question in a few words using the memories"):
            return {"answer": "6", "evidence": []}  # the answerer, for the recall
        return cognitive_reply(system, user, schema)

    doc = run_cognitive_bench(scripted(reply), out, scenarios=scenarios, runs=1,
                              progress=False, through_memory=True)
    assert doc["path"] == "memory"
    assert doc["levels"]["L1"]["score"] == 1.0 and doc["levels"]["L3"]["score"] == 1.0
    assert doc["levels"]["L1"]["llm_calls"] == 2  # classify, then the answerer
    with Store.open(out / "cognitive_run1.db", embedder=None) as store:
        programs = [r.program for r in store.runs.list("cognitive:L1")]
    assert "memory.read" in programs and "memory.answer" in programs


def test_the_cli_takes_the_door_options(capsys: Any) -> None:
    import pytest

    for argv in (["bench", "cognitive", "--help"], ["bench", "locomo", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
    text = capsys.readouterr().out
    assert "--through-memory" in text and "memory_routed" in text
