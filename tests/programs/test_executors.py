"""Executors over a tool session: RLM, ReAct and the scratchpad with scripted models and a
mock interpreter; every run recorded, with its leakage figures, and secrets masked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata.memory import Store
from memstrata.programs import ExecutorSettings, run_executor, wrap_lm
from memstrata.programs.instrument import PromptTap
from memstrata.tools import ToolSession
from memstrata.trajectories import MASK, export_jsonl
from tests.conftest import InProcessInterpreter, field, locomo_record


@pytest.fixture
def session(store: Store) -> ToolSession:
    from memstrata.bench.locomo import load_conversation
    from memstrata.formats.locomo import _parse_conversation

    load_conversation(store, _parse_conversation(Path("t.json"), 0, locomo_record("conv-a")))
    s = ToolSession(store, "conv-a")
    s.put_blob("conversation", "\n".join(
        f"[{t.turn_id}] {t.speaker}: {t.text}" for t in store.turns("conv-a")))
    return s


def _plan(*codes: str):
    """A scripted RLM: iteration i writes ``codes[i]``; extraction answers 'fallback'."""
    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        props = (schema or {}).get("properties", {})
        if "code" in props:
            i = int(field(user, "iteration").split("/")[0]) - 1
            return {"reasoning": f"step {i + 1}", "code": codes[min(i, len(codes) - 1)]}
        return {"reasoning": "out of steps", "answer": "fallback"}
    return reply


def test_rlm_run_is_recorded_with_steps_tools_and_leakage(session: ToolSession, scripted: Any,
                                                           tmp_path: Path) -> None:
    handle = scripted(_plan(
        "r = mem_search('guinea pig', k=2)\nprint(r['results'][0]['description'])",
        "print(ctx_find(conversation, 'Oscar')['matches'][0]['line'])",
        "SUBMIT(answer='Oscar')"))
    mock = InProcessInterpreter()
    run = run_executor("What is the guinea pig called?", session, handle,
                       ExecutorSettings(max_iters=5), context={"conversation":
                                                               session.ref("conversation")},
                       factory=lambda: mock)
    assert run.error is None and run.answer == "Oscar" and run.converged
    assert [s["iteration"] for s in run.steps] == [1, 2, 3]
    assert "Oscar" in run.steps[0]["output"] and run.steps[1]["output"].strip() == "1"
    assert [t["name"] for t in run.steps[0]["tools"]] == ["mem_search"]
    assert [t["name"] for t in run.steps[1]["tools"]] == ["ctx_find"]
    # The sandbox saw a handle, never the text.
    assert repr(mock.namespace["conversation"]).startswith("BlobRef(key='conversation'")
    assert mock.shut

    lk = run.leakage
    assert lk.iterations == 3 and len(lk.context_chars_per_iteration) == 3
    assert all(c > 500 for c in lk.context_chars_per_iteration)
    assert lk.tool_calls == 2 and lk.sub_calls == 0 and lk.llm_calls == run.usage.calls == 3
    assert lk.stdout_chars == sum(len(s["output"]) for s in run.steps)
    assert 0 < lk.variables_info_chars < 2000

    store = session.binding.store
    rec = store.runs.get("conv-a", run.run_id)
    assert rec is not None and rec.status == "ok" and rec.program == "executor.rlm"
    assert rec.output["answer"] == "Oscar" and rec.usage["calls"] == 3
    assert rec.git_commit and rec.db_state["rows"]["blobs"] == 2 and rec.db_state["digest"]
    assert rec.config["max_iters"] == 5 and rec.config["model"] == handle.name
    assert rec.leakage["tool_calls"] == 2 and rec.wall_s is not None
    steps = store.runs.steps("conv-a", run.run_id)
    assert [s.kind for s in steps] == ["iteration", "tool", "iteration", "tool", "iteration"]
    tool = steps[1]
    assert tool.name == "mem_search" and tool.data["ids"] and tool.output_chars > 0
    assert store.runs.steps("someone-else", run.run_id) == []

    out = tmp_path / "runs.jsonl"
    assert export_jsonl(store, out, user_id="conv-a") == 1
    line = json.loads(out.read_text().splitlines()[0])
    assert line["id"] == run.run_id and len(line["steps"]) == 5


def test_dummy_lm_run_with_a_mock_interpreter_writes_a_trajectory(session: ToolSession) -> None:
    from dspy.utils import DummyLM

    lm = DummyLM([{"reasoning": "look", "code": "print(mem_search('violin')['results'][0]['id'])"},
                  {"reasoning": "done", "code": "SUBMIT(answer='the violin')"}],
                 adapter=dspy.JSONAdapter())
    run = run_executor("What did Bob start learning?", session, wrap_lm(lm, "dummy"),
                       factory=InProcessInterpreter)
    assert run.answer == "the violin" and run.usage.calls == 2
    steps = session.binding.store.runs.steps("conv-a", run.run_id)
    assert [s.kind for s in steps] == ["iteration", "tool", "iteration"]
    assert steps[1].data["ids"][0].startswith("t_")


def test_secrets_never_reach_a_record(session: ToolSession, scripted: Any,
                                      monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key = "sk-proj-" + "Z" * 30
    monkeypatch.setenv("MY_SERVICE_TOKEN", "hunter2-very-secret")
    handle = scripted(_plan(
        f"print('{key}')\nprint('hunter2-very-secret')",
        "SUBMIT(answer='done')"))
    run = run_executor(f"Use {key} please", session, handle, factory=InProcessInterpreter)
    store = session.binding.store
    out = tmp_path / "runs.jsonl"
    export_jsonl(store, out)
    dumped = out.read_text()
    assert key not in dumped and "hunter2-very-secret" not in dumped and MASK in dumped
    assert store.runs.get("conv-a", run.run_id).task == f"Use {MASK} please"


def test_react_over_the_same_tools(session: ToolSession, scripted: Any) -> None:
    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        props = (schema or {}).get("properties", {})
        if "next_tool_name" in props:
            if "mem_search" in user and "observation_0" in user.lower():
                return {"next_thought": "enough", "next_tool_name": "finish",
                        "next_tool_args": {}}
            return {"next_thought": "search", "next_tool_name": "mem_search",
                    "next_tool_args": {"query": "Sweden grandma"}}
        return {"reasoning": "found it", "answer": "Sweden"}

    run = run_executor("Where does Alice's grandma live?", session, scripted(reply),
                       ExecutorSettings(executor="react", max_iters=4),
                       context={"conversation": session.ref("conversation")})
    assert run.error is None and run.answer == "Sweden" and run.converged
    assert run.steps[0]["code"].startswith("mem_search(") and run.steps[0]["tools"]
    assert run.leakage.iterations == 2 and run.leakage.tool_calls == 1
    # ReAct's inputs are prompt text: it saw the handle's repr, not the conversation.
    assert "BlobRef(key='conversation'" in run.steps[0]["output"] or run.leakage.\
        variables_info_chars < 200


def test_scratchpad_keeps_namespace_and_truncates_history(session: ToolSession,
                                                          scripted: Any) -> None:
    seen: list[str] = []

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        props = (schema or {}).get("properties", {})
        if "code" in props:
            history = field(user, "history")
            seen.append(history)
            n = history.count("Step ")
            codes = ["x = mem_search('hiking')['results'][0]['id']\nprint('x' * 3000)",
                     "print(len(x))", "print('again')", "SUBMIT(answer=x)"]
            return {"reasoning": "go", "code": codes[min(n + ("earlier" in history) * 2, 3)]}
        return {"answer": "none"}

    run = run_executor("Which id mentions hiking?", session, scripted(reply),
                       ExecutorSettings(executor="scratchpad", max_iters=6, history_steps=2,
                                        max_output_chars=100),
                       factory=InProcessInterpreter)
    assert run.converged and run.answer.startswith("t_")
    assert "(3,001 chars)" in seen[1] and "x" * 101 not in seen[1]  # output cut at 100
    assert any("earlier steps not shown" in h for h in seen)


def test_parse_failure_is_a_recorded_error_not_a_silent_answer(session: ToolSession,
                                                               scripted: Any) -> None:
    run = run_executor("Anything?", session, scripted(lambda s, u, schema: "not json at all"),
                       factory=InProcessInterpreter)
    assert run.error and "ProgramParseError" in run.error and run.answer == ""
    rec = session.binding.store.runs.get("conv-a", run.run_id)
    assert rec.status == "error" and "ProgramParseError" in rec.error


def test_naive_tools_leak_more_into_the_prompt_than_handles(session: ToolSession,
                                                            scripted: Any) -> None:
    code = ["print(mem_search('guinea pig Oscar'))", "SUBMIT(answer='Oscar')"]
    handles = run_executor("q?", session, scripted(_plan(*code)),
                           ExecutorSettings(tools="handles"), factory=InProcessInterpreter)
    naive = run_executor("q?", session, scripted(_plan(*code)),
                         ExecutorSettings(tools="naive"), factory=InProcessInterpreter)
    assert naive.leakage.stdout_chars > 3 * handles.leakage.stdout_chars
    first, second = (naive.leakage.context_chars_per_iteration[i]
                     - handles.leakage.context_chars_per_iteration[i] for i in (0, 1))
    # Same tool names and docs: the first prompts differ only by ctx_read's doc line;
    # the second carries the printed payload.
    assert abs(first) < 300 and second > first + 1000


def test_prompt_tap_counts_sub_calls_outside_step_predictors(scripted: Any) -> None:
    handle = scripted(lambda s, u, schema: {"answer": "x"})
    step = dspy.Predict("question -> answer")
    tap = PromptTap([step], [])
    with dspy.context(lm=handle.lm, callbacks=[tap], adapter=dspy.JSONAdapter()):
        step(question="a")
        handle.lm("a raw sub-call")
    assert len(tap.context_chars) == 1 and tap.context_chars[0] > 0
    assert tap.sub_calls == 1 and tap.llm_calls == 2


def test_a_judge_grades_the_run_and_its_verdict_is_recorded(session: ToolSession,
                                                            scripted: Any) -> None:
    seen: list[str] = []

    def judge_reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        seen.append(user)
        return {"success": True, "rationale": "the answer names the pet"}

    run = run_executor("What is the guinea pig called?", session,
                       scripted(_plan("print(mem_search('guinea pig')['results'][0]['id'])",
                                      "SUBMIT(answer='Oscar')")),
                       factory=InProcessInterpreter, judge=scripted(judge_reply, "local/judge"))
    assert run.verdict == {"judge_model": "local/judge", "success": True,
                           "rationale": "the answer names the pet"}
    assert "Oscar" in seen[0] and "mem_search" in seen[0]
    store = session.binding.store
    assert store.runs.get("conv-a", run.run_id).verdict["success"] is True
    assert store.runs.steps("conv-a", run.run_id)[-1].kind == "verdict"
    assert store.runs.set_verdict("conv-a", run.run_id, {"f1": 1.0})
    assert not store.runs.set_verdict("conv-b", run.run_id, {"f1": 0.0})
    assert store.runs.get("conv-a", run.run_id).verdict == {"f1": 1.0}


def test_react_tool_arguments_are_held_to_the_tools_schemas(session: ToolSession,
                                                             scripted: Any) -> None:
    # Small local models echoed ReAct's argument schema ({"query": {"type": "string",
    # "value": ...}}) and no tool was ever called: the grammar now only allows real args.
    seen: list[dict[str, Any]] = []

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        props = (schema or {}).get("properties", {})
        if "next_tool_name" in props:
            seen.append(props["next_tool_args"])
            return {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}
        return {"reasoning": "r", "answer": "x"}

    run_executor("Where?", session, scripted(reply), ExecutorSettings(executor="react"))
    options = seen[0]["anyOf"]
    search = next(o for o in options if "query" in o["properties"])
    assert search["properties"]["query"] == {"type": "string"}
    assert search["additionalProperties"] is False and search["required"] == ["query"]
    assert "k" not in search["properties"]  # optional: strict schemas would demand it
    assert {"type": "object", "properties": {}, "required": [],
            "additionalProperties": False} in options  # finish takes nothing


def test_react_stops_a_call_repeated_after_the_notice(session: ToolSession,
                                                      scripted: Any) -> None:
    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        if "next_tool_name" in (schema or {}).get("properties", {}):
            return {"next_thought": "search", "next_tool_name": "mem_search",
                    "next_tool_args": {"query": "Sweden grandma"}}
        return {"reasoning": "found it", "answer": "Sweden"}

    run = run_executor("Where does Alice's grandma live?", session, scripted(reply),
                       ExecutorSettings(executor="react", max_iters=8))
    # the search, its repeat (answered with the notice, not run), then finish
    assert run.leakage.tool_calls == 1 and run.leakage.iterations == 3
    assert run.answer == "Sweden"


def test_the_context_that_reached_the_prompt_is_measured(session: ToolSession,
                                                         scripted: Any) -> None:
    # Issue 21: budgets are checked on what the model received, not on the packer's report.
    from memstrata.programs.instrument import chars_in_prompt

    assert chars_in_prompt("abcdef", "xx abcd yy") == 4
    assert chars_in_prompt("abc", "nothing") == 0 and chars_in_prompt("", "x") == 0
    memory = "remember: " + " ".join(f"fact{i}" for i in range(400))

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        if "next_tool_name" in (schema or {}).get("properties", {}):
            return {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}
        return {"reasoning": "r", "answer": "x"}

    run = run_executor("q?", session, scripted(reply), ExecutorSettings(executor="react"),
                       context={"memory": memory})
    assert run.context_in_prompt == {"memory": len(memory)}
    rlm = run_executor("q?", session, scripted(_plan("SUBMIT(answer='x')")),
                       context={"memory": memory}, factory=InProcessInterpreter)
    assert 0 < rlm.context_in_prompt["memory"] < len(memory)  # a preview, the rest in the REPL
