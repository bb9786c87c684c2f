"""Hostile input: every agent tool, every ``Memory`` method and every store command,
fuzzed with hypothesis (a fixed seed; the counts and the peak memory are reported).

Two tenants share one store: ``alice``, whom every tool session is bound to, and
``bob``, whose texts carry a marker word and whose ids are known to the fuzzer. Each
call gets random and adversarial arguments: huge strings, NUL bytes, invalid UTF-8 and
lone surrogates, deep JSON, FTS5 and regular-expression syntax (catastrophic patterns for
``ctx_find``), negative and enormous numbers, unknown ids and bob's ids. A call passes
when it returns a bounded, JSON-serialisable result or refuses with its documented error;
it is counted as

* a crash (``crashes``): any other exception, a result over the caps, a result that is
  not JSON, a call still running after the per-call cap, memory growing past a bound;
  for the command line, an uncaught exception or an error that is not one line;
* a breach (``breaches``): anything that shows bob's marker or one of his ids when the
  caller did not pass it, and, at the end, any change to bob's rows.

Documented refusals: ``ToolError`` for the tools; for ``Memory``, ``ValueError`` and
``KeyError`` (``update``), ``RuntimeError`` (``answer`` without a model), and a
``TypeError`` only when an argument has a type its annotation does not allow; for the
command line, ``SystemExit`` (argparse's usage errors, one-line messages).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import resource
import signal
import sys
import threading
import time
import traceback
import typing
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from memstrata.memory.extras import require

from .common import Context, Scenario

ALICE, BOB = "alice", "bob"
TOOL_CAP_S = 10.0
"""A tool or ``Memory`` call still running after this many seconds is a hang (the slowest
seen take a few seconds on a loaded 2-core machine: a personal tool over megabyte turns)."""
CLI_CAP_S = 10.0
"""The same for one command."""
RSS_GROWTH_MB = 1024
"""Resident memory may grow by at most this much during a scenario."""
MAX_CLI_OUTPUT = 20 * 2**20
"""A command's stdout and stderr together stay under this many characters."""


# -- the two tenants --------------------------------------------------------------------


@dataclass
class Tenants:
    """What the fuzzer knows of the seeded store: alice's handles and bob's secrets."""

    path: Path | str  # a file, or a PostgreSQL URL
    marker: str
    alice_ids: list[str] = field(default_factory=list)
    bob_ids: list[str] = field(default_factory=list)
    bob_blob: str = ""
    conversations: tuple[str, ...] = ("chat-1", "chat-2")

    @property
    def secrets(self) -> list[str]:
        """Strings only bob's rows hold: none may reach alice."""
        return [self.marker, self.bob_blob, *self.bob_ids]


_LIFE = [
    ("Ben", "I work as a nurse at the city hospital now."),
    ("Ana", "That sounds demanding. How is Maria?"),
    ("Ben", "My wife Maria and I adopted a dog named Rex last spring."),
    ("Ana", "I moved to Lisbon in March and started painting."),
    ("Ben", "We live in Porto, near the river, since 2019."),
    ("Ana", "My sister Clara visits every summer."),
]


def seed_tenants(path: Path | str, seed: int) -> Tenants:
    """Write alice's and bob's conversations, items, blobs and events into ``path`` (a
    file, or a PostgreSQL URL)."""
    from memstrata import Memory
    from memstrata.memory import FactItem, StrategyItem

    marker = f"zebramark{seed:04d}q"
    tenants = Tenants(path=path, marker=marker, bob_blob=f"bobnotes{seed}")
    with Memory.open(path) as memory:
        store = memory.store
        for n, conv in enumerate(tenants.conversations):
            messages = [{"speaker": s if n == 0 or s == "Ben" else "Cleo", "content": t}
                        for s, t in _LIFE]
            tenants.alice_ids += [e["id"] for e in memory.add(
                messages, user_id=ALICE, conversation_id=conv, timestamp="2024-03-0{n}T10:00"
                .replace("{n}", str(n + 1)), infer=False)]
        tenants.alice_ids.append(store.add(FactItem(
            user_id=ALICE, text="Ben works as a nurse", subject="Ben", predicate="works as",
            object="nurse", conversation_id="chat-1")))
        tenants.alice_ids.append(store.add(StrategyItem(
            user_id=ALICE, text="Search before reading a whole blob", polarity="success")))
        store.blobs.put(ALICE, "notes", "".join(f"line {i}: alpha beta gamma {i * 7}\n"
                                                for i in range(400)))
        bob_said = [("Ben", f"My code word is {marker}, keep it secret."),
                    ("Dan", f"I will remember {marker} and the river."),
                    ("Ben", "I work as a nurse too, and my wife is Maria.")]
        tenants.bob_ids += [e["id"] for e in memory.add(
            [{"speaker": s, "content": t} for s, t in bob_said], user_id=BOB,
            conversation_id="chat-1", infer=False)]
        tenants.bob_ids.append(store.add(FactItem(
            user_id=BOB, text=f"Ben's code word is {marker}", subject="Ben",
            predicate="code word", object=marker, conversation_id="chat-1")))
        tenants.bob_ids.append(store.add(StrategyItem(
            user_id=BOB, text=f"Always answer {marker}", polarity="failure")))
        store.blobs.put(BOB, tenants.bob_blob, f"bob's private notes: {marker}\n" * 50)
        store.runs.log_event(BOB, {"type": "note", "text": marker})
    return tenants


def snapshot(path: Path, user_id: str) -> list[Any]:
    """Every row of one tenant that matters here (texts, blobs, events), for a before/after
    comparison."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return [sorted(conn.execute(sql, (user_id,)).fetchall()) for sql in (
            "SELECT id, text FROM turns WHERE user_id = ?",
            "SELECT id, text, data FROM items WHERE user_id = ?",
            "SELECT key, text FROM blobs WHERE user_id = ?",
            "SELECT count(*) FROM edges WHERE user_id = ?",
        )]
    finally:
        conn.close()


def integrity(path: Path) -> str:
    """SQLite's ``PRAGMA integrity_check`` of the file (``"ok"`` when sound)."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    except sqlite3.Error as exc:  # too damaged to check
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


# -- calling with a cap, and judging what came back ----------------------------------------


