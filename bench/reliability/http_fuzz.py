"""Hostile HTTP: ``memstrata serve``'s app under a real uvicorn on 127.0.0.1, fuzzed with
seeded random requests (``http_fuzz``).

The store holds ``fuzz.seed_tenants``' alice and bob (bob's texts carry a marker word,
his ids are known to the fuzzer) and carol, whom the admin key may act on. Keys: alice's,
bob's, an admin key, a revoked key of alice's, and junk. Each request picks a method
(the API's, odd ones, unknown ones), a path (every route, unknown paths, bob's ids in
alice's paths, unicode and percent-encoded junk), a key, query parameters and a body:
valid bodies with fields changed, wrong types, unknown fields, ``user_id`` naming another
tenant, bad JSON, invalid UTF-8, lone surrogates, deep JSON, bodies over the limit (sent
on a raw socket, declared or chunked, so the server must refuse them before reading them
whole). Counted:

* crashes (``crashes``): a 5xx, a dropped connection or a request the server never
  answered, an error that is not ``{"error": {"code", "message"}}``;
* cross-tenant results (``breaches``): a response to alice's or carol's key (or to no key)
  that holds bob's marker or one of bob's ids the request did not itself carry; at the
  end, any change to bob's rows;
* unauthenticated successes (``breaches``): a 2xx to a request under ``/v1`` or ``/mcp``
  without an active key (none, junk or the revoked one).

Each counter is also reported on its own in ``figures``. The scale is ``ctx.sized``: a
few hundred requests in the fast slice, at least 5,000 in the full run.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from .common import Context, Scenario
from .fuzz import BOB, integrity, seed_tenants, snapshot

CAROL = "carol"
MAX_BODY = 64 * 1024
"""The fuzzed server's body limit: small, so bodies over it cost little to send."""
QUICK, FULL = 400, 6000
NOT_SENT = -1
"""A request the HTTP client itself refused to build (not counted)."""
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "FOO",
           "get")
PATHS = ("/v1/memories", "/v1/memories/{id}", "/v1/memories/{id}/history", "/v1/search",
         "/v1/answer", "/v1/flush", "/v1/export", "/v1/me", "/v1/jobs", "/v1/jobs/{id}",
         "/v1/wait", "/v1/context", "/v1/read", "/v1/learn", "/v1/expect", "/v1/admin/keys",
         "/v1/admin/keys/{id}", "/v1/admin/tenants",
         "/v1/admin/tenants/{tenant}", "/mcp", "/openapi.json", "/healthz", "/ui/", "/",
         "/v1", "/v1/", "/v2/search", "/v1/search/", "/v1/memories//history", "/../etc/passwd",
         "/v1/%00", "/v1/m\u00e9moires", "/v1/memories/%ff%fe", "/v1/admin")
ROUTE_METHODS = {
    "/v1/memories": ("GET", "POST", "DELETE"), "/v1/memories/{id}": ("GET", "PUT", "DELETE"),
    "/v1/memories/{id}/history": ("GET",), "/v1/search": ("POST",), "/v1/answer": ("POST",),
    "/v1/flush": ("POST",), "/v1/export": ("GET",), "/v1/me": ("GET",), "/v1/jobs": ("GET",),
    "/v1/jobs/{id}": ("GET",), "/v1/wait": ("POST",), "/v1/admin/keys": ("GET", "POST"),
    "/v1/admin/keys/{id}": ("DELETE",), "/v1/admin/tenants": ("GET",),
    "/v1/admin/tenants/{tenant}": ("DELETE",), "/mcp": ("POST", "GET", "DELETE"),
    "/v1/context": ("POST",), "/v1/read": ("POST",), "/v1/learn": ("POST",),
    "/v1/expect": ("POST",), "/healthz": ("GET",)}
"""The methods each route takes (the fuzzer mostly sends those, so requests get past the
router into the handlers)."""
ODD = ["", " ", "\x00", "\ud800", "\u202e\u0645\u0631\u062d\u0628\u0627", "😀" * 50,
       "'; DROP TABLE turns; --", "\" OR 1=1", "NEAR(a b)", "*", "a" * 3000, "\n\r\t",
       "%s%s%s", "${jndi:ldap://x}", "../../", "null", "0", "-1", "1e309", "[]", "{}"]


