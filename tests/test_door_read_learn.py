"""``Memory.read`` and ``Memory.learn``: what is read is found by ``context``, ``search``
and ``answer``; a judged run becomes strategies the next ``context`` shows; both are
covered by ``history``, ``export``/``import_`` and ``delete_all``, tenant by tenant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata import Memory
from memstrata.memory.models import StrategyItem
from tests.door_script import DoorScript

ANA = "ana"
GUIDE = ("The tram 28 runs through Alfama. A single ride costs 3 euros.\n"
         "1. Buy a Viva Viagem card\n2. Load it with zapping credit\n3. Validate on boarding")


def _read(m: Memory, user: str = ANA) -> Any:
    return m.read(GUIDE, user_id=user, title="Lisbon tram guide", source="Visit Lisboa",
                  when="2024-03-01")


def test_read_writes_episode_facts_and_procedure_found_by_every_verb() -> None:
    m = Memory.open(":memory:", embedder=None)
    report = _read(m)
    assert report.episode_id and len(report.facts) == 2 and report.procedure_id
    fact = m.get(report.facts[1], user_id=ANA)
    assert fact is not None and fact["text"] == "A single ride costs 3 euros."
    assert fact["event_time"].startswith("2024-03-01")
    assert [v.text for v in m.history(report.facts[1], user_id=ANA)] == [fact["text"]]
    assert m.search("how much does a tram ride cost", user_id=ANA)[0].id == report.facts[1]
    ctx = m.context("How much is a tram ride?", user_id=ANA)
    assert report.facts[1] in ctx.layers["semantic"].ids
    assert report.procedure_id in m.context("how to ride", user_id=ANA).ids
    run = m.store.runs.list(ANA)[0]
    assert run.program == "memory.read" and run.usage == {"calls": 0}
    assert m.context("tram", user_id="ben").text == ""  # nothing crosses tenants
    with pytest.raises(ValueError, match="empty"):
        m.read("  ", user_id=ANA)


def test_read_reports_progress_once_a_fact() -> None:
    from memstrata.memory.cognitive.reading import sentences

    m = Memory.open(":memory:", embedder=None)
    text = GUIDE + "\nTrams stop at midnight. Night buses run later."
    seen: list[int] = []
    report = m.read(text, user_id=ANA, progress=seen.append)
    assert seen == [1] * len(report.facts) and len(report.facts) == 4
    assert len(sentences(text)) == 4


def test_learn_by_trace_without_a_model_then_context_shows_the_strategy() -> None:
    m = Memory.open(":memory:", embedder=None)
    lesson = m.learn({"task": "Which tram goes to Alfama?", "trajectory": [
        {"tool": "mem_search", "args": {"query": "tram Alfama"}}], "answer": "The tram 28"},
        user_id=ANA, success=True)
    assert lesson.method == "trace" and lesson.llm_calls == 0 and len(lesson.strategies) == 1
    ctx = m.context("Which tram goes to Alfama?", user_id=ANA)
    assert ctx.layers["strategies"].ids == lesson.strategies
    assert "The tram 28" in ctx.text
    assert m.store.runs.get(ANA, lesson.run_id).usage == {"calls": 0}
    with pytest.raises(ValueError, match="needs the task"):
        m.learn("the agent searched and answered", user_id=ANA, success=False)


def test_learn_from_a_react_prediction_with_a_model(scripted: Any) -> None:
    script = DoorScript()
    m = Memory.open(":memory:", embedder=None, lm=scripted(script))
    old = StrategyItem(user_id=ANA, title="Read the guide first", text="Read the city "
                       "guide before planning a tram ride in Lisbon")
    shown = m.store.add(old)
    pred = dspy.Prediction(trajectory={
        "thought_0": "I should look up the tram", "tool_name_0": "mem_search",
        "tool_args_0": {"query": "tram 28"}, "observation_0": ["tram 28 runs to Alfama"],
        "thought_1": "done", "tool_name_1": "finish", "tool_args_1": {},
        "observation_1": "Completed."}, answer="Take the tram 28")
    lesson = m.learn(pred, user_id=ANA, success=True, task="How do I get to Alfama?",
                     used=[shown])
    assert script.asked == ["distil"] and lesson.llm_calls == 1 and lesson.method == "llm"
    assert "mem_search" in script.seen["distil"][0] and "tram 28" in script.seen["distil"][0]
    assert lesson.used == [shown] and m.store.get(ANA, shown).uses == 1
    new = m.get(lesson.strategies[0], user_id=ANA)
    assert new["title"] == "Probe the tram timetable first" and new["polarity"] == "success"
    ctx = m.context("How do I get to Alfama by tram?", user_id=ANA, layers=["strategies"])
    assert lesson.strategies[0] in ctx.ids
    assert m.store.runs.get(ANA, lesson.run_id).usage == {"calls": 1}


def test_learn_reads_a_recorded_run(scripted: Any) -> None:
    from memstrata.trajectories import Recorder

    m = Memory.open(":memory:", embedder=None)
    with Recorder(m.store, ANA, "react", task="Which tram goes to Belém?") as rec:
        rec.step("tool", "mem_search", input="tram Belém", output="tram 15 goes to Belém")
        rec.finish(output={"answer": "the tram 15"})
    lesson = m.learn(rec.run_id, user_id=ANA, success=False, rationale="it was the 15E")
    assert lesson.task == "Which tram goes to Belém?"
    item = m.get(lesson.strategies[0], user_id=ANA)
    assert item["polarity"] == "failure" and "15E" in item["text"]


def test_export_import_and_delete_all_cover_what_read_and_learn_wrote(tmp_path: Path) -> None:
    m = Memory.open(tmp_path / "a.db", embedder=None)
    report = _read(m)
    lesson = m.learn({"task": "Which tram goes to Alfama?", "trajectory": "searched",
                      "answer": "The tram 28"}, user_id=ANA, success=True)
    _read(m, "ben")
    written = [report.episode_id, *report.facts, report.procedure_id, *lesson.strategies]
    m.export(ANA, tmp_path / "ana.jsonl")
    other = Memory.open(tmp_path / "b.db", embedder=None)
    counts = other.import_(tmp_path / "ana.jsonl")
    assert counts["items"] >= len(written) and counts["edges"] > 0
    for node_id in written:  # every field, the record times included
        mine, theirs = m.get(node_id, user_id=ANA), other.get(node_id, user_id=ANA)
        assert theirs is not None and theirs == mine
    assert other.context("tram ride cost", user_id=ANA).ids
    deleted = m.delete_all(ANA)
    assert deleted["items"] >= len(written) and deleted.get("runs", 0) >= 2
    assert all(m.get(i) is None for i in written) and m.store.runs.list(ANA) == []
    assert m.context("tram", user_id=ANA).text == ""
    assert m.context("tram", user_id="ben").ids  # ben keeps what he read
