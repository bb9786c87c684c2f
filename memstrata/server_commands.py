"""``memstrata serve`` (the REST API, MCP and the inspector in one server) and ``memstrata
keys`` (the API keys it accepts: create, list, revoke)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from memstrata.cli_support import NotFound, listen, no_store, port_number
from memstrata.memory.store.opener import describe, store_missing

DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _size(raw: str) -> int:
    """A byte count: ``1048576``, ``512k``, ``4m`` (KiB and MiB)."""
    text = raw.strip().lower()
    scale = {"k": 1024, "m": 1024 * 1024}.get(text[-1:], 1)
    digits = text[:-1] if scale != 1 else text
    try:
        value = int(digits) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {raw!r} (e.g. 1048576, "
                                         "512k, 4m)") from None
    if value < 1024:
        raise argparse.ArgumentTypeError(f"a body limit under 1k is too small: {raw!r}")
    return value


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve a memory over HTTP: the REST API (/v1, OpenAPI at /openapi.json), the MCP
    endpoint (/mcp) and the inspector (/ui), in one uvicorn process. Every request needs
    'Authorization: Bearer KEY' with a key of 'memstrata keys create': a tenant key acts as
    its tenant only, an admin key manages keys and tenants (and logs into /ui). With a
    postgresql:// --db, several server processes can share the database."""
    from memstrata.memory.extras import require

    require("starlette", "server", "memstrata serve")
    require("uvicorn", "server", "memstrata serve")
    import uvicorn

    from memstrata import Memory
    from memstrata.server import create_app

    created = store_missing(args.db)
    # The port first: a port in use leaves no new, empty store and no model loaded.
    with listen(args.host, args.port) as sock:
        with contextlib.redirect_stdout(sys.stderr):  # a model loading may print
            lm = None
            if args.lm:
                from memstrata.programs import setup_lm

                lm = setup_lm(args.lm, api_base=args.api_base)
            memory = Memory.open(args.db, lm=lm)
        with memory:
            app = create_app(memory, max_body=args.max_body, host=args.host, mcp=not args.no_mcp,
                             ui=not args.no_ui)
            active = memory.store.keys.records(revoked=False)
            where = describe(args.db) + (" (a new, empty store)" if created else "")
            print(f"memstrata: serving {where} at http://{args.host}:{args.port} (REST /v1, "
                  f"OpenAPI /openapi.json{'' if args.no_mcp else ', MCP /mcp'}"
                  f"{'' if args.no_ui else ', inspector /ui'}); {len(active)} active key(s)",
                  file=sys.stderr)
            if not active:
                # describe: a database URL's password is not printed (servers' logs).
                print(f"memstrata: no key yet: every request gets 401 until one exists "
                      f"('memstrata keys create --user U --db {describe(args.db)}')",
                      file=sys.stderr)
            if args.host not in LOOPBACK:
                print("memstrata: listening beyond loopback over plain HTTP: put TLS in front "
                      "(keys travel in every request)", file=sys.stderr)
            uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port,
                                          log_level=args.log_level, access_log=False)
                           ).run(sockets=[sock])
    return 0


def _open_store(db: str, *, must_exist: bool) -> Any:
    from memstrata.memory.store.opener import open_store

    if must_exist and store_missing(db):
        raise no_store(db)
    return open_store(db, embedder=None)


def cmd_keys_create(args: argparse.Namespace) -> int:
    """Create an API key for one tenant (--user) or an admin key (--admin) and print it on
    stdout, once: only its hash is stored, so it cannot be shown again (revoke it and
    create another if it is lost). The key's id and tenant go to stderr."""
    if bool(args.user) == bool(args.admin):
        raise SystemExit("memstrata: give --user U (a tenant's key) or --admin")
    with _open_store(args.db, must_exist=False) as store:
        key, record = store.keys.create(args.user, admin=args.admin, name=args.name or "")
    what = "admin key" if record.admin else f"key for user {record.tenant!r}"
    print(f"memstrata: {what} {record.id} created in {describe(args.db)}; it is shown "
          "this once", file=sys.stderr)
    print(key)
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    """List the keys (never the keys themselves: their ids, tenants, names, creation,
    last use and revocation), one JSON object a line, oldest first."""
    with _open_store(args.db, must_exist=True) as store:
        found = store.keys.records(args.user, revoked=args.all)
    for record in found:
        print(json.dumps(record.model_dump(mode="json"), ensure_ascii=False))
    if not found:  # said, as the other lists say it: an empty stdout alone reads as a fault
        whose = f" of user {args.user!r}" if args.user else ""
        revoked = "" if args.all else " active"
        print(f"memstrata: no{revoked} keys{whose} in {describe(args.db)} (create one with "
              f"'memstrata keys create --user U --db {describe(args.db)}')", file=sys.stderr)
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    """Revoke a key by its id (from 'keys list' or 'keys create'): it is refused from its
    next request on, by every server on the store."""
    with _open_store(args.db, must_exist=True) as store:
        if store.keys.get(args.key_id) is None:
            raise NotFound(f"memstrata: no key {args.key_id!r}")
        revoked = store.keys.revoke(args.key_id)
    print(json.dumps({"id": args.key_id, "revoked": revoked}))
    return 0


