"""``memstrata ui``: the inspector alone, over one store, on this machine's loopback.

There is no login in this mode (``memstrata serve`` mounts the same inspector at ``/ui``
behind its admin keys), so it listens on a loopback address unless told otherwise, and
answers only requests addressed to a loopback name: a web page elsewhere that points a
name of its own at 127.0.0.1 (DNS rebinding) gets a 400, not the memories.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from typing import TYPE_CHECKING, Any

from memstrata.cli_support import listen, port_number
from memstrata.memory.store.opener import describe, store_missing

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from memstrata.api import Memory

DEFAULT_PORT = 8081
DEFAULT_HOST = "127.0.0.1"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback name or address (``localhost``, ``127.0.0.0/8``,
    ``::1``)."""
    if host.strip("[]").lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8081`` -> ``::1``)."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0].lower()
    return header.rsplit(":", 1)[0].lower() if header.count(":") == 1 else header.lower()


class LoopbackHosts:
    """Refuses (400) an HTTP request whose ``Host`` is not a loopback name or
    address (see the module)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if not is_loopback(_host_name(host)):
                from starlette.responses import PlainTextResponse

                response = PlainTextResponse(
                    "memstrata ui answers only requests to a loopback address "
                    "(127.0.0.1, localhost, ::1)", status_code=400)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def local_app(memory: Memory, host: str) -> Any:
    """The inspector without a login, as ``memstrata ui`` serves it on ``host``: on a
    loopback host, behind :class:`LoopbackHosts`."""
    from memstrata.inspector import create_app

    app = create_app(memory)
    return LoopbackHosts(app) if is_loopback(host) else app


def cmd_ui(args: argparse.Namespace) -> int:
    """Browse a store in a web browser: its users, their conversations and sessions, the
    turns with the facts extracted from them (each linked to its evidence), every
    memory's versions, a search that shows each hit's channels and score, the runs with
    their LLM calls, tokens and latency, the extraction jobs, and forgetting a user
    (after a confirmation). Serves http://HOST:PORT/ until Ctrl-C. There is no login:
    it listens on 127.0.0.1 unless --host names another address, which needs
    --allow-remote. 'memstrata serve' offers the same pages at /ui behind admin keys."""
    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port must be between 1 and 65535, not {args.port}")
    if not is_loopback(args.host) and not args.allow_remote:
        raise SystemExit(
            f"memstrata: --host {args.host} is not a loopback address, and 'memstrata ui' "
            "has no login: anyone who can reach it could read and forget every user's "
            "memory. Use 'memstrata serve' (the inspector at /ui behind admin keys), or "
            "pass --allow-remote if this network is yours alone")
    if store_missing(args.db):
        from memstrata.cli_support import no_store

        raise no_store(args.db)
    from memstrata.memory.extras import require

    uvicorn = require("uvicorn", "server", "the inspector")
    require("starlette", "server", "the inspector")
    require("jinja2", "server", "the inspector")
    from memstrata.api import Memory

    with listen(args.host, args.port) as sock, Memory.open(args.db) as memory:
        shown = f"[{args.host}]" if ":" in args.host else args.host
        print(f"memstrata: the inspector of {describe(args.db)} at http://{shown}:{args.port}/"
              " (no login; Ctrl-C stops it)", file=sys.stderr)
        uvicorn.Server(uvicorn.Config(local_app(memory, args.host), host=args.host,
                                      port=args.port, log_level="warning")
                       ).run(sockets=[sock])
    return 0


def add_ui_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``memstrata ui``."""
    p = sub.add_parser("ui", help="browse a store's memories in a web browser (the inspector)",
                       description=cmd_ui.__doc__)
    p.add_argument("--db", required=True, help="store file or postgresql:// URL")
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                   help=f"port to listen on (default {DEFAULT_PORT})")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}; another than a "
                   "loopback address needs --allow-remote)")
    p.add_argument("--allow-remote", action="store_true",
                   help="listen on a non-loopback --host although there is no login")
    p.set_defaults(func=cmd_ui)
