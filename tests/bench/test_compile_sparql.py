"""``memstrata compile sparql``, ``memstrata bench compile sparql`` and ``memstrata
experiment --program`` against a scripted LM on a tiny ontology task file: the split by
level never lets a held-out task into a compile, each optimizer compiles the suite's
SPARQL agent into a file that loads with its demos, the bench writes its shape, and an
experiment run with a compiled agent names it (and refuses a file that does not fit)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata.bench.compile import SparqlTask
from memstrata.bench.compile.sparql import LEVEL_SPLIT, TASK_FILE, read_levels
from memstrata.bench.experiments.ontology_suite import sparql_agent
from memstrata.bench.ontology import load_tasks
from memstrata.cli import main
from memstrata.memory import Store
from memstrata.programs import setup_lm
from memstrata.programs.compiled import load_program, program_hash, save_program
from memstrata.programs.compiler import BUDGETS, CompileJob, Models, Split, compile_program, spread
from memstrata.programs.executors import Executor, ExecutorSettings
from memstrata.programs.qa import QA
from tests.conftest import ScriptedEngine, field

TINY = ("L1-01", "L1-03", "L1-04", "L2-01", "L2-06", "L3-01", "L3-02")
SPLIT = ["--train", "L1", "--val", "L2"]
# The scripted agent gets these wrong (a subject that does not exist: no rows) unless its
# instructions carry MARK, the advice every optimizer's own prompts are answered with, or
# its prompt shows demos: so a compile that lands an instruction or a demo makes a
# measurable difference. It never solves NEVER.
WRONG = {"L1-04", "L2-01", "L3-02"}
NEVER = {"L1-03"}
MARK = "Check that every IRI you use exists."
CHECKED = "(IRIs checked)"
GOLD = {t.question: t for t in load_tasks() if t.id in TINY}
GOLD_BY_ID = {t.id: t for t in GOLD.values()}
E6 = ExecutorSettings(executor="react", interpreter="sandbox", tools="handles", max_iters=3)


def _query(question: str, marked: bool) -> str:
    task = GOLD.get(question)
    if task is None:
        return "SELECT ?x WHERE { ?x ?p ?o } LIMIT 1"
    if task.id in NEVER:
        return task.gold_sparql.replace("?label }", "?label . ?label rdfs:label ?x }")
    if task.id in WRONG and not marked:  # right prefixes, a missing subject: no rows
        return re.sub(r"\b(brick|bldg):(Supply_Air_Flow_Sensor|AHU_\d)\b", r"\1:Nope",
                      task.gold_sparql)
    return task.gold_sparql


def _output_fields(system: str) -> list[str]:
    block = re.search(r"Your output fields are:\n(.*?)(?:\n\n|$)", system, re.S)
    return re.findall(r"`(\w+)`", block[1]) if block else []


def _advice() -> dict[str, str]:
    return {"agent.react.step.predict": MARK, "agent.extract.predict": MARK}


class DemoAwareEngine(ScriptedEngine):
    """A scripted engine that tells ``reply`` whether the request shows demos (messages
    before the live one)."""

    demos = False

    def complete(self, request: Any) -> Any:
        DemoAwareEngine.demos = len(request.messages) > 1
        return super().complete(request)


def reply(system: str, user: str, schema: dict[str, Any] | None) -> Any:
    """The agent: test its query once with run_sparql, then finish and give it (the gold
    query, except for NEVER, and for WRONG unless MARK is in its instructions or its prompt
    shows demos); an optimizer's own prompts get MARK in every text field (SIMBA's advice
    names both predictors)."""
    props = (schema or {}).get("properties", {})
    question = field(user, "question")
    marked = MARK in system or DemoAwareEngine.demos
    if "next_tool_name" in props:
        if "run_sparql" in field(user, "trajectory"):
            return {"next_thought": "It runs.", "next_tool_name": "finish",
                    "next_tool_args": {}}
        return {"next_thought": f"Test the query {CHECKED if marked else ''}.",
                "next_tool_name": "run_sparql",
                "next_tool_args": {"query": _query(question, marked)}}
    if "sparql" in props:  # the final step gives the query the loop tested
        marked = marked or CHECKED in field(user, "trajectory")
        return {"reasoning": "From the card.", "sparql": _query(question, marked)}
    if schema is not None:
        return {k: [] if v.get("type") == "array" else _advice() if v.get("type") == "object"
                else MARK for k, v in props.items()}
    names = _output_fields(system)
    if not names:  # a bare reflection prompt
        return f"```\n{MARK}\n```"
    return "\n\n".join(f"[[ ## {n} ## ]]\n" + (json.dumps(_advice()) if "advice" in n
                                              else MARK)
                       for n in names) + "\n\n[[ ## completed ## ]]"


def _handle(name: str = "local/scripted") -> Any:
    return setup_lm(name, engine=DemoAwareEngine(reply))


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    """Seven shipped tasks: three of L1 (one answered wrong), two of L2, two of L3."""
    path = tmp_path / "tiny_tasks.json"
    chosen = [t for t in load_tasks() if t.id in TINY]
    path.write_text(json.dumps({"ontology_version": "test", "tasks": [
        t.model_dump(mode="json") for t in chosen]}), encoding="utf-8")
    return path


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every model a command sets up is the scripted one; the handles made are listed."""
    import memstrata.programs as programs

    made: list[Any] = []

    def setup(*args: Any, **kwargs: Any) -> Any:
        made.append(_handle())
        return made[-1]

    monkeypatch.setattr(programs, "setup_lm", setup)
    return made