def add_server_parsers(sub: argparse._SubParsersAction, default_db: str) -> None:
    """Register ``memstrata serve`` and ``memstrata keys``."""
    db_help = f"store file or postgresql:// URL (default {default_db})"
    p = sub.add_parser("serve", help="serve the REST API, MCP and the inspector over HTTP",
                       description=cmd_serve.__doc__)
    p.add_argument("--db", default=default_db, help=db_help + "; created if missing")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST})")
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--lm", help="extract facts and answer with this model (e.g. "
                   "local/qwen2.5-coder-1.5b or any litellm provider/model)")
    p.add_argument("--api-base", help="server address for --lm (Ollama, vLLM, llama.cpp)")
    p.add_argument("--max-body", type=_size, default=1024 * 1024, metavar="BYTES",
                   help="largest request body (default 1m; e.g. 512k, 4m)")
    p.add_argument("--no-mcp", action="store_true", help="do not mount the MCP endpoint")
    p.add_argument("--no-ui", action="store_true", help="do not mount the inspector")
    p.add_argument("--log-level", default="warning",
                   choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn's log level (default warning)")
    p.set_defaults(func=cmd_serve)

    keys = sub.add_parser("keys", help="API keys of 'memstrata serve': create, list, revoke",
                          description="API keys: each bound to one tenant, or an admin key.")
    ksub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    p = ksub.add_parser("create", help="create a key and print it once",
                        description=cmd_keys_create.__doc__)
    p.add_argument("--user", help="the tenant the key acts as")
    p.add_argument("--admin", action="store_true", help="an admin key (keys and tenants)")
    p.add_argument("--name", help="a label for the key (who or what uses it)")
    p.add_argument("--db", default=default_db, help=db_help + "; created if missing")
    p.set_defaults(func=cmd_keys_create)
    p = ksub.add_parser("list", help="list keys (ids, never the keys)",
                        description=cmd_keys_list.__doc__)
    p.add_argument("--user", help="only this tenant's keys")
    p.add_argument("--all", action="store_true", help="revoked keys too")
    p.add_argument("--db", default=default_db, help=db_help)
    p.set_defaults(func=cmd_keys_list)
    p = ksub.add_parser("revoke", help="revoke a key by its id",
                        description=cmd_keys_revoke.__doc__)
    p.add_argument("key_id", help="the key's id (12 hex characters)")
    p.add_argument("--db", default=default_db, help=db_help)
    p.set_defaults(func=cmd_keys_revoke)


def cmd_bench_serve(args: argparse.Namespace) -> int:
    """REST search latency with concurrent clients against in-process search on the same
    store, in one run: a store of --turns turns (built through Memory.import_conversations,
    kept at --db when given), then in-process search (one at a time, and from --clients
    threads) and POST /v1/search to 'memstrata serve' from --clients threads. Target: REST
    p95 <= in-process p95 (same concurrency) + 5 ms. Writes serve.json and serve.md."""
    from memstrata.bench.serve_latency import run_serve_bench, serve_table, write_serve_outputs

    if args.turns < 1000 or args.queries < 10 or args.clients < 1:
        raise SystemExit("memstrata: --turns must be >= 1000, --queries >= 10, --clients >= 1")
    doc = run_serve_bench(turns=args.turns, queries=args.queries, clients=args.clients,
                          seed=args.seed, db=args.db)
    paths = write_serve_outputs(doc, args.out)
    print(serve_table(doc))
    print("wrote " + ", ".join(map(str, paths)))
    return 0


def add_serve_bench_parser(bsub: argparse._SubParsersAction) -> None:
    """Register ``memstrata bench serve``."""
    p = bsub.add_parser("serve", help="REST search p95 vs in-process, concurrent clients",
                        description=cmd_bench_serve.__doc__)
    p.add_argument("--turns", type=int, default=100_000, help="turns in the store "
                   "(default 100000)")
    p.add_argument("--queries", type=int, default=400, help="timed searches per arm "
                   "(default 400)")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--db", help="build the store at this new path and keep it (reused when "
                   "it exists)")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    p.set_defaults(func=cmd_bench_serve)
