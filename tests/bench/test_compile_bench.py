"""``memstrata compile qa`` and ``memstrata bench compile`` against a scripted LM on a tiny
LoCoMo-format file: each optimizer writes a loadable program, ``bench locomo --program``
names it, the bench writes its documented shape, the split never leaks a question, and a
bad split is refused before any model loads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata.bench.compile import compile_sets, qa_examples, read_split
from memstrata.bench.locomo import load_locomo, read_locomo
from memstrata.bench.qa import QASettings, select_questions
from memstrata.cli import main
from memstrata.memory import Store
from memstrata.programs.compiled import load_program, program_hash
from memstrata.programs.compiler import Split
from memstrata.programs.qa import QA
from tests.bench.compile_helpers import optimizer_reply, scripted_cli_models, tiny_locomo
from tests.conftest import field, locomo_record

PEOPLE = {"conv-1": ("Ana", "Ben", "Oslo", "baker"), "conv-2": ("Cleo", "Dan", "Paris", "nurse"),
          "conv-3": ("Eve", "Finn", "Rome", "pilot"), "conv-4": ("Gus", "Hal", "Lima", "judge")}
SPLIT = ["--train", "conv-1,conv-2", "--val", "conv-3"]
# What the scripted model copies from the memories, by a word of the question.
FACTS = {"live": r"I live in (\w+)", "work": r"I work as a (\w+)", "cat": r"a cat named (\w+)"}


def _record(sample_id: str) -> dict[str, Any]:
    a, b, city, job = PEOPLE[sample_id]
    sessions = {1: [{"speaker": a, "dia_id": "D1:1", "text": f"I live in {city} now."},
                    {"speaker": b, "dia_id": "D1:2", "text": f"Nice! I work as a {job}."}],
                2: [{"speaker": a, "dia_id": "D2:1", "text": "I adopted a cat named Tom."},
                    {"speaker": b, "dia_id": "D2:2", "text": "I ran a marathon last week."}]}
    qa = [{"question": f"Where does {a} live?", "answer": city, "evidence": ["D1:1"],
           "category": 4},
          {"question": f"What does {b} work as?", "answer": job, "evidence": ["D1:2"],
           "category": 4},
          {"question": f"What is the name of {a}'s cat?", "answer": "Tom",
           "evidence": ["D2:1"], "category": 1},
          {"question": f"What is {b}'s favourite colour?", "adversarial_answer": "red",
           "evidence": [], "category": 5}]
    return locomo_record(sample_id, speakers=(a, b), sessions=sessions, qa=qa)


def reply(system: str, user: str, schema: dict[str, Any] | None) -> Any:
    """QA copies the fact the question asks for (else abstains); an optimizer's own
    prompts (DSPy's chat format) get a short instruction in every output field."""
    props = (schema or {}).get("properties", {})
    if {"answer", "evidence"} <= set(props):
        question = field(user, "question").lower()
        cue = next((c for c in FACTS if c in question), None)
        m = re.search(r"\[(D\d+:\d+)[^\]]*\][^\n]*?" + FACTS[cue], user) if cue else None
        return {"answer": m[2], "evidence": [m[1]]} if m else {"answer": "Not mentioned",
                                                               "evidence": []}
    return optimizer_reply(system, schema, text="Copy the answer from the memories.",
                           instruction="Copy the answer from the memories, in a few words.")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tiny_locomo(tmp_path, [_record(s) for s in PEOPLE])


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch, scripted: Any) -> list[Any]:
    """Every model the CLI sets up is the scripted one; the handles made are listed."""
    return scripted_cli_models(monkeypatch, scripted, reply)


def _compile(data: Path, out: Path, optimizer: str, *extra: str) -> int:
    return main(["compile", "qa", "--optimizer", optimizer, "--lm", "local/x", "--data",
                 str(data), *SPLIT, "--out", str(out), "--no-dense", *extra])


BUDGET = {"bootstrap": "4", "mipro": "2", "gepa": "12", "simba": "1"}


