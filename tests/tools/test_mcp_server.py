"""The MCP server: the handle tools and ``answer`` over the protocol, bound to one tenant.

End to end with the SDK's own client: ``memstrata mcp`` is spawned over stdio (and over
streamable HTTP); ``answer`` runs in-process under a scripted model (no real LLM).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata import Memory
from memstrata.cli import main
from memstrata.mcp_server import (
    HANDLE_TOOL_NAMES,
    LM_TOOL_NAMES,
    VERB_TOOL_NAMES,
    TenantTools,
    build_server,
)
from memstrata.memory.models import StrategyItem
from memstrata.memory.store.opener import open_store
from tests.conftest import field
from tests.door_script import DoorScript

pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parents[2]
BEN_MARKERS = ("zorblax", "vexmoor", "quintessa")
"""Words only in ben's rows (texts, titles, tags, speaker, blob): never in ana's answers."""


# -- a store with two tenants ---------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Where the store lives: a SQLite file, or a PostgreSQL database's URL (``--db``)."""
    if request.param == "sqlite":
        return tmp_path / "mem.db"
    return request.getfixturevalue("pg_db_url")



def two_tenants(path: Path | str) -> dict[str, Any]:
    """Ana's and ben's turns, items and blobs in one file; their ids by tenant."""
    with Memory.open(path) as m:
        ana = [e["id"] for e in m.add(
            [{"role": "user", "content": "I moved to Lisbon in May"},
             {"role": "assistant", "content": "How do you like Lisbon?"}], user_id="ana",
            infer=False)]
        ben = [e["id"] for e in m.add(
            [{"speaker": "Vexmoor", "content": "My locker code is zorblax 4471, Lisbon gym"},
             {"speaker": "Vexmoor", "content": "Quintessa is my sister in Lisbon"}],
            user_id="ben", infer=False)]
        ana_tools = {t.__name__: t for t in m.tools("ana")}
        ben_tools = {t.__name__: t for t in m.tools("ben")}
        ana.append(ana_tools["mem_add"]("Ana swims at the lido on Sundays", kind="fact",
                                        title="swimming")["id"])
        ben.append(ben_tools["mem_add"]("Zorblax lido pass for Vexmoor, Sundays", kind="fact",
                                        title="quintessa pass", tags=["zorblax"])["id"])
        from memstrata.tools import ToolSession

        ToolSession(m.store, "ana").put_blob("notes", "alpha\nLisbon beta\ngamma\n")
        ToolSession(m.store, "ben").put_blob("quintessa-vault", "zorblax vault\n" * 5)
    return {"ana": ana, "ben": ben}


# -- the SDK's stdio client, held open for synchronous tests --------------------------------


def _command() -> tuple[str, list[str]]:
    """The ``memstrata`` console script of this environment (``python -m`` otherwise)."""
    script = Path(sys.executable).with_name("memstrata")
    if script.exists():
        return str(script), []
    return sys.executable, ["-m", "memstrata.cli"]


def _params(db: Path | str, user: str, *extra: str, home: Path) -> StdioServerParameters:
    command, prefix = _command()
    return StdioServerParameters(
        command=command, args=[*prefix, "mcp", "--db", str(db), "--user", user, *extra],
        env={"MEMSTRATA_HOME": str(home), "HF_HUB_OFFLINE": "1"}, cwd=str(ROOT))


class Session:
    """A connected SDK client, called synchronously through a blocking portal."""

    def __init__(self, portal: Any, client: Client) -> None:
        self.portal, self.client = portal, client

    def list_tools(self) -> Any:
        return self.portal.call(self.client.list_tools)

    def call(self, name: str, args: dict[str, Any]) -> Any:
        return self.portal.call(self.client.call_tool, name, args)


@contextlib.contextmanager
def connect(transport: Any) -> Iterator[Session]:
    with anyio.from_thread.start_blocking_portal() as portal, \
            portal.wrap_async_context_manager(Client(transport)) as client:
        yield Session(portal, client)


@contextlib.contextmanager
def stdio(db: Path | str, user: str, *extra: str, tmp_path: Path) -> Iterator[Session]:
    log = tmp_path / f"server-{user}.log"
    with log.open("w") as errlog:
        try:
            with connect(stdio_client(_params(db, user, *extra, home=tmp_path),
                                      errlog=errlog)) as session:
                yield session
        finally:
            errlog.flush()
            print(log.read_text(), file=sys.stderr)  # shown when a test fails