# --- the split ------------------------------------------------------------------------


def test_the_default_split_holds_out_the_levels_no_compile_sees() -> None:
    assert LEVEL_SPLIT.unit == "level" and LEVEL_SPLIT.heldout == ("L4", "L5")
    data = read_levels(TASK_FILE, LEVEL_SPLIT)
    heldout = {t.id for lv in data.split.heldout for t in data.units[lv]}
    assert len(heldout) == 24 and all(i[:2] in ("L4", "L5") for i in heldout)
    task = SparqlTask(Models(student=_handle()))
    with Store.open(":memory:") as store:
        sets = task.sets(store, data, limit=None)
    assert len(sets.train) == 26 and len(sets.val) == 12
    assert sets.ids and not sets.ids & heldout
    assert {e.level for e in sets.train} == {"L1", "L2"} and {e.level for e in sets.val} == {"L3"}
    example = sets.train[0]
    assert set(example.inputs()) == {"question", "memory"}
    assert example.task.id == example.id and example.sparql == example.task.gold_sparql
    assert "PREFIX brick:" in example.memory  # E6's card: the real prefixes
    # At most limit a set, spread over the levels and within each.
    with Store.open(":memory:") as store:
        small = task.sets(store, data, limit=5)
    assert [e.id for e in small.train] == ["L1-03", "L1-07", "L1-11", "L2-04", "L2-10"]


def test_a_bad_split_is_refused_naming_the_levels(tasks: Path) -> None:
    with pytest.raises(ValueError, match=r"no level L4 in .* \(it holds L1, L2, L3\)"):
        read_levels(tasks, Split.parse("L1", "L2", "L4", unit="level"))
    with pytest.raises(ValueError, match="level L2 is in both --train and --val"):
        Split.parse("L1,L2", "L2", unit="level")
    assert spread([[1, 2, 3, 4], [5], [6, 7]], 5) == [2, 4, 5, 6, 7]
    assert spread([[1, 2], [3]], None) == [1, 2, 3]


def test_a_learning_config_is_refused() -> None:
    with pytest.raises(ValueError, match="E9 learns"):
        SparqlTask(Models(student=_handle()), experiment="E9")


# --- compiling ------------------------------------------------------------------------

BUDGET = {"bootstrap": 3, "mipro": 1, "gepa": 6, "simba": 1}