class Trial:
    """One request's outcome, as judged (see the module)."""

    def __init__(self, status: int | None, body: bytes, error: str = "") -> None:
        self.status, self.body, self.error = status, body, error


def http_fuzz(ctx: Context) -> Scenario:
    """The scenario (see the module)."""
    from memstrata.memory.extras import require

    require("uvicorn", "server", "the HTTP fuzzing")
    httpx = require("httpx", "server", "the HTTP fuzzing")
    from memstrata import Memory
    from memstrata.server import create_app

    result = Scenario(name="http_fuzz")
    path = ctx.work / "fuzz.db"
    tenants = seed_tenants(path, ctx.seed)
    rng = random.Random(ctx.seed)
    memory = Memory.open(path, embedder=None)
    keys = memory.store.keys
    alice_key, alice_rec = keys.create("alice")
    bob_key, bob_rec = keys.create(BOB)
    carol_key, carol_rec = keys.create(CAROL)
    admin_key, _ = keys.create(admin=True)
    revoked_key, revoked_rec = keys.create("alice")
    keys.revoke(revoked_rec.id)
    memory.add([{"role": "user", "content": "carol likes kites"}], user_id=CAROL,
               infer=False)
    bob_before = snapshot(path, BOB)
    forbidden = [tenants.marker, *tenants.bob_ids, bob_key, bob_rec.id]
    counts: dict[str, Any] = {"crashes": 0, "cross_tenant": 0,
                              "unauthenticated_successes": 0, "not_sent": 0, "status": {}}
    total = ctx.sized(QUICK, FULL)
    started = time.perf_counter()
    app = create_app(memory, max_body=MAX_BODY)
    with _serving(app) as (host, port), httpx.Client(
            base_url=f"http://{host}:{port}", timeout=30) as client:
        auth = {"alice": alice_key, "carol": carol_key, "admin": admin_key,
                "revoked": revoked_key, "junk": _junk_key(rng), "none": None}
        for n in range(total):
            if ctx.expired():
                result.stopped_early = True
                break
            who = rng.choice(["alice"] * 5 + ["carol", "admin", "revoked", "junk", "none"])
            key = auth[who] if who != "junk" else _junk_key(rng)
            request = _request(rng, who, tenants, key, revoked_rec.id, alice_rec.id,
                               carol_rec.id)
            trial = (_raw(host, port, request) if request["raw"]
                     else _send(client, request))
            if trial.status == NOT_SENT:
                counts["not_sent"] += 1
                continue
            result.attempts += 1
            _judge(result, counts, request, trial, who, forbidden)
            if n % 500 == 499:
                result.note(progress=n + 1, seconds=round(time.perf_counter() - started, 1))
    memory.close()
    if snapshot(path, BOB) != bob_before:
        counts["cross_tenant"] += 1
        result.fail("breaches", "bob's rows changed during the fuzzing")
    if (check := integrity(path)) != "ok":
        result.fail("integrity_failures", "the store failed its integrity check", check=check)
    seconds = time.perf_counter() - started
    result.figures.update({
        "requests": result.attempts, "crashes": counts["crashes"],
        "cross_tenant_results": counts["cross_tenant"],
        "unauthenticated_successes": counts["unauthenticated_successes"],
        "requests_per_s": round(result.attempts / max(seconds, 1e-9), 1),
        "status_counts": json.dumps(dict(sorted(counts["status"].items()))),
        "max_body": MAX_BODY, "not_sent_by_the_client": counts["not_sent"],
    })
    return result


# -- requests -------------------------------------------------------------------------------


def _junk_key(rng: random.Random) -> str:
    return rng.choice([
        "ms_" + "".join(rng.choice("0123456789abcdef") for _ in range(12)) + "_"
        + "".join(rng.choice("abcXYZ-_09") for _ in range(43)),
        "ms_", "x", "Bearer", "ms_zzzzzzzzzzzz_" + "a" * 43, rng.choice(ODD)])