def payload(result: Any) -> dict[str, Any]:
    """A successful call's structured content (its text content is the same JSON)."""
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def error_text(result: Any) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


# -- the round trip -------------------------------------------------------------------------


def test_mcp_round_trip_over_stdio(tmp_path: Path, where: Path | str) -> None:
    """Every tool listed (exactly the handle tools, none taking a user) and called over
    stdio, on a SQLite file and on PostgreSQL; refusals arrive as tool errors with their
    message; each call is a run."""
    db = where
    ids = two_tenants(db)
    with stdio(db, "ana", "--caps", '{"max_get": 2}', "--agent-id", "claude",
               tmp_path=tmp_path) as s:
        listed = {t.name: t for t in s.list_tools().tools}
        # No --lm: no 'answer' nor 'expect'.
        assert set(listed) == {*HANDLE_TOOL_NAMES, *VERB_TOOL_NAMES}
        for tool in listed.values():
            props = tool.input_schema["properties"]
            assert not any("user" in p for p in props), (tool.name, props)
            assert tool.input_schema.get("additionalProperties") is False
            assert tool.description and "Args:" in tool.description
        assert listed["mem_search"].annotations.read_only_hint is True
        assert listed["mem_add"].annotations.read_only_hint is False

        calls = {
            "ctx_stats": {"ref": "notes"},
            "ctx_peek": {"ref": "notes", "n": 5},
            "ctx_slice": {"ref": "notes", "start": 6, "end": 12},
            "ctx_find": {"ref": "notes", "pattern": "beta"},
            "mem_search": {"query": "Lisbon", "k": 5},
            "mem_get": {"ids": ids["ana"][:2]},
            "mem_quote": {"id": ids["ana"][0], "max_chars": 8},
            "mem_add": {"text": "Ana prefers window seats", "kind": "semantic",
                        "tags": ["travel"]},
            "event_log": {"obj": {"type": "note", "text": "from claude"}},
        }
        out = {name: payload(s.call(name, args)) for name, args in calls.items()}
        assert out["ctx_stats"]["lines"] == 3 and out["ctx_peek"]["text"] == "alpha"
        assert out["ctx_slice"]["text"] == "Lisbon" and out["ctx_find"]["matches"]
        found = {r["id"] for r in out["mem_search"]["results"]}
        assert found and found <= set(ids["ana"])
        assert [i["id"] for i in out["mem_get"]["items"]] == ids["ana"][:2]
        assert out["mem_quote"]["text"] == "I moved "
        assert out["mem_add"]["status"] == "added" and out["event_log"]["written"]

        refused = {
            "mem_get": ({"ids": ids["ana"][:3]}, "a request for ids: 3 is over the cap of 2"),
            "mem_search": ({"query": "Lisbon", "k": 999}, "k = 999 is over the cap of 20"),
            "mem_quote": ({"id": ids["ben"][0]}, f"no memory {ids['ben'][0]!r} for this user"),
            "ctx_peek": ({"ref": "quintessa-vault"},
                         "no blob 'quintessa-vault' for this user; blobs: 'notes'"),
        }
        for name, (args, message) in refused.items():
            assert message in error_text(s.call(name, args)), name
        smuggled = error_text(s.call("mem_search", {"query": "Lisbon", "user_id": "ben"}))
        assert "user_id" in smuggled and "zorblax" not in smuggled.lower()
        assert "Unknown tool: answer" in error_text(s.call("answer", {"question": "where?"}))
        assert "Unknown tool: expect" in error_text(s.call("expect", {}))

    with open_store(db) as store:
        runs = store.runs.list("ana", limit=100)
        by_program: dict[str, list[Any]] = {}
        for run in runs:
            by_program.setdefault(run.program, []).append(run)
        assert {f"mcp.{n}" for n in calls} <= set(by_program)
        for name in calls:
            ok = [r for r in by_program[f"mcp.{name}"] if r.status == "ok"]
            assert len(ok) == 1 and ok[0].agent_id == "claude", name
            assert ok[0].config["transport"] == "stdio"
            steps = store.runs.steps("ana", ok[0].id)
            assert [(step.kind, step.name) for step in steps] == [("tool", name)]
        get_refused = [r for r in by_program["mcp.mem_get"] if r.status == "error"]
        assert len(get_refused) == 1 and "over the cap of 2" in get_refused[0].error
        assert len({r.config["server_session"] for r in runs}) == 1
        # What the tools wrote points back at the run that wrote it, in ana's tenant.
        add_run = next(r for r in by_program["mcp.mem_add"] if r.status == "ok")
        item = store.get("ana", out["mem_add"]["id"])
        assert item is not None and item.source == f"tool:mem_add:{add_run.id}"
        assert item.agent_id == "claude"
        event = store.runs.events("ana", limit=1)[0]
        assert event["run_id"] == by_program["mcp.event_log"][0].id
        assert store.runs.list("ben") == [] and store.runs.events("ben") == []


