"""The experiment runner end to end: DummyLM and scripted models over a three-task suite,
every file written, budgets checked, the closed loop writing back, resume, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from memstrata.bench.experiments import (
    OntologySuite,
    Runner,
    compare_runs,
    load_config,
)
from memstrata.bench.experiments.config import ExperimentConfig
from memstrata.bench.experiments.runner import ordered
from memstrata.bench.ontology import load_tasks
from memstrata.cli import main
from memstrata.memory import Store
from memstrata.memory.bank import active_strategies
from memstrata.programs import wrap_lm
from tests.conftest import FakeEmbedder, ScriptedEngine

FILES = {"config.json", "run.json", "results.jsonl", "trajectories.jsonl", "memory.db",
         "summary.json", "summary.md"}
INTERFACE = ["experiment", "tasks", "success_rate", "steps_per_task", "llm_calls",
             "budget_violations"]


@pytest.fixture(scope="module")
def three() -> list[Any]:
    """Three shipped tasks: a definition lookup, a label lookup, one building question."""
    tasks = {t.id: t for t in load_tasks()}
    return [tasks["L1-01"], tasks["L1-03"], tasks["L2-06"]]


@pytest.fixture
def task_file(tmp_path: Path, three: list[Any]) -> Path:
    path = tmp_path / "three.json"
    path.write_text(json.dumps({"ontology_version": "test", "tasks": [
        t.model_dump(mode="json") for t in three]}))
    return path


def _order(config: ExperimentConfig, suite: OntologySuite) -> list[str]:
    return [t.id for t in ordered(suite.tasks(), config.order_seed, None)]


def _dummy_e1(three: list[Any], order: list[str]) -> DummyLM:
    # Per task, in the pass's order: a ReAct step that finishes, then the query. The
    # second task's query is wrong on purpose (no PREFIX): it must fail, not crash.
    gold = {t.id: t.gold_sparql for t in three}
    answers: list[dict[str, Any]] = []
    for n, tid in enumerate(order):
        answers.append({"next_thought": "I know it", "next_tool_name": "finish",
                        "next_tool_args": {}})
        query = gold[tid] if n != 1 else gold[tid].split("SELECT", 1)[1].join(["SELECT", ""])
        answers.append({"reasoning": "from the card", "sparql": query})
    return DummyLM(answers, adapter=dspy.JSONAdapter())


def test_runner_end_to_end_on_dummy_lm(tmp_path: Path, task_file: Path,
                                       three: list[Any]) -> None:
    config, suite = load_config("E1"), OntologySuite(task_file)
    order = _order(config, suite)
    handle = wrap_lm(_dummy_e1(three, order), "dummy")
    out = tmp_path / "e1"
    summary = Runner(config, suite, handle, out).run(progress=False)

    assert {p.name for p in out.iterdir()} >= FILES
    doc = json.loads((out / "summary.json").read_text())
    assert list(doc)[:6] == INTERFACE
    assert doc["experiment"] == "E1" and doc["tasks"] == 3 and doc["budget_violations"] == 0
    assert doc["success_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert doc["llm_calls"] == 6 and doc["steps_per_task"] == 1.0
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in results] == order
    assert [r["success"] for r in results] == [True, False, True]
    assert results[1]["status"] == "parse_error" and "missing_prefix" in results[1]["findings"]
    assert all(r["verdict"] is None for r in results)  # E1 does not judge
    # Every task's agent run is in the trajectories, and the config and commit are saved.
    runs = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert {r["id"] for r in runs} == {i for r in results for i in r["run_ids"]}
    assert json.loads((out / "config.json").read_text()) == config.model_dump(mode="json")
    meta = json.loads((out / "run.json").read_text())
    assert meta["order"] == order and meta["db_before"]["digest"] and "commit" in meta
    assert summary.curve == [1.0, 0.5, 0.6667]
    assert "## Learning curve" in (out / "summary.md").read_text()


def test_cli_runs_an_experiment_and_prints_the_interface(
        tmp_path: Path, task_file: Path, three: list[Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import memstrata.experiment_commands as commands

    order = _order(load_config("E1"), OntologySuite(task_file))
    asked: list[str] = []

    def model(args: Any) -> Any:
        asked.append(args.lm)
        return wrap_lm(_dummy_e1(three, order), args.lm)

    monkeypatch.setattr(commands, "model_from_args", model)
    out = tmp_path / "cli-e1"
    assert main(["experiment", "E1", "--suite", "ontology", "--task-file", str(task_file),
                 "--lm", "local/dummy", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert asked == ["local/dummy"] and list(printed) == INTERFACE
    assert printed == {k: json.loads((out / "summary.json").read_text())[k] for k in INTERFACE}
    assert printed["tasks"] == 3 and printed["budget_violations"] == 0


def test_a_context_over_budget_is_counted_and_fails_the_command(
        tmp_path: Path, task_file: Path, three: list[Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import memstrata.experiment_commands as commands
    import memstrata.packers.context as context
    from memstrata.packers import PackedLayer

    def overflowing(items: Any, *, budget: int, **_: Any) -> PackedLayer:
        text = "x" * (budget + 1)  # a packer that breaks its budget
        return PackedLayer(layer="L2", text=text, chars=len(text), budget=budget)

    monkeypatch.setattr(context, "pack_l2", overflowing)
    monkeypatch.setattr(commands, "model_from_args", lambda args: wrap_lm(DummyLM(
        [{"next_thought": "t", "next_tool_name": "finish", "next_tool_args": {}},
         {"reasoning": "r", "sparql": "SELECT ?x WHERE { ?x ?p ?o } LIMIT 1"}] * 3,
        adapter=dspy.JSONAdapter()), "dummy"))
    out = tmp_path / "cli-e5"
    assert main(["experiment", "E5", "--task-file", str(task_file), "--out", str(out)]) == 1
    # Per task: the layer over its budget, one line for no id, the total over its bound,
    # and the prompt that carried it.
    assert json.loads(capsys.readouterr().out)["budget_violations"] == 3 * 4
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for r in results:
        assert [v.split(":")[0] for v in r["budget_violations"]] == [
            "L2", "L2", "total", "prompt"]
        assert "chars > budget 1200" in r["budget_violations"][0]


def test_a_prompt_over_budget_is_a_violation_even_when_the_build_says_it_fits(
        tmp_path: Path, task_file: Path, three: list[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 21: the figure compared the build with itself and could not fail. Here the
    # build reports itself in budget, but what reaches the model is not.
    from memstrata.packers.context import ContextBuilder

    real = ContextBuilder.build

    def padded(self: ContextBuilder, *args: Any, **kwargs: Any) -> Any:
        ctx = real(self, *args, **kwargs)
        assert ctx.violations == []
        return ctx.model_copy(update={"text": ctx.text + "\n" + "y" * (ctx.bound + 1)})

    monkeypatch.setattr(ContextBuilder, "build", padded)
    answers = [{"next_thought": "t", "next_tool_name": "finish", "next_tool_args": {}},
               {"reasoning": "r", "sparql": "SELECT ?x WHERE { ?x ?p ?o } LIMIT 1"}] * 3
    handle = wrap_lm(DummyLM(answers, adapter=dspy.JSONAdapter()), "dummy")
    summary = Runner(load_config("E5"), OntologySuite(task_file), handle,
                     tmp_path / "e5").run(progress=False)
    assert summary.budget_violations == 3
    results = [json.loads(line) for line in (tmp_path / "e5" / "results.jsonl").read_text()
               .splitlines()]
    for r in results:
        [violation] = r["budget_violations"]
        assert violation.startswith("prompt: ") and "> bound" in violation


def _scripted_loop(three: list[Any], *, fail_first_rollout: bool = False):
    """A model that writes the gold query, judges success, and distils one lesson."""
    gold = {t.question: t.gold_sparql for t in three}
    calls = {"sparql": 0}

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        props = (schema or {}).get("properties", {})
        question = next(q for q in gold if q in user) if any(q in user for q in gold) else ""
        if "next_tool_name" in props:
            if "observation_0" in user.lower():
                return {"next_thought": "rows are right", "next_tool_name": "finish",
                        "next_tool_args": {}}
            return {"next_thought": "test it", "next_tool_name": "run_sparql",
                    "next_tool_args": {"query": gold[question]}}
        if "sparql" in props:
            calls["sparql"] += 1
            bad = fail_first_rollout and calls["sparql"] % 3 == 1
            return {"reasoning": "tested", "sparql": "SELECT" if bad else gold[question]}
        if "success" in props:
            return {"success": True, "rationale": "the rows answer the question"}
        if "lessons" in props:
            return {"lessons": [{"title": f"Lesson from: {question[:40]}",
                                 "description": "when a question names a Brick class",
                                 "content": "Bind the class IRI directly and read skos "
                                            f"definitions or rdfs labels: {question}"}]}
        if "do" in props:
            return {"do": [{"title": "Declare prefixes and project variables",
                            "description": "when writing any Brick query",
                            "content": "Start with PREFIX brick and rdfs, then SELECT "
                                       "named variables from bound class IRIs."}],
                    "avoid": [{"title": "A bare SELECT is not a query",
                               "description": "when the query text is incomplete",
                               "content": "Never submit SELECT without a WHERE pattern; "
                                          "run_sparql reports the parse error first."}]}
        raise AssertionError(f"unexpected program: {sorted(props)}")

    return reply


def test_closed_loop_writes_back_and_injects_learned_strategies(
        tmp_path: Path, task_file: Path, three: list[Any]) -> None:
    handle = wrap_lm(dspy.LM("local/scripted", engine=ScriptedEngine(_scripted_loop(three)),
                             cache=False), "local/scripted")
    out = tmp_path / "e9"
    summary = Runner(load_config("E9"), OntologySuite(task_file), handle, out).run(
        progress=False)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert summary.success_rate == 1.0 and summary.judge_agreement == 1.0
    assert all(r["verdict"]["source"] == "llm" for r in results)
    assert [a["action"] for r in results for a in r["extracted"]] == ["add"] * 3
    # A strategy learned on an earlier task is injected into a later one and counted.
    assert any(r["injected_ids"] for r in results[1:])
    with Store.open(out / "memory.db") as store:
        bank = active_strategies(store, "experiment")
        assert len(bank) == 3 and all("ontology:brick" in s.tags for s in bank)
        assert sum(s.uses for s in bank) == sum(len(r["injected_ids"]) for r in results)
        kinds = {s.kind for r in results for rid in r["run_ids"]
                 for s in store.runs.steps("experiment", rid)}
    assert {"verdict", "extraction", "bank", "iteration", "tool"} <= kinds
    assert summary.health is not None and summary.health.novelty_rate == 1.0


def test_dense_switch_embeds_the_bank_and_is_off_by_default(
        tmp_path: Path, task_file: Path, three: list[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.bench.experiments import runner as runner_mod

    def no_model() -> Any:
        raise AssertionError("the embedded model must not load here")

    monkeypatch.setattr(runner_mod, "default_embedder", no_model)
    handle = wrap_lm(dspy.LM("local/scripted", engine=ScriptedEngine(_scripted_loop(three)),
                             cache=False), "local/scripted")
    assert not load_config("E9").retrieval.dense  # today's lexical L2 stays the default
    assert Runner(load_config("E9"), OntologySuite(task_file), handle, tmp_path / "a"
                  ).embedder is None
    config = load_config("E5", ["retrieval.dense=true", "learn=true"])
    embedder = FakeEmbedder()
    out = tmp_path / "dense"
    summary = Runner(config, OntologySuite(task_file), handle, out, embedder=embedder).run(
        progress=False)
    assert summary.success_rate == 1.0 and summary.budget_violations == 0
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["injected_ids"] for r in results)  # the dense hybrid still fills L2
    with Store.open(out / "memory.db") as store:
        bank = active_strategies(store, "experiment")
        learned = [s for s in bank if "seed" not in s.tags]
        assert learned and len(bank) > len(learned)  # the seed pack and three lessons
        # Seeded before the first build and learned after each task: all embedded.
        assert sorted(store.vectors("experiment", embedder.name)[0]) == sorted(
            s.id for s in bank)
    # Switched on with no embedder given, the runner takes the embedded default.
    monkeypatch.setattr(runner_mod, "default_embedder", lambda: embedder)
    assert Runner(config, OntologySuite(task_file), handle, tmp_path / "b").embedder \
        is embedder


def test_rollouts_select_by_judge_and_contrast(tmp_path: Path, task_file: Path,
                                              three: list[Any]) -> None:
    engine = ScriptedEngine(_scripted_loop(three, fail_first_rollout=True))
    handle = wrap_lm(dspy.LM("local/scripted", engine=engine, cache=False), "local/scripted")
    out = tmp_path / "e12"
    summary = Runner(load_config("E12"), OntologySuite(task_file), handle, out).run(
        progress=False)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # Rollout 0 writes a bare SELECT; the judge's checks fail it and a later one is kept.
    assert all(r["rollouts"] == 3 and r["selected"] == 1 for r in results)
    assert summary.success_rate == 1.0
    # Steps cost every rollout; the kept rollout's own steps are reported beside them.
    assert all(r["steps"] == 3 * r["selected_steps"] > 0 for r in results)
    assert summary.steps_per_task == 3 * summary.selected_steps_per_task
    # Mixed outcomes: contrastive extraction gives one strategy and one guardrail.
    first = results[0]["extracted"]
    assert sorted(a["polarity"] for a in first) == ["failure", "success"]
    temps = {r.config.temperature for r in engine.requests}
    assert 0.7 in temps  # later rollouts sample


def test_full_layer_cake_stays_inside_budgets(tmp_path: Path, task_file: Path,
                                              three: list[Any]) -> None:
    config = load_config("E6")
    handle = wrap_lm(dspy.LM("local/scripted", engine=ScriptedEngine(_scripted_loop(three)),
                             cache=False), "local/scripted")
    out = tmp_path / "e6"
    summary = Runner(config, OntologySuite(task_file), handle, out).run(progress=False)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert summary.budget_violations == 0
    for r in results:
        assert set(r["layer_chars"]) == {"L0", "L1", "L2", "L3"}
        for layer, chars in r["layer_chars"].items():
            assert 0 < chars <= config.budgets.of(layer)
        assert r["injected_ids"]  # the seeded bank reaches the prompt
    with Store.open(out / "memory.db") as store:  # L3's guide is stored whole
        assert store.blobs.info("experiment", "guide:brick").chars > config.budgets.l3


def test_interrupted_run_resumes_after_the_last_task(tmp_path: Path, task_file: Path,
                                                     three: list[Any]) -> None:
    engine = ScriptedEngine(_scripted_loop(three))
    handle = wrap_lm(dspy.LM("local/scripted", engine=engine, cache=False), "local/scripted")
    out, config, suite = tmp_path / "e1", load_config("E1"), OntologySuite(task_file)
    engine.fail_after = 5  # the second task's calls are cut off
    with pytest.raises(KeyboardInterrupt):
        Runner(config, suite, handle, out).run(progress=False)
    assert len((out / "results.jsonl").read_text().splitlines()) == 1
    with pytest.raises(ValueError, match="--resume"):
        Runner(config, suite, handle, out).run(progress=False)
    changed = config.model_copy(update={"title": "another"})
    with pytest.raises(ValueError, match="differs"):
        Runner(changed, suite, handle, out).run(progress=False, resume=True)
    # A run saved before a config field existed resumes: the field reads as its default.
    saved = json.loads((out / "config.json").read_text())
    del saved["retrieval"]["dense"]
    (out / "config.json").write_text(json.dumps(saved))
    engine.fail_after = None
    summary = Runner(config, suite, handle, out).run(progress=False, resume=True)
    ids = [json.loads(line)["task_id"] for line in (out / "results.jsonl").read_text()
           .splitlines()]
    assert summary.tasks == 3 and ids == _order(config, suite)


def test_configs_are_the_seed_experiments() -> None:
    configs = {n: load_config(n) for n in (f"E{i}" for i in range(1, 13))}
    assert configs["E1"].layers == [] and not configs["E1"].learn
    assert configs["E6"].layers == ["L0", "L1", "L2", "L3"] and configs["E6"].seed_bank
    assert configs["E7"].executor.tools == "naive" and configs["E8"].mode == "tools"
    # E9 differs from E1 only by the learned L2 layer and the loop.
    e1, e9 = configs["E1"].model_dump(), configs["E9"].model_dump()
    assert {k for k in e1 if e1[k] != e9[k]} == {"experiment", "title", "layers", "learn"}
    assert configs["E9"].consolidation is None and configs["E10"].consolidation is not None
    assert configs["E11"].forgetting is not None and configs["E12"].rollouts.n == 3
    assert configs["E12"].extraction.contrastive


def test_config_overrides_and_errors(tmp_path: Path) -> None:
    cfg = load_config("E9", ["executor.max_iters=2", "extraction.method=trace",
                             "forgetting={\"max_active\": 30}"])
    assert cfg.executor.max_iters == 2 and cfg.extraction.method == "trace"
    assert cfg.forgetting is not None and cfg.forgetting.max_active == 30
    with pytest.raises(ValueError, match="no experiment"):
        load_config("E99")
    with pytest.raises(ValueError, match="invalid experiment config"):
        load_config("E1", ["mode=sideways"])
    with pytest.raises(ValueError, match="key=value"):
        load_config("E1", ["mode"])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json"):
        load_config(str(bad))


def _executor_run(answer: str) -> Any:
    from memstrata.programs.executors import ExecutorRun
    from memstrata.programs.meter import Usage
    from memstrata.trajectories import Leakage

    return ExecutorRun(run_id="r", executor="react", answer=answer, converged=True,
                       leakage=Leakage(), usage=Usage(), wall_s=0.0)


def test_the_card_is_built_to_the_runs_l0_budget(task_file: Path) -> None:
    from memstrata.bench.ontology.card import sense_card
    from memstrata.packers import LayerBudgets, pack_l0

    suite = OntologySuite(task_file)
    assert suite.sources().card == sense_card(600)
    small = suite.sources(LayerBudgets(l0=300)).card
    assert small == sense_card(300) and len(small) <= 300
    # Re-selected to fit, not the full card's first lines: cutting those would lose
    # every item after the namespaces.
    assert "Class facts:" in small and "Class facts:" not in pack_l0(sense_card(600), 300).text


def test_suite_checks_need_no_gold(three: list[Any]) -> None:
    from memstrata.bench.experiments.suites import SuiteTask

    suite = OntologySuite()
    task = SuiteTask(id=three[0].id, level="L1", question=three[0].question)
    run = _executor_run

    assert all(c.passed for c in suite.checks(task, run(three[0].gold_sparql)))
    no_prefix = three[0].gold_sparql.split("SELECT", 1)[1].join(["SELECT", ""])
    failed = {c.name for c in suite.checks(task, run(no_prefix)) if not c.passed}
    assert {"runs", "no_anti_pattern"} <= failed
    assert [c.name for c in suite.checks(task, run("I think it is a sensor"))] == ["has_query"]
    assert suite.grade(task, run(three[0].gold_sparql)).success


def _count_executions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the suite's query runs; grading must not run the query on its own."""
    from memstrata.bench.experiments import ontology_suite
    from memstrata.bench.ontology import scoring

    calls: list[str] = []
    real = ontology_suite.execute

    def counted(query: str, **kwargs: Any) -> Any:
        calls.append(query)
        return real(query, **kwargs)

    def refused(query: str, **kwargs: Any) -> Any:
        raise AssertionError(f"grading ran the query again: {query[:60]}")

    monkeypatch.setattr(ontology_suite, "execute", counted)
    monkeypatch.setattr(scoring, "execute", refused)
    return calls


