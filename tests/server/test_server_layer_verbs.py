"""The layer verbs over REST: ``POST /v1/context``, ``/v1/read``, ``/v1/learn``,
``/v1/expect`` and ``route`` on ``/v1/answer``, for the key's tenant only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memstrata import Memory
from memstrata.memory.models import StrategyItem
from memstrata.server.errors import STATUS
from tests.door_script import DoorScript
from tests.server.server_helpers import World, client, make_world

GUIDE = ("The tram 28 runs through Alfama. A single ride costs 3 euros.\n"
         "How to ride the tram:\n1. Buy a Viva Viagem card\n2. Load it with zapping "
         "credit\n3. Validate it on boarding")
BEN_DOC = "The zorblax vault opens at 4471. Vexmoor keeps the quintessa key."
VERBS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/context", {"query": "tram"}),
    ("/v1/read", {"text": "A document."}),
    ("/v1/learn", {"run": "searched and answered", "task": "t", "success": True}),
    ("/v1/expect", {}),
    ("/v1/answer", {"question": "Where?", "route": "rules"}),
]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path / "m.db")


def _error(response: Any, code: str) -> str:
    assert response.status_code == STATUS[code], response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    return str(body["error"]["message"])


def test_read_then_context_and_learn_without_a_model(world: World) -> None:
    with client(world, "ana", mcp=False, ui=False) as c:
        report = c.post("/v1/read", json={"text": GUIDE, "title": "Lisbon tram guide",
                                          "source": "Visit Lisboa", "when": "2024-03-01"})
        assert report.status_code == 200, report.text
        read = report.json()
        assert len(read["facts"]) == 3 and read["episode_id"] and read["procedure_id"]
        cost = read["facts"][1]
        assert c.get(f"/v1/memories/{cost}").json()["text"] == "A single ride costs 3 euros."

        ctx = c.post("/v1/context", json={"query": "How much is a tram ride in Lisbon?",
                                          "budget": 400}).json()
        assert ctx["tokens"] <= 400 and ctx["text"].startswith("## What was said")
        assert cost in ctx["layers"]["semantic"]["ids"] and ctx["sources"][cost] == "semantic"
        assert read["procedure_id"] in ctx["layers"]["procedures"]["ids"]
        for name, layer in ctx["layers"].items():
            # Every line's head read back: the layer's ids, in order, each one resolving.
            assert [line["id"] for line in layer["lines"]] == layer["ids"], name
            for line in layer["lines"]:
                assert f"[{line['id']}" in ctx["text"] and line["text"] in ctx["text"]
                assert c.get(f"/v1/memories/{line['id']}").status_code == 200
        fact_line = next(x for x in ctx["layers"]["semantic"]["lines"] if x["id"] == cost)
        assert fact_line["speaker"] == "Visit Lisboa" and fact_line["day"] == "2024-03-01"
        assert set(ctx["ids"]) == set(ctx["sources"])
        only = c.post("/v1/context", json={"query": "tram", "layers": ["semantic"]}).json()
        assert set(only["layers"]) == {"semantic"} and "## What was said" not in only["text"]

        lesson = c.post("/v1/learn", json={
            "run": {"task": "Which tram goes to Alfama?", "answer": "The tram 28",
                    "trajectory": [{"tool": "mem_search", "args": {"query": "Alfama"}}]},
            "success": True})
        assert lesson.status_code == 200, lesson.text
        learned = lesson.json()
        assert learned["method"] == "trace" and learned["llm_calls"] == 0
        assert len(learned["strategies"]) == 1 and learned["run_id"].startswith("run_")
        shown = c.post("/v1/context", json={"query": "Which tram goes to Alfama?",
                                            "layers": ["strategies"]}).json()
        assert shown["layers"]["strategies"]["ids"] == learned["strategies"]
        again = c.post("/v1/learn", json={"run": "searched, then answered 28",
                                          "task": "Which tram goes to Alfama?",
                                          "success": True, "used": shown["ids"]}).json()
        assert again["used"] == learned["strategies"]
        stored = world.memory.store.get("ana", learned["strategies"][0])
        assert isinstance(stored, StrategyItem) and (stored.uses, stored.wins) == (1, 1)
        by_id = c.post("/v1/learn", json={"run": learned["run_id"], "success": False,
                                          "task": "Which tram?"})
        assert by_id.status_code == 200, by_id.text

        assert "needs one" in _error(c.post("/v1/learn", json={
            "run": "x", "task": "t", "success": True, "method": "llm"}), "no_model")
        _error(c.post("/v1/expect", json={}), "no_model")
        _error(c.post("/v1/answer", json={"question": "Where?", "route": "reasoner"}),
               "no_model")
        _error(c.post("/v1/answer", json={"question": "Where?", "route": "psychic"}),
               "validation_error")
        _error(c.post("/v1/context", json={"query": "x", "budget": 0}), "validation_error")
        _error(c.post("/v1/context", json={"query": "x", "budget": 10**6}), "validation_error")
        _error(c.post("/v1/context", json={"query": "x", "layers": ["dreams"]}),
               "validation_error")
        _error(c.post("/v1/context", json={"query": "x\u0000"}), "validation_error")
        _error(c.post("/v1/read", json={"text": "   "}), "validation_error")
        _error(c.post("/v1/read", json={"text": "x", "when": "someday"}), "validation_error")
        _error(c.post("/v1/learn", json={"run": "x", "success": True}), "validation_error")
        _error(c.post("/v1/learn", json={"run": {"trajectory": "x", "colour": 1},
                                         "task": "t", "success": True}), "validation_error")
    runs = {r.program for r in world.memory.store.runs.list("ana", limit=100)}
    assert {"memory.read", "memory.learn"} <= runs


def test_the_layer_verbs_never_cross_tenants(world: World) -> None:
    ben_read = world.memory.read(BEN_DOC, user_id="ben", title="quintessa vault")
    ben_strategy = world.memory.store.add(StrategyItem(
        user_id="ben", title="zorblax first", text="Open the zorblax vault first"))
    ben_run = world.memory.learn({"task": "zorblax", "trajectory": "opened the vault"},
                                 user_id="ben", success=True).run_id
    ben_before = world.memory.store.counts("ben")
    with client(world, None, mcp=False, ui=False) as c:
        for path, body in VERBS:  # no key, a wrong key: 401 before anything is read
            for headers in ({}, {"Authorization": "Bearer ms_000000000000_wrong"}):
                _error(c.post(path, json=body, headers=headers), "unauthorized")
    with client(world, "ana", mcp=False, ui=False) as c:
        for path, body in VERBS:
            for other in ("ben", "", "ANA"):
                response = c.post(path, json={**body, "user_id": other})
                _error(response, "forbidden")
                assert "zorblax" not in response.text
        ctx = c.post("/v1/context", json={"query": "zorblax vault quintessa Vexmoor 4471",
                                          "budget": 2000}).json()
        assert not {*ben_read.facts, ben_read.episode_id, ben_strategy} & set(ctx["ids"])
        assert "zorblax" not in ctx["text"] and "Vexmoor" not in ctx["text"]
        # ben's run id reads as an unknown one; ben's strategy id is not counted as used.
        message = _error(c.post("/v1/learn", json={"run": ben_run, "success": True}),
                         "not_found")
        assert "zorblax" not in message
        lesson = c.post("/v1/learn", json={"run": "searched", "task": "vault",
                                           "success": True, "used": [ben_strategy]}).json()
        assert lesson["used"] == []
        for fact in ben_read.facts:
            assert c.get(f"/v1/memories/{fact}").status_code == 404
    after = world.memory.store.get("ben", ben_strategy)
    assert isinstance(after, StrategyItem) and after.uses == 0
    assert world.memory.store.counts("ben") == ben_before
    with client(world, "admin", mcp=False, ui=False) as c:
        _error(c.post("/v1/context", json={"query": "vault"}), "validation_error")
        ctx = c.post("/v1/context", json={"query": "zorblax vault", "user_id": "ben"}).json()
        assert set(ben_read.facts) & set(ctx["ids"])


def test_expect_and_routed_answer_with_a_scripted_model(scripted: Any, tmp_path: Path) -> None:
    script = DoorScript("mathematical_computation", answer="Lisbon",
                        prediction="I love hiking in the Alps", needed=("hiking",))
    memory = Memory.open(tmp_path / "lm.db", embedder=None, lm=scripted(script))
    key = memory.store.keys.create("ana")[0]
    world = World(memory, {"ana": key})
    with client(world, "ana", mcp=False, ui=False) as c:
        def say(role: str, text: str) -> None:
            added = c.post("/v1/memories", json={
                "messages": {"role": role, "content": text}, "conversation_id": "chat",
                "infer": False})
            assert added.json()["results"][0]["event"] == "ADD"

        _error(c.post("/v1/expect", json={"conversation_id": "chat"}), "validation_error")
        say("user", "Hi, I moved to Lisbon in May")
        say("assistant", "Hello! What do you like to do?")
        first = c.post("/v1/expect", json={"conversation_id": "chat"}).json()
        assert first["prediction"] == "I love hiking in the Alps" and first["checked"] is None
        assert first["llm_calls"] == 1 and first["run_id"].startswith("run_")
        say("user", "Actually I spent the weekend baking sourdough")
        say("assistant", "Sourdough! How did it turn out?")
        second = c.post("/v1/expect", json={"conversation_id": "chat"}).json()
        assert second["checked"]["violation"] and second["fact_id"]
        assert second["checked"]["actual"] == "Actually I spent the weekend baking sourdough"
        voe = c.post("/v1/context", json={"query": "sourdough tips", "layers": ["voe"],
                                          "conversation_id": "chat"}).json()
        assert {second["id"], second["fact_id"]} <= set(voe["ids"])

        script.asked.clear()
        rules = c.post("/v1/answer", json={"question": "Where did I move in May?",
                                           "route": "rules"}).json()
        assert rules["path"] == "answerer" and rules["llm_calls"] == 1
        assert script.asked == ["qa"] and rules["answer"] == "Lisbon"
        assert memory.store.runs.get("ana", rules["run_id"]).program == "memory.answer"
        routed = c.post("/v1/answer", json={"question": "How many days between May and "
                                            "June?"}).json()
        assert routed["path"] == "reasoner" and routed["intent"]
        assert routed["llm_calls"] >= 3

        learned = c.post("/v1/learn", json={"run": "searched the timetable", "task":
                                            "How do I get to Alfama?", "success": True}).json()
        assert learned["method"] == "llm" and learned["llm_calls"] == 1
    memory.close()


def test_the_openapi_document_describes_the_layer_verbs(world: World) -> None:
    with client(world, mcp=False, ui=False) as c:
        doc = c.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for path, model in [("/v1/context", "ContextRequest"), ("/v1/read", "ReadRequest"),
                        ("/v1/learn", "LearnRequest"), ("/v1/expect", "ExpectRequest")]:
        op = doc["paths"][path]["post"]
        assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
            f"/{model}")
        assert {"401", "403", "422"} <= set(op["responses"])
    assert {"409", "502"} <= set(doc["paths"]["/v1/expect"]["post"]["responses"])
    assert {"409", "502"} <= set(doc["paths"]["/v1/answer"]["post"]["responses"])
    assert "409" not in doc["paths"]["/v1/context"]["post"]["responses"]
    assert set(schemas["AnswerRequest"]["properties"]["route"]["enum"]) == {
        "auto", "rules", "answerer", "reasoner"}
    assert {"lines", "ids", "tokens"} <= set(schemas["ContextLayer"]["properties"])
    assert {"path", "intent", "llm_calls", "run_id"} <= set(
        schemas["AnswerResponse"]["properties"])