def _request(rng: random.Random, who: str, tenants: Any, key: str | None, *ids: str
             ) -> dict[str, Any]:
    """One random request (see the module)."""
    template = rng.choice(PATHS)
    if template in ROUTE_METHODS and rng.random() < 0.75:
        method = rng.choice(ROUTE_METHODS[template])  # mostly what the route takes
    else:
        method = rng.choice(METHODS) if rng.random() < 0.3 else rng.choice(
            ["GET", "POST", "PUT", "DELETE"])
    some_id = rng.choice([*tenants.bob_ids, *tenants.alice_ids, *ids, "t_nonesuch",
                          rng.choice(ODD), "i_" + "0" * 24])
    tenant = rng.choice([BOB, "alice", CAROL, rng.choice(ODD)]) if who != "admin" else \
        rng.choice([CAROL, "nobody", rng.choice(ODD)])
    if who == "admin" and template in ("/v1/admin/keys/{id}", "/v1/jobs/{id}"):
        some_id = rng.choice([ids[2], "000000000000", rng.choice(ODD)])  # carol's or junk
    path = template.replace("{id}", _quote(some_id)).replace("{tenant}", _quote(tenant))
    if template == "/v1/search" and method not in ("GET", "HEAD"):
        method = "POST"
    headers: dict[str, str] = {}
    if key is not None:
        if not (key.isascii() and key.isprintable()):
            key = _quote(key)  # HTTP carries no other header value; the client would refuse
        headers["Authorization"] = rng.choice(
            [f"Bearer {key}"] * 8 + [key, f"bearer {key}", f"Bearer  {key}", f"Basic {key}"])
    params: dict[str, str] = {}
    if rng.random() < 0.3:
        name = rng.choice(["user_id", "kind", "limit", "offset", "status", "tenant",
                           "revoked", "x"])
        params[name] = rng.choice(
            [BOB, "alice", CAROL, "turn", "fact", "-1", "10", "1e9", "true", *ODD[:8]])
        if who == "admin" and name in ("user_id", "tenant"):
            params[name] = CAROL  # the admin acts on carol only: bob's rows must not change
    body, raw = _body(rng, who, tenants, template)
    if who == "admin" and isinstance(body, dict) and "user_id" in body:
        body["user_id"] = rng.choice([CAROL, None])  # the admin acts on carol only
        if body["user_id"] is None:
            del body["user_id"]
    return {"method": method, "path": path, "headers": headers, "params": params,
            "body": body, "raw": raw, "carries": f"{path} {params} {body!r}"[:100_000]}


def _quote(text: str) -> str:
    from urllib.parse import quote

    try:
        return quote(text, safe="")
    except UnicodeEncodeError:
        return "%ED%A0%80"  # a lone surrogate's UTF-8-ish bytes