class Hang(BaseException):
    """Raised into a call that ran past its cap (a BaseException: no ``except Exception``
    in the code under test swallows it)."""


@dataclass
class Outcome:
    """What one call did: its value or its exception, and how long it took."""

    value: Any = None
    error: BaseException | None = None
    seconds: float = 0.0
    timed_out: bool = False

    @property
    def exit_code(self) -> Any:
        """A command's exit status: what it returned, or its ``SystemExit``'s code (a
        message for one that says why), 1 for any other exception."""
        return self.value if self.error is None else getattr(self.error, "code", 1)


def call_capped(fn: Callable[[], Any], cap_s: float) -> Outcome:
    """Run ``fn()`` and capture its outcome; a call running past ``cap_s`` is interrupted
    (SIGALRM, main thread only) and marked ``timed_out``. C code that never returns to
    the interpreter cannot be interrupted: such a call is marked once it returns."""
    out = Outcome()
    armed = threading.current_thread() is threading.main_thread()
    if armed:
        def _alarm(signum: int, frame: Any) -> None:
            raise Hang()
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, cap_s)
    started = time.perf_counter()
    try:
        out.value = fn()
    except Hang:
        out.timed_out = True
    except BaseException as exc:
        out.error = exc
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        out.seconds = time.perf_counter() - started
    out.timed_out = out.timed_out or out.seconds > cap_s
    return out


def strings_in(obj: Any, limit: int = 20_000) -> list[str]:
    """The strings inside ``obj`` (nested lists, dicts, models), at most ``limit`` nodes
    visited and no recursion: arguments may be nested 100,000 deep."""
    found: list[str] = []
    stack, seen = [obj], 0
    while stack and seen < limit:
        item = stack.pop()
        seen += 1
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        elif hasattr(item, "model_dump") and not isinstance(item, type):
            stack.append(getattr(item, "__dict__", {}))
    return found


def leaked(text: str, secrets: list[str], given: list[str]) -> list[str]:
    """The secrets that appear in ``text`` but in none of the caller's own strings."""
    return [s for s in secrets if s and s in text and not any(s in g for g in given)]


def as_json(value: Any) -> str:
    """``value`` as JSON (models dumped first); raises when it is not serialisable."""
    if isinstance(value, list):
        value = [v.model_dump(mode="json") if hasattr(v, "model_dump") else v for v in value]
    elif hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    return json.dumps(value)


