"""``memstrata compile extractor`` and ``bench compile extractor`` against a scripted LM on a
tiny LoCoMo-format file: the examples are ingest's chunks with the questions' evidence,
each optimizer writes a loadable extractor, no held-out chunk is trained or validated on,
the bench writes grounded facts per chunk and recall through facts, and a bad split is
refused before any model loads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata.bench.compile import TASKS, ExtractorTask, read_split
from memstrata.bench.compile.extractor import ShownChunk, compile_sets, select_chunks
from memstrata.bench.locomo import LOCOMO_DATE_STYLE
from memstrata.cli import main
from memstrata.memory import Store
from memstrata.memory.chunking import Chunk
from memstrata.memory.facts import chunk_text
from memstrata.programs.compiled import load_program, program_hash, read_program_file
from memstrata.programs.compiler import Budget, CompileJob, Models, Split, compile_program
from memstrata.programs.extractor import Extractor
from memstrata.programs.metrics import extractor_metric
from tests.bench.compile_helpers import optimizer_reply, scripted_cli_models, tiny_locomo
from tests.conftest import field, locomo_record

PEOPLE = {"conv-1": ("Ana", "Ben", "Oslo", "baker"), "conv-2": ("Cleo", "Dan", "Paris", "nurse"),
          "conv-3": ("Eve", "Finn", "Rome", "pilot"), "conv-4": ("Gus", "Hal", "Lima", "judge")}
SPLIT = ["--train", "conv-1,conv-2", "--val", "conv-3"]
SMALL_TALK = ["Ha, that sounds fun.", "Tell me more about it.", "Sure, it was a long day.",
              "Really? Nice to hear.", "Yes, we should talk soon."]
# What the scripted extractor proposes, by a pattern of a turn: the relation and value
# (grounded: both are the turn's words).
FACTS = {r"I live in (\w+)": "live in", r"I work as a (\w+)": "work as a",
         r"a cat named (\w+)": "adopted a cat named"}


def _session(a: str, b: str, first: str, second: str, n: int) -> list[dict[str, Any]]:
    """Ten turns, the two facts said first, small talk after."""
    texts = [first, second, *(SMALL_TALK * 2)][:10]
    return [{"speaker": (a, b)[i % 2], "dia_id": f"D{n}:{i + 1}", "text": text}
            for i, text in enumerate(texts)]


def _record(sample_id: str) -> dict[str, Any]:
    """Three sessions of ten turns (three chunks as ingest plans them); the questions'
    evidence lies in sessions 1 and 3, none in session 2."""
    a, b, city, job = PEOPLE[sample_id]
    sessions = {1: _session(a, b, f"I live in {city} now.", f"Nice! I work as a {job}.", 1),
                2: _session(a, b, "The weather was grey all week.", "Same here, rain.", 2),
                3: _session(a, b, "I adopted a cat named Tom.", "I ran a marathon.", 3)}
    qa = [{"question": f"Where does {a} live?", "answer": city, "evidence": ["D1:1"],
           "category": 4},
          {"question": f"What does {b} work as?", "answer": job, "evidence": ["D1:2"],
           "category": 4},
          {"question": f"What is the name of {a}'s cat?", "answer": "Tom",
           "evidence": ["D3:1"], "category": 1},
          {"question": f"What is {b}'s favourite colour?", "adversarial_answer": "red",
           "evidence": ["D2:2"], "category": 5}]
    return locomo_record(sample_id, speakers=(a, b), sessions=sessions, qa=qa)


def reply(system: str, user: str, schema: dict[str, Any] | None) -> Any:
    """The extractor proposes each fact a turn states (grounded) and one it invents (not
    grounded); an optimizer's own prompts get a short instruction in every field."""
    props = (schema or {}).get("properties", {})
    if {"facts", "entities", "qa"} <= set(props):
        facts = []
        for line in field(user, "turns").splitlines():
            speaker, _, text = line.partition(": ")
            for pattern, predicate in FACTS.items():
                if m := re.search(pattern, text):
                    facts.append({"subject": speaker, "predicate": predicate, "object": m[1]})
        facts.append({"subject": "Ana", "predicate": "collects", "object": "purple kites"})
        return {"facts": facts[:5], "entities": [], "qa": []}
    return optimizer_reply(system, schema, text="Copy the facts the turns state.",
                           instruction="Copy the facts the turns state, in their words.")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tiny_locomo(tmp_path, [_record(s) for s in PEOPLE])


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch, scripted: Any) -> list[Any]:
    """Every model the CLI sets up is the scripted one; the handles made are listed."""
    return scripted_cli_models(monkeypatch, scripted, reply)


