"""The agent-facing commands: ``memstrata rlm``, ``memstrata sandbox``, ``memstrata runs``.

Helpers shared with the executor benchmarks (model, executor settings, tool caps) live
here too; ``cli.py`` builds the parser and dispatches.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from typing import Any

from memstrata.cli_support import NotFound, no_store, stdout_as_file
from memstrata.memory.store.opener import describe, open_store, store_missing

THREADS_HELP = ("CPU threads of a local model (default: all cores; fewer decode faster when "
                "other work shares the machine)")


def lm_help(what: str = "the model") -> str:
    """``--lm``'s help: the default, the other offline models, the other forms."""
    from memstrata.programs.models import EMBEDDED, MODELS

    others = ", ".join(f"local/{n}" for n in MODELS if f"local/{n}" != EMBEDDED)
    return (f"{what}: {EMBEDDED} (offline; default), {others} (see 'memstrata models "
            "list'), local/PATH.gguf, or any litellm provider/model (keys from the "
            "environment)")


def add_prefix_cache_arg(p: argparse.ArgumentParser, default: str = "last") -> None:
    """``--prefix-cache``: how a local model keeps evaluated prompt prefixes."""
    p.add_argument("--prefix-cache", choices=("last", "ram", "off"), default=default,
                   help="local models: reuse the previous call's prompt prefix ('last'), keep "
                   "recent prompts' states so alternating programs each keep theirs "
                   f"('ram'), or none ('off'); default {default}")


def add_model_args(p: argparse.ArgumentParser, prefix_cache: str = "last") -> None:
    """``--lm``, ``--api-base``, ``--n-ctx``, ``--max-tokens``, ``--threads`` and
    ``--prefix-cache``: what ``model_from_args`` reads."""
    from memstrata.programs.models import EMBEDDED

    p.add_argument("--lm", default=EMBEDDED, help=lm_help())
    p.add_argument("--api-base", help="server address for --lm (Ollama, vLLM, llama.cpp)")
    p.add_argument("--n-ctx", type=int, default=8192,
                   help="context window of a local model in tokens (default 8192)")
    p.add_argument("--max-tokens", type=int, default=512,
                   help="longest output per LLM call (default 512: room for a code step)")
    p.add_argument("--threads", type=int, help=THREADS_HELP)
    add_prefix_cache_arg(p, prefix_cache)


def model_from_args(args: argparse.Namespace):
    """The model a command runs on (``--lm``/``--api-base``/``--n-ctx``)."""
    from memstrata.programs import setup_lm

    if args.threads is not None and args.threads < 1:
        raise SystemExit("memstrata: --threads must be at least 1")
    return setup_lm(args.lm, api_base=args.api_base, n_ctx=args.n_ctx,
                    max_tokens=args.max_tokens, n_threads=args.threads,
                    prefix_cache=args.prefix_cache)


def from_flags(model: type, flags: dict[str, tuple[str, object]]):
    """``model(**fields)`` from command-line flags given as ``{flag: (field, value)}``; a
    value the model refuses exits naming the flag the user typed."""
    from pydantic import ValidationError

    try:
        return model(**dict(flags.values()))
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = next((f for f, (field, _) in flags.items() if field == first["loc"][0]),
                    str(first["loc"][0]))
        raise SystemExit(f"memstrata: --{flag}: {first['msg']}") from None


def executor_settings_from_args(args: argparse.Namespace):
    """``ExecutorSettings`` from the executor flags; a bad value exits naming its flag."""
    from memstrata.programs import ExecutorSettings

    return from_flags(ExecutorSettings, {
        "executor": ("executor", args.executor), "interpreter": ("interpreter", args.interpreter),
        "max-iters": ("max_iters", args.max_iters),
        "max-llm-calls": ("max_llm_calls", args.max_llm_calls),
        "max-output-chars": ("max_output_chars", args.max_output_chars),
        "sandbox-time-s": ("sandbox_time_s", args.sandbox_time_s),
        "sandbox-memory-mb": ("sandbox_memory_mb", args.sandbox_memory_mb)})


def caps_from_json(raw: str | None):
    """``ToolCaps`` from ``--caps`` JSON (defaults when empty); bad JSON exits clearly."""
    from pydantic import ValidationError

    from memstrata.tools import ToolCaps

    try:
        return ToolCaps(**json.loads(raw)) if raw else ToolCaps()
    except (json.JSONDecodeError, TypeError, ValidationError) as exc:
        raise SystemExit(f"memstrata: --caps must be a JSON object of ToolCaps: {exc}") from None


