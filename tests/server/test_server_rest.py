"""The REST API: every verb for the key's tenant, the error shape, the OpenAPI document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstrata.server.errors import STATUS
from tests.server.server_helpers import World, client, make_world


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path / "m.db")


def _error(response, status: int, code: str) -> str:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    assert STATUS[code] == status
    return str(body["error"]["message"])


def test_every_verb_for_the_keys_tenant(world: World, tmp_path: Path) -> None:
    with client(world, "ana") as c:
        added = c.post("/v1/memories", json={
            "messages": [{"role": "user", "content": "My cat Luna likes tuna"},
                         {"role": "system", "content": "be brief"}],
            "infer": False, "conversation_id": "pets", "metadata": {"via": "rest"},
            "timestamp": "2024-05-01T10:00:00Z", "agent_id": "bot"})
        assert added.status_code == 200, added.text
        events = added.json()["results"]
        assert [e["event"] for e in events] == ["ADD", "NONE"]
        assert events[1]["reason"] == "system"
        new_id = events[0]["id"]

        hits = c.post("/v1/search", json={"query": "Luna tuna", "k": 3}).json()["results"]
        assert hits[0]["id"] == new_id and hits[0]["text"] == "My cat Luna likes tuna"
        assert 0 < hits[0]["score"] <= 1 and hits[0]["channels"]
        mem0 = c.post("/v1/search", json={"query": "Luna tuna", "limit": 1,
                                          "format": "mem0"}).json()["results"]
        assert len(mem0) == 1 and mem0[0]["memory"] == "My cat Luna likes tuna"
        assert {"id", "memory", "score", "user_id", "metadata"} <= set(mem0[0])
        assert mem0[0]["user_id"] == "ana"
        filtered = c.post("/v1/search", json={"query": "Lisbon", "filters": {
            "conversation_id": "pets"}}).json()["results"]
        assert filtered == []

        one = c.get(f"/v1/memories/{new_id}").json()
        assert one["text"] == "My cat Luna likes tuna" and one["metadata"]["via"] == "rest"
        assert one["conversation_id"] == "pets" and one["agent_id"] == "bot"
        page = c.get("/v1/memories", params={"kind": "turn", "limit": 2}).json()["results"]
        assert page[0]["id"] == new_id and len(page) == 2

        changed = c.put(f"/v1/memories/{new_id}", json={"text": "My cat Luna likes salmon"})
        assert changed.json() == {"id": new_id, "memory": "My cat Luna likes salmon",
                                  "event": "UPDATE", "previous": "My cat Luna likes tuna"}
        versions = c.get(f"/v1/memories/{new_id}/history").json()["results"]
        assert [v["text"] for v in versions] == ["My cat Luna likes tuna",
                                                 "My cat Luna likes salmon"]

        export = c.get("/v1/export")
        assert export.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in export.text.splitlines()]
        assert lines[0]["user_id"] == "ana" and "zorblax" not in export.text
        assert sum(1 for x in lines if x.get("type") == "turn") == 3

        assert c.post("/v1/flush", json={}).json() == {"results": []}
        _error(c.post("/v1/answer", json={"question": "What does Luna like?"}), 409,
               "no_model")
        assert c.get("/v1/me").json() == {"key_id": world.keys["ana"][3:15], "tenant": "ana",
                                          "admin": False}

        assert c.delete(f"/v1/memories/{new_id}").json() == {"deleted": True}
        _error(c.get(f"/v1/memories/{new_id}"), 404, "not_found")
        deleted = c.delete("/v1/memories").json()["deleted"]
        assert deleted["turns"] == 2
        assert c.get("/v1/memories").json() == {"results": []}
    assert len(world.memory.search("zorblax", user_id="ben")) == 1  # ben untouched


def test_refusals_are_json_with_stable_codes(world: World) -> None:
    with client(world, "ana") as c:
        assert "not JSON" in _error(c.post("/v1/search", content=b"{nope"), 400, "bad_json")
        _error(c.post("/v1/search", content=b""), 400, "bad_json")
        _error(c.post("/v1/search", content=b'{"query": NaN}'), 400, "bad_json")
        _error(c.post("/v1/search", content=b"\xff\xfe"), 400, "bad_json")
        _error(c.post("/v1/search", json=["query"]), 422, "validation_error")
        message = _error(c.post("/v1/search", json={"query": "x", "kk": 3}), 422,
                         "validation_error")
        assert "kk" in message
        details = c.post("/v1/search", json={"k": "many"}).json()["error"]["details"]
        assert {tuple(d["loc"]) for d in details} == {("query",), ("k",)}
        # Memory's own refusals keep their message.
        assert "filter" in _error(c.post("/v1/search", json={"query": "x", "filters": {
            "colour": "red"}}), 422, "validation_error")
        _error(c.post("/v1/search", json={"query": "x", "k": 2, "limit": 3}), 422,
               "validation_error")
        _error(c.post("/v1/search", json={"query": "x\u0000"}), 422, "validation_error")
        _error(c.post("/v1/memories", json={"messages": "hi", "user_id": ""}), 403,
               "forbidden")
        _error(c.get("/v1/memories", params={"kind": "nonsense"}), 422, "validation_error")
        _error(c.get("/v1/memories", params={"limit": "ten"}), 422, "validation_error")
        _error(c.get("/v1/me", params={"x": "1"}), 422, "validation_error")
        _error(c.put("/v1/memories/t_nonesuch", json={"text": "x"}), 404, "not_found")
        _error(c.put(f"/v1/memories/{world.ids['ana'][0]}", json={"text": " "}), 422,
               "validation_error")
        _error(c.get("/v1/memories/" + "x" * 2000), 422, "validation_error")
        _error(c.patch("/v1/search"), 405, "method_not_allowed")
        _error(c.get("/v2/anything"), 404, "not_found")
        # A lone surrogate in what is refused still comes back as valid JSON.
        response = c.post("/v1/search", content=b'{"query": "\\ud800 x"}')
        _error(response, 422, "validation_error")


def test_openapi_document_describes_every_operation(world: World) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    with client(world) as c:
        doc = c.get("/openapi.json").json()  # public: no key needed
    assert doc["openapi"].startswith("3.1") and doc["info"]["title"] == "memstrata"
    app_endpoints = {(e.method.lower(), e.path) for e in _endpoints(world)}
    listed = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert listed == app_endpoints | {("get", "/healthz")}
    assert doc["paths"]["/healthz"]["get"]["security"] == []  # the one without a key
    assert doc["paths"]["/v1/memories"]["post"]["requestBody"]["content"][
        "application/json"]["schema"] == {"$ref": "#/components/schemas/AddRequest"}
    search = doc["components"]["schemas"]["SearchRequest"]
    assert {"query", "k", "limit", "format", "filters"} <= set(search["properties"])
    assert search["required"] == ["query"]
    # Every $ref resolves, and every schema is a valid JSON Schema (2020-12, OpenAPI 3.1's).
    refs = [v for v in _walk(doc) if isinstance(v, str) and v.startswith("#/")]
    for ref in refs:
        node = doc
        for part in ref[2:].split("/"):
            node = node[part]
    for schema in doc["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    for path, ops in doc["paths"].items():
        for op in ops.values():
            assert op["operationId"] and op["summary"], path
            assert ("401" in op["responses"]) is (path != "/healthz"), path
            names = {p["name"] for p in op["parameters"] if p["in"] == "path"}
            assert names == {part[1:-1] for part in path.split("/") if part.startswith("{")}
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


def _endpoints(world: World) -> list:  # type: ignore[type-arg]
    from memstrata.server import create_app

    return create_app(world.memory, mcp=False, ui=False).state.endpoints


def _walk(node):  # type: ignore[no-untyped-def]
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_healthz_needs_no_key_and_says_when_the_store_cannot_be_read(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load balancer's probe: 200 while the store answers a read, 503 (the error shape,
    ``store_unavailable``) when it cannot; it needs no key and names no tenant."""
    import sqlite3

    import memstrata

    with client(world) as c:
        ok = c.get("/healthz")
        assert ok.status_code == 200
        assert ok.json() == {"status": "ok", "version": memstrata.__version__}

        def unreadable(self: object, key_id: str) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(type(world.memory.store.keys), "get", unreadable)
        _error(c.get("/healthz"), 503, "store_unavailable")
        assert c.post("/healthz").status_code == 405