@pytest.mark.parametrize("optimizer", ["bootstrap", "mipro", "gepa", "simba"])
def test_each_optimizer_compiles_the_agent_into_a_loadable_file(
        optimizer: str, tasks: Path, tmp_path: Path) -> None:
    if optimizer == "mipro":
        pytest.importorskip("optuna")
    handle = _handle()
    task = SparqlTask(Models(student=handle))
    data = task.read(tasks, Split.parse("L1", "L2", "L3", unit="level"))
    out = tmp_path / f"{optimizer}.json"
    budget = BUDGETS[optimizer].model_copy(update={"main": BUDGET[optimizer],
                                                   "minibatch_size": 2})
    job = CompileJob(task=task, optimizer=optimizer, data=data, out=out, budget=budget,
                     limit=None)
    with Store.open(tmp_path / "compile.db") as store:
        result = compile_program(job, store, progress=False)
        [run] = store.runs.list("compile")
    assert run.status == "ok" and result.llm_calls == len(handle.lm.engine.requests) > 0
    meta = json.loads(out.read_text())["meta"]
    assert meta["train_ids"] == ["L1-01", "L1-03", "L1-04"] and meta["val_ids"] == [
        "L2-01", "L2-06"]
    assert meta["experiment"] == "E6" and meta["program"] == "sparql"
    agent = load_program("sparql", out)
    assert isinstance(agent, Executor) and agent.settings == E6 and agent.tool_names == [
        "run_sparql"]
    assert program_hash(out) == result.program.sha256
    saved = dict(agent.named_predictors())
    assert set(json.loads(out.read_text())["state"]) == set(saved)
    demos = [d for p in saved.values() for d in p.demos]
    marked = [n for n, p in saved.items() if MARK in p.signature.instructions]
    assert demos or marked  # the compile landed something: demos, or an instruction
    if optimizer == "bootstrap":
        # Solved train tasks only (threshold 1.0): L1-03 is never answered right.
        assert demos and GOLD_BY_ID["L1-03"].question not in {d["question"] for d in demos}
        step = agent.step_modules()[0].predict
        assert any(d.get("next_tool_name") == "run_sparql" for d in step.demos)
    # The loaded agent runs as the compiled one did, its tools bound by tools_from; what
    # it learned solves a held-out task the uncompiled agent gets wrong.
    question = GOLD_BY_ID["L3-02"].question
    with Store.open(":memory:") as live, task.running(live), dspy.context(lm=handle.lm):
        assert agent(question=question, memory="(none)").sparql == GOLD_BY_ID[
            "L3-02"].gold_sparql
        assert task.student()(question=question, memory="(none)").sparql != GOLD_BY_ID[
            "L3-02"].gold_sparql


def test_an_executor_called_without_tools_outside_tools_from_is_unbound() -> None:
    from memstrata.programs.binding import UnboundProgramError

    with pytest.raises(UnboundProgramError, match="tools_from"):
        sparql_agent(E6)(question="q", memory="(none)")


# --- the commands ---------------------------------------------------------------------


