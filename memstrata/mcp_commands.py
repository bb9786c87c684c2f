"""``memstrata mcp``: serve one tenant's memory to other agents over the Model Context
Protocol (stdio by default; streamable HTTP on 127.0.0.1 with a bearer token)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from memstrata.cli_support import port_number
from memstrata.memory.store.opener import describe, store_missing

DEFAULT_TOKEN_ENV = "MEMSTRATA_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
DEFAULT_PORT = 8765


def _http_token(env: str) -> str:
    """The bearer token from ``$env``. Never generated here: a generated token would have
    to be printed, and stderr ends up in log files and scrollback; it would also change at
    every restart, breaking the clients configured with it. Never a flag either: the
    command line is visible to every user of the machine (``ps``)."""
    token = os.environ.get(env, "").strip()
    if not token:
        raise ValueError(
            f"--transport http needs a bearer token in ${env} (make one with: export "
            f"{env}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))'))")
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"${env} is {len(token)} characters; a bearer token needs at least "
                         f"{MIN_TOKEN_CHARS} (secrets.token_urlsafe(32) gives 43)")
    return token


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve one user's memory over MCP: the handle tools (mem_search, mem_get, mem_quote,
    mem_add, event_log, ctx_stats/peek/slice/find) and, with --lm, answer, all bound to
    --user (no tool takes a user). Every call is recorded as a run ('memstrata runs list
    --user U'). stdio by default (stdout carries only the protocol); --transport http
    serves http://127.0.0.1:PORT/mcp and needs a bearer token in $MEMSTRATA_MCP_TOKEN
    (or the variable --token-env names)."""
    if not args.user.strip() or len(args.user) > 256:
        raise ValueError("--user must be a non-empty string of at most 256 characters")
    from memstrata.memory.extras import require

    require("mcp", "mcp", "the MCP server")
    if args.transport == "http":
        token = _http_token(args.token_env)
        if not 1 <= args.port <= 65535:
            raise ValueError(f"--port must be between 1 and 65535, not {args.port}")
    from memstrata import Memory
    from memstrata.agent_commands import caps_from_json
    from memstrata.mcp_server import LOOPBACK, TenantTools, build_server, serve_http, serve_stdio

    caps = caps_from_json(args.caps)
    created = store_missing(args.db)
    # Setup may print (a model loading): keep it off stdout, which is the stdio wire.
    with contextlib.redirect_stdout(sys.stderr):
        lm = None
        if args.lm:
            from memstrata.programs import setup_lm

            lm = setup_lm(args.lm, api_base=args.api_base)
        memory = Memory.open(args.db, lm=lm)
    with memory:
        tools = TenantTools(memory, args.user, agent_id=args.agent_id, caps=caps,
                            transport=args.transport)
        server = build_server(tools)
        what = f"{len(tools.names)} tools for user {args.user!r} of {describe(args.db)}" + (
            " (a new, empty store)" if created else "")
        if args.transport == "stdio":
            print(f"memstrata: MCP over stdio: {what}", file=sys.stderr)
            serve_stdio(server)
        else:
            print(f"memstrata: MCP at http://{LOOPBACK}:{args.port}/mcp: {what}; send "
                  f"'Authorization: Bearer ${args.token_env}'", file=sys.stderr)
            serve_http(server, port=args.port, token=token)
    return 0


def add_mcp_parser(sub: argparse._SubParsersAction, default_db: str) -> None:
    """Register ``memstrata mcp``."""
    p = sub.add_parser("mcp", help="serve one user's memory to other agents over MCP",
                       description=cmd_mcp.__doc__)
    p.add_argument("--db", default=default_db,
                   help=f"store file or postgresql:// URL (default {default_db};"
                   " created if missing)")
    p.add_argument("--user", required=True, help="the tenant every tool is bound to")
    p.add_argument("--agent-id", help="recorded on the runs and on what mem_add writes")
    p.add_argument("--lm", help="offer 'answer' with this model (e.g. "
                   "local/qwen2.5-coder-1.5b or any litellm provider/model); without it "
                   "'answer' is not listed")
    p.add_argument("--api-base", help="server address for --lm (Ollama, vLLM, llama.cpp)")
    p.add_argument("--caps", help='tool caps as JSON, e.g. \'{"max_get": 3}\' (see ToolCaps)')
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (default), or streamable HTTP on 127.0.0.1 with a bearer token")
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                   help=f"HTTP port on 127.0.0.1 (default {DEFAULT_PORT})")
    p.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="VAR",
                   help=f"environment variable holding the HTTP bearer token (default "
                   f"{DEFAULT_TOKEN_ENV}; at least {MIN_TOKEN_CHARS} characters)")
    p.set_defaults(func=cmd_mcp)