def test_stdout_carries_only_the_protocol(tmp_path: Path) -> None:
    """Raw stdio, no client library: every line the server writes is a JSON-RPC message
    (the startup note goes to stderr), and it exits when stdin closes."""
    db = tmp_path / "mem.db"
    two_tenants(db)
    command, prefix = _command()
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "mem_search", "arguments": {"query": "Lisbon"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "mem_get", "arguments": {"ids": ["x"] * 9}}},
    ]
    proc = subprocess.Popen(
        [command, *prefix, "mcp", "--db", str(db), "--user", "ana"], cwd=ROOT, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "MEMSTRATA_HOME": str(tmp_path)})
    assert proc.stdin is not None and proc.stdout is not None
    replies = []
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        proc.stdin.flush()
        # Each reply is read before stdin closes: at EOF the server stops, in-flight
        # calls included.
        while len([r for r in replies if "id" in r]) < 3:
            line = proc.stdout.readline()
            assert line, "the server closed stdout early"
            replies.append(json.loads(line))  # a stray print would fail here
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        replies += [json.loads(line) for line in proc.stdout.read().splitlines()]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert all(r["jsonrpc"] == "2.0" for r in replies)
    by_id = {r["id"]: r["result"] for r in replies if "id" in r}
    assert by_id[2]["structuredContent"]["results"] and not by_id[2]["isError"]
    assert by_id[3]["isError"] and "over the cap of 5" in by_id[3]["content"][0]["text"]
    assert proc.stderr is not None and "MCP over stdio" in proc.stderr.read()


# -- tenancy, through the protocol ----------------------------------------------------------