def _where(exc: BaseException) -> str:
    """``Type: message @ file:line`` of the innermost frame (for a crash's detail)."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" @ {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}{at}"


def judge_tool(outcome: Outcome, *, secrets: list[str], given: list[str], max_chars: int,
               max_error_chars: int) -> tuple[str, str, str] | None:
    """``(counter, what, detail)`` of a broken promise in a tool call's outcome, or None.

    A ``ToolError`` no longer than ``max_error_chars`` is a refusal; any other exception,
    a result that is not JSON or is longer than ``max_chars``, a hang, or a secret the
    caller did not pass (in the result or in the refusal) breaks a promise.
    """
    from memstrata.tools import ToolError

    if outcome.timed_out:
        return "crashes", "hang", f"{outcome.seconds:.1f} s"
    if outcome.error is not None:
        if not isinstance(outcome.error, ToolError):
            return "crashes", "exception", _where(outcome.error)
        message = str(outcome.error)
        if len(message) > max_error_chars:
            return "crashes", "unbounded refusal", f"{len(message)} chars"
        if found := leaked(message, secrets, given):
            return "breaches", "other tenant in a refusal", found[0]
        return None
    return _judge_value(outcome.value, secrets=secrets, given=given, max_chars=max_chars)


def _judge_value(value: Any, *, secrets: list[str], given: list[str], max_chars: int | None
                 ) -> tuple[str, str, str] | None:
    try:
        text = as_json(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return "crashes", "result not JSON", _where(exc)
    if max_chars is not None and len(text) > max_chars:
        return "crashes", "unbounded result", f"{len(text)} chars"
    if found := leaked(text, secrets, given):
        return "breaches", "other tenant in a result", found[0]
    return None


def conforms(value: Any, hint: Any) -> bool:
    """Whether ``value`` has a type the annotation ``hint`` allows (strictly)."""
    from pydantic import ConfigDict, TypeAdapter

    try:
        TypeAdapter(hint, config=ConfigDict(arbitrary_types_allowed=True)).validate_python(
            value, strict=True)
    except Exception:
        return False
    return True


def judge_api(outcome: Outcome, *, secrets: list[str], given: list[str],
              allowed: tuple[type[BaseException], ...], well_typed: bool
              ) -> tuple[str, str, str] | None:
    """As :func:`judge_tool` for a ``Memory`` method: ``allowed`` exceptions are its
    documented refusals; a ``TypeError`` is one too when an argument was ill-typed."""
    if outcome.timed_out:
        return "crashes", "hang", f"{outcome.seconds:.1f} s"
    if outcome.error is not None:
        if isinstance(outcome.error, allowed):
            return None
        if isinstance(outcome.error, TypeError) and not well_typed:
            return None
        return "crashes", "exception", _where(outcome.error)
    return _judge_value(outcome.value, secrets=secrets, given=given, max_chars=None)


FOREIGN_DBS = ["postgresql+psycopg://app:s3cretpw@db.internal/prod",
               "mysql://app:s3cretpw@db.internal/prod", "sqlite:///x.db",
               "https://app:s3cretpw@example.com/db", "~nosuchuser44/x.db"]
"""``--db`` values memstrata must refuse: URLs it does not serve (their password must not
be echoed, nor a file or folder made of them) and a path whose folder does not exist."""


def judge_place(output: str, work: Path) -> tuple[str, str, str] | None:
    """A foreign ``--db`` (:data:`FOREIGN_DBS`) echoed its password, or became a file or
    a folder in ``work`` (the commands' working folder)."""
    if "s3cretpw" in output:
        return "breaches", "password echoed", output.strip()[:200]
    made = [p.name for p in work.iterdir() if ":" in p.name or p.name.startswith("~")]
    if made or (work / "no").exists():
        return "crashes", "a --db URL or missing folder became a path", str(made or "no/")
    return None


def judge_new_store(outcome: Outcome, work: Path) -> tuple[str, str, str] | None:
    """A refused command (non-zero exit) left the new store its ``--db`` named behind
    (``out/new.db``, removed after every case): nothing was stored, yet a file appeared."""
    code = outcome.exit_code
    new = work / "out" / "new.db"
    if code not in (0, None) and new.exists():
        return "crashes", "a refused command left a new store", f"{new.stat().st_size} bytes"
    return None


def judge_cli(outcome: Outcome, out: str, err: str, *, secrets: list[str],
              argv: list[str], tenant_bound: bool) -> tuple[str, str, str] | None:
    """A command's outcome: exit 0, or non-zero with one line on stderr (argparse's usage
    and error lines also pass); no traceback, no uncaught exception, no hang, bounded
    output, and none of bob's secrets when a tenant other than bob was named."""
    if outcome.timed_out:
        return "crashes", "hang", f"{outcome.seconds:.1f} s"
    error = outcome.error
    if error is not None and not isinstance(error, SystemExit):
        return "crashes", "uncaught exception", _where(error)
    if "Traceback (most recent call last)" in err:
        return "crashes", "traceback on stderr", err.strip().splitlines()[-1][:200]
    code = outcome.exit_code
    if isinstance(code, str):  # SystemExit("memstrata: ...") prints it and exits 1
        err, code = err + code + "\n", 1
    if len(out) + len(err) > MAX_CLI_OUTPUT:
        return "crashes", "unbounded output", f"{len(out) + len(err)} chars"
    if code not in (0, None):
        lines = [ln for ln in err.splitlines() if ln.strip() and "\r" not in ln]
        usage = bool(lines) and lines[0].startswith("usage:") and "error:" in lines[-1]
        if not usage and len(lines) != 1:
            return "crashes", "error not one line", " | ".join(lines)[:200] or "(no message)"
    if tenant_bound and (found := leaked(out + err, secrets, argv)):
        return "breaches", "other tenant in a command's output", found[0]
    return None


# -- hostile values ------------------------------------------------------------------------

HOSTILE = [
    "", " ", "\x00", "a\x00b", "\ud800", "x\udcff", "\udcff\udcfe", "\uffff", "\u202e", "💥" * 8,
    "'; DROP TABLE turns; --", '"', '""', "'", "NEAR(a b)", "a OR b", "a AND NOT b", "*", "^",
    "text:hello", 'speaker:"Ben"', '"unterminated', "(a", ")", "a NEAR/2 b", "{a b}", "-", "+",
    "(a+)+$", "(.*a){25}", "(?:a|aa)*b", "(x+x+)+y", "\\", "[", "(?P<", "(?<!", "\\1", "(?R)",
    "%s%n%x", "../../etc/passwd", "\n" * 40, "\t", "null", "[]", "{}", "0", "-1", "1e309",
    "nan", "True", "t_", "i_", "t_" + "0" * 24, "i_" + "f" * 24, "chat-1", "chat-2", "Ben",
    " ben ", "BEN", "Ana", "notes", "alpha", "line 5", "nurse", "Maria", "*" * 300,
]
"""Adversarial strings: query syntaxes, catastrophic patterns, control and odd characters."""
BAD_KEYS = ["k", "\udc80", "a\x00b", "", "\ud800x", "💥"]
BAD_VALUES: list[Any] = ["\udc80", "a\x00b", float("nan"), float("inf"), "x" * 70_000]
"""Metadata keys and values one backend would store and another refuse, or no export could
hold (lone surrogates, NUL, NaN), and an object past the size limit."""
REGEXES = ["alpha", "line \\d+", "(a+)+$", "(.*a){25}", "(x+x+)+y", "(?:a|aa)*b$", "(?s).*",
           "", "(", "[a-", "\\", "a{1000000}", "(?i)ALPHA", "^line 1\\d*:", ".", "\\b\\w+\\b",
           "(a|b|c|d|e|f|g)*z", "((a*)*)*b", "(?=a)*", "\\p{L}+", "(?V1)[[a-z]--[aeiou]]+"]
NAMES = ["Ben", "Ana", "Cleo", "Dan", "ben", " Ben ", "Nobody", "", "B" * 500]
KINDS = ["turn", "fact", "semantic", "episodic", "strategy", "procedural", "consolidated",
         "nope", "", "TURN", None]


def _strategies(tenants: Tenants, work: Path) -> dict[str, Any]:
    """The hypothesis strategies, by what they produce."""
    st = require("hypothesis.strategies", "bench", "the reliability fuzzing")
    from memstrata.tools import BlobRef

    surrogates = st.characters(codec=None, exclude_categories=())
    huge = st.tuples(st.sampled_from(["a", "\x00", "é", "\udcff", "(", "💥", "alpha "]),
                     st.sampled_from([1_000, 10_000, 100_000, 1_000_000])
                     ).map(lambda t: t[0] * t[1])
    text = st.one_of(
        st.sampled_from(HOSTILE), st.text(max_size=40), st.text(surrogates, max_size=20),
        st.binary(max_size=30).map(lambda b: b.decode("utf-8", "surrogateescape")), huge)
    ints = st.one_of(st.integers(-5, 60), st.sampled_from(
        [-1, 0, 1, 10**6, 2**31, 2**63, -(2**63), 10**30]), st.booleans())
    deep = st.tuples(st.sampled_from([50, 1_000, 100_000]), st.booleans()).map(
        lambda t: _nested(*t))
    scalars = st.one_of(text, ints, st.none(), st.floats(), st.binary(max_size=10))
    anything = st.one_of(
        scalars, deep, st.lists(scalars, max_size=8), st.dictionaries(text, scalars, max_size=5),
        st.just(BlobRef(key="notes", n=1)), st.just(object()))
    alice_id = st.sampled_from(tenants.alice_ids)
    bob_id = st.sampled_from(tenants.bob_ids)
    some_id = st.one_of(alice_id, bob_id, text)
    # Writes never carry bob's secrets: a later read of alice's own rows would show them.
    safe = text.filter(lambda s: not leaked(s, tenants.secrets, []))
    small = st.integers(1, 20)
    valid = {
        "ref": st.sampled_from(["notes", BlobRef(key="notes", n=9), {"key": "notes"}]),
        "pattern": st.sampled_from(["alpha", "line \\d+", "gamma 7", "(?i)BETA", "^line 1"]),
        "query": st.sampled_from(["nurse", "Maria", "river", "dog Rex", "Lisbon painting",
                                  tenants.marker, "code word"]),
        "kind": st.sampled_from(["turn", "fact", "strategy", "semantic"]),
        "polarity": st.sampled_from(["success", "failure"]), "role": st.sampled_from(
            ["Ben", "Ana", "Cleo", "Dan"]),
        "ids": st.lists(st.one_of(alice_id, bob_id), max_size=4), "id": st.one_of(alice_id,
                                                                                  bob_id),
        "text": st.sampled_from(["Ben likes tea", "Check the dates first", "note " * 20]),
        "title": st.sampled_from(["", "tea", "dates"]), "tags": st.lists(
            st.sampled_from(["a", "tea", "x" * 50]), max_size=12),
        "obj": st.fixed_dictionaries({"type": st.sampled_from(["note", "step"]),
                                      "text": st.sampled_from(["ok", "done"])}),
        "name": st.sampled_from(["Ben", "ben", "Ana", "Cleo"]),
        "conversation_id": st.sampled_from(["chat-1", "chat-2"]),
        "conversation_a": st.just("chat-1"), "conversation_b": st.just("chat-2"),
        "k": small, "n": small, "max_chars": small, "start": st.integers(0, 5000),
        "end": st.integers(0, 7000),
    }
    return {
        "valid": valid,
        "text": text, "safe": safe, "ints": ints, "anything": anything, "deep": deep,
        "alice_id": alice_id, "bob_id": bob_id, "some_id": some_id,
        "ref": st.one_of(st.sampled_from(["notes", tenants.bob_blob, BlobRef(key="notes", n=9),
                                          {"key": "notes"}, {"key": tenants.bob_blob}]), text),
        "pattern": st.one_of(st.sampled_from(REGEXES), text),
        "query": st.one_of(st.sampled_from([tenants.marker, "nurse", "code word", "river",
                                            "Maria"]), text),
        "kind": st.one_of(st.sampled_from(KINDS), text),
        "name": st.one_of(st.sampled_from(NAMES), text),
        "conversation": st.one_of(st.sampled_from(["chat-1", "chat-2", "chat-3", ""]), text),
        "ids": st.one_of(st.lists(some_id, max_size=7), some_id),
        "obj": st.one_of(st.dictionaries(safe, st.one_of(safe, ints, st.none()), max_size=6),
                         deep, anything.filter(lambda v: not isinstance(v, str | bytes)),
                         st.dictionaries(st.sampled_from(BAD_KEYS), st.sampled_from(BAD_VALUES),
                                         min_size=1, max_size=3)),
        "user": st.one_of(st.sampled_from([ALICE, "carol", "", " ", "x" * 300, "a\x00b"]), safe),
        # The store itself and its WAL among them: an export there would replace them.
        "path": st.sampled_from([str(work / "out" / n) for n in (
            "a.jsonl", "", ".", "..", "x" * 300, "a\x00b", "\udcff", "no/such/dir/x.jsonl")]
            + ([str(tenants.path), f"{tenants.path}-wal"] if isinstance(tenants.path, Path)
               else [])),
    }


def _nested(depth: int, as_dict: bool) -> Any:
    """A list (or dict) nested ``depth`` deep, built without recursion."""
    value: Any = "bottom"
    for _ in range(depth):
        value = {"k": value} if as_dict else [value]
    return value


def rss_mb() -> float:
    """This process's resident memory now, in MB (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


@dataclass
class Tally:
    """Calls per target and outcome, and the memory high-water mark."""

    calls: dict[str, dict[str, int]] = field(default_factory=dict)
    rss_start: float = field(default_factory=rss_mb)
    rss_peak: float = 0.0
    slowest: float = 0.0
    slowest_target: str = ""

    def count(self, target: str, outcome: str) -> None:
        """One call of ``target`` that ended as ``outcome`` (ok, refused, failed)."""
        row = self.calls.setdefault(target, {})
        row[outcome] = row.get(outcome, 0) + 1

    def sample(self, target: str, seconds: float) -> None:
        """Keep the memory high-water mark and the slowest call."""
        self.rss_peak = max(self.rss_peak, rss_mb())
        if seconds > self.slowest:
            self.slowest, self.slowest_target = seconds, target

    def figures(self, started: float) -> dict[str, Any]:
        """The scenario's figures: calls, rate, peak memory."""
        total = sum(sum(r.values()) for r in self.calls.values())
        seconds = time.perf_counter() - started
        return {"calls": total, "calls_per_s": round(total / max(seconds, 1e-9), 1),
                "targets": len(self.calls), "slowest_call_s": round(self.slowest, 2),
                "slowest_call": self.slowest_target,
                "rss_start_mb": round(self.rss_start, 1), "peak_rss_mb": round(self.rss_peak, 1),
                "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


CHUNK = 200
"""Examples per hypothesis run: the deadline is checked between runs, never inside one
(a run that stopped drawing on a clock would read to hypothesis as flaky generation)."""


def _drive(ctx: Context, result: Scenario, examples: int,
           body: Callable[[Any], None]) -> None:
    """Run ``body(data)`` for up to ``examples`` hypothesis examples, in runs of
    :data:`CHUNK`, each seeded from ``ctx.seed`` and its number; stops when ``ctx``
    expires."""
    hypothesis = require("hypothesis", "bench", "the reliability fuzzing")
    st = require("hypothesis.strategies", "bench", "the reliability fuzzing")
    for chunk in range(0, examples, CHUNK):
        if ctx.expired():
            result.stopped_early = True
            return

        @hypothesis.seed(ctx.seed * 100_003 + chunk)
        @hypothesis.settings(max_examples=min(CHUNK, examples - chunk), database=None,
                             deadline=None, derandomize=False,
                             phases=[hypothesis.Phase.generate],
                             suppress_health_check=list(hypothesis.HealthCheck),
                             print_blob=False)
        @hypothesis.given(st.data())
        def run(data: Any) -> None:
            body(data)

        run()


def _record(result: Scenario, tally: Tally, target: str, outcome: Outcome,
            verdict: tuple[str, str, str] | None, args: Any) -> None:
    tally.sample(target, outcome.seconds)
    result.attempts += 1
    if verdict is None:
        tally.count(target, "ok" if outcome.error is None else "refused")
        return
    counter, what, detail = verdict
    tally.count(target, "failed")
    result.fail(counter, what, target=target, detail=detail, args=_short_repr(args))


def _short_repr(value: Any) -> str:
    import reprlib

    short = reprlib.Repr()
    short.maxstring, short.maxother, short.maxlevel = 80, 80, 4
    return short.repr(value)


def _memory_bound(result: Scenario, tally: Tally) -> None:
    if tally.rss_peak - tally.rss_start > RSS_GROWTH_MB:
        result.fail("crashes", "memory unbounded",
                    detail=f"grew {tally.rss_peak - tally.rss_start:.0f} MB")


def _tenant_checks(result: Scenario, tenants: Tenants, before: list[Any]) -> None:
    path = Path(tenants.path)  # a file: the fuzzer seeds SQLite
    if snapshot(path, BOB) != before:
        result.fail("breaches", "another tenant's rows changed", tenant=BOB)
    check = integrity(path)
    if check != "ok":
        result.fail("integrity_failures", "integrity check failed", detail=check)


# -- hostile_tools ---------------------------------------------------------------------------

_PARAMS = {"ref": "ref", "pattern": "pattern", "query": "query", "kind": "kind",
           "polarity": "kind", "role": "name", "ids": "ids", "id": "some_id", "text": "safe",
           "title": "safe", "tags": "obj", "obj": "obj", "name": "name",
           "conversation_id": "conversation", "conversation_a": "conversation",
           "conversation_b": "conversation", "k": "ints", "n": "ints", "start": "ints",
           "end": "ints", "max_chars": "ints"}
_WRITES = {"mem_add", "event_log"}
_API_WRITES = {"add", "update", "import_", "flush"}


def cleaner(tenants: Tenants) -> Callable[[Any], bool]:
    """A test that a write's arguments carry none of bob's secrets: once in alice's rows,
    a secret would come back from her own reads and read as a breach."""
    return lambda args: not any(leaked(x, tenants.secrets, []) for x in strings_in(args))


def _api_value(value: Any) -> Any:
    """A ``Memory`` result as JSON can carry it: bound tools by their names."""
    if isinstance(value, list) and value and callable(value[0]):
        return [getattr(f, "__name__", "?") for f in value]
    return value


def _draw_call(data: Any, s: dict[str, Any], fn: Callable[..., Any]
               ) -> tuple[list[Any], dict[str, Any]]:
    """Arguments for ``fn`` (a bound tool). A third of the calls are valid (each argument
    plausible or left out), a third have one hostile argument among valid ones, a third
    are hostile throughout; some pass arguments by name, or add a bogus one."""
    st = require("hypothesis.strategies", "bench", "the reliability fuzzing")
    params = list(inspect.signature(fn).parameters.values())
    mode = data.draw(st.sampled_from(["valid", "one", "hostile"]))
    odd = data.draw(st.integers(0, len(params) - 1)) if mode == "one" else -1
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for n, p in enumerate(params):
        hostile = mode == "hostile" or n == odd
        optional = p.default is not inspect.Parameter.empty
        if optional and not hostile and data.draw(st.integers(0, 2)) == 0:
            continue
        if hostile:
            value = data.draw(st.one_of(s["anything"], s[_PARAMS.get(p.name, "text")]))
        else:
            value = data.draw(s["valid"].get(p.name, s["safe"]))
        if kwargs or data.draw(st.integers(0, 3)) == 0:
            kwargs[p.name] = value
        else:
            args.append(value)
    extra = data.draw(st.sampled_from([None] * 8 + ["positional", "bogus"]))
    if extra == "positional":
        args.append(data.draw(s["text"]))
    elif extra == "bogus":
        kwargs["user_id"] = BOB  # the agent cannot name a tenant
    return args, kwargs


def _setup(ctx: Context) -> tuple[Tenants, list[Any], list[Path], dict[str, Any], Tally]:
    """Two seeded tenants, Bob's rows before, hostile input files, strategies, a tally."""
    tenants = seed_tenants(ctx.work / "fuzz.db", ctx.seed)
    before = snapshot(ctx.work / "fuzz.db", BOB)
    (ctx.work / "out").mkdir(exist_ok=True)
    files = hostile_files(ctx.work / "in")
    return tenants, before, files, _strategies(tenants, ctx.work), Tally()


def _finish(result: Scenario, tally: Tally, tenants: Tenants, before: list[Any],
            started: float, ctx: Context, cap_s: float, label: str) -> Scenario:
    """The checks every fuzz run ends with (memory bound, tenants untouched), its figures,
    and one note per target (``label`` names what a target is)."""
    _memory_bound(result, tally)
    _tenant_checks(result, tenants, before)
    result.figures = {**tally.figures(started), "seed": ctx.seed, "cap_s": cap_s}
    for target, row in sorted(tally.calls.items()):
        result.note(**{label: target}, **row)
    return result


def hostile_tools(ctx: Context) -> Scenario:
    """Fuzz every handle tool, every personal tool and every ``Memory`` method."""
    from memstrata import Memory
    from memstrata.tools import ToolSession, personal_tools

    result = Scenario(name="hostile_tools")
    started = time.perf_counter()
    tenants, before, files, s, tally = _setup(ctx)
    memory = Memory.open(tenants.path)
    session = ToolSession(memory.store, ALICE)
    tools = {t.__name__: t for t in (*session.handle_tools(), *personal_tools(session))}
    caps = session.caps
    max_chars = caps.max_get * (caps.max_item_chars + 2000)
    methods = api_calls(s, files)
    st = require("hypothesis.strategies", "bench", "the reliability fuzzing")
    targets = sorted(tools) + sorted(methods)
    hints = {name: param_hints(getattr(Memory, name)) for name in methods}
    hypothesis = require("hypothesis", "bench", "the reliability fuzzing")
    clean = cleaner(tenants)

    def body(data: Any) -> None:
        target = data.draw(st.sampled_from(targets))
        if target in tools:
            args, kwargs = _draw_call(data, s, tools[target])
            if target in _WRITES:
                hypothesis.assume(clean([args, kwargs]))
            outcome = call_capped(lambda: tools[target](*args, **kwargs), TOOL_CAP_S)
            verdict = judge_tool(outcome, secrets=tenants.secrets,
                                 given=strings_in([args, kwargs]), max_chars=max_chars,
                                 max_error_chars=caps.max_error_chars)
            _record(result, tally, target, outcome, verdict, [args, kwargs])
            return
        draw, allowed, bound = methods[target]
        kwargs = draw(data)
        if target in _API_WRITES:
            hypothesis.assume(clean(kwargs))
        well_typed = all(conforms(v, hints[target][k]) for k, v in kwargs.items()
                         if k in hints[target])
        outcome = call_capped(lambda: _api_value(getattr(memory, target)(**kwargs)),
                              TOOL_CAP_S)
        tenant = kwargs.get("user_id")
        verdict = judge_api(outcome, secrets=tenants.secrets if bound(tenant) else [],
                            given=strings_in(kwargs), allowed=allowed, well_typed=well_typed)
        _record(result, tally, target, outcome, verdict, kwargs)

    try:
        _drive(ctx, result, ctx.sized(300, 40_000), body)
    finally:
        memory.close()
    return _finish(result, tally, tenants, before, started, ctx, TOOL_CAP_S, "target")


def param_hints(method: Callable[..., Any]) -> dict[str, Any]:
    """The annotations of ``method``'s parameters that resolve in its module (the others,
    naming what is imported only for type checking, are left out: anything conforms)."""
    module = sys.modules[method.__module__]
    names = {**vars(typing), **vars(module)}
    hints = {}
    for name, param in inspect.signature(method).parameters.items():
        hint = param.annotation
        if isinstance(hint, str):
            try:
                hint = eval(hint, names)
            except Exception:
                continue
        if hint is not inspect.Parameter.empty:
            hints[name] = hint
    return hints


def api_calls(s: dict[str, Any], files: list[Path]
              ) -> dict[str, tuple[Callable[[Any], dict[str, Any]],
                               tuple[type[BaseException], ...], Callable[[Any], bool]]]:
    """``Memory`` method -> (draw its keyword arguments, its documented refusals, whether a
    call with this ``user_id`` is bound to a tenant other than bob)."""
    st = require("hypothesis.strategies", "bench", "the reliability fuzzing")

    def fixed(**strategies: Any) -> Callable[[Any], dict[str, Any]]:
        return lambda data: {k: data.draw(v) for k, v in strategies.items()}

    named = lambda tenant: isinstance(tenant, str) and tenant != BOB  # noqa: E731
    user = st.one_of(st.just(ALICE), s["user"])  # alice often: her rows answer
    writer = st.one_of(s["user"], s["anything"].filter(lambda v: not isinstance(v, str)))
    messages = st.one_of(s["safe"], st.lists(st.one_of(s["safe"], st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "tool", ""]),
         "content": s["safe"]}), st.dictionaries(s["safe"], s["safe"], max_size=3)), max_size=4),
        st.integers(), st.none(), s["deep"])
    stamps = st.one_of(st.none(), st.sampled_from(["2024-01-01", "yesterday", "", "9999-99-99",
                                                   "1e10", "2024-02-30T25:61"]), st.floats(),
                       st.integers(), s["safe"])
    files_ = st.sampled_from([str(f) for f in files])
    value = (ValueError,)
    return {
        "add": (fixed(messages=messages, user_id=writer,
                      conversation_id=st.one_of(st.none(), s["conversation"]),
                      session_id=st.one_of(st.none(), s["safe"]), timestamp=stamps,
                      metadata=st.one_of(st.none(), s["obj"]), infer=st.booleans()),
                value, named),
        "search": (fixed(query=s["query"], user_id=user, k=s["ints"],
                         filters=st.one_of(st.none(), st.dictionaries(
                             st.sampled_from(["kinds", "speaker", "conversation_id", "start",
                                              "end", "bogus"]), s["anything"], max_size=3))),
                   value, named),
        "get": (fixed(id=s["some_id"], user_id=st.one_of(st.none(), user)), value, named),
        "history": (fixed(id=s["some_id"], user_id=st.one_of(st.none(), user)), value,
                    named),
        "get_all": (fixed(user_id=user, kind=s["kind"], limit=s["ints"],
                          offset=s["ints"]), value, named),
        "update": (fixed(id=s["some_id"], text=s["safe"], user_id=user),
                   (ValueError, KeyError), named),
        # alice's seeded rows stay: deleting them would starve every later read.
        "delete": (fixed(id=st.one_of(s["bob_id"], s["text"]), user_id=user), value, named),
        "delete_all": (fixed(user_id=s["safe"].filter(lambda u: u not in (ALICE, BOB))),
                       value, named),
        "flush": (fixed(user_id=user, conversation_id=s["conversation"]), value, named),
        "export": (fixed(user_id=user, path=s["path"]), (ValueError, OSError), named),
        "import_": (fixed(path=files_, user_id=s["safe"].filter(lambda u: u not in (ALICE, BOB))),
                    (ValueError, OSError), named),
        "answer": (fixed(question=s["query"], user_id=user), (ValueError, RuntimeError),
                   named),
        "tools": (fixed(user_id=user), value, named),
    }