def _context_refs(session, keys: list[str] | None) -> dict:
    """The blobs an executor gets as variables: the named ones, or all of the user's."""
    import re

    store = session.binding.store
    available = store.blobs.keys(session.user_id)
    keys = keys if keys is not None else available
    if len(keys) > 5:
        raise SystemExit(f"memstrata: user {session.user_id!r} has {len(keys)} blobs; name "
                         "up to 5 with --blob")
    refs = {}
    for key in keys:
        if key not in available:
            raise NotFound(f"memstrata: no blob {key!r} for user {session.user_id!r}; "
                           f"blobs: {', '.join(available) or 'none'}")
        name = re.sub(r"\W", "_", key)
        refs[name if name[:1].isalpha() else f"blob_{name}"] = session.ref(key)
    return refs


def _show_run(run, user: str) -> None:
    """An executor run's steps, tool calls and figures, for people."""
    for step in run.steps:
        head = f"── iteration {step['iteration']}"
        if step.get("context_chars"):
            head += f" · prompt {step['context_chars']:,} chars"
        print(head)
        if step.get("reasoning"):
            print(f"reasoning: {step['reasoning']}")
        print("code:\n  " + str(step.get("code", "")).replace("\n", "\n  "))
        for call in step.get("tools", []):
            args = ", ".join(f"{k}={v}" for k, v in call["args"].items())
            note = f"refused: {call['error']}" if call["error"] else \
                f"{call['result_chars']:,} chars" + (f", ids {call['ids'][:5]}" if call["ids"]
                                                     else "")
            print(f"  → {call['name']}({args}) {call['ms']} ms, {note}")
        output = str(step.get("output", ""))
        cut = output if len(output) <= 800 else output[:800] + f"… ({len(output):,} chars)"
        print("output:\n  " + cut.replace("\n", "\n  "))
    lk, usage = run.leakage, run.usage
    print("──")
    if run.error:
        print(f"failed: {run.error}")
    print(f"answer: {run.answer or '(none)'}")
    if run.verdict:
        print(f"judge ({run.verdict['judge_model']}): success={run.verdict['success']} "
              f"{run.verdict.get('rationale') or run.verdict.get('error', '')}")
    print(f"converged: {run.converged} · iterations {lk.iterations} · LLM calls {usage.calls} "
          f"({usage.input_tokens:,} in / {usage.output_tokens:,} out tokens) · "
          f"sub-calls {lk.sub_calls} · tool calls {lk.tool_calls} · "
          f"stdout {lk.stdout_chars:,} chars · {run.wall_s} s")
    print(f"recorded as run {run.run_id} (memstrata runs show {run.run_id} --user {user})")


def cmd_rlm(args: argparse.Namespace) -> int:
    """Run one executor session (RLM by default) on a question about one user's memories,
    with the handle tools bound to that user, and show its steps. The run is recorded in
    the store (see 'memstrata runs'). Code runs in the offline Deno/Pyodide sandbox unless
    --interpreter local is given (which is NOT a sandbox)."""
    from memstrata.programs import run_executor
    from memstrata.programs.sandbox import LOCAL_WARNING
    from memstrata.tools import ToolSession

    if not args.question.strip():
        raise SystemExit("memstrata: the question is empty")
    if store_missing(args.db):
        raise no_store(args.db)
    settings = executor_settings_from_args(args)
    if settings.interpreter == "local":
        print(f"memstrata: warning: {LOCAL_WARNING}", file=sys.stderr)
    with open_store(args.db) as store:
        if not any(store.counts(args.user).values()) and not store.blobs.keys(args.user):
            raise SystemExit(f"memstrata: user {args.user!r} has nothing stored in "
                             f"{describe(args.db)}")
        session = ToolSession(store, args.user, caps=caps_from_json(args.caps))
        context = _context_refs(session, args.blob)
        judge = None
        if args.judge:
            from memstrata.programs import setup_lm

            judge = setup_lm(args.judge, api_base=args.judge_api_base)
        run = run_executor(args.question, session, model_from_args(args), settings, context=context,
                           judge=judge)
    if args.json:
        print(run.model_dump_json(indent=2))
    else:
        _show_run(run, args.user)
    return 1 if run.error else 0


