"""Keys decide everything: no key, a wrong or revoked one, another tenant's ids in paths and
bodies, admin-only endpoints, and the MCP endpoint under the same keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.server.server_helpers import World, client, make_world, uvicorn_server

ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/memories", {"messages": "hi", "infer": False}),
    ("GET", "/v1/memories", None),
    ("DELETE", "/v1/memories", None),
    ("GET", "/v1/memories/{id}", None),
    ("PUT", "/v1/memories/{id}", {"text": "changed"}),
    ("DELETE", "/v1/memories/{id}", None),
    ("GET", "/v1/memories/{id}/history", None),
    ("POST", "/v1/search", {"query": "Lisbon"}),
    ("POST", "/v1/answer", {"question": "where?"}),
    ("POST", "/v1/flush", {}),
    ("GET", "/v1/export", None),
    ("GET", "/v1/me", None),
    ("GET", "/v1/admin/keys", None),
    ("POST", "/v1/admin/keys", {"tenant": "eve"}),
    ("DELETE", "/v1/admin/keys/{id}", None),
    ("GET", "/v1/admin/tenants", None),
    ("DELETE", "/v1/admin/tenants/ben", None),
]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path / "m.db")


def _call(c: Any, method: str, path: str, body: dict[str, Any] | None, **kw: Any) -> Any:
    return c.request(method, path, json=body, **kw)


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer ", "Basic dXNlcjpwYXNz",
                                    "Bearer ms_000000000000_wrong", "Bearer not-a-key",
                                    "bearer ms_zzzzzzzzzzzz_x", "Bearer " + "a" * 5000])
def test_every_route_is_401_without_an_active_key(world: World, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    with client(world) as c:
        for method, path, body in ROUTES:
            response = _call(c, method, path.format(id=world.ids["ana"][0]), body,
                             headers=headers)
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"].startswith("Bearer")
    assert len(world.memory.get_all("ana")) == 2 and len(world.memory.get_all("ben")) == 1


def test_a_revoked_key_is_refused_at_its_next_request(world: World) -> None:
    with client(world, "ana") as c:
        assert c.get("/v1/me").status_code == 200
        key_id = world.keys["ana"][3:15]
        assert world.memory.store.keys.revoke(key_id)
        assert c.get("/v1/me").status_code == 401
        assert c.post("/v1/search", json={"query": "Lisbon"}).status_code == 401
    found = world.memory.store.keys.get(key_id)
    assert found is not None and found.last_used is not None and found.revoked_at


def test_another_tenants_ids_read_as_absent(world: World) -> None:
    """ben's ids in ana's paths are 404 as unknown ids are, and change nothing of ben's."""
    with client(world, "ana") as c:
        for ben_id in world.ids["ben"]:
            for method, path, body in ROUTES[3:7]:
                response = _call(c, method, path.format(id=ben_id), body)
                assert response.status_code == 404, (method, path, response.text)
                assert "zorblax" not in response.text and "ben" not in response.text
            hits = c.post("/v1/search", json={"query": "zorblax locker 4471",
                                              "min_score": 0}).json()["results"]
            assert all(h["id"] not in world.ids["ben"] for h in hits)
    assert world.memory.get(world.ids["ben"][0])["text"].startswith("My locker code")
    assert len(world.memory.history(world.ids["ben"][0])) == 1


@pytest.mark.parametrize("where", ["body", "query"])
def test_a_tenant_key_naming_another_tenant_is_forbidden(world: World, where: str) -> None:
    with client(world, "ana") as c:
        for other in ("ben", "nobody", "", "ANA", "ana "):
            if where == "body":
                calls = [c.post("/v1/search", json={"query": "zorblax", "user_id": other}),
                         c.post("/v1/memories", json={"messages": "x", "user_id": other}),
                         c.put(f"/v1/memories/{world.ids['ben'][0]}",
                               json={"text": "x", "user_id": other})]
            else:
                calls = [c.get("/v1/memories", params={"user_id": other}),
                         c.delete("/v1/memories", params={"user_id": other}),
                         c.get("/v1/export", params={"user_id": other}),
                         c.get(f"/v1/memories/{world.ids['ben'][0]}",
                               params={"user_id": other})]
            for response in calls:
                assert response.status_code == 403, response.text
                assert response.json()["error"]["code"] == "forbidden"
                assert "zorblax" not in response.text
        # Naming itself is allowed.
        assert c.post("/v1/search", json={"query": "Lisbon", "user_id": "ana"}
                      ).status_code == 200
    assert len(world.memory.get_all("ben")) == 1