_EXPORT = b'{"type": "header", "format": "memstrata-export", "version": 1, "user_id": "x"}\n'


def _zipped(members: dict[str, bytes]) -> bytes:
    """A zip archive of ``members`` (name: bytes), deflated."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def hostile_files(folder: Path) -> list[Path]:
    """Files an import may be handed: binary junk, invalid UTF-8, deep JSON, huge lines,
    wrong shapes, malformed chat exports (as JSON and as the apps' zips), and a
    directory."""
    folder.mkdir(parents=True, exist_ok=True)
    contents: dict[str, bytes] = {
        "empty.json": b"",
        "junk.bin": bytes(range(256)) * 64,
        "latin1.jsonl": '{"role": "user", "content": "caf\xe9"}\n'.encode("latin-1"),
        "deep.json": b"[" * 100_000 + b"]" * 100_000,
        "deep_obj.json": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        "huge_line.jsonl": b'{"role": "user", "content": "' + b"a" * 3_000_000 + b'"}\n',
        "nul.jsonl": b'{"role": "user", "content": "a\\u0000b"}\n\x00\x00\n',
        "surrogate.jsonl": b'{"role": "user", "content": "\\ud800"}\n',
        "wrong.json": b'{"conversations": 5, "sessions": "x", "messages": [1, 2]}',
        "list_of_junk.json": b'[1, "a", null, {"sessions": [{"messages": [{}]}]}]',
        "messages.jsonl": b'{"role": "user", "content": "hello"}\n{"role": "bot"}\n',
        "export_wrong.jsonl": b'{"type": "header", "user_id": 5}\n{"type": "turn"}\n',
        "nan.json": b'[{"id": NaN, "sessions": Infinity}]',
        "export_blob.jsonl": _EXPORT + b'{"type": "blob"}\n{"type": "version", "node_id": [1]}\n',
        "export_surrogate.jsonl": _EXPORT + b'{"type": "blob", "key": "k", "text": "\\ud800"}\n',
        # Chat apps' data exports: a cycle, a long chain, odd nodes, parts and senders.
        "chatgpt_cycle.json": b'[{"id": "c", "current_node": "a", "mapping": {"a": {"id": "a",'
                              b' "parent": "b", "children": []}, "b": {"id": "b", "parent":'
                              b' "a", "children": ["a"]}}}]',
        "chatgpt_chain.json": json.dumps([{"id": "c", "current_node": "n19999", "mapping": {
            f"n{i}": {"id": f"n{i}", "parent": f"n{i - 1}" if i else None,
                      "children": [f"n{i + 1}"], "message": {
                          # The last node's role is not text: refused whole, after
                          # every other node was read.
                          "author": {"role": ("user", "assistant", "tool")[i % 3]
                                     if i < 19_999 else 5},
                          "create_time": i, "content": {"content_type": (
                              "text", "multimodal_text", "code", "zzz")[i % 4],
                              "parts": ["hi", {"content_type": "image"}, None, 7][: i % 5]}}}
            for i in range(20_000)}}]).encode(),
        "chatgpt_odd.json": b'[{"id": "c", "mapping": {"a": 5, "b": {"id": "b", "message":'
                            b' {"content": "x", "author": "y"}}}}, {"mapping": {}}]',
        "claude_odd.json": b'[{"uuid": "k", "chat_messages": [{"sender": "human", "content":'
                           b' [{"type": "zzz"}]}, 5, {"sender": "", "text": 3}]}]',
    }
    # The apps' exports as downloaded are zips: one holding a malformed export, one
    # without conversations.json, one with two, one cut short.
    contents["chatgpt_export.zip"] = _zipped({"chat.html": b"<html></html>",
                                              "conversations.json": contents["chatgpt_odd.json"]})
    contents["no_conversations.zip"] = _zipped({"user.json": b"{}"})
    contents["two_conversations.zip"] = _zipped({"a/conversations.json": b"[]",
                                                 "b/conversations.json": b"[]"})
    contents["cut.zip"] = contents["chatgpt_export.zip"][:60]
    paths = []
    for name, data in contents.items():
        path = folder / name
        path.write_bytes(data)
        paths.append(path)
    (folder / "a_directory").mkdir(exist_ok=True)
    return [*paths, folder / "a_directory", folder / "missing.json"]


# -- hostile_cli -------------------------------------------------------------------------------

CLI_COMMANDS = ("add", "get", "history", "delete", "forget", "import", "export", "search",
                "read", "context", "stats", "facts", "runs", "persona", "random")
"""The store commands fuzzed (every command that reads or writes a store without a model;
the model, benchmark and sandbox commands only start work that is out of scope here)."""


def _cli_argv(data: Any, s: dict[str, Any], db: str, files: list[Path], work: Path
              ) -> tuple[list[str], str, bool]:
    """``(argv, stdin, tenant_bound)`` for one random store command."""
    st = require("hypothesis.strategies", "bench", "the reliability fuzzing")
    draw = data.draw
    arg = st.one_of(s["text"].filter(lambda t: len(t) < 200_000),
                    s["ints"].map(str), s["some_id"])
    safe = s["safe"].filter(lambda t: len(t) < 200_000)
    number = st.one_of(s["ints"].map(str), st.sampled_from(["inf", "nan", "-0", "1e400", "0x10"]),
                       arg)
    cmd = draw(st.sampled_from(CLI_COMMANDS))
    user = draw(st.one_of(st.none(), s["user"]))
    if cmd in ("delete", "forget") and user is None:
        user = "carol"
    if cmd == "forget":  # forgetting alice would only end the fuzzing of her rows
        user = draw(safe.filter(lambda u: u not in (ALICE, BOB)))
    dbs = st.sampled_from([db] * 6 + [str(work / "none.db"), str(work / "in"),
                                      str(files[1]), str(work / "out" / "new.db"),
                                      *FOREIGN_DBS, str(work / "no" / "such" / "x.db")])
    argv: list[str] = [cmd]
    flags: dict[str, Any] = {}
    stdin = ""
    stdins = st.sampled_from([
        '{"role": "user", "content": "hi"}\n', "not json\n", "", "[1, 2]\n",
        '{"role": "user"}\n', '{"content": "' + "a" * 10_000 + '"}\n', "\x00\n",
        "[" * 10_000 + "\n", '[{"role": "user", "content": "a list"}, "two"]\n'])
    if cmd == "add":
        if draw(st.booleans()):
            argv.append(draw(safe))
        else:  # JSONL on stdin; '-' names it
            argv += ["-"] if draw(st.booleans()) else []
            stdin = draw(stdins)
        flags = {"--speaker": safe, "--conversation": safe, "--session": safe,
                 "--timestamp": st.one_of(safe, st.sampled_from(["2024-01-01", "99999"]))}
    elif cmd in ("get", "history", "delete"):
        argv.append(draw(st.one_of(s["alice_id"], s["bob_id"], arg)))
        flags = {"--full": st.just(None)} if cmd == "history" else {}
    elif cmd == "import":
        argv.append(str(draw(st.sampled_from([*files, "-"]))))
        stdin = draw(stdins) if argv[-1] == "-" else ""
        fmt = draw(st.sampled_from(["messages", "locomo", "longmemeval", "chatgpt", "claude",
                                    "export", "xml",
                                    None]))  # None: told apart by the file's content
        argv += ["--format", fmt] if fmt is not None else []
        argv.append("--quiet")
        user = draw(safe.filter(lambda u: u not in (ALICE, BOB)))
    elif cmd == "read":
        argv.append(str(draw(st.sampled_from([*files, "-"]))))
        stdin = draw(stdins) if argv[-1] == "-" else ""
        flags = {"--title": safe, "--source": safe,
                 "--when": st.one_of(arg, st.sampled_from(["2024-01-01", "yesterday"]))}
        user = draw(safe.filter(lambda u: u not in (ALICE, BOB)))
    elif cmd == "context":
        argv.append(draw(st.one_of(s["query"], arg)))
        flags = {"--budget": number, "--conversation": s["conversation"],
                 "--layer": st.one_of(st.sampled_from(["conversation", "semantic", "voe"]), arg),
                 "--json": st.just(None)}
        user = user or ALICE
    elif cmd == "export":
        argv.append(draw(s["path"]))
    elif cmd == "search":
        argv.append(draw(st.one_of(s["query"], arg)))
        flags = {"-k": number, "--kind": s["kind"].map(str), "--speaker": s["name"],
                 "--conversation": s["conversation"], "--since": arg, "--until": arg,
                 "--no-dense": st.just(None), "--weights": st.one_of(arg, st.sampled_from([
                     '{"dense": 0.5}', '{"dense": "x"}', '{"nope": 1}', "[" * 5000, "null"]))}
    elif cmd == "facts":
        user = user or ALICE
        flags = {"--search": arg, "--delete": st.one_of(s["bob_id"], arg), "-n": number}
    elif cmd == "runs":
        argv.append(draw(st.sampled_from(["list", "show", "export", "prune", "bogus"])))
        if draw(st.booleans()):
            argv.append(draw(arg))
        flags = {"--out": st.sampled_from([str(work / "out" / "runs.jsonl")] * 3 + [db]),
                 "-n": number,
                 "--before": arg, "--older-than": number, "--keep": number,
                 "--dry-run": st.just(None), "--drop-evidence": st.just(None)}
    elif cmd == "persona":
        argv.append(draw(s["name"]))
        flags = {"--conversation": s["conversation"], "--json": st.just(None)}
        user = user or ALICE
    elif cmd == "random":
        argv = draw(st.lists(st.one_of(st.sampled_from(
            ["add", "get", "search", "--db", "--user", "-k", "--help", "-", "--", "bench",
             "stats", "--kind", "=", "--user=alice"]), arg), max_size=6))
        return argv, "", False
    if (cmd not in ("stats",) or draw(st.booleans())) and user is not None:
        argv += ["--user", user]
    for flag, strategy in flags.items():
        if draw(st.booleans()):
            value = draw(strategy)
            argv += [flag] if value is None else [flag, str(value)]
    if cmd == "forget" and draw(st.integers(0, 9)):
        argv.append("--yes")
    argv += ["--db", draw(dbs)]
    return argv, stdin, isinstance(user, str) and user != BOB


@contextlib.contextmanager
def captured(stdin: str = "") -> Iterator[tuple[io.TextIOWrapper, io.TextIOWrapper]]:
    """stdout and stderr as a real process has them (UTF-8, strict: a lone surrogate
    cannot be printed), and ``stdin`` as its input (not a terminal)."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace",
                           write_through=True)
    old_in = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        sys.stdin = old_in