def cmd_sandbox(args: argparse.Namespace) -> int:
    """Install or check the RLM sandbox: Pyodide from npm (once), run by Deno from PyPI,
    started with no network. 'install' needs the npm registry (or --from a tarball made
    by 'npm pack pyodide@VERSION'); 'check' starts the sandbox offline and runs code."""
    import time

    from memstrata.programs.sandbox import (
        check_deno,
        deno_binary,
        install_sandbox,
        runner_imports,
        sandbox_factory,
        sandbox_paths,
    )

    if args.action == "install":
        paths = install_sandbox(args.from_tarball, force=args.force)
        print(json.dumps({"installed": str(paths.root), "pyodide": runner_imports()[0]}))
        return 0
    paths = sandbox_paths()
    started = time.perf_counter()
    interpreter = sandbox_factory()()
    try:
        out = interpreter.execute("import sys\nprint(sys.version.split()[0], 6 * 7)").strip()
    finally:
        interpreter.shutdown()
    print(json.dumps({"ok": out.endswith("42"), "python": out.split()[0],
                      "deno": check_deno(deno_binary()), "pyodide": runner_imports()[0],
                      "files": str(paths.root),
                      "start_and_run_s": round(time.perf_counter() - started, 2)}))
    return 0


SQL_MAX = 2**62
"""A count larger than this is as good as unbounded (SQLite's integers stop at 2**63)."""


def _prune_runs(store: Any, args: argparse.Namespace) -> dict[str, Any]:
    from memstrata.memory.models import as_utc, utcnow

    if not args.user:
        raise SystemExit("memstrata: runs prune needs --user (runs are per user)")
    cutoffs = []
    if args.before is not None:
        cutoffs.append(as_utc(args.before))
    if args.older_than is not None:
        try:
            cutoffs.append(utcnow() - timedelta(days=args.older_than))
        except (OverflowError, ValueError):  # inf, nan, or before the year 1
            raise SystemExit(f"memstrata: --older-than {args.older_than} is not a usable "
                             "number of days") from None
    if not cutoffs and args.keep is None:
        raise SystemExit("memstrata: runs prune needs a rule: --before DATE, "
                         "--older-than DAYS and/or --keep N")
    # Both cutoffs given: a run must be older than both, i.e. than the earlier one.
    before = min(cutoffs) if cutoffs else None
    keep = None if args.keep is None else min(args.keep, SQL_MAX)
    report = store.runs.prune(args.user, before=before, keep=keep,
                              keep_evidence=not args.drop_evidence, dry_run=args.dry_run)
    doc = report.model_dump()
    if args.vacuum and not args.dry_run:
        store.vacuum()
        doc["vacuumed"] = True
    return doc


def cmd_runs(args: argparse.Namespace) -> int:
    """Recorded runs: list them, show one with its steps, export them as JSONL, or prune
    one tenant's old runs (the run tables otherwise grow with every run)."""
    from memstrata.trajectories import export_jsonl

    if store_missing(args.db):
        raise no_store(args.db)
    args.limit = max(min(args.limit, SQL_MAX), 0)  # -n 10**30 must not overflow SQLite
    with open_store(args.db) as store:
        if args.action == "prune":
            print(json.dumps(_prune_runs(store, args)))
        elif args.action == "export":
            with stdout_as_file(args.out) as path:
                n = export_jsonl(store, path, user_id=args.user, limit=args.limit)
            if args.out != "-":
                print(json.dumps({"runs": n, "file": args.out}))
        elif args.action == "show":
            if not args.user:
                raise SystemExit("memstrata: runs show needs --user (runs are per user)")
            run = store.runs.get(args.user, args.run_id)
            if run is None:
                raise NotFound(f"memstrata: no run {args.run_id!r} for user {args.user!r}")
            doc = run.model_dump(mode="json")
            doc["steps"] = [s.model_dump(mode="json", exclude={"run_id"})
                            for s in store.runs.steps(args.user, args.run_id)]
            print(json.dumps(doc, indent=2, ensure_ascii=False))
        else:
            runs = store.runs.list(args.user, limit=args.limit)
            if not runs:
                whose = f" for user {args.user!r}" if args.user else ""
                print(f"memstrata: no runs recorded{whose} in {describe(args.db)}",
                      file=sys.stderr)
            for run in runs:
                print(json.dumps({"id": run.id, "user": run.user_id, "program": run.program,
                                  "status": run.status, "started_at": str(run.started_at),
                                  "wall_s": run.wall_s, "task": run.task[:80]}))
    return 0

