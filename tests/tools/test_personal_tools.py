"""The reconciler's four tools on a hand-made tenant (tests/personal_data.py): one Alex in
conv-a and conv-b, another in conv-c; bounded JSON, clear refusals, one tenant only."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from memstrata.memory import FactItem, Store
from memstrata.memory.person_patterns import observe
from memstrata.memory.profile import same_value
from memstrata.tools import ToolError, ToolSession
from memstrata.tools.personal_tools import MAX_EVENTS, personal_tools
from tests.personal_data import load

Tools = dict[str, Callable[..., dict[str, Any]]]


@pytest.fixture
def session(store: Store) -> ToolSession:
    return ToolSession(load(store), "u1")


@pytest.fixture
def tools(session: ToolSession) -> Tools:
    return {t.__name__: t for t in personal_tools(session)}


def test_same_person_shares_distinctive_attributes_and_nothing_clashes(tools: Tools) -> None:
    out = tools["compare_entities_across_conversations"]("Alex", "conv-a", "conv-b")
    shared = {(s["kind"], s["value"].casefold()) for s in out["shared"]}
    assert {("spouse", "priya"), ("pet", "biscuit"), ("job", "globex"),
            ("home", "lisbon")} <= shared
    assert all(s["a"].startswith("D") and s["b"].startswith("D") for s in out["shared"])
    assert out["shared_distinctive"] >= 4 and out["overlap_score"] >= 0.5
    assert out["a"]["partners"] == ["Bea"] and out["b"]["partners"] == ["Carl"]
    assert out["time_overlap_days"] == 0  # May vs June
    assert tools["detect_contradictions"]("Alex", "conv-a", "conv-b")["count"] == 0


def test_two_people_with_one_name_contradict_each_other(tools: Tools) -> None:
    out = tools["detect_contradictions"]("Alex", "conv-a", "conv-c")
    relations = {c["relation"] for c in out["contradictions"]}
    assert {"spouse", "job"} <= relations and out["count"] == len(out["contradictions"])
    spouse = next(c for c in out["contradictions"] if c["relation"] == "spouse")
    assert (spouse["a"]["value"], spouse["b"]["value"]) == ("Priya", "Tom")
    assert spouse["a"]["evidence"] == ["D1:1"] and spouse["b"]["evidence"] == ["D1:4"]
    # Lisbon (20 May) then Denver (14 June): separate times, so a possible move, not a clash.
    assert [c["relation"] for c in out["changes"]] == ["home"]
    cmp = tools["compare_entities_across_conversations"]("Alex", "conv-a", "conv-c")
    assert cmp["shared"] == [] and cmp["overlap_score"] < 0.35
    assert cmp["differing"]["spouse"] == {"a": ["Priya"], "b": ["Tom"]}
    assert cmp["time_overlap_days"] == 10


def test_timeline_is_time_ordered_with_turn_ids_and_bounded(tools: Tools) -> None:
    out = tools["get_entity_timeline"]("alex", "conv-c")  # names match case-insensitively
    assert out["name"] == "Alex" and out["span"] == ["2023-05-10", "2023-06-14"]
    whens = [e["when"] for e in out["events"]]
    assert whens == sorted(whens) and len(out["events"]) <= MAX_EVENTS
    assert {(e["relation"], e["turn"]) for e in out["events"]} >= {
        ("job", "D1:2"), ("marital", "D1:4"), ("home", "D2:2")}
    # A person who says nothing about themselves still gets their distinctive turns.
    bea = tools["get_entity_timeline"]("Bea", "conv-a")
    assert bea["events"] and all(e["turn"].startswith("D") for e in bea["events"])


def test_timeline_uses_stored_facts(session: ToolSession, tools: Tools) -> None:
    session.binding.store.add(FactItem(
        user_id="u1", text="Alex works at Initech", subject="Alex", predicate="works at",
        object="Initech", about="Alex", speaker="Alex", conversation_id="conv-c",
        evidence=["D2:4"]))
    session.binding.store.add(FactItem(
        user_id="u1", text="Alex adopted a parrot", predicate="adopted", object="a parrot",
        about="Alex", conversation_id="conv-c", evidence=["D2:2"]))
    out = tools["get_entity_timeline"]("Alex", "conv-c")
    assert out["facts"] == 2 and any(e["value"] == "Initech" for e in out["events"])
    assert any(e["relation"] == "fact" and "parrot" in e["text"] for e in out["events"])


def test_conversation_context_lists_participants_and_what_sets_them_apart(tools: Tools) -> None:
    out = tools["get_conversation_context"]("conv-a")
    assert out["sessions"] == 2 and out["turns"] == 8
    assert out["span"] == ["2023-05-02", "2023-05-20"]
    alex = next(p for p in out["participants"] if p["name"] == "Alex")
    assert {"Priya", "Globex", "Biscuit", "Lisbon"} <= set(alex["names"])
    assert any(s.startswith("job: globex") for s in alex["states"])
    assert len(json.dumps(out)) < 3000


@pytest.mark.parametrize(("call", "args", "message"), [
    ("get_conversation_context", ("conv-zz",), "conversations: conv-a, conv-b, conv-c"),
    ("get_entity_timeline", ("Zed", "conv-a"), "people there: Alex, Bea"),
    ("get_entity_timeline", (None, "conv-a"), "nobody named None"),
    ("detect_contradictions", ("Alex", "conv-a", "conv-a"), "two different conversations"),
    ("compare_entities_across_conversations", ("Bea", "conv-a", "conv-b"), "people there"),
])
def test_bad_input_is_refused_with_what_is_valid(tools: Tools, session: ToolSession, call: str,
                                                 args: tuple, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        tools[call](*args)
    assert session.log.calls[-1].error and session.log.calls[-1].name == call


@pytest.mark.parametrize("call", ["get_entity_timeline", "get_conversation_context"])
def test_a_refusal_quoting_a_huge_argument_is_bounded(tools: Tools, session: ToolSession,
                                                      call: str) -> None:
    huge = "Zed " * 50_000  # an agent's runaway argument, quoted back in the refusal
    args = (huge, "conv-a") if call == "get_entity_timeline" else (huge,)
    with pytest.raises(ToolError) as exc:
        tools[call](*args)
    limit = session.binding.caps.max_error_chars
    assert len(str(exc.value)) <= limit and session.log.calls[-1].error == str(exc.value)
    # Start and end survive the cut: which tool, and what would have been valid.
    assert str(exc.value).startswith(call) and str(exc.value).endswith(
        "Alex, Bea" if call == "get_entity_timeline" else "conv-a, conv-b, conv-c")


def test_calls_are_logged_and_results_bounded(tools: Tools, session: ToolSession) -> None:
    for name, args in (("get_entity_timeline", ("Alex", "conv-a")),
                       ("get_conversation_context", ("conv-b",)),
                       ("compare_entities_across_conversations", ("Alex", "conv-a", "conv-c")),
                       ("detect_contradictions", ("Alex", "conv-a", "conv-c"))):
        size = len(json.dumps(tools[name](*args)))
        assert size < 4000 and session.log.calls[-1].result_chars == size
    assert [c.name for c in session.log.calls][-1] == "detect_contradictions"
    with pytest.raises(ToolError, match="get_entity_timeline"):
        tools["get_entity_timeline"]("Alex")  # a missing argument, refused by name


def test_tools_never_read_another_tenant(store: Store) -> None:
    load(store, "u1", ("conv-a", "conv-b"))
    load(store, "u2", ("conv-c",))
    mine = {t.__name__: t for t in personal_tools(ToolSession(store, "u1"))}
    with pytest.raises(ToolError, match=r"conversations: conv-a, conv-b$"):
        mine["get_conversation_context"]("conv-c")
    theirs = {t.__name__: t for t in personal_tools(ToolSession(store, "u2"))}
    assert "Tom" not in json.dumps(mine["get_entity_timeline"]("Alex", "conv-a"))
    assert "Priya" not in json.dumps(theirs["get_entity_timeline"]("Alex", "conv-c"))
    with pytest.raises(ToolError, match=r"conversations: conv-c$"):
        theirs["detect_contradictions"]("Alex", "conv-a", "conv-c")


def test_patterns_read_first_person_statements() -> None:
    found = {(o.relation, o.kind, o.value) for o in observe(
        "I lost my job at the paper mill. My girlfriend Ana and I had a lovely wedding "
        "ceremony! I'm a big fan of jazz and I moved to Porto.", None, "D1:1")}
    assert ("job", "end", "paper mill") in found and ("partner", "state", "Ana") in found
    assert ("marital", "wedding", "married") in found and ("home", "start", "Porto") in found
    assert not any(r == "job" and k == "state" for r, k, _ in found)  # "big fan": no job
    assert same_value("Globex Corp", "globex") and not same_value("married", "unmarried")


def test_answers_stay_bounded_whatever_the_turns_hold(session: ToolSession, tools: Tools
                                                      ) -> None:
    """Found by the reliability fuzzer: a 100,000-letter word came back as a 'term'."""
    from memstrata.memory import Turn

    store = session.binding.store
    conv = store.turns("u1")[0].conversation_id
    speaker = store.turns("u1")[0].speaker
    store.add_turns([Turn(user_id="u1", conversation_id=conv, session_id="s99", turn_id="x",
                          seq=10_000 + n, speaker=speaker, text="a" * 100_000 + f" {n}")
                     for n in range(3)])
    out = tools["get_conversation_context"](conv)
    assert len(json.dumps(out)) < 20_000
    with pytest.raises(ToolError, match="unknown conversation"):
        tools["get_conversation_context"]({"deep": [[[["x"]]]]})