@pytest.mark.parametrize("optimizer", ["bootstrap", "mipro", "gepa", "simba"])
def test_compile_writes_a_loadable_program_and_records_the_run(
        optimizer: str, data: Path, tmp_path: Path, model: list[Any],
        capsys: pytest.CaptureFixture[str]) -> None:
    if optimizer == "mipro":
        pytest.importorskip("optuna")
    out = tmp_path / f"{optimizer}.json"
    assert _compile(data, out, optimizer, "--budget", BUDGET[optimizer]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    made = len(model[0].lm.engine.requests)
    qa = load_program("qa", out)
    assert isinstance(qa, QA) and qa.style == QASettings().style  # LoCoMo's answer style
    with dspy.context(lm=model[0].lm):
        assert qa(question="Where does Ida live?",
                  memories="[D1:1 · Ida · 8 May 2023] I live in Kyiv now.").answer == "Kyiv"
    doc = json.loads(out.read_text())
    meta = doc["meta"]
    assert meta["optimizer"] == optimizer and meta["train"] == ["conv-1", "conv-2"]
    assert meta["llm_calls"] == printed["llm_calls"] == made > 0
    assert printed["program"]["sha256"] == program_hash(out)
    # Only train and validation questions were seen.
    assert {q.split("#")[0] for q in meta["train_ids"]} <= {"conv-1", "conv-2"}
    assert {q.split("#")[0] for q in meta["val_ids"]} == {"conv-3"}
    # The compile is one recorded run, every LLM call a step.
    with Store.open(f"{out}.db") as store:
        [run] = store.runs.list("compile")
        steps = store.runs.steps("compile", run.id)
    assert run.status == "ok" and run.output["sha256"] == program_hash(out)
    assert run.usage["calls"] == meta["llm_calls"]
    assert sum(s.kind == "llm" for s in steps) == meta["llm_calls"]


@pytest.mark.parametrize("optimizer", ["bootstrap", "mipro", "gepa", "simba"])
def test_the_answerer_compiles_end_to_end_and_answers_in_bench_locomo(
        optimizer: str, data: Path, tmp_path: Path, model: list[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.programs.answer import PersonalAnswerer
    from memstrata.programs.binding import UnboundProgramError

    if optimizer == "mipro":
        pytest.importorskip("optuna")
    prepared: list[bool] = []  # per run of the answerer: whether that copy was bound
    prepare = PersonalAnswerer.prepare

    def spy(self: PersonalAnswerer, *args: Any, **kwargs: Any) -> Any:
        prepared.append(self.sources.bound)
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(PersonalAnswerer, "prepare", spy)
    out = tmp_path / "answerer.json"
    assert main(["compile", "answerer", "--optimizer", optimizer, "--lm", "local/x", "--data",
                 str(data), *SPLIT, "--out", str(out), "--no-dense", "--budget",
                 BUDGET[optimizer]]) == 0
    # The optimizer ran unbound copies of the answerer (its runs, not just its QA), each
    # reading the compile's store through answering_from; the examples' own packing is
    # the one bound run per example before them.
    assert False in prepared
    answerer = load_program("answerer", out)
    assert isinstance(answerer, PersonalAnswerer) and not answerer.sources.bound
    with pytest.raises(UnboundProgramError):  # the compile's store did not stay bound
        answerer.prepare("Where does Ana live?", "conv-1")
    meta = json.loads(out.read_text())["meta"]
    assert meta["program"] == "answerer" and meta["llm_calls"] > 0
    # Each training run packed its own memories: the program was run end to end.
    with Store.open(f"{out}.db") as store:
        [run] = store.runs.list("compile")
        calls = [s for s in store.runs.steps("compile", run.id) if s.kind == "llm"]
    assert len(calls) == meta["llm_calls"]
    if optimizer == "bootstrap":
        demos = answerer.qa.respond.predict.demos
        assert demos and all("memories" in d for d in demos)
    bench = tmp_path / "bench"
    assert main(["bench", "locomo", "--program", str(out), "--data", str(data), "--lm",
                 "local/x", "--out", str(bench), "--no-dense", "--conversations", "conv-4",
                 "--systems", "memstrata"]) == 0
    doc = json.loads((bench / "locomo.json").read_text())
    assert doc["program"]["name"] == "answerer"
    assert doc["program"]["sha256"] == program_hash(out)


def test_bench_locomo_refuses_an_answerer_with_other_settings(
        data: Path, tmp_path: Path) -> None:
    from memstrata.bench.qa import compiled_qa
    from memstrata.programs.answer import AnswerSettings, PersonalAnswerer
    from memstrata.programs.compiled import save_program

    settings = QASettings()
    out = tmp_path / "a.json"
    save_program(PersonalAnswerer(settings=AnswerSettings(retrieve_k=7), qa=QA(settings.style)),
                 out, name="answerer")
    with pytest.raises(ValueError, match="answer settings"):
        compiled_qa(out, settings)
    save_program(PersonalAnswerer(qa=QA(settings.style)), out, name="answerer")
    qa, ref = compiled_qa(out, settings)
    assert isinstance(qa, QA) and ref.name == "answerer"


def test_an_interrupted_compile_is_recorded_with_its_calls(data: Path, tmp_path: Path,
                                                           scripted: Any) -> None:
    from memstrata.bench.compile import QATask
    from memstrata.programs.compiler import BUDGETS, CompileJob, Models, compile_program

    handle = scripted(reply)
    handle.lm.engine.fail_after = 2
    job = CompileJob(task=QATask(Models(student=handle)), optimizer="bootstrap",
                     data=read_split(data, Split.parse("conv-1,conv-2", "conv-3")),
                     out=tmp_path / "p.json", budget=BUDGETS["bootstrap"])
    with Store.open(tmp_path / "c.db") as store:
        with pytest.raises(KeyboardInterrupt):
            compile_program(job, store, progress=False)
        [run] = store.runs.list("compile")
    assert run.status == "error" and run.usage["calls"] == 3  # the third one raised
    assert not job.out.exists()


def test_the_trainset_memories_are_those_bench_locomo_shows_qa(
        data: Path, tmp_path: Path, scripted: Any) -> None:
    from memstrata.bench.qa import run_locomo_bench

    handle = scripted(reply)
    doc = run_locomo_bench(data, handle, tmp_path / "bench", systems=("memstrata",),
                           conversations={"conv-1"}, progress=False)
    assert doc["program"] is None
    with Store.open(tmp_path / "bench" / "locomo.db") as store:
        injected = {}
        for run in store.runs.list("conv-1", limit=100):
            steps = {s.kind: s for s in store.runs.steps("conv-1", run.id)}
            if "inject" in steps:
                injected[run.task] = steps["inject"].output
    with Store.open(":memory:") as store:
        convs = read_locomo(data)[:1]
        load_locomo(store, convs)
        examples = qa_examples(store, handle, QASettings.for_model(handle.name),
                               select_questions(convs, categories=None, limit=None))
    assert examples and {e.question: e.memories for e in examples} == injected
    assert {e.answer for e in examples if e.category == 5} == {"Not mentioned"}


def test_the_split_never_leaks_a_question(data: Path, scripted: Any) -> None:
    with pytest.raises(ValueError, match="both --train and --val"):
        Split.parse("conv-1,conv-2", "conv-2")
    with pytest.raises(ValueError, match="both --val and --heldout"):
        Split.parse("conv-1", "conv-2", "conv-2")
    with pytest.raises(ValueError, match="twice"):
        Split.parse("conv-1,conv-1", "conv-2")
    with pytest.raises(ValueError, match="no conversation conv-9"):
        read_split(data, Split.parse("conv-1,conv-9", "conv-3"))
    split = read_split(data, Split.parse("conv-1,conv-2", "conv-3", "conv-4"))
    with Store.open(":memory:") as store:
        sets = compile_sets(store, scripted(reply), QASettings(), split, limit=None)
    heldout = {q.qid for q in split.units["conv-4"].questions}
    assert sets.ids and not sets.ids & heldout
    assert {q.split("#")[0] for q in sets.ids} == {"conv-1", "conv-2", "conv-3"}


@pytest.mark.parametrize("program", ["qa", "answerer", "extractor", "voe"])
def test_a_bad_split_is_refused_before_any_model_loads(
        program: str, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import memstrata.programs as programs

    def no_model(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model was set up")

    monkeypatch.setattr(programs, "setup_lm", no_model)
    base = ["compile", program, "--optimizer", "bootstrap", "--data", str(data),
            "--out", str(tmp_path / "p.json")]
    with pytest.raises(SystemExit, match="no conversation conv-9"):
        main([*base, "--train", "conv-1,conv-9", "--val", "conv-3"])
    with pytest.raises(SystemExit, match="conv-3 is in both --train and --val"):
        main([*base, "--train", "conv-1,conv-3", "--val", "conv-3"])
    with pytest.raises(SystemExit, match="both --val and --heldout"):
        main(["bench", "compile", program, "--data", str(data), *SPLIT, "--heldout", "conv-3",
              "--out", str(tmp_path / "b")])
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "b").exists()
    with pytest.raises(SystemExit):  # argparse refuses a program that is not compiled
        main(["compile", "nonesuch", "--optimizer", "bootstrap", "--data", str(data), *SPLIT,
              "--out", str(tmp_path / "p.json")])
    with pytest.raises(SystemExit, match="--budget"):
        main([*base, *SPLIT, "--budget", "0"])
    assert not (tmp_path / "p.json").exists()


def test_mipro_without_optuna_names_the_extra(
        data: Path, tmp_path: Path, model: list[Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed
    assert _compile(data, tmp_path / "m.json", "mipro") == 2
    assert "memstrata[optimize]" in capsys.readouterr().err
    assert not model  # refused before any model was set up


def test_bench_locomo_answers_with_the_program_and_names_it(
        data: Path, tmp_path: Path, model: list[Any]) -> None:
    program = tmp_path / "qa.json"
    assert _compile(data, program, "bootstrap", "--budget", "4") == 0
    out = tmp_path / "bench"
    assert main(["bench", "locomo", "--program", str(program), "--data", str(data), "--lm",
                 "local/x", "--out", str(out), "--no-dense", "--conversations", "conv-4",
                 "--systems", "memstrata,no_memory"]) == 0
    doc = json.loads((out / "locomo.json").read_text())
    assert doc["program"] == {"path": str(program), "name": "qa",
                              "sha256": program_hash(program)}
    demos = load_program("qa", program).respond.predict.demos
    prompts = [r.messages[0].text for r in model[-1].lm.engine.requests]
    assert any(str(demos[0]["question"]) in p for p in prompts)  # its demos were shown
    with Store.open(out / "locomo.db") as store:
        configs = [r.config for r in store.runs.list("conv-4", limit=100)]
    named = [c["program"] for c in configs if c["system"] == "memstrata"]
    assert named and all(p["sha256"] == program_hash(program) for p in named)
    assert all(c.get("program") is None for c in configs if c["system"] == "no_memory")


def test_bench_compile_writes_the_documented_shape(
        data: Path, tmp_path: Path, model: list[Any]) -> None:
    pytest.importorskip("optuna")
    pytest.importorskip("matplotlib")
    out = tmp_path / "bench"
    args = ["bench", "compile", "qa", "--lm", "local/x", "--data", str(data), *SPLIT,
            "--heldout", "conv-4", "--out", str(out), "--no-dense",
            *[f"--budget={o}={n}" for o, n in BUDGET.items()]]
    assert main(args) == 0
    doc = json.loads((out / "compile.json").read_text())
    assert doc["program"] == "qa" and doc["heldout"] == ["conv-4"]
    assert list(doc["systems"]) == ["uncompiled", "bootstrap", "mipro", "gepa", "simba"]
    for name, row in doc["systems"].items():
        assert isinstance(row["f1"], float) and isinstance(row["llm_calls"], int)
        assert row["questions"] == 4 and row["program"] == (
            None if name == "uncompiled" else {"path": str(out / "programs" / f"{name}.json"),
                                               "name": "qa",
                                               "sha256": program_hash(row["program"]["path"])})
    assert doc["systems"]["uncompiled"]["compile_s"] == 0
    assert doc["systems"]["uncompiled"]["llm_calls"] == 0
    assert all(doc["systems"][o]["llm_calls"] > 0 for o in BUDGET)
    assert (out / "compile.md").read_text().count("| ") > 5 and (out / "compile.png").stat().st_size
    # No held-out question was seen by any compile.
    for name in BUDGET:
        meta = json.loads((out / "programs" / f"{name}.json").read_text())["meta"]
        assert not {q for q in meta["train_ids"] + meta["val_ids"] if q.startswith("conv-4")}
    # Run again: every program is reused and every answer comes from the cache.
    calls = sum(len(h.lm.engine.requests) for h in model)
    assert main(args) == 0
    assert sum(len(h.lm.engine.requests) for h in model) == calls
    again = json.loads((out / "compile.json").read_text())
    assert all(again["systems"][o]["reused"] for o in BUDGET)


def test_the_commands_table_of_programs_is_the_tasks() -> None:
    """``compile``'s parser reads ``bench.compile_specs`` (no DSPy); every task takes its
    line and default split from there, and every program there has a task."""
    from memstrata.bench.compile import TASKS
    from memstrata.bench.compile_specs import PROGRAMS

    assert list(TASKS) == list(PROGRAMS)
    for name, task in TASKS.items():
        spec = PROGRAMS[name]
        assert (task.summary, task.default_split, task.unit) == (
            spec.summary, spec.split, spec.split.unit), name