def test_admin_endpoints_need_an_admin_key(world: World) -> None:
    with client(world, "ana") as c:
        for method, path, body in ROUTES[12:]:
            response = _call(c, method, path.format(id=world.keys["ben"][3:15]), body)
            assert response.status_code == 403, (method, path)
            assert response.json()["error"]["code"] == "forbidden"
            assert "ben" not in response.text
    assert world.memory.store.keys.verify(world.keys["ben"]) is not None
    with client(world, "admin") as c:
        made = c.post("/v1/admin/keys", json={"tenant": "eve", "name": "eve's app"})
        assert made.status_code == 201
        eve_key = made.json()["key"]
        assert eve_key.startswith("ms_") and made.json()["record"]["tenant"] == "eve"
        listed = c.get("/v1/admin/keys", params={"tenant": "eve"}).json()["results"]
        assert [k["name"] for k in listed] == ["eve's app"] and "key" not in listed[0]
        assert eve_key not in c.get("/v1/admin/keys").text
        assert c.get("/v1/admin/tenants").json()["results"] == ["ana", "ben", "eve"]
        # An admin key acts on the tenant a request names, and must name one.
        assert c.post("/v1/search", json={"query": "x"}).status_code == 422
        hits = c.post("/v1/search", json={"query": "zorblax", "user_id": "ben"}).json()
        assert hits["results"][0]["id"] == world.ids["ben"][0]
        gone = c.delete("/v1/admin/tenants/ben").json()
        assert gone["revoked_keys"] == 1 and gone["deleted"]["turns"] == 1
        revoked = c.delete(f"/v1/admin/keys/{listed[0]['id']}").json()
        assert revoked == {"revoked": True}
        assert c.delete(f"/v1/admin/keys/{listed[0]['id']}").json() == {"revoked": False}
        assert c.delete("/v1/admin/keys/000000000000").status_code == 404
        assert c.post("/v1/admin/keys", json={"tenant": "x", "admin": True}
                      ).status_code == 422
    assert world.memory.store.keys.verify(world.keys["ben"]) is None
    assert world.memory.store.keys.verify(eve_key) is None
    assert world.memory.get_all("ben") == [] and len(world.memory.get_all("ana")) == 2


def test_a_real_uvicorn_and_the_mcp_endpoint_under_the_same_keys(world: World) -> None:
    """REST over a real socket, and MCP: each key reaches its own tenant's tools only."""
    anyio = pytest.importorskip("anyio")
    pytest.importorskip("mcp")
    import httpx
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from memstrata.server import create_app

    app = create_app(world.memory)
    with uvicorn_server(app) as base:
        with httpx.Client(base_url=base, headers=world.auth("ben")) as http:
            found = http.post("/v1/search", json={"query": "zorblax", "k": 3}).json()
            assert found["results"][0]["id"] == world.ids["ben"][0]
            assert http.get(f"/v1/memories/{world.ids['ana'][0]}").status_code == 404
            assert httpx.post(f"{base}/v1/search", json={"query": "x"}).status_code == 401
            hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            for headers in ({}, {"Authorization": "Bearer ms_000000000000_x"}):
                assert httpx.post(f"{base}/mcp", json=hello, headers=headers
                                  ).status_code == 401
            assert httpx.post(f"{base}/mcp", json=hello, headers=world.auth("admin")
                              ).status_code == 403

        async def as_tenant(who: str) -> tuple[set[str], set[str]]:
            async with httpx2.AsyncClient(headers=world.auth(who)) as http, Client(
                    streamable_http_client(f"{base}/mcp", http_client=http)) as session:
                listed = await session.list_tools()
                result = await session.call_tool("mem_search",
                                                 {"query": "zorblax Lisbon locker"})
                assert not result.is_error, result.content
                ids = {r["id"] for r in result.structured_content["results"]}
                refused = await session.call_tool("mem_search", {"query": "x",
                                                                 "user_id": "ben"})
                assert refused.is_error
                return {t.name for t in listed.tools}, ids

        ana_tools, ana_ids = anyio.run(as_tenant, "ana")
        _, ben_ids = anyio.run(as_tenant, "ben")
    assert "mem_search" in ana_tools
    assert ana_ids <= set(world.ids["ana"]) and ana_ids
    assert ben_ids <= set(world.ids["ben"]) and ben_ids
    runs = world.memory.store.runs.list("ana")
    assert runs and all(r.config["transport"] == "http" for r in runs)


def test_the_inspector_at_ui_takes_admin_keys_only(world: World) -> None:
    pytest.importorskip("jinja2")
    with client(world) as c:
        assert c.get("/ui/").status_code == 401  # the login page
        refused = c.post("/ui/login", data={"key": world.keys["ana"]}, follow_redirects=False)
        assert refused.status_code == 401 and "set-cookie" not in refused.headers
        accepted = c.post("/ui/login", data={"key": world.keys["admin"]},
                          follow_redirects=False)
        assert accepted.status_code == 303
        assert c.get("/ui/").status_code == 200
        world.memory.store.keys.revoke(world.keys["admin"][3:15])
        assert c.get("/ui/").status_code == 401