def test_the_extractor_task_is_registered() -> None:
    assert TASKS["extractor"] is ExtractorTask
    assert ExtractorTask.program == "extractor" and ExtractorTask.unit == "conversation"
    assert ExtractorTask.default_split.heldout == ("conv-47",)


def test_the_examples_are_ingest_chunks_labelled_with_the_questions_evidence(
        data: Path, scripted: Any) -> None:
    from memstrata.programs.ingest import plan

    split = read_split(data, Split.parse("conv-1,conv-2", "conv-3"))
    task = ExtractorTask(Models(student=scripted(reply)))
    with Store.open(":memory:") as store:
        sets = task.sets(store, split, None)
        chunks = plan(store, "conv-1", "conv-1", task.settings)
    assert len(sets.train) == 6 and len(sets.val) == 3  # three chunks a conversation
    first = next(e for e in sets.train if e.id == "conv-1#chunk-0")
    assert set(first.inputs().keys()) == {"chunk"}
    assert first.chunk.turn_ids == chunks[0].turn_ids  # exactly ingest's plan
    assert first.evidence == ["D1:1", "D1:2"] and first.participants == ["Ana", "Ben"]
    assert first.user_id == "conv-1" and first.date_style == LOCOMO_DATE_STYLE == "long"
    assert sorted(first.qids) and len(first.qids) == 2
    # Category 5's evidence is no label; session 2 holds no other evidence.
    assert next(e for e in sets.train if e.id == "conv-1#chunk-1").evidence == []
    # A chunk prints as the extractor reads it (MIPROv2 shows examples to a model).
    assert "Ana: I live in Oslo now." in repr(first) and "user_id=" not in repr(first.chunk)
    assert str(first.chunk) == chunk_text(chunks[0], "long")
    # The uncompiled extractor on an example: the metric grounds its facts.
    with dspy.context(lm=task.models.student.lm):
        scored = extractor_metric(first, task.student()(**first.inputs()))
    assert scored.score == pytest.approx((2 / 3 + 1.0) / 2, abs=1e-3)
    assert "purple kites" in scored.feedback


def test_limit_prefers_chunks_with_evidence_spread_over_conversations(
        data: Path, scripted: Any) -> None:
    split = read_split(data, Split.parse("conv-1,conv-2", "conv-3"))
    with Store.open(":memory:") as store:
        sets = compile_sets(store, ExtractorTask(Models(student=scripted(reply))).settings,
                            split, limit=4)
    assert [e.id for e in sets.train] == ["conv-1#chunk-0", "conv-2#chunk-0",
                                          "conv-1#chunk-2", "conv-2#chunk-2"]
    assert all(e.evidence for e in sets.train)
    assert [e.id for e in sets.val] == ["conv-3#chunk-0", "conv-3#chunk-2", "conv-3#chunk-1"]


def test_select_chunks_spreads_over_a_conversation() -> None:
    def example(i: int, evidence: bool) -> dspy.Example:
        return dspy.Example(id=f"c#chunk-{i}", evidence=["x"] if evidence else [])

    chunks = [example(i, True) for i in range(8)]
    assert [e.id[-1] for e in select_chunks([chunks], 4)] == ["0", "4", "2", "6"]
    assert len(select_chunks([chunks], None)) == 8
    mixed = [[example(0, False), example(1, True)], [example(0, True)]]
    assert [e.evidence for e in select_chunks(mixed, 2)] == [["x"], ["x"]]


