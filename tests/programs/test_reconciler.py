"""The reconciler agent on scripted models: MERGE and SEPARATE from the tools' results,
the guard overriding a MERGE the tools do not support, loud parse failures, the LLM-call
budget, storage of each decision, the scripted policy and the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata.cli import main
from memstrata.memory import EntityItem, FactItem, Store
from memstrata.memory.entities import DISTINCT_FROM, SAME_AS
from memstrata.programs import ProgramParseError, setup_lm
from memstrata.programs.reconcile_policy import NAME, ReconcilePolicy
from memstrata.programs.reconcile_run import reconcile_person
from memstrata.programs.reconciler import Reconciler, ReconcilerSettings
from memstrata.tools import ToolSession
from tests.personal_data import RECORDS, load

Reply = Callable[[str, str, dict[str, Any] | None], Any]


def agent(decision: str, conv_a: str, conv_b: str, plan: tuple[str, ...] = (
        "compare_entities_across_conversations", "detect_contradictions")) -> Reply:
    """A scripted agent: calls the planned tools on the pair, then proposes ``decision``."""
    args = {"name": "Alex", "conversation_a": conv_a, "conversation_b": conv_b}

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        if "next_tool_name" in (schema or {}).get("properties", {}):
            step = user.count("tool_name_")
            if step < len(plan):
                return {"next_thought": f"call {plan[step]}", "next_tool_name": plan[step],
                        "next_tool_args": args}
            return {"next_thought": "enough", "next_tool_name": "finish", "next_tool_args": {}}
        return {"reasoning": "read the tools", "decision": decision,
                "reason": f"scripted {decision}", "confidence": 0.8}
    return reply


@pytest.fixture
def session(store: Store) -> ToolSession:
    return ToolSession(load(store), "u1")


def test_merge_when_the_tools_show_one_person(session: ToolSession, scripted: Any) -> None:
    handle = scripted(agent("MERGE", "conv-a", "conv-b"))
    [result] = reconcile_person(session, handle, "Alex", ["conv-a", "conv-b"])
    d = result.decision
    assert d is not None and d.decision == "MERGE" and not d.overridden
    assert d.guard.merge_allowed and d.guard.contradictions == 0
    assert d.reason.startswith("scripted MERGE | tools: 4 shared distinctive attributes")
    assert [c.name for c in d.tool_calls] == ["compare_entities_across_conversations",
                                              "detect_contradictions"]
    assert [s["tool"] for s in d.steps] == [c.name for c in d.tool_calls] + ["finish"]
    assert d.llm_calls == 4 == handle.meter.since(0).calls  # 3 steps + the decision
    assert {e.split(":")[0] for e in d.evidence} == {"conv-a", "conv-b"}
    store = session.binding.store
    person = store.get("u1", d.stored["person_id"])
    assert isinstance(person, EntityItem) and person.conversation_id is None
    for cand in d.candidates:
        edge = store.edges("u1", src=cand.entity_id, relation=SAME_AS)[0]
        assert edge.dst == person.id and edge.metadata["reason"] == d.reason
    event = store.runs.events("u1")[0]
    assert json.loads(json.dumps(event))  # the decision is in the event log too
    assert "MERGE" in json.dumps(event)


def test_merge_supersedes_an_earlier_fact_and_keeps_it(session: ToolSession,
                                                      scripted: Any) -> None:
    store = session.binding.store
    old = store.add(FactItem(user_id="u1", text="Alex works at Globex", predicate="works at",
                             object="Globex", about="Alex", conversation_id="conv-a",
                             evidence=["D1:3"], event_time=datetime(2023, 5, 2, tzinfo=UTC)))
    new = store.add(FactItem(user_id="u1", text="Alex works at Initech", predicate="works at",
                             object="Initech", about="Alex", conversation_id="conv-b",
                             evidence=["D2:4"], event_time=datetime(2023, 6, 25, tzinfo=UTC)))
    [result] = reconcile_person(session, scripted(agent("MERGE", "conv-a", "conv-b")), "Alex",
                                ["conv-a", "conv-b"])
    d = result.decision
    assert d is not None and d.decision == "MERGE"  # a job change at separate times
    assert d.stored["superseded"] == [(old, new)]
    kept = store.get("u1", old)
    assert kept is not None and kept.valid_to == datetime(2023, 6, 25, tzinfo=UTC)
    assert store.edges("u1", src=new, relation="supersedes")[0].dst == old
    assert store.get("u1", new).valid_to is None


def test_separate_when_the_agent_says_so(session: ToolSession, scripted: Any) -> None:
    handle = scripted(agent("SEPARATE", "conv-a", "conv-c"))
    [result] = reconcile_person(session, handle, "Alex", ["conv-a", "conv-c"])
    d = result.decision
    assert d is not None and d.decision == "SEPARATE" and not d.overridden
    assert d.guard.contradictions >= 2 and d.confidence == 0.9
    a, c = (x.entity_id for x in d.candidates)
    edge = session.binding.store.edges("u1", src=a, relation=DISTINCT_FROM)[0]
    assert edge.dst == c and edge.metadata["reason"] == d.reason
    assert "spouse is 'Priya' in conv-a and 'Tom' in conv-c" in d.reason


def test_guard_overrides_a_merge_the_tools_contradict(session: ToolSession,
                                                      scripted: Any) -> None:
    handle = scripted(agent("MERGE", "conv-a", "conv-c", plan=()))  # no tool called at all
    with dspy.context(lm=handle.lm):
        d = Reconciler(session)(name="Alex", conversation_a="conv-a", conversation_b="conv-c")
    assert d.proposal.decision == "MERGE" and d.decision == "SEPARATE" and d.overridden
    assert d.reason.startswith("Overridden: the agent proposed MERGE")
    assert not d.guard.merge_allowed and d.guard.contradictions >= 2
    assert d.tool_calls == [] and d.llm_calls == 2


def test_guard_needs_positive_evidence_not_just_no_contradiction(store: Store,
                                                                 scripted: Any) -> None:
    load(store, convs=("conv-b", "conv-c"))  # conv-b (June) vs conv-c: nothing shared
    session = ToolSession(store, "u1")
    [result] = reconcile_person(session, scripted(agent("MERGE", "conv-b", "conv-c")), "Alex",
                                ["conv-b", "conv-c"])
    d = result.decision
    assert d is not None and d.overridden and d.decision == "SEPARATE"
    assert "0 shared distinctive attribute(s), 2 needed" in d.guard.reason


def test_parse_failure_is_loud_and_stores_nothing(session: ToolSession, scripted: Any) -> None:
    handle = scripted(lambda system, user, schema: "MERGE!!! they are both Alex")
    with dspy.context(lm=handle.lm), pytest.raises(ProgramParseError, match="reconciler"):
        Reconciler(session)(name="Alex", conversation_a="conv-a", conversation_b="conv-b")
    [result] = reconcile_person(session, handle, "Alex", ["conv-a", "conv-b"])
    assert result.decision is None and "could not be parsed" in (result.error or "")
    store = session.binding.store
    assert store.edges("u1", relation=SAME_AS) == [] and store.runs.events("u1") == []


def test_llm_call_budget_makes_the_agent_finish(session: ToolSession, scripted: Any) -> None:
    endless = ("get_conversation_context",) * 10
    handle = scripted(agent("SEPARATE", "conv-a", "conv-b", plan=endless))
    settings = ReconcilerSettings(max_iters=8, max_llm_calls=5)
    [result] = reconcile_person(session, handle, "Alex", ["conv-a", "conv-b"], settings)
    d = result.decision
    assert d is not None and d.llm_calls <= 5
    assert d.steps[-1]["tool"] == "finish" and "budget" in d.steps[-1]["thought"]
    with pytest.raises(ValueError):
        ReconcilerSettings(max_iters=0)


def test_a_call_repeated_after_the_notice_finishes_the_agent(session: ToolSession,
                                                              scripted: Any) -> None:
    endless = ("compare_entities_across_conversations",) * 10
    handle = scripted(agent("SEPARATE", "conv-a", "conv-b", plan=endless))
    [result] = reconcile_person(session, handle, "Alex", ["conv-a", "conv-b"],
                                ReconcilerSettings(max_iters=8, max_llm_calls=40))
    d = result.decision
    assert d is not None
    # the call, its repeat (answered with the notice), then the agent is stopped
    assert [s["tool"] for s in d.steps] == ["compare_entities_across_conversations"] * 2 + [
        "finish"]
    assert "repeat notice" in d.steps[-1]["thought"]
    assert d.llm_calls == 4  # three steps and the decision


def test_a_person_in_fewer_than_two_conversations_is_refused(session: ToolSession,
                                                             scripted: Any) -> None:
    with pytest.raises(ValueError, match="needs two conversations"):
        reconcile_person(session, scripted(agent("MERGE", "a", "b")), "Bea", ["conv-a", "conv-b"])


def test_policy_engine_runs_the_whole_path(session: ToolSession) -> None:
    handle = setup_lm(NAME, engine=ReconcilePolicy())
    results = reconcile_person(session, handle, "Alex", ["conv-a", "conv-b", "conv-c"])
    got = {(r.conversation_a, r.conversation_b): r.decision.decision for r in results
           if r.decision}
    assert got == {("conv-a", "conv-b"): "MERGE", ("conv-a", "conv-c"): "SEPARATE",
                   ("conv-b", "conv-c"): "SEPARATE"}


def test_cli_reconcile_prints_each_decision(write_json: Callable[[str, Any], Path],
                                            tmp_path: Path, capsys: Any) -> None:
    data = write_json("people.json", list(RECORDS.values()))
    db = tmp_path / "people.db"
    code = main(["reconcile", "--data", str(data), "--conversations", "conv-a,conv-b,conv-c",
                 "--person", "Alex", "--lm", "policy", "--db", str(db), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["user"] == "alex" and len(out["pairs"]) == 3
    assert [p["decision"]["decision"] for p in out["pairs"]] == ["MERGE", "SEPARATE",
                                                                "SEPARATE"]
    with Store.open(db) as store:
        assert len(store.edges("alex", relation=DISTINCT_FROM)) == 2
    assert main(["reconcile", "--data", str(data), "--conversations", "conv-a,conv-b",
                 "--person", "Alex", "--lm", "policy"]) == 0
    assert "decision: MERGE" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="at least two"):
        main(["reconcile", "--data", str(data), "--conversations", "conv-a", "--person", "A"])


@pytest.mark.slow
def test_embedded_model_never_merges_two_people_who_share_a_name(session: ToolSession) -> None:
    """The real default model drives the agent: whatever it proposes, two Alexes with
    different spouses and jobs at the same time are never merged, and the budget holds."""
    settings = ReconcilerSettings(max_iters=2, max_llm_calls=6)
    handle = setup_lm(max_tokens=256)
    [result] = reconcile_person(session, handle, "Alex", ["conv-a", "conv-c"], settings)
    assert handle.meter.since(0).calls <= 6
    if result.decision is None:  # a parse failure is loud, and nothing was stored
        assert "could not be parsed" in (result.error or "")
        assert session.binding.store.edges("u1", relation=SAME_AS) == []
        return
    d = result.decision
    assert d.decision == "SEPARATE" and d.proposal.decision in ("MERGE", "SEPARATE")
    assert d.guard.contradictions >= 2 and d.llm_calls <= 6
    assert session.binding.store.edges("u1", relation=SAME_AS) == []


def test_constructed_cases_one_sam_twice_and_another_sam(capsys) -> None:
    # bench/data/reconcile_cases.json: Sam the nurse (wife Elena, daughter Mia, dog
    # Biscuit) in two conversations, and a student Sam (girlfriend Tara, cat Pixel) over
    # the same months. The tools must support MERGE for the first pair, SEPARATE for both
    # others, so that a model deciding right is never overridden.
    from importlib.resources import files

    cases = files("memstrata.bench") / "data" / "reconcile_cases.json"
    assert main(["reconcile", "--data", str(cases), "--person", "Sam", "--lm", "policy",
                 "--conversations", "case-sam-a,case-sam-b,case-sam-c", "--json"]) == 0
    pairs = {(p["conversation_a"], p["conversation_b"]): p["decision"]
             for p in json.loads(capsys.readouterr().out)["pairs"]}
    same = pairs[("case-sam-a", "case-sam-b")]
    assert same["decision"] == "MERGE" and same["guard"]["merge_allowed"]
    assert not same["overridden"]
    for other in (("case-sam-a", "case-sam-c"), ("case-sam-b", "case-sam-c")):
        assert pairs[other]["decision"] == "SEPARATE"
        assert not pairs[other]["guard"]["merge_allowed"]
    assert pairs[("case-sam-a", "case-sam-c")]["guard"]["contradictions"] >= 1


def test_the_agents_tool_arguments_are_capped_with_clear_refusals(
        session: ToolSession, scripted: Any) -> None:
    # Issue 21: the reconciler's tools took whatever strings the model wrote, unbounded.
    huge = "Alex" + "x" * 5000
    calls = iter([
        {"name": huge, "conversation_a": "conv-a", "conversation_b": "conv-b"},
        {"name": "Alex", "conversation_a": ["conv-a"] * 1000, "conversation_b": "conv-b"},
        {"name": "Alex", "conversation_a": "conv-a", "conversation_b": "conv-b"},
    ])

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        if "next_tool_name" in (schema or {}).get("properties", {}):
            args = next(calls, None)
            if args is None:
                return {"next_thought": "done", "next_tool_name": "finish",
                        "next_tool_args": {}}
            return {"next_thought": "try", "next_tool_args": args,
                    "next_tool_name": "compare_entities_across_conversations"}
        return {"reasoning": "r", "decision": "SEPARATE", "reason": "r", "confidence": 0.5}

    agent = Reconciler(session, ReconcilerSettings(max_iters=5, max_llm_calls=20))
    with dspy.context(lm=scripted(reply).lm):
        d = agent(name="Alex", conversation_a="conv-a", conversation_b="conv-b")
    errors = [c.error for c in d.tool_calls]
    assert errors[0] is not None and "over the cap of 200" in errors[0]
    assert len(errors[0]) <= session.caps.max_error_chars
    # A list where a conversation id goes is refused by the cap or by DSPy's own checks.
    assert all(c.error is None for c in d.tool_calls[-1:])
    assert d.tool_calls[-1].name == "compare_entities_across_conversations"
    assert not any(huge in str(s) for s in d.steps)
    with pytest.raises(ValueError, match="at most 200 characters"):
        agent(name=huge, conversation_a="conv-a", conversation_b="conv-b")


def test_a_key_in_the_models_reason_is_not_stored(session: ToolSession, scripted: Any) -> None:
    # Issue 21 (secrets): the reason is the model's words, stored on the edges and events.
    key = "sk-ant-" + "K" * 40
    reply = agent("SEPARATE", "conv-a", "conv-b")

    def leaky(system: str, user: str, schema: dict[str, Any] | None) -> Any:
        out = reply(system, user, schema)
        if "reason" in out:
            out["reason"] = f"see {key}"
        return out

    [result] = reconcile_person(session, scripted(leaky), "Alex", ["conv-a", "conv-b"])
    assert result.decision is not None and key in result.decision.reason  # returned as said
    store = session.binding.store
    stored = json.dumps([list(r) for r in store.conn.execute("SELECT * FROM edges")]
                        + [list(r) for r in store.conn.execute("SELECT * FROM events")],
                        default=str)
    assert key not in stored and "[REDACTED]" in stored