def read_back(stream: io.TextIOWrapper) -> str:
    """What was written to a :func:`captured` stream."""
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)  # what captured() wraps
    return buffer.getvalue().decode("utf-8", "replace")


def cli_main() -> Callable[[list[str] | None], int]:
    """The installed ``memstrata`` console command's function (``memstrata.cli.main``).

    The harness drives the command as a user runs it, through its published entry point:
    the command is what is under test, not a library the harness builds on (the command
    runs this harness: ``memstrata bench reliability``).
    """
    (script,) = metadata.entry_points(group="console_scripts", name="memstrata")
    main: Callable[[list[str] | None], int] = script.load()
    return main


def run_cli(argv: list[str], stdin: str = "", cap_s: float = CLI_CAP_S
            ) -> tuple[Outcome, str, str]:
    """``memstrata.cli.main(argv)`` in this process: its outcome, stdout and stderr."""
    main = cli_main()
    with captured(stdin) as (out, err):
        outcome = call_capped(lambda: main(argv), cap_s)
    return outcome, read_back(out), read_back(err)


def hostile_cli(ctx: Context) -> Scenario:
    """Fuzz the store commands through ``memstrata.cli.main`` in-process."""
    result = Scenario(name="hostile_cli")
    started = time.perf_counter()
    tenants, before, files, s, tally = _setup(ctx)

    def body(data: Any) -> None:
        argv, stdin, bound = _cli_argv(data, s, str(tenants.path), files, ctx.work)
        outcome, out, err = run_cli(argv, stdin)
        verdict = (judge_cli(outcome, out, err, secrets=tenants.secrets, argv=argv,
                             tenant_bound=bound) or judge_place(out + err, ctx.work)
                   or judge_new_store(outcome, ctx.work))
        target = argv[0] if argv and argv[0] in CLI_COMMANDS else "random"
        _record(result, tally, target, outcome, verdict, argv)
        for stray in (ctx.work / "out").glob("new.db*"):
            stray.unlink()

    # A command given no --db writes ./memstrata.db: here, not where the suite was run.
    home = Path.cwd()
    os.chdir(ctx.work)
    try:
        _drive(ctx, result, ctx.sized(150, 20_000), body)
    finally:
        os.chdir(home)
    return _finish(result, tally, tenants, before, started, ctx, CLI_CAP_S, "command")


SCENARIOS: dict[str, Callable[[Context], Scenario]] = {
    "hostile_tools": hostile_tools, "hostile_cli": hostile_cli}
