"""Programs an optimizer can hold: predictors as their only state, no store in a copy,
the adapter settable, save/load by path with demos and instructions, and the executor
built once with its tools bound per call."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata.memory import Store
from memstrata.memory.chunking import Chunk
from memstrata.memory.models import Turn
from memstrata.programs import ExecutorSettings, run_executor
from memstrata.programs.answer import PersonalAnswerer
from memstrata.programs.binding import Live, UnboundProgramError
from memstrata.programs.compiled import load_program, program_hash, save_program
from memstrata.programs.executors import Executor
from memstrata.programs.extractor import Extractor
from memstrata.programs.qa import QA
from memstrata.programs.structured import CompactJSONAdapter
from memstrata.programs.voe import VoELoop, VoEPredictor, VoEResponder
from memstrata.tools import HANDLE_TOOLS, ToolSession
from tests.conftest import InProcessInterpreter, ScriptedEngine, locomo_record

MEMORIES = "[s1:2 · Ana · 2023-05-01] I live in Oslo"
# sha256 of the QA prompt (system message and messages) for MEMORIES and "Where?", as the
# QA of commit ea7982a sends it: the default programs must keep today's prompts.
QA_PROMPT_SHA256 = "f56544899464a4307063bd488925c7fa51f98880be9452b7dab41dfe74bd0caa"


def _requests(engine: ScriptedEngine) -> list[tuple[str, list[list[str]]]]:
    out = []
    for r in engine.requests:
        system = r.system if isinstance(r.system, str) else "".join(
            p.text for p in r.system or ())
        out.append((system, [[m.role, m.text] for m in r.messages]))
    return out


def _answer(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    return {"answer": "Oslo", "evidence": ["s1:2"]}


def _qa_prompt(qa: QA, scripted: Any) -> tuple[str, list[list[str]]]:
    handle = scripted(_answer)
    with dspy.context(lm=handle.lm):
        qa(question="Where?", memories=MEMORIES)
    engine = handle.lm.engine if hasattr(handle.lm, "engine") else None
    assert engine is not None
    return _requests(engine)[-1]


def _sha(prompt: tuple[str, list[list[str]]]) -> str:
    return hashlib.sha256(json.dumps(list(prompt), ensure_ascii=False).encode()).hexdigest()


def test_the_default_qa_prompt_is_unchanged(scripted: Any) -> None:
    assert _sha(_qa_prompt(QA(), scripted)) == QA_PROMPT_SHA256


def test_a_global_adapter_does_not_change_the_prompt_but_the_program_adapter_does(
        scripted: Any) -> None:
    with dspy.context(adapter=dspy.ChatAdapter()):
        assert _sha(_qa_prompt(QA(), scripted)) == QA_PROMPT_SHA256
    qa = QA()
    assert isinstance(qa.respond.adapter, CompactJSONAdapter)
    qa.respond.adapter = dspy.JSONAdapter()
    system, _ = _qa_prompt(qa, scripted)
    assert "[[ ## memories ## ]]" in system  # DSPy's own format, as asked


def test_optimizers_see_the_predictor_and_its_demos_reach_the_prompt(scripted: Any) -> None:
    qa = QA()
    names = [n for n, _ in qa.named_predictors()]
    assert names == ["respond.predict"]
    predictor = dict(qa.named_predictors())["respond.predict"]
    predictor.demos = [dspy.Example(memories="[s9:1 · Bo · 2020-01-01] I keep bees",
                                    question="What does Bo keep?", answer="bees",
                                    evidence=["s9:1"])]
    predictor.signature = predictor.signature.with_instructions("Answer tersely, from memory.")
    system, messages = _qa_prompt(qa, scripted)
    assert system.startswith("Answer tersely, from memory.")
    assert any("I keep bees" in text for _, text in messages)
    assert any(text == '{"answer": "bees", "evidence": ["s9:1"]}' for _, text in messages)


def test_save_and_load_round_trip_demos_instructions_and_the_prompt(
        tmp_path: Path, scripted: Any) -> None:
    qa = QA()
    qa.respond.predict.signature = qa.respond.predict.signature.with_instructions("Be brief.")
    qa.respond.predict.demos = qa.respond.predict.demos[:2]
    path = tmp_path / "qa.json"
    digest = save_program(qa, path, meta={"optimizer": "by hand"})
    doc = json.loads(path.read_text())
    assert doc["program"] == "qa" and doc["sha256"] == digest == program_hash(path)
    assert doc["memstrata_version"] and doc["meta"] == {"optimizer": "by hand"}
    loaded = load_program("qa", path)
    assert isinstance(loaded, QA)
    assert loaded.respond.predict.signature.instructions == "Be brief."
    assert len(loaded.respond.predict.demos) == 2
    assert _qa_prompt(loaded, scripted) == _qa_prompt(qa, scripted)
    # An untouched default program loads back to exactly today's prompt.
    save_program(QA(), tmp_path / "default.json")
    assert _sha(_qa_prompt(load_program("qa", tmp_path / "default.json"), scripted)) == \
        QA_PROMPT_SHA256
    with pytest.raises(ValueError, match="holds the program 'qa'"):
        load_program("extractor", path)
    doc["state"]["respond.predict"]["signature"]["instructions"] = "edited"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="sha256"):
        load_program("qa", path)


def _chunk() -> Chunk:
    return Chunk(conversation_id="c", turns=[Turn(
        user_id="u", conversation_id="c", session_id="s1", turn_id="D1:1", seq=0,
        speaker="Ana", text="I moved to Oslo last month.", event_time=datetime(2023, 5, 8))])


def test_extractor_round_trips_with_the_same_prompt(tmp_path: Path, scripted: Any) -> None:
    def reply(system: str, user: str, schema: Any) -> dict[str, Any]:
        return {"facts": [], "entities": [], "qa": []}

    def prompt(program: Extractor) -> Any:
        handle = scripted(reply)
        with dspy.context(lm=handle.lm):
            program(chunk=_chunk())
        return _requests(handle.lm.engine)[-1]

    save_program(Extractor(), tmp_path / "ex.json")
    assert prompt(load_program("extractor", tmp_path / "ex.json")) == prompt(Extractor())


def _no_store_in(obj: Any, store: Store) -> None:
    """Walk an object graph (attributes, containers, closures) and fail on ``store``."""
    seen: set[int] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, (str, bytes, int, float, type)):
            continue
        seen.add(id(item))
        assert item is not store and item is not store.conn, f"store reached via {item!r}"
        if isinstance(item, dict):
            stack += list(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack += list(item)
        for cell in getattr(item, "__closure__", None) or ():
            stack.append(cell.cell_contents)
        if hasattr(item, "__dict__"):
            stack += list(vars(item).values())
        for slot in getattr(type(item), "__slots__", ()):
            if hasattr(item, slot):
                stack.append(getattr(item, slot))
        if hasattr(item, "__wrapped__"):
            stack.append(item.__wrapped__)
        if hasattr(item, "func"):
            stack.append(item.func)


@pytest.fixture
def session(store: Store) -> ToolSession:
    from memstrata.bench.locomo import load_conversation
    from memstrata.formats.locomo import _parse_conversation

    load_conversation(store, _parse_conversation(Path("t.json"), 0, locomo_record("conv-a")))
    return ToolSession(store, "conv-a")


def test_no_copy_of_any_program_reaches_a_store(store: Store, session: ToolSession) -> None:
    programs: list[Any] = [
        QA(), Extractor(), VoEPredictor(), VoEResponder(),
        PersonalAnswerer(store), VoELoop(store, "u"),
        *(Executor(ExecutorSettings(executor=kind), session.handle_tools(),
                   factory=InProcessInterpreter) for kind in ("rlm", "react", "scratchpad")),
    ]
    for program in programs:
        for clone in (copy.deepcopy(program), program.deepcopy(), program.reset_copy()):
            _no_store_in(clone, store)
            assert [n for n, _ in clone.named_predictors()] == \
                [n for n, _ in program.named_predictors()]


def test_a_copied_answerer_is_unbound_until_bound_or_given_sources(store: Store,
                                                                    session: ToolSession,
                                                                    scripted: Any) -> None:
    from memstrata.programs.answer import AnswerSources

    answerer = PersonalAnswerer(store)
    clone = copy.deepcopy(answerer)
    with pytest.raises(UnboundProgramError, match="bind"):
        clone(question="What is the guinea pig called?", user_id="conv-a")
    handle = scripted(lambda s, u, schema: {"answer": "Oscar", "evidence": []})
    with dspy.context(lm=handle.lm):
        given = clone(question="What is the guinea pig called?", user_id="conv-a",
                      sources=AnswerSources.over(store))
        bound = clone.bind(store)(question="What is the guinea pig called?", user_id="conv-a")
    assert given.answer == bound.answer == "Oscar"
    held = Live(store, what="store")
    assert not copy.copy(held).bound and held.bound


def _react_reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    props = (schema or {}).get("properties", {})
    if "next_tool_name" in props:
        if "observation_0" in user:
            return {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}
        return {"next_thought": "look", "next_tool_name": "mem_search",
                "next_tool_args": {"query": "guinea pig"}}
    return {"reasoning": "found", "answer": "Oscar"}


def test_one_executor_serves_many_sessions_and_its_copies(store: Store, session: ToolSession,
                                                          scripted: Any) -> None:
    agent = Executor(ExecutorSettings(executor="react"), HANDLE_TOOLS, drop_first=True)
    step = agent.step_modules()[0]
    step.predict.demos = [dspy.Example(question="q", trajectory="t", next_thought="n",
                                       next_tool_name="finish", next_tool_args={})]
    for program in (agent, copy.deepcopy(agent)):
        other = ToolSession(store, "conv-a")
        run = run_executor("What is the guinea pig called?", other, scripted(_react_reply),
                           executor=program)
        assert run.answer == "Oscar" and run.error is None
        assert [c.name for c in other.log.calls] == ["mem_search"]  # this call's session
        assert program.step_modules()[0].predict.demos  # the predictors persist
    with pytest.raises(ValueError, match="not among the call's tools"):
        run_executor("q", session, scripted(_react_reply), executor=agent, tools=[])
    with pytest.raises(UnboundProgramError):
        agent.agent.tools["mem_search"](query="x")  # a slot outside a call


def test_a_persistent_rlm_runs_like_a_fresh_one(session: ToolSession, scripted: Any) -> None:
    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        if "code" in (schema or {}).get("properties", {}):
            return {"reasoning": "go", "code": "SUBMIT(answer='Oscar')"}
        return {"reasoning": "x", "answer": "fallback"}

    agent = Executor(ExecutorSettings(max_iters=2), session.handle_tools(),
                     factory=InProcessInterpreter)
    fresh = run_executor("q?", session, scripted(reply), ExecutorSettings(max_iters=2),
                         factory=InProcessInterpreter)
    kept = run_executor("q?", session, scripted(reply), executor=agent)
    assert fresh.answer == kept.answer == "Oscar"


def test_voe_programs_are_the_loops_predictors(store: Store) -> None:
    loop = VoELoop(store, "u", predictor=VoEPredictor(), responder=VoEResponder())
    assert sorted(n for n, _ in loop.named_predictors()) == [
        "predictor.predict.predict", "predictor.predict_distil.predict",
        "responder.respond.predict"]
    assert not copy.deepcopy(loop).live.bound


def test_the_sparql_agent_is_a_savable_executor(tmp_path: Path) -> None:
    pytest.importorskip("pyoxigraph")
    from memstrata.bench.experiments.ontology_suite import sparql_agent

    agent = sparql_agent(ExecutorSettings(executor="react"))
    assert agent.tool_names == ["run_sparql"] and agent.context_names == ["memory"]
    save_program(agent, tmp_path / "sparql.json")
    loaded = load_program("sparql", tmp_path / "sparql.json")
    assert [n for n, _ in loaded.named_predictors()] == [n for n, _ in agent.named_predictors()]