def test_runner_runs_each_final_query_once(tmp_path: Path, task_file: Path,
                                           three: list[Any],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_executions(monkeypatch)
    config, suite = load_config("E1"), OntologySuite(task_file)
    order = _order(config, suite)
    handle = wrap_lm(_dummy_e1(three, order), "dummy")
    summary = Runner(config, suite, handle, tmp_path / "e1").run(progress=False)
    # Same verdicts as when checks and grade each ran the query (the end-to-end test).
    assert summary.success_rate == pytest.approx(2 / 3, abs=1e-4)
    # The agent finishes without run_sparql, so every run here is checks or grade: one
    # per task, although both looked at each task's final query.
    assert len(calls) == len(set(calls)) == 3


def test_checks_and_grade_share_one_run_and_match_separate_runs(
        three: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.bench.experiments.ontology_suite import _capped
    from memstrata.bench.experiments.suites import SuiteTask
    from memstrata.bench.ontology import execute, score

    gold = three[0]
    task = SuiteTask(id=gold.id, level="L1", question=gold.question)
    rdfs = "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\n"
    many = rdfs + "SELECT ?s WHERE { ?s rdfs:subClassOf ?o }"  # 2,103 rows, repeats
    star = rdfs + "SELECT * WHERE { ?s rdfs:subClassOf ?o }"  # the large-result check
    no_prefix = gold.gold_sparql.split("SELECT", 1)[1].join(["SELECT", ""])
    queries = [gold.gold_sparql, many, f"  {many}\n", star, no_prefix, "SELECT"]
    # The reference is what checks and grade saw when each ran the query itself: checks
    # at 1,000 rows (fed to a second suite in place of its shared run), grade via score.
    separate = {q.strip(): execute(q.strip(), timeout_s=10.0, max_rows=1_000)
                for q in queries}
    assert separate[many].truncated and len(separate[many].rows) == 1_000
    # The shared run keeps 10,000 rows; the checks' view of it is the 1,000-row run.
    shared = _capped(execute(many, max_rows=10_000), 1_000)
    assert shared.model_dump(exclude={"elapsed_s"}) == \
        separate[many].model_dump(exclude={"elapsed_s"})
    reference = OntologySuite()
    monkeypatch.setattr(reference, "_outcome", lambda q: separate[q.strip()])
    want_checks = [reference.checks(task, _executor_run(q)) for q in queries]
    want_grades = [score(gold, q) for q in queries]

    calls = _count_executions(monkeypatch)
    suite = OntologySuite()
    for query, checks, want in zip(queries, want_checks, want_grades, strict=True):
        run = _executor_run(query)
        for _ in range(3):  # three rollouts with one final query, as E12 checks them
            assert suite.checks(task, run) == checks
        got = suite.grade(task, run)
        assert (got.success, got.score, got.status, got.findings) == (
            want.success, want.f1, want.status, want.finding_names)
    assert [c.passed for c in want_checks[0]] == [True] * 4  # the gold query passes all
    # Six answers, five distinct query texts once stripped: five runs in all.
    assert len(calls) == 5


def test_cli_compare_and_errors(tmp_path: Path, task_file: Path, three: list[Any],
                                capsys: pytest.CaptureFixture[str]) -> None:
    suite = OntologySuite(task_file)
    for name in ("E1", "E5"):
        handle = wrap_lm(dspy.LM("local/scripted", engine=ScriptedEngine(
            _scripted_loop(three)), cache=False), "local/scripted")
        Runner(load_config(name), suite, handle, tmp_path / name).run(progress=False)
    assert main(["experiment", "compare", str(tmp_path / "E1"), str(tmp_path / "E5"),
                 "--out", str(tmp_path / "cmp")]) == 0
    assert "E5" in capsys.readouterr().out
    assert (tmp_path / "cmp" / "compare.png").stat().st_size > 0
    assert compare_runs([tmp_path / "E1", tmp_path / "E5"], tmp_path / "cmp2").runs
    with pytest.raises(SystemExit, match="invalid experiment config"):
        main(["experiment", "E1", "--out", str(tmp_path / "x"), "--set", "mode=sideways"])
    with pytest.raises(SystemExit, match="categories"):
        main(["experiment", "E1", "--suite", "locomo", "--categories", "7",
              "--out", str(tmp_path / "x")])


def test_locomo_suite_through_the_executor_with_memory_tools(tmp_path: Path) -> None:
    from memstrata.bench.experiments import LocomoSuite
    from tests.conftest import locomo_record

    qa = [{"question": "What pet did Alice adopt?", "answer": "a guinea pig",
           "evidence": ["D1:1"], "category": 4},
          {"question": "Where does Alice's grandma live?", "answer": "Sweden",
           "evidence": ["D2:2"], "category": 4},
          {"question": "What did Bob say about Mars?", "adversarial_answer": "x",
           "evidence": [], "category": 5}]
    data = tmp_path / "conv.json"
    data.write_text(json.dumps([locomo_record("conv-a", qa=qa)]))
    answers = {"pet": "a guinea pig named Oscar", "grandma": "Paris"}

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        props = (schema or {}).get("properties", {})
        if "next_tool_name" in props:
            if "observation_0" in user.lower():
                return {"next_thought": "found", "next_tool_name": "finish",
                        "next_tool_args": {}}
            return {"next_thought": "search", "next_tool_name": "mem_search",
                    "next_tool_args": {"query": "Alice"}}
        if "answer" in props:
            return {"reasoning": "read it", "answer": next(
                (a for k, a in answers.items() if k in user.split("Question")[-1]), "")}
        if "success" in props:
            return {"success": True, "rationale": "it answers"}
        if "lessons" in props:
            return {"lessons": []}
        raise AssertionError(sorted(props))

    suite = LocomoSuite(data, categories=(4,))
    assert suite.user_id == "conv-a" and [t.level for t in suite.tasks()] == ["cat4"] * 2
    handle = wrap_lm(dspy.LM("local/scripted", engine=ScriptedEngine(reply), cache=False),
                     "local/scripted")
    config = load_config("E9", ["order_seed=null"])
    summary = Runner(config, suite, handle, tmp_path / "run").run(progress=False)
    results = [json.loads(line) for line in
               (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert [r["success"] for r in results] == [True, False]  # Paris is not Sweden
    assert all(r["tool_calls"] >= 1 for r in results)
    # The judge (no gold) said success both times; gold disagrees once.
    assert summary.judge_agreement == 0.5
    with pytest.raises(ValueError, match="no conversation"):
        LocomoSuite(data, conversation="conv-zz")


def test_extraction_parse_failure_is_loud_and_the_pass_goes_on(
        tmp_path: Path, task_file: Path, three: list[Any]) -> None:
    script = _scripted_loop(three)

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> Any:
        if "lessons" in (schema or {}).get("properties", {}):
            return "Lesson: declare prefixes"  # not JSON, twice: the retry fails too
        return script(system, user, schema)

    handle = wrap_lm(dspy.LM("local/scripted", engine=ScriptedEngine(reply), cache=False),
                     "local/scripted")
    out = tmp_path / "e9"
    summary = Runner(load_config("E9"), OntologySuite(task_file), handle, out).run(
        progress=False)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert summary.tasks == 3 and summary.errors == 3
    assert all("extraction: " in r["error"] and not r["extracted"] for r in results)
    with Store.open(out / "memory.db") as store:
        loops = [store.runs.get("experiment", r["run_ids"][-1]) for r in results]
    assert all(run is not None and run.program == "loop.E9" and run.status == "error"
               for run in loops)


def test_tools_mode_and_naive_tools(tmp_path: Path, task_file: Path, three: list[Any]) -> None:
    from memstrata.programs.executors import ExecutorSettings
    from memstrata.tools import ToolSession

    suite = OntologySuite(task_file)
    with Store.open(tmp_path / "t.db") as store:
        session = ToolSession(store, suite.user_id)
        inject = [t.__name__ for t in suite.tools(session, ExecutorSettings(), "inject")]
        tools = [t.__name__ for t in suite.tools(session, ExecutorSettings(), "tools")]
        assert inject == ["run_sparql"]
        assert tools[0] == "run_sparql" and {"mem_search", "mem_get"} <= set(tools)
        query = ("PREFIX brick: <https://brickschema.org/schema/Brick#> "
                 "SELECT ?c WHERE { ?c a brick:Relationship }")
        bounded = suite.tools(session, ExecutorSettings(), "inject")[0](query)
        naive = suite.tools(session, ExecutorSettings(tools="naive"), "inject")[0](query)
        assert bounded["n_rows"] == naive["n_rows"] > 5
        assert len(bounded["rows"]) == 5 and len(naive["rows"]) == naive["n_rows"]
        assert [c.name for c in session.log.calls] == ["run_sparql", "run_sparql"]
    handle = wrap_lm(dspy.LM("local/scripted", engine=ScriptedEngine(_scripted_loop(three)),
                             cache=False), "local/scripted")
    summary = Runner(load_config("E8"), suite, handle, tmp_path / "e8").run(progress=False)
    results = [json.loads(line) for line in
               (tmp_path / "e8" / "results.jsonl").read_text().splitlines()]
    assert summary.budget_violations == 0
    assert all(not r["injected_ids"] and r["layer_chars"]["L2"] > 0 for r in results)


def test_locomo_suite_on_the_rlm_executor(tmp_path: Path) -> None:
    from memstrata.bench.experiments import LocomoSuite
    from tests.conftest import InProcessInterpreter, locomo_record

    qa = [{"question": "What pet did Alice adopt?", "answer": "a guinea pig",
           "evidence": ["D1:1"], "category": 4}]
    data = tmp_path / "conv.json"
    data.write_text(json.dumps([locomo_record("conv-a", qa=qa)]))

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        props = (schema or {}).get("properties", {})
        if "code" in props:
            if "guinea" in user.split("Iteration")[-1] or "Oscar" in user:
                return {"reasoning": "found", "code": "SUBMIT(answer='a guinea pig')"}
            return {"reasoning": "look", "code":
                    "print(mem_search('pet adopt')['results'][0]['description'])"}
        return {"reasoning": "out of steps", "answer": "not mentioned"}

    handle = wrap_lm(dspy.LM("local/scripted", engine=ScriptedEngine(reply), cache=False),
                     "local/scripted")
    config = load_config("E1", ["executor.executor=rlm"])
    summary = Runner(config, LocomoSuite(data), handle, tmp_path / "run",
                     factory=InProcessInterpreter).run(progress=False)
    result = json.loads((tmp_path / "run" / "results.jsonl").read_text())
    assert summary.success_rate == 1.0 and result["tool_calls"] >= 1
    assert result["answer"] == "a guinea pig"


def _door_model(three: list[Any], prompts: list[str], *, search_first: bool) -> Any:
    """A model that (optionally) searches memory, then runs and submits the gold query;
    every prompt it is sent is kept in ``prompts``."""
    gold = {t.question: t.gold_sparql for t in three}

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        prompts.append(user)
        props = (schema or {}).get("properties", {})
        question = next(q for q in gold if q in user)
        if "next_tool_name" in props:
            if search_first and "observation_0" not in user.lower():
                return {"next_thought": "what does memory say", "next_tool_name": "mem_search",
                        "next_tool_args": {"query": "brick prefix namespace",
                                           "kind": "semantic"}}
            if "observation_1" in user.lower() or (
                    not search_first and "observation_0" in user.lower()):
                return {"next_thought": "done", "next_tool_name": "finish",
                        "next_tool_args": {}}
            return {"next_thought": "test it", "next_tool_name": "run_sparql",
                    "next_tool_args": {"query": gold[question]}}
        if "sparql" in props:
            return {"reasoning": "tested", "sparql": gold[question]}
        raise AssertionError(f"unexpected program: {sorted(props)}")

    return wrap_lm(dspy.LM("local/scripted", engine=ScriptedEngine(reply), cache=False),
                   "local/scripted")


def test_memory_door_mode_one_injects_memory_context_within_the_layer_cakes_bound(
        tmp_path: Path, task_file: Path, three: list[Any]) -> None:
    from memstrata.bench.experiments.door import token_budget
    from memstrata.packers.context import max_chars

    config = load_config("E6", ["door=memory"])
    prompts: list[str] = []
    out = tmp_path / "e6m"
    summary = Runner(config, OntologySuite(task_file), _door_model(three, prompts,
                     search_first=False), out).run(progress=False)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    meta = json.loads((out / "run.json").read_text())
    assert summary.success_rate == 1.0 and summary.budget_violations == 0
    # The card, the constraints and the guide were read as documents, once.
    assert set(meta["read"]) == {"sense card", "constraints and anti-patterns", "guide:brick"}
    bound = max_chars({"L0", "L1", "L2", "L3"}, config.budgets, "inject")
    assert token_budget(config) == bound // 4
    with Store.open(out / "memory.db") as store:
        facts = store.kind_items("experiment", "semantic", limit=10_000)
        strategies = {s.id for s in active_strategies(store, "experiment")}
    assert len(facts) > 20 and all(f.source == "ontology" for f in facts)
    for r in results:
        # Each task's memory is Memory.context's block: read facts and seeded strategies,
        # every line with its id, inside the layer cake's own character bound.
        assert 0 < r["context_chars"] <= bound
        assert {"semantic", "strategies"} <= set(r["layer_chars"])
        assert r["injected_ids"] and set(r["injected_ids"]) <= strategies
    shown = [p for p in prompts if "## What was read" in p and "## Strategies from past runs" in p]
    assert len(shown) == len(prompts)
    resumed = Runner(config, OntologySuite(task_file), _door_model(three, [], search_first=False),
                     out).run(progress=False, resume=True)
    assert resumed.tasks == 3  # a resumed pass does not read the documents again
    with Store.open(out / "memory.db") as store:
        assert len(store.kind_items("experiment", "episodic", limit=100)) == 3


def test_memory_door_mode_two_reaches_what_was_read_through_memory_tools(
        tmp_path: Path, task_file: Path, three: list[Any]) -> None:
    from memstrata.bench.experiments.door import DOOR_HINT

    prompts: list[str] = []
    out = tmp_path / "e8m"
    summary = Runner(load_config("E8", ["door=memory"]), OntologySuite(task_file),
                     _door_model(three, prompts, search_first=True), out).run(progress=False)
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert summary.success_rate == 1.0 and summary.budget_violations == 0
    assert all(r["context_chars"] == len(DOOR_HINT) and not r["injected_ids"]
               and r["tool_calls"] == 2 for r in results)
    assert not any("## What was read" in p for p in prompts)
    # The search is logged in the run (the session is Memory's) and found what was read.
    with Store.open(out / "memory.db") as store:
        steps = [store.runs.steps("experiment", r["run_ids"][0]) for r in results]
    assert all([s.name for s in run if s.kind == "tool"] == ["mem_search", "run_sparql"]
               for run in steps)
    # (The iteration step keeps the observation as the agent saw it: its text.)
    assert all("PREFIX brick: <https://brickschema.org/schema/Brick#>" in str(run[0].output)
               and "'kind': 'semantic'" in str(run[0].output) for run in steps)