def _body(rng: random.Random, who: str, tenants: Any, template: str
          ) -> tuple[Any, dict[str, Any] | None]:
    """A body: a dict (sent as JSON), bytes (sent as they are), None, or, for bodies over
    the limit, a raw-socket plan."""
    roll = rng.random()
    if roll < 0.04:
        return None, {"declared": rng.choice([True, False]),
                      "size": rng.choice([MAX_BODY + 1, 4 * MAX_BODY, 64 * MAX_BODY])}
    if roll < 0.12:
        return rng.choice([b"{", b"{nope}", b"\xff\xfe\x00", b"[" * 100_000, b"null",
                           b'{"query": NaN}', b'{"query": "\\ud800"}', b"",
                           json.dumps({"query": "x" * 20_000}).encode(),
                           b'{"a":' * 5000 + b"1" + b"}" * 5000,
                           "😀".encode() * 1000]), None
    bodies = [
        {"messages": rng.choice(["I moved to Faro", [{"role": "user", "content": "hi"}],
                                 [{"role": "system", "content": "x"}], {"content": None},
                                 [1, 2, 3], rng.choice(ODD)]),
         "infer": rng.choice([False, True, "yes"])},
        {"query": rng.choice(["Maria nurse", tenants.marker, "river", rng.choice(ODD)]),
         "k": rng.choice([1, 10, -5, 10**9, 2.5, None, "3"]),
         "format": rng.choice(["memstrata", "mem0", "xml"])},
        {"text": rng.choice(["changed", "", rng.choice(ODD)])},
        {"question": "Where does Ben work?"},
        {"tenant": rng.choice([CAROL, None]), "admin": rng.choice([False, True]),
         "name": rng.choice(ODD)},
        {"timeout": rng.choice([0, 0.01, -1, 1e9])},
        {},
        {"query": rng.choice(["Maria nurse", tenants.marker, rng.choice(ODD)]),
         "budget": rng.choice([1, 600, 0, -3, 10**9, "600", None]),
         "layers": rng.choice([None, ["turns"], ["facts", "strategies"], ["nope"], "turns"])},
        {"text": rng.choice(["The river Tamega floods in March.", "", rng.choice(ODD)]),
         "title": rng.choice([None, "notes", rng.choice(ODD)]),
         "when": rng.choice([None, "2024-03-01", 1.7e9, "yesterday", -1])},
        {"run": rng.choice([{"task": "t", "trajectory": "x", "answer": "a"}, "a trajectory",
                            rng.choice(tenants.bob_ids), "r_" + "0" * 24, None, 3]),
         "success": rng.choice([True, False, "no", None]),
         "used": rng.choice([[], tenants.bob_ids[:2], [rng.choice(ODD)]]),
         "method": rng.choice([None, "llm", "rules", "x"])},
        {"conversation_id": rng.choice([None, "chat-1", rng.choice(ODD)])},
    ]
    fitting = {"/v1/memories": 0, "/v1/search": 1, "/v1/memories/{id}": 2, "/v1/answer": 3,
               "/v1/admin/keys": 4, "/v1/wait": 5, "/v1/flush": 6, "/v1/context": 7,
               "/v1/read": 8, "/v1/learn": 9, "/v1/expect": 10}
    # Mostly the body the route takes (then changed below), else any of them.
    good: dict[str, Any] = (bodies[fitting[template]] if template in fitting
                            and rng.random() < 0.7 else rng.choice(bodies))
    if rng.random() < 0.25:
        good["user_id"] = rng.choice([BOB, "alice", CAROL, "", rng.choice(ODD)])
    if rng.random() < 0.15:
        good[rng.choice(ODD[:5]) or "extra"] = rng.choice(tenants.bob_ids)
    if rng.random() < 0.1:
        good["filters"] = rng.choice([{"conversation_id": "chat-1"}, {"kinds": ["x"]},
                                      {"speaker": 3}, "all"])
    if rng.random() < 0.05:
        nest: dict[str, Any] = {}
        node = nest
        for _ in range(rng.choice([10, 30, 70])):
            node["d"] = {}
            node = node["d"]
        good["metadata"] = nest
    return good, None


# -- sending --------------------------------------------------------------------------------


def _send(client: Any, request: dict[str, Any]) -> Trial:
    body = request["body"]
    options: dict[str, Any] = {"headers": request["headers"], "params": request["params"]}
    if isinstance(body, bytes):
        options["content"] = body
    elif body is not None:
        options["content"] = json.dumps(body, ensure_ascii=False).encode("utf-8",
                                                                           "surrogatepass")
        options["headers"] = {**request["headers"], "Content-Type": "application/json"}
    import httpx

    try:
        response = client.request(request["method"], request["path"], **options)
    except httpx.LocalProtocolError as exc:  # the client would not send it
        return Trial(NOT_SENT, b"", f"{type(exc).__name__}: {exc}")
    except httpx.TransportError as exc:  # a dropped connection or no answer: counted
        return Trial(None, b"", f"{type(exc).__name__}: {exc}")
    except (UnicodeError, ValueError, httpx.InvalidURL) as exc:  # the client would not send it
        return Trial(NOT_SENT, b"", f"{type(exc).__name__}: {exc}")
    return Trial(response.status_code, response.content)