def _calls(ids: dict[str, list[str]]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """Arbitrary calls of every read tool (mem_add and context too), aimed at ben's data:
    his real ids, his words as queries and patterns, his blob's key, his speaker as a role."""
    any_id = st.sampled_from(ids["ana"] + ids["ben"]) | st.from_regex(
        r"\A[ti]_[0-9a-f]{24}\Z") | st.text(max_size=30)
    words = st.sampled_from([*BEN_MARKERS, "Lisbon", "lido", "Sundays", "sister", "code",
                             "Vexmoor"]) | st.text(min_size=1, max_size=30)
    refs = st.sampled_from(["notes", "quintessa-vault", "Quintessa-vault", "vault", ""]
                           ) | st.text(max_size=20)
    small = st.none() | st.integers(-2, 25)
    return st.one_of(
        st.tuples(st.just("mem_search"), st.fixed_dictionaries(
            {"query": words}, optional={"k": small, "role": st.sampled_from(
                ["Vexmoor", "user", "assistant"]) | words,
                "kind": st.sampled_from(["turn", "fact", "semantic"])})),
        st.tuples(st.just("mem_get"), st.fixed_dictionaries(
            {"ids": st.lists(any_id, min_size=1, max_size=5)})),
        st.tuples(st.just("mem_quote"), st.fixed_dictionaries(
            {"id": any_id}, optional={"max_chars": small})),
        st.tuples(st.sampled_from(["ctx_stats", "ctx_peek"]), st.fixed_dictionaries(
            {"ref": refs})),
        st.tuples(st.just("ctx_slice"), st.fixed_dictionaries(
            {"ref": refs, "start": st.integers(0, 60), "end": st.integers(0, 120)})),
        st.tuples(st.just("ctx_find"), st.fixed_dictionaries(
            {"ref": refs, "pattern": words}, optional={"k": small})),
        st.tuples(st.just("mem_add"), st.fixed_dictionaries(
            {"text": st.text(alphabet="abc de", min_size=1, max_size=30)})),
        st.tuples(st.just("context"), st.fixed_dictionaries(
            {"query": words}, optional={"budget": st.integers(1, 800)})),
    )


ECHOES = ("query", "pattern", "key", "missing")
"""Result fields that echo the caller's own arguments (``missing``: the ids not found)."""


def _leaks(result: Any, args: dict[str, Any], ben_ids: set[str]) -> list[str]:
    """What of ben's a response shows: his words or ids anywhere but in the echo of the
    caller's own arguments (a result's echo fields; in a refusal, the values quoted)."""
    if result.is_error:
        text = result.content[0].text.lower()
        sent = [v for v in _strings(args) if len(v) >= 3]
        for value in sorted(sent, key=len, reverse=True):
            text = text.replace(value.lower(), " ")
    else:
        text = json.dumps({k: v for k, v in result.structured_content.items()
                           if k not in ECHOES}, ensure_ascii=False).lower()
    return [w for w in BEN_MARKERS if w in text] + sorted(
        set(re.findall(r"[ti]_[0-9a-f]{24}", text)) & ben_ids)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_a_call_never_reaches_another_tenant(tmp_path: Path, where: Path | str) -> None:
    """Two tenants in one store (a file, or a database), a server bound to ana: no call,
    however aimed at ben's rows (his ids, words, blob, speaker), shows any of them or
    writes into his tenant; a ``user_id`` argument is refused."""
    db = where
    ids = two_tenants(db)
    with open_store(db) as store:
        ben_before = store.counts("ben"), store.blobs.keys("ben")
    ben_ids = set(ids["ben"])
    with stdio(db, "ana", tmp_path=tmp_path) as s:

        @settings(max_examples=100, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow])
        @given(call=_calls(ids), smuggle=st.sampled_from([None, "ben", "ana"]))
        def check(call: tuple[str, dict[str, Any]], smuggle: str | None) -> None:
            name, args = call
            if smuggle is not None:
                args = {**args, "user_id": smuggle}
            result = s.call(name, args)
            assert _leaks(result, args, ben_ids) == [], (name, args, result)
            if smuggle is not None:
                assert result.is_error and "user_id" in result.content[0].text

        check()
    with open_store(db) as store:
        assert (store.counts("ben"), store.blobs.keys("ben")) == ben_before
        assert store.runs.list("ben") == []
        assert store.runs.list("ana", limit=1000)  # the calls were recorded, as ana's


# -- answer, with a scripted model ----------------------------------------------------------


def answering(system: str, user: str, schema: Any) -> dict[str, Any]:
    """A scripted model: answers with the first memory shown, citing its id."""
    memories = field(user, "memories")
    cited = re.findall(r"\[([^\s·\]]+)", memories)
    text = memories.splitlines()[0].split("]", 1)[-1].strip() if memories else ""
    return {"answer": text[:40] or "unknown", "evidence": cited[:1]}


def test_answer_is_offered_with_an_lm_and_recorded(scripted, tmp_path: Path) -> None:
    db = tmp_path / "mem.db"
    ids = two_tenants(db)
    handle = scripted(answering)
    with Memory.open(db, lm=handle) as memory:
        server = build_server(TenantTools(memory, "ana"))

        async def session() -> tuple[Any, ...]:
            async with Client(server) as client:
                listed = {t.name: t for t in (await client.list_tools()).tools}
                good = await client.call_tool("answer", {"question": "Where did I move?"})
                long = await client.call_tool("answer", {"question": "x" * 1001})
                foreign = await client.call_tool(
                    "answer", {"question": "What is the locker code?", "user_id": "ben"})
                return listed, good, long, foreign

        listed, good, long, foreign = anyio.run(session)
        assert set(listed) == {*HANDLE_TOOL_NAMES, *VERB_TOOL_NAMES, *LM_TOOL_NAMES}
        assert set(listed["answer"].input_schema["properties"]) == {"question",
                                                                     "conversation_id"}
        out = payload(good)
        assert out["question"] == "Where did I move?" and out["answer"]
        assert out["evidence"] and not set(out["evidence"]) & set(ids["ben"])
        assert "over the cap of 1000" in error_text(long)
        assert "user_id" in error_text(foreign)
        runs = [r for r in memory.store.runs.list("ana") if r.program == "mcp.answer"]
        assert sorted(r.status for r in runs) == ["error", "ok"]
        ok = next(r for r in runs if r.status == "ok")
        assert ok.usage["calls"] >= 1 and ok.output["answer"] == out["answer"]
        assert ok.config["model"] == handle.name


