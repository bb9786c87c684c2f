"""The body limit, enforced while the body is read; deep JSON; the CLI of serve and keys."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memstrata.cli import main
from memstrata.server.limits import MAX_JSON_DEPTH
from tests.server.server_helpers import World, client, make_world, uvicorn_server


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path / "m.db")


def test_bodies_over_the_limit_are_413_and_change_nothing(world: World) -> None:
    limit = 4096
    with client(world, "ana", max_body=limit) as c:
        big = {"messages": "x" * limit, "infer": False}
        response = c.post("/v1/memories", json=big)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "too_large"

        def chunks():  # type: ignore[no-untyped-def]  # no Content-Length: read as it comes
            for _ in range(64):
                yield b"[" * 256

        response = c.post("/v1/memories", content=chunks())
        assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"
        # Just under the limit is read and handled.
        ok = {"messages": "y" * (limit - 200), "infer": False}
        assert c.post("/v1/memories", json=ok).status_code == 200
        # Unauthenticated bodies are cut off too, before the key is looked at.
        assert c.post("/v1/search", content=b"z" * (limit + 1),
                      headers={"Authorization": ""}).status_code == 413
    assert len(world.memory.get_all("ana")) == 3


def test_the_limit_holds_on_a_real_socket_with_a_lying_content_length(world: World) -> None:
    """A client that declares a small body and sends a huge one is cut off at the limit,
    not read to its end."""
    from memstrata.server import create_app

    with uvicorn_server(create_app(world.memory, max_body=2048, mcp=False)) as base:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /v1/memories HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                         + world.keys["ana"].encode() + b"\r\nTransfer-Encoding: chunked\r\n"
                         b"Content-Type: application/json\r\n\r\n")
            sent = 0
            answer = b""
            try:
                for _ in range(2000):  # up to ~8 MB, unless the server answers first
                    piece = b"a" * 4096
                    sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    sent += len(piece)
                    sock.settimeout(0.001)
                    with contextlib.suppress(TimeoutError, BlockingIOError):
                        answer += sock.recv(65536)
                    sock.settimeout(10)
                    if answer:
                        break
            except (BrokenPipeError, ConnectionResetError):
                pass
            deadline = time.monotonic() + 5
            while b'"too_large"' not in answer and time.monotonic() < deadline:
                try:
                    more = sock.recv(65536)
                except OSError:
                    break
                if not more:
                    break
                answer += more
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"too_large"' in answer
    assert sent < 8 * 2**20


def test_deep_json_is_bad_json(world: World) -> None:
    with client(world, "ana") as c:
        for depth in (MAX_JSON_DEPTH + 1, 5000, 100_000):
            body = '{"query": ' + "[" * depth + "]" * depth + "}"
            response = c.post("/v1/search", content=body.encode())
            assert response.status_code == 400, depth
            assert response.json()["error"]["code"] == "bad_json"
        deep_meta = {"messages": "x", "infer": False, "metadata": {}}
        node = deep_meta["metadata"]
        for _ in range(30):  # within the JSON limit, over Memory's metadata depth
            node["a"] = {}
            node = node["a"]
        response = c.post("/v1/memories", json=deep_meta)
        assert response.status_code == 422 and "nested" in response.json()["error"]["message"]


def _cli(*argv: str) -> int:
    try:
        return main(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def test_keys_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "k.db")
    assert _cli("keys", "create", "--user", "ana", "--name", "app", "--db", db) == 0
    out, err = capsys.readouterr()
    key = out.strip()
    assert key.startswith("ms_") and len(out.splitlines()) == 1 and key not in err
    assert _cli("keys", "create", "--admin", "--db", db) == 0
    capsys.readouterr()
    assert _cli("keys", "list", "--db", db) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["tenant"], r["admin"], r["name"]) for r in rows] == [("ana", False, "app"),
                                                                     (None, True, "")]
    assert key not in json.dumps(rows)
    assert _cli("keys", "revoke", rows[0]["id"], "--db", db) == 0
    assert json.loads(capsys.readouterr().out) == {"id": rows[0]["id"], "revoked": True}
    assert _cli("keys", "list", "--db", db) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert _cli("keys", "list", "--all", "--user", "ana", "--db", db) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert _cli("keys", "list", "--user", "ana", "--db", db) == 0  # her one key is revoked
    out, err = capsys.readouterr()
    assert out == "" and "no active keys of user 'ana'" in err
    # Exit codes: usage 2, not found 1.
    assert _cli("keys", "revoke", "000000000000", "--db", db) == 1
    assert _cli("keys", "create", "--db", db) == 2
    assert _cli("keys", "create", "--user", "ana", "--admin", "--db", db) == 2
    assert _cli("keys", "create", "--user", "", "--db", db) == 2
    assert _cli("keys", "list", "--db", str(tmp_path / "none.db")) == 1
    assert not (tmp_path / "none.db").exists()
    assert _cli("serve", "--port", "70000", "--db", db) == 2
    assert _cli("serve", "--max-body", "12", "--db", db) == 2


def test_a_port_in_use_is_one_line_before_anything_says_it_serves(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    db = str(tmp_path / "p.db")
    assert _cli("add", "hello", "--user", "ana", "--db", db) == 0
    capsys.readouterr()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        new = str(tmp_path / "new.db")  # serve would create it: not when it cannot listen
        for argv in (("serve", "--port", port, "--db", db), ("ui", "--port", port, "--db", db),
                     ("serve", "--port", port, "--db", new)):
            assert _cli(*argv) == 2, argv
            err = capsys.readouterr().err.strip()
            assert err == (f"memstrata: cannot listen on 127.0.0.1:{port}: Address already in "
                           "use (another server is there: give --port)"), err
    assert not (tmp_path / "new.db").exists()


def test_serve_command_answers_with_keys(tmp_path: Path) -> None:
    """``memstrata serve`` as a user starts it: 401 without a key, the tenant's data with
    one; the key is never printed by the server."""
    import httpx

    from tests.server.server_helpers import free_port

    db = tmp_path / "s.db"
    world = make_world(db)
    world.memory.close()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstrata.cli", "serve", "--db", str(db), "--port", str(port),
         "--no-ui"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
             "MEMSTRATA_HOME": str(tmp_path)})
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                first = httpx.post(f"{base}/v1/search", json={"query": "Lisbon"})
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.2)
        assert first.status_code == 401
        hits = httpx.post(f"{base}/v1/search", json={"query": "Lisbon", "k": 5},
                          headers=world.auth("ana")).json()["results"]
        assert {h["id"] for h in hits} == set(world.ids["ana"])
        added = httpx.post(f"{base}/v1/memories", json={"messages": "hello", "infer": False},
                           headers=world.auth("ben"))
        assert added.json()["results"][0]["event"] == "ADD"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "active key(s)" in err and not any(k in err for k in world.keys.values())


def test_serve_never_prints_a_database_urls_password(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """What serve says on stderr (servers' logs keep it) names a PostgreSQL store
    without its password: the serving line and the no-key hint."""
    import uvicorn

    from memstrata import Memory
    from memstrata.memory import Store
    from tests.server.server_helpers import free_port

    opened: list[str] = []

    def fake_open(db: str, **kw: object) -> Memory:
        opened.append(db)
        return Memory(Store.open(":memory:", embedder=None))

    monkeypatch.setattr(Memory, "open", staticmethod(fake_open))
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    url = "postgresql://app:s3cretpw@db.example:5432/mem"
    assert _cli("serve", "--db", url, "--port", str(free_port()), "--no-ui", "--no-mcp") == 0
    err = capsys.readouterr().err
    assert opened == [url]  # the server opens the URL as given
    assert "s3cretpw" not in err
    shown = "postgresql://app@db.example:5432/mem"
    assert f"serving {shown} at http://127.0.0.1:" in err
    assert "no key yet" in err and f"--db {shown}')" in err