def test_no_heldout_chunk_is_ever_trained_or_validated_on(data: Path, scripted: Any) -> None:
    split = read_split(data, Split.parse("conv-1,conv-2", "conv-3", "conv-4"))
    task = ExtractorTask(Models(student=scripted(reply)))
    with Store.open(":memory:") as store:
        sets = task.sets(store, split, None)
        assert not store.turns("conv-4")  # the held-out conversation is not even loaded
    assert {i.split("#")[0] for i in sets.ids} == {"conv-1", "conv-2", "conv-3"}
    seen = {(t.conversation_id, t.turn_id) for e in (*sets.train, *sets.val)
            for t in e.chunk.turns}
    assert seen and not {c for c, _ in seen} & {"conv-4"}
    with pytest.raises(ValueError, match="both --val and --heldout"):
        Split.parse("conv-1", "conv-3", "conv-3")


BUDGET = {"bootstrap": 4, "mipro": 2, "gepa": 12, "simba": 1}


def _state(program: dspy.Module) -> dict[str, Any]:
    predictor = dict(program.named_predictors())["extract.predict"]
    return {"instructions": predictor.signature.instructions,
            "demos": json.loads(json.dumps([dict(d) for d in predictor.demos], default=str))}


@pytest.mark.parametrize("optimizer", ["bootstrap", "mipro", "gepa", "simba"])
def test_each_optimizer_compiles_the_extractor_and_the_file_round_trips(
        optimizer: str, data: Path, tmp_path: Path, scripted: Any) -> None:
    from memstrata.programs.compiled import save_program
    from memstrata.programs.compiler import BUDGETS

    if optimizer == "mipro":
        pytest.importorskip("optuna")
    handle = scripted(reply)
    task = ExtractorTask(Models(student=handle))
    budget = Budget(**{**BUDGETS[optimizer].model_dump(), "main": BUDGET[optimizer]})
    out = tmp_path / f"{optimizer}.json"
    job = CompileJob(task=task, optimizer=optimizer, out=out, budget=budget, limit=4,
                     data=read_split(data, Split.parse("conv-1,conv-2", "conv-3")))
    with Store.open(tmp_path / "c.db") as store:
        result = compile_program(job, store, progress=False)
    assert result.llm_calls == len(handle.lm.engine.requests) > 0
    doc = read_program_file(out)
    assert doc["program"] == "extractor" and doc["options"]["date_style"] == "long"
    assert doc["meta"]["settings"]["date_style"] == "long"
    assert {i.split("#")[0] for i in doc["meta"]["train_ids"]} <= {"conv-1", "conv-2"}
    assert {i.split("#")[0] for i in doc["meta"]["val_ids"]} == {"conv-3"}
    loaded = load_program("extractor", out)
    assert isinstance(loaded, Extractor) and loaded.date_style == "long"
    state = _state(loaded)
    assert state["demos"] and state["instructions"]
    if optimizer == "bootstrap":  # its demos are the teacher's extractions of train chunks
        assert all("turns" in d and d["facts"] for d in state["demos"])
    # Saved again, the loaded program is the same program (demos and instructions).
    save_program(loaded, tmp_path / "again.json", meta=doc["meta"])
    assert program_hash(tmp_path / "again.json") == doc["sha256"]
    assert _state(load_program("extractor", tmp_path / "again.json")) == state
    turns = [t for e in task.sets(Store.open(":memory:"), job.data, 1).train
             for t in e.chunk.turns]
    with dspy.context(lm=handle.lm):
        facts = loaded(chunk=Chunk(conversation_id="conv-1", turns=turns)).extraction.facts
    assert {f.object for f in facts} >= {"Oslo", "baker"}