def test_memstrata_compile_sparql_writes_the_program(tasks: Path, tmp_path: Path,
                                                     model: list[Any],
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    out = tmp_path / "sparql.json"
    assert main(["compile", "sparql", "--optimizer", "bootstrap", "--budget", "2", "--lm",
                 "local/x", "--data", str(tasks), *SPLIT, "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["program"]["name"] == "sparql"
    assert printed["program"]["sha256"] == program_hash(out)
    with pytest.raises(SystemExit, match=r"no level L7 .*it holds L1, L2, L3"):
        main(["compile", "sparql", "--optimizer", "bootstrap", "--data", str(tasks),
              "--train", "L1,L7", "--val", "L2", "--out", str(tmp_path / "x.json")])


def test_bench_compile_sparql_scores_the_heldout_levels(tasks: Path, tmp_path: Path,
                                                        model: list[Any]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "bench"
    args = ["bench", "compile", "sparql", "--lm", "local/x", "--data", str(tasks), *SPLIT,
            "--heldout", "L3", "--out", str(out), "--optimizers", "bootstrap",
            "--budget", "bootstrap=2"]
    assert main(args) == 0
    doc = json.loads((out / "compile.json").read_text())
    assert doc["program"] == "sparql" and doc["unit"] == "level"
    assert doc["headline"] == "success" and doc["heldout"] == ["L3"]
    assert doc["columns"] == ["f1"] and doc["experiment"] == "E6"
    base, compiled = doc["systems"]["uncompiled"], doc["systems"]["bootstrap"]
    # Uncompiled: L3-01 solved, L3-02 answered wrong; the demos fix L3-02.
    assert base["success"] == 0.5 and base["by_level"] == {"L3": 0.5} and base["f1"] == 0.5
    assert compiled["success"] == compiled["f1"] == 1.0 and compiled["gain"] == 2.0
    assert compiled["by_level"] == {"L3": 1.0}
    for row in (base, compiled):
        assert row["tasks"] == row["items"] == 2 and row["failures"] == 0
        assert row["heldout_llm_calls"] > 0
    assert doc["systems"]["bootstrap"]["program"]["name"] == "sparql"
    # Each system's run is the experiment runner's, keyed by its program's hash; the
    # compiled one ran the program file.
    sha = doc["systems"]["bootstrap"]["program"]["sha256"]
    [run_dir] = (out / "heldout" / "bootstrap").iterdir()
    assert run_dir.name.startswith(sha[:16])
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["program"]["sha256"] == sha
    # A re-run is served from the runs: no call is made again.
    calls = sum(len(h.lm.engine.requests) for h in model)
    assert main(args) == 0
    assert sum(len(h.lm.engine.requests) for h in model) == calls
    again = json.loads((out / "compile.json").read_text())["systems"]
    assert again["bootstrap"].pop("reused") and not doc["systems"]["bootstrap"].pop("reused")
    assert again == doc["systems"]


def _experiment(tasks: Path, out: Path, *extra: str) -> int:
    return main(["experiment", "E6", "--suite", "ontology", "--task-file", str(tasks),
                 "--lm", "local/x", "--out", str(out), "--tasks", "2", *extra])


def test_experiment_runs_the_compiled_agent_and_names_it(
        tasks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import memstrata.experiment_commands as commands

    handles: list[Any] = []

    def model(args: Any) -> Any:
        handles.append(_handle(args.lm))
        return handles[-1]

    monkeypatch.setattr(commands, "model_from_args", model)
    plain = sparql_agent(E6)
    program = tmp_path / "sparql.json"
    save_program(plain, program)
    sha = program_hash(program)
    assert _experiment(tasks, tmp_path / "base") == 0
    out = tmp_path / "compiled"
    assert _experiment(tasks, out, "--program", str(program)) == 0
    ref = {"path": str(program), "name": "sparql", "sha256": sha}
    assert json.loads((out / "run.json").read_text())["program"] == ref
    assert json.loads((out / "summary.json").read_text())["meta"]["program"] == ref
    assert f"sha256 {sha}" in (out / "summary.md").read_text()
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(results) == 2 and all(r["program"] == ref for r in results)
    runs = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    agent_runs = [r for r in runs if r["id"] in {i for x in results for i in x["run_ids"]}]
    assert agent_runs and all(r["config"]["program"] == ref for r in agent_runs)
    base = [json.loads(line) for line in
            (tmp_path / "base" / "results.jsonl").read_text().splitlines()]
    assert all(r["program"] is None for r in base)
    # The uncompiled program file prompts exactly as the agent a run builds per task (the
    # L2 strategies' ids aside: each run's store draws its own).
    prompts = [[re.sub(r"i_[0-9a-f]{12,}", "i_*", "\n".join(
        [q.system, *(m.text for m in q.messages)])) for q in h.lm.engine.requests]
        for h in handles]
    assert prompts[0] == prompts[1] and prompts[0]
    # A run is resumed only with the program it began with.
    with pytest.raises(SystemExit, match="another program"):
        _experiment(tasks, out, "--resume")


def test_experiment_refuses_a_program_that_does_not_fit(
        tasks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import memstrata.experiment_commands as commands

    def no_model(args: Any) -> Any:
        raise AssertionError("a model was set up")

    monkeypatch.setattr(commands, "model_from_args", no_model)
    qa = tmp_path / "qa.json"
    save_program(QA(), qa)
    with pytest.raises(SystemExit, match="holds the program qa; experiment uses sparql"):
        _experiment(tasks, tmp_path / "a", "--program", str(qa))
    program = tmp_path / "sparql.json"
    save_program(sparql_agent(E6), program)
    with pytest.raises(SystemExit, match="tools: 'handles' there, 'naive' here"):
        main(["experiment", "E7", "--task-file", str(tasks), "--out", str(tmp_path / "b"),
              "--program", str(program)])
    with pytest.raises(SystemExit, match="compiled for the inject mode, not this run's tools"):
        main(["experiment", "E8", "--task-file", str(tasks), "--out", str(tmp_path / "c"),
              "--program", str(program)])
    with pytest.raises(SystemExit, match="locomo suite's agent is not a compiled program"):
        main(["experiment", "E1", "--suite", "locomo", "--out", str(tmp_path / "d"),
              "--program", str(program)])
    assert not any((tmp_path / d).exists() for d in "abcd")