def test_the_verbs_as_tools_for_one_tenant(scripted, tmp_path: Path) -> None:
    """read, context, learn and expect as tools: bound to ana, bounded, refused as the
    tools refuse, each call a run with its LLM usage; nothing of ben's comes back."""
    db = tmp_path / "mem.db"
    ids = two_tenants(db)
    script = DoorScript(prediction="I love hiking in the Alps", needed=("hiking",))
    with Memory.open(db, lm=scripted(script)) as memory:
        memory.read("Quintessa guards the zorblax vault. Vexmoor has its key.",
                    user_id="ben", title="zorblax notes")
        bens = memory.store.add(StrategyItem(user_id="ben", title="zorblax first",
                                             text="Open the zorblax vault first"))
        memory.add([{"role": "user", "content": "Hi, I just moved to Lisbon"},
                    {"role": "assistant", "content": "Welcome! What do you like to do?"}],
                   user_id="ana", conversation_id="chat", infer=False)
        server = build_server(TenantTools(memory, "ana"))

        async def session() -> dict[str, Any]:
            async with Client(server) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                call = client.call_tool
                return {
                    "tools": tools,
                    "read": await call("read", {
                        "text": "The tram 28 runs through Alfama. A ride costs 3 euros.",
                        "title": "Lisbon tram guide", "when": "2024-03-01"}),
                    "context": await call("context", {"query": "tram ride cost zorblax",
                                                      "budget": 300}),
                    "learn": await call("learn", {
                        "task": "Which tram goes to Alfama?", "success": True,
                        "trajectory": "1. mem_search tram Alfama\n2. answered 28",
                        "answer": "The tram 28", "used": [bens]}),
                    "expect": await call("expect", {"conversation_id": "chat"}),
                    "big": await call("context", {"query": "tram", "budget": 4001}),
                    "long": await call("read", {"text": "x" * 100_001}),
                    "empty": await call("expect", {"conversation_id": "nothing-said"}),
                    "layer": await call("context", {"query": "tram", "layers": ["dreams"]}),
                    "smuggled": await call("context", {"query": "zorblax",
                                                       "user_id": "ben"}),
                }

        out = anyio.run(session)
        tools = out["tools"]
        assert set(tools) == {*HANDLE_TOOL_NAMES, *VERB_TOOL_NAMES, *LM_TOOL_NAMES}
        assert set(tools["context"].input_schema["properties"]) == {
            "query", "budget", "layers", "conversation_id"}
        assert tools["context"].annotations.read_only_hint is True
        assert tools["read"].annotations.read_only_hint is False
        assert all("Args:" in tools[n].description for n in (*VERB_TOOL_NAMES, "expect"))

        read = payload(out["read"])
        assert read["facts_total"] == 2 and len(read["facts"]) == 2 and read["episode_id"]
        ctx = payload(out["context"])
        assert set(read["facts"]) <= set(ctx["ids"]) and ctx["tokens"] <= 300
        assert "A ride costs 3 euros." in ctx["text"] and "zorblax" not in ctx["text"].lower()
        assert not set(ctx["ids"]) & set(ids["ben"])
        learned = payload(out["learn"])
        assert learned["method"] == "llm" and learned["llm_calls"] == 1
        assert learned["used"] == [] and len(learned["strategies"]) == 1
        expected = payload(out["expect"])
        assert expected["prediction"] == "I love hiking in the Alps"
        assert expected["llm_calls"] == 1 and expected["checked"] is None

        assert "over the cap of 4000" in error_text(out["big"])
        assert "over the cap of 100000" in error_text(out["long"])
        assert "holds no turn" in error_text(out["empty"])
        assert "no layer 'dreams'" in error_text(out["layer"])
        assert "user_id" in error_text(out["smuggled"])

        runs = memory.store.runs.list("ana", limit=100)
        mcp_runs = {(r.program, r.status): r for r in runs if r.program.startswith("mcp.")}
        for name in ("read", "context", "learn", "expect"):
            assert (f"mcp.{name}", "ok") in mcp_runs, name
        assert mcp_runs[("mcp.expect", "ok")].usage["calls"] == 1
        assert mcp_runs[("mcp.learn", "ok")].usage["calls"] == 1
        assert mcp_runs[("mcp.context", "ok")].usage["calls"] == 0
        assert ("mcp.read", "error") in mcp_runs and ("mcp.expect", "error") in mcp_runs
        assert memory.store.get("ben", bens).uses == 0
        assert {r.program for r in memory.store.runs.list("ben")} <= {"memory.read"}