def test_bench_compile_extractor_writes_grounded_facts_and_recall(
        data: Path, tmp_path: Path, model: list[Any]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "bench"
    args = ["bench", "compile", "extractor", "--lm", "local/x", "--data", str(data), *SPLIT,
            "--heldout", "conv-4", "--out", str(out), "--no-dense", "--optimizers",
            "bootstrap", "--budget", "bootstrap=4", "--limit", "4"]
    assert main(args) == 0
    doc = json.loads((out / "compile.json").read_text())
    assert doc["program"] == "extractor" and doc["headline"] == "grounded_per_chunk"
    assert doc["columns"] == ["recall@10", "grounded_share"]
    assert list(doc["systems"]) == ["uncompiled", "bootstrap"]
    for row in doc["systems"].values():
        # Three chunks: 2 + 0 + 1 grounded facts (the invented one never grounds).
        assert row["grounded_per_chunk"] == 1.0 and row["chunks"] == 3 and row["facts"] == 3
        assert row["grounded_share"] == 0.5 and row["failures"] == 0
        assert row["questions"] == 3  # categories 1-4 with evidence
        assert row["recall@10"] == 1.0 and row["recall@10_facts+turns"] == 1.0
        assert row["heldout_llm_calls"] == 3 == row["llm_calls_now"]
    assert doc["systems"]["bootstrap"]["llm_calls"] > 0
    assert "grounded_per_chunk" in (out / "compile.md").read_text()
    meta = json.loads((out / "programs" / "bootstrap.json").read_text())["meta"]
    assert not {i for i in meta["train_ids"] + meta["val_ids"] if i.startswith("conv-4")}
    # A compiled extractor's extractions are cached apart from the uncompiled one's.
    for name in ("uncompiled", "bootstrap"):
        assert len((out / "heldout" / name / "extractions.jsonl").read_text().splitlines()) == 3
    # Run again: the program is reused, every extraction comes from the cache, and the
    # held-out calls are the recorded ones.
    calls = sum(len(h.lm.engine.requests) for h in model)
    assert main(args) == 0
    assert sum(len(h.lm.engine.requests) for h in model) == calls
    again = json.loads((out / "compile.json").read_text())
    assert again["systems"]["bootstrap"]["reused"]
    for row in again["systems"].values():
        assert row["heldout_llm_calls"] == 3 and row["llm_calls_now"] == 0
        assert row["cached_chunks"] == 3


def test_the_heldout_limit_extracts_the_first_chunks_and_scores_their_questions(
        data: Path, tmp_path: Path, scripted: Any) -> None:
    handle = scripted(reply)
    task = ExtractorTask(Models(student=handle))
    split = read_split(data, Split.parse("conv-1", "conv-2", "conv-3,conv-4"))
    scored = task.score(split, None, tmp_path / "h", limit=2, progress=False)
    assert scored.items == 2 and scored.metrics["chunks"] == 2
    assert len(handle.lm.engine.requests) == 2 == scored.llm_calls
    # conv-3's first two chunks: its D1 questions count, the cat (D3:1) does not; conv-4
    # is never reached.
    assert scored.metrics["questions"] == 2 and scored.metrics["recall@10"] == 1.0
    assert scored.score == 1.0  # 2 grounded facts in 2 chunks
    with Store.open(tmp_path / "h" / "facts.db") as store:
        assert not store.turns("conv-4")
        [run] = store.runs.list("conv-3")
    assert run.config["max_chunks"] == 2


def test_a_shown_chunk_is_a_chunk() -> None:
    from memstrata.memory.models import Turn

    turn = Turn(user_id="u", conversation_id="c", session_id="s", turn_id="D1:1", seq=0,
                speaker="Ana", text="I live in Oslo now.")
    shown = ShownChunk(conversation_id="c", turns=[turn], date_style="long")
    assert isinstance(shown, Chunk) and shown.turn_ids == ["D1:1"]
    assert str(shown) == "-- ? --\nAna: I live in Oslo now."
