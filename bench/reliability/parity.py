"""Same input, same outcome: every hostile ``Memory`` call run against a SQLite store and a
PostgreSQL store that hold the same rows, and their outcomes compared.

Both stores are seeded alike (the fuzzers' two tenants, :func:`fuzz.seed_tenants`, written
through ``Memory`` into each). Each input is one ``Memory`` call drawn by the fuzzers'
generators (:func:`fuzz.api_calls`: NUL and lone surrogates in text, metadata and ids,
deep and huge metadata, oversized messages and queries, odd ``k`` values, unknown kinds
and filters, hostile files to import, bad paths to export to), after a fixed list of the
inputs issue 44 reported (:data:`REPORTED`). An id of a seeded row names the same row on
both backends (each has its own ids; the SQLite one is drawn and translated).

The outcome class (:func:`outcome_class`) must be the same on both: refused with the same
exception type, or done with the same shape of result (``add``'s events, whether ``get``
found the row, how many versions, rows or hits came back). A difference counts under
``parity_mismatches``. Without PostgreSQL (pgserver and psycopg, the ``dev`` and
``postgres`` extras) the scenario does not run and says so (``figures["skipped"]``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from memstrata.memory.extras import require

from .common import Context, Scenario
from .fuzz import (
    TOOL_CAP_S,
    Outcome,
    _drive,
    _short_repr,
    _strategies,
    api_calls,
    call_capped,
    hostile_files,
    seed_tenants,
)
from .pgserve import postgres, unavailable

SKIPPED_TARGETS = ("answer",)
"""Calls not compared: ``answer`` without a model is refused before reaching a store."""

REPORTED: list[tuple[str, dict[str, Any]]] = [
    ("add", {"messages": "nul \x00 char", "user_id": "alice", "infer": False}),
    ("add", {"messages": "hello", "user_id": "alice", "metadata": {"k": "\udc80"},
             "infer": False}),
    ("add", {"messages": "hello", "user_id": "alice", "metadata": {"\ud800": 1},
             "infer": False}),
    ("add", {"messages": "x" * 5_000_000, "user_id": "alice", "infer": False}),
    ("add", {"messages": "hello", "user_id": "a\udcffb", "infer": False}),
    ("add", {"messages": "hello", "user_id": "alice", "conversation_id": "c\x00",
             "infer": False}),
    ("search", {"query": "q" * 1_900_000, "user_id": "alice"}),
    ("search", {"query": "nurse", "user_id": "alice", "k": float("inf")}),
    ("search", {"query": "nurse", "user_id": "alice", "k": None}),
    ("search", {"query": "nurse", "user_id": "alice", "filters": {"kinds": ["bogus"]}}),
    ("get_all", {"user_id": "alice", "kind": "bogus"}),
    ("get_all", {"user_id": "alice"}),
]
"""The inputs issue 44 found to differ between the backends or to fail unclearly."""


def outcome_class(target: str, outcome: Outcome) -> str:
    """What a call did, in the terms both backends must agree on."""
    if outcome.timed_out:
        return "hang"
    if outcome.error is not None:
        kind = type(outcome.error)
        return f"refused {kind.__module__}.{kind.__qualname__}"
    value = outcome.value
    if target == "add":
        return "stored " + ",".join(str(e.get("event")) for e in value)
    if target in ("get_all", "search", "history"):
        return f"{len(value)} rows"
    if target in ("get", "delete"):
        return "found" if value else "none"
    return "done"


def _translate(value: Any, ids: dict[str, str]) -> Any:
    """An argument (a string, or a list of strings) with SQLite ids replaced by the
    PostgreSQL ids of the same rows; anything else (nested 100,000 deep) as it is."""
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [ids.get(v, v) for v in value]
    return value


def _call(memory: Any, target: str, kwargs: dict[str, Any]) -> Outcome:
    return call_capped(lambda: getattr(memory, target)(**kwargs), TOOL_CAP_S)


def backend_parity(ctx: Context) -> Scenario:
    """``sized(150, 2000)`` hostile calls (after :data:`REPORTED`), each on both backends."""
    from memstrata import Memory

    result = Scenario(name="backend_parity")
    reason = unavailable()
    if reason is not None:
        result.fail(None, f"skipped: {reason}")
        result.figures.update({"skipped": True, "reason": reason})
        return result
    st = require("hypothesis.strategies", "bench", "the reliability fuzzing")
    started = time.perf_counter()
    files = hostile_files(ctx.work / "in")
    classes: dict[str, dict[str, int]] = {}
    with postgres() as pg:
        url = pg.new_database()
        # seed_tenants writes through Memory.open, which takes a URL as well as a path.
        lite = seed_tenants(ctx.work / "parity.db", ctx.seed)
        other = seed_tenants(url, ctx.seed)
        ids = dict(zip([*lite.alice_ids, *lite.bob_ids], [*other.alice_ids, *other.bob_ids],
                       strict=True))
        out_lite, out_pg = ctx.work / "out", ctx.work / "out_pg"
        out_lite.mkdir(exist_ok=True)
        out_pg.mkdir(exist_ok=True)
        methods = api_calls(_strategies(lite, ctx.work), files)
        targets = sorted(t for t in methods if t not in SKIPPED_TARGETS)
        memories = (Memory.open(ctx.work / "parity.db"), Memory.open(url))

        def compare(target: str, kwargs: dict[str, Any]) -> None:
            theirs = {k: _translate(v, ids) for k, v in kwargs.items()}
            if isinstance(theirs.get("path"), str):
                theirs["path"] = theirs["path"].replace(str(out_lite), str(out_pg))
            a = outcome_class(target, _call(memories[0], target, kwargs))
            b = outcome_class(target, _call(memories[1], target, theirs))
            result.attempts += 1
            row = classes.setdefault(target, {})
            row["same" if a == b else "different"] = row.get(
                "same" if a == b else "different", 0) + 1
            if a != b:
                result.fail("parity_mismatches", "the backends disagree", target=target,
                            sqlite=a, postgres=b, args=_short_repr(kwargs))

        def body(data: Any) -> None:
            target = data.draw(st.sampled_from(targets))
            compare(target, methods[target][0](data))

        try:
            for target, kwargs in REPORTED:
                compare(target, kwargs)
            _drive(ctx, result, ctx.sized(150, 2000), body)
        finally:
            for memory in memories:
                memory.close()
    for target, row in sorted(classes.items()):
        result.note(target=target, **row)
    result.figures.update({"seed": ctx.seed, "inputs": result.attempts,
                           "inputs_per_s": round(result.attempts / max(
                               time.perf_counter() - started, 1e-9), 1)})
    return result


SCENARIOS: dict[str, Callable[[Context], Scenario]] = {"backend_parity": backend_parity}