# -- the command line -----------------------------------------------------------------------


def test_an_unreachable_database_url_is_a_clear_error_with_nothing_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("psycopg", reason="needs the postgres extra")
    monkeypatch.chdir(tmp_path)
    # Port 1 on the loopback: nothing listens there, the connection is refused at once.
    code = main(["mcp", "--db", "postgresql://me:s3cret@127.0.0.1:1/mem", "--user", "ana"])
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert "postgresql://me@127.0.0.1:1/mem" in err and "cannot be reached" in err
    assert "s3cret" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("token", "message"), [
    (None, "needs a bearer token in $MEMSTRATA_MCP_TOKEN"),
    ("short", "a bearer token needs at least 16"),
])
def test_http_without_a_usable_token_refuses_to_start(
        token: str | None, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("MEMSTRATA_MCP_TOKEN", raising=False)
    if token is not None:
        monkeypatch.setenv("MEMSTRATA_MCP_TOKEN", token)
    code = main(["mcp", "--db", str(tmp_path / "m.db"), "--user", "ana",
                 "--transport", "http"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "m.db").exists()


def test_core_does_not_import_mcp_and_a_missing_sdk_names_the_extra(tmp_path: Path) -> None:
    code = """
import importlib.abc, json, sys, contextlib, io
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "mcp":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
import memstrata, memstrata.cli, memstrata.api, memstrata.tools, memstrata.mcp_server
core_clean = "mcp" not in sys.modules
err = io.StringIO()
with contextlib.redirect_stderr(err):
    status = memstrata.cli.main(["mcp", "--db", sys.argv[1], "--user", "ana"])
print(json.dumps({"clean": core_clean, "status": status, "err": err.getvalue()}))
"""
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.db")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MEMSTRATA_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["clean"] and out["status"] == 2
    assert out["err"].count("\n") == 1 and "pip install 'memstrata[mcp]'" in out["err"]
    assert not (tmp_path / "m.db").exists()


# -- streamable HTTP ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(port: int, proc: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read() if proc.stderr else ''}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise AssertionError("server did not start")


def test_http_needs_the_bearer_token(tmp_path: Path) -> None:
    """Streamable HTTP on 127.0.0.1: 401 without the token or with a wrong one; the SDK's
    client with the token lists and calls the tools."""
    import httpx2

    db = tmp_path / "mem.db"
    ids = two_tenants(db)
    port, token = _free_port(), "t0k3n-" + "x" * 30
    command, prefix = _command()
    proc = subprocess.Popen(
        [command, *prefix, "mcp", "--db", str(db), "--user", "ana", "--transport", "http",
         "--port", str(port), "--token-env", "MY_MCP_TOKEN"], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "MY_MCP_TOKEN": token, "MEMSTRATA_HOME": str(tmp_path)})
    try:
        _wait_for(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        for headers in ({}, {"Authorization": "Bearer wrong-token-xxxxxxxxxxxx"},
                        {"Authorization": token}):
            response = httpx2.post(url, json=hello, headers=headers)
            assert response.status_code == 401, headers
            assert response.headers["www-authenticate"].startswith("Bearer")

        async def authorised() -> tuple[Any, Any]:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
                from mcp.client.streamable_http import streamable_http_client

                async with Client(streamable_http_client(url, http_client=http)) as client:
                    listed = await client.list_tools()
                    found = await client.call_tool("mem_search", {"query": "zorblax Lisbon"})
                    return listed, found

        listed, found = anyio.run(authorised)
        assert {t.name for t in listed.tools} == {*HANDLE_TOOL_NAMES, *VERB_TOOL_NAMES}
        assert {r["id"] for r in payload(found)["results"]} <= set(ids["ana"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.stdout is not None and token not in proc.stdout.read()
    with open_store(db) as store:
        runs = store.runs.list("ana")
        assert [r.config["transport"] for r in runs] == ["http"]