def _raw(host: str, port: int, request: dict[str, Any]) -> Trial:
    """A body over the limit on a raw socket: headers first (``Content-Length`` declared
    or chunked), then the body in pieces while the answer is awaited; the server must
    answer 413 before it has read the whole body."""
    plan = request["raw"]
    auth = request["headers"].get("Authorization", "")
    framing = (f"Content-Length: {plan['size']}" if plan["declared"]
               else "Transfer-Encoding: chunked")
    head = (f"POST {request['path'] if request['path'].isascii() else '/v1/search'} HTTP/1.1"
            f"\r\nHost: {host}\r\n{framing}\r\nContent-Type: application/json\r\n"
            + (f"Authorization: {auth}\r\n" if auth.isascii() and auth else "")
            + "Connection: close\r\n\r\n").encode()
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=30) as sock:
            sock.sendall(head)
            sent = 0
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                while sent < plan["size"] and not answer:
                    piece = b"a" * min(16_384, plan["size"] - sent)
                    sock.sendall(piece if plan["declared"]
                                 else f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    sent += len(piece)
                    sock.settimeout(0.002)
                    with contextlib.suppress(TimeoutError, BlockingIOError):
                        answer += sock.recv(65_536)
                    sock.settimeout(30)
                if not plan["declared"] and not answer:
                    sock.sendall(b"0\r\n\r\n")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    more = sock.recv(65_536)
                except (TimeoutError, ConnectionResetError):
                    break
                if not more:
                    break
                answer += more
    except OSError as exc:
        return Trial(None, answer, f"{type(exc).__name__}: {exc}")
    status_line, _, rest = answer.partition(b"\r\n")
    parts = status_line.split()
    if len(parts) < 2 or not parts[1].isdigit():
        return Trial(None, answer, "no HTTP answer to a body over the limit")
    return Trial(int(parts[1]), rest.partition(b"\r\n\r\n")[2])


# -- judging --------------------------------------------------------------------------------


def _judge(result: Scenario, counts: dict[str, Any], request: dict[str, Any], trial: Trial,
           who: str, forbidden: list[str]) -> None:
    status = trial.status
    counts["status"][str(status)] = counts["status"].get(str(status), 0) + 1
    where = {"method": request["method"], "path": request["path"][:200], "who": who}
    if status is None or status >= 500:
        counts["crashes"] += 1
        result.fail("crashes", "a 5xx or no answer", status=status, error=trial.error,
                    body=trial.body[:300].decode("utf-8", "replace"), **where)
        return
    text = trial.body.decode("utf-8", "replace")
    path = request["path"].split("?")[0]
    if status >= 400 and path.startswith("/v1") and request["method"] != "HEAD":
        try:
            error = json.loads(text)["error"]
            assert isinstance(error["code"], str) and isinstance(error["message"], str)
        except (ValueError, KeyError, TypeError, AssertionError):
            counts["crashes"] += 1
            result.fail("crashes", "an error that is not the JSON error shape",
                        status=status, body=text[:300], **where)
            return
    # The admin key may see bob's key record and tenant name: it manages them.
    leaked = [s for s in forbidden if s in text and s not in request["carries"]]
    if leaked and who != "admin":
        counts["cross_tenant"] += 1
        result.fail("breaches", "bob's data reached another key", leaked=leaked[0],
                    status=status, **where)
    keyless = who in ("none", "junk", "revoked")
    if keyless and 200 <= status < 300 and (path.startswith(("/v1", "/mcp"))):
        counts["unauthenticated_successes"] += 1
        result.fail("breaches", "a success without an active key", status=status, **where)


@contextlib.contextmanager
def _serving(app: Any) -> Iterator[tuple[str, int]]:
    """``app`` under uvicorn on 127.0.0.1 (a free port) in a thread."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="critical", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start for the HTTP fuzzing")
        time.sleep(0.02)
    try:
        yield "127.0.0.1", port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


SCENARIOS = {"http_fuzz": http_fuzz}
