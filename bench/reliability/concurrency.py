"""Concurrency: processes and threads on one store, and tenants kept apart under load.

- ``concurrency_processes``: N worker processes (forked from :class:`~.crash.ForkServer`)
  each make M writes to one file (WAL): turns added to a conversation they all share or
  to one of their own, and updates of a few *hot* turns that every process updates, with
  a read (search, get, get_all) after every few writes and a read of each added turn.
  Each reports every committed write (``os.write`` after the call returned) and every
  exception. Afterwards every reported turn is there once (missing: ``lost_writes``; a
  text stored twice or a ``seq`` reused: ``integrity_failures``), each hot turn's history
  holds its first text and every reported update exactly once (one missing is a lost
  write), and :func:`~.crash.index_problems` finds nothing.
- ``concurrency_threads``: T threads share one ``Memory`` and make C mixed calls each
  (add, import, update, delete, get, get_all, history, search) on two tenants; every
  thread checks that it reads its own writes back, and afterwards the store holds exactly
  what the threads reported (each thread updates and deletes only what it added).
- ``tenancy_under_load``: the isolation property of ``tests/memory/test_tenant_isolation``
  under load and with deletes. Tenants with awkward ids (quotes, spaces, CJK, FTS5
  operators, SQL, case twins) are written, updated, deleted one memory at a time and
  wholly (``delete_all``) by writer threads and by two worker processes, while reader
  threads (and the workers) search, page, fetch and call the tools for their own tenant,
  and try other tenants' ids. Any result that holds another tenant's row, id, text
  marker or ``user_id``, and any foreign id a tenant could delete or update, is a
  ``breaches`` count. Afterwards no row is stored under the wrong tenant and the
  tenants never wholly deleted kept every reported write.

In all three, any exception a call raised counts under ``crashes`` (``database is
locked`` ones are also counted apart in the figures: the target is none), and so does a
worker process still running at the deadline (the full counts take about half of it:
that is a hang); throughput is reported.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from .common import Context, Scenario, sqlite_store
from .crash import WORDS, ForkServer, Reporter, child_error, index_problems, opened, read_lines

if TYPE_CHECKING:
    from memstrata import Memory

USER = "shared-user"


def _words(rng: random.Random, n: int = 5) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _error(exc: BaseException) -> dict[str, Any]:
    from memstrata.memory.locking import is_busy

    return {"error": f"{type(exc).__name__}: {exc}"[:300], "busy": is_busy(exc)}


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


# -- concurrency_processes -------------------------------------------------------------------


def process_task(path: str, report: str, error_file: str, worker: int, writes: int,
                 hot: list[str], seed: int, read_every: int = 4) -> None:
    """One ``concurrency_processes`` worker: ``writes`` writes (adds, and updates of the
    hot turns), a read after every ``read_every``, each write and error reported."""
    from memstrata import Memory

    rng = random.Random(seed)
    say = Reporter(report)
    memory = Memory.open(path)
    own: list[str] = []
    started = time.perf_counter()
    reads = 0
    for i in range(writes):
        try:
            if hot and rng.random() < 0.2:
                target, text = rng.choice(hot), f"p{worker}w{i} hot {_words(rng)}"
                memory.update(target, text)
                say(op="update", id=target, text=text)
            else:
                conv = "shared" if rng.random() < 0.5 else f"own{worker}"
                text = f"p{worker}w{i} {_words(rng)}"
                node = memory.add(text, user_id=USER, conversation_id=conv, infer=False)[0]["id"]
                say(op="add", id=node, text=text, conv=conv)
                own.append(node)
                got = memory.get(node, user_id=USER)
                if got is None or got["text"] != text:
                    say(op="stale", id=node, found=None if got is None else got["text"])
        except Exception as exc:
            say(op="error", call="write", **_error(exc))
        if i % read_every == 0:
            try:
                kind = (i // read_every) % 3
                if kind == 0:
                    memory.search(_words(rng, 3), user_id=USER, k=5)
                elif kind == 1 and own:
                    memory.get(rng.choice(own + hot), user_id=USER)
                else:
                    memory.get_all(USER, kind="turn", limit=20)
                reads += 1
            except Exception as exc:
                say(op="error", call="read", **_error(exc))
    memory.close()
    say(op="end", reads=reads, seconds=time.perf_counter() - started)


def check_processes(memory: Memory, lines: list[dict[str, Any]], hot: dict[str, str],
                    result: Scenario) -> Counter[str]:
    """Compare the store with the workers' reports (see the module's docstring); returns
    the counts of what was reported."""
    store = sqlite_store(memory)
    q = store.conn.execute
    counts: Counter[str] = Counter(line["op"] for line in lines)
    rows = {r[0]: (r[1], r[2], r[3]) for r in q(
        "SELECT id, conversation_id, seq, text FROM turns WHERE user_id = ?", (USER,))}
    for line in lines:
        if line["op"] == "add":
            row = rows.get(line["id"])
            if row is None:
                result.fail("lost_writes", "a reported turn is missing", id=line["id"])
            elif row[2] != line["text"] or row[0] != line["conv"]:
                result.fail("lost_writes", "a reported turn is not as written", id=line["id"])
        elif line["op"] == "stale":
            result.fail("integrity_failures", "a process did not read back its own write",
                        **line)
        elif line["op"] == "error":
            result.fail("crashes", f"a {line['call']} raised", error=line["error"])
    texts = Counter(text for _, _, text in rows.values())
    for text, n in texts.items():
        if n > 1:
            result.fail("integrity_failures", "a write stored twice", text=text, times=n)
    added = {line["id"] for line in lines if line["op"] == "add"}
    for node in rows.keys() - added - hot.keys():
        result.fail("integrity_failures", "a turn nobody reported", id=node)
    seqs = Counter((conv, seq) for conv, seq, _ in rows.values())
    for (conv, seq), n in seqs.items():
        if n > 1:
            result.fail("integrity_failures", "seq used twice", conversation=conv, seq=seq)
    for node, first in hot.items():
        want = Counter([first] + [line["text"] for line in lines
                                  if line["op"] == "update" and line["id"] == node])
        have = Counter(v.text for v in memory.history(node, user_id=USER))
        for text in want - have:
            result.fail("lost_writes", "a reported update is missing from the history",
                        id=node, text=text)
        for text in have - want:
            result.fail("integrity_failures", "a version nobody wrote (or written twice)",
                        id=node, text=text)
    return counts


def concurrency_processes(ctx: Context) -> Scenario:
    """N processes x M writes (and reads) on one file; nothing lost, nothing twice."""
    from memstrata import Memory

    result = Scenario(name="concurrency_processes")
    procs, writes = ctx.sized(2, 4), ctx.sized(50, 1000)
    rng = random.Random(ctx.seed * 7919 + 11)
    path = ctx.work / "procs.db"
    with Memory.open(path) as memory:
        hot = {}
        for h in range(8):
            text = f"hot{h} first {_words(rng)}"
            hot[memory.add(text, user_id=USER, conversation_id="hot", infer=False)[0]["id"]] = text
    reports = [ctx.work / f"report-{n}.jsonl" for n in range(procs)]
    errors = [ctx.work / f"error-{n}.txt" for n in range(procs)]
    with ForkServer() as forks:
        started = time.perf_counter()
        pids = [forks.start(f"{__name__}:process_task", path=str(path), report=str(reports[n]),
                            error_file=str(errors[n]), worker=n, writes=writes,
                            hot=sorted(hot), seed=rng.randrange(2**31)) for n in range(procs)]
        budget = max(ctx.deadline - time.monotonic(), 10.0)
        ends = [forks.wait(pid, budget) for pid in pids]
        wall = time.perf_counter() - started
    for n, end in enumerate(ends):
        if end.killed:  # the full count takes about half the budget: this is a hang
            result.stopped_early = True
            result.fail("crashes", "a worker was still running at the deadline (hung, or "
                        "far too slow)", worker=n, error=child_error(errors[n]))
        elif end.code != 0:
            result.fail("crashes", "a worker process failed", worker=n,
                        error=child_error(errors[n]))
    lines = [line for report in reports for line in read_lines(report)]
    with opened(path) as store:
        from memstrata import Memory as _Memory

        counts = check_processes(_Memory(store), lines, hot, result)
        for what, detail in index_problems(store, _embedder()):
            result.fail("integrity_failures", what, **detail)
    done = counts["add"] + counts["update"]
    reads = sum(line.get("reads", 0) for line in lines if line["op"] == "end")
    result.attempts = done + reads
    result.figures.update({
        "processes": procs, "writes_per_process": writes, "writes_committed": done,
        "adds": counts["add"], "updates": counts["update"], "reads": reads,
        "errors": counts["error"],
        "locked_surfaced": sum(1 for line in lines if line.get("busy")),
        "writes_per_s": _rate(done, wall), "reads_per_s": _rate(reads, wall),
        "wall_s": round(wall, 2)})
    return result


def _embedder() -> Any:
    from memstrata.memory import default_embedder

    return default_embedder()


# -- concurrency_threads ---------------------------------------------------------------------


@dataclass
class _Thread:
    """What one thread wrote (and so what the store must hold of it)."""

    user: str
    texts: dict[str, str] = field(default_factory=dict)
    updates: Counter[str] = field(default_factory=Counter)
    deleted: set[str] = field(default_factory=set)
    imports: dict[str, int] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    latency: list[float] = field(default_factory=list)


def thread_calls(memory: Memory, mine: _Thread, t: int, calls: int, seed: int,
                 result: Scenario, lock: threading.Lock) -> None:
    """One ``concurrency_threads`` thread: ``calls`` mixed calls, each checked."""
    from memstrata.formats import ConversationRecord, Message, SessionRecord

    rng = random.Random(seed)
    ops = ("add", "import", "update", "delete", "get", "get_all", "history", "search")
    weights = (30, 5, 15, 5, 15, 10, 5, 15)

    def fail(counter: str, what: str, **detail: Any) -> None:
        with lock:
            result.fail(counter, what, thread=t, **detail)

    for i in range(calls):
        op = rng.choices(ops, weights)[0]
        live = [n for n in mine.texts if n not in mine.deleted]
        if op in ("update", "delete", "get", "history") and not live:
            op = "add"
        started = time.perf_counter()
        try:
            if op == "add":
                text = f"t{t}c{i} {_words(rng)}"
                conv = rng.choice(["shared", f"own{t}"])
                node = memory.add(text, user_id=mine.user, conversation_id=conv,
                                  infer=False)[0]["id"]
                mine.texts[node] = text
            elif op == "import":
                conv = f"imp{t}c{i}"
                msgs = [Message(speaker="Ann", content=f"t{t}c{i}m{m} {_words(rng)}")
                        for m in range(rng.randint(2, 5))]
                memory.import_conversations([ConversationRecord(
                    id=conv, sessions=[SessionRecord(id="s1", messages=msgs)])],
                    user_id=mine.user)
                mine.imports[conv] = len(msgs)
            elif op == "update":
                node, text = rng.choice(live), f"t{t}c{i} edited {_words(rng)}"
                memory.update(node, text, user_id=mine.user)
                mine.texts[node] = text
                mine.updates[node] += 1
            elif op == "delete":
                node = rng.choice(live)
                if not memory.delete(node, user_id=mine.user):
                    fail("lost_writes", "a thread's own turn was gone before its delete",
                         id=node)
                mine.deleted.add(node)
            elif op == "get":
                node = rng.choice(live)
                got = memory.get(node, user_id=mine.user)
                if got is None or got["text"] != mine.texts[node]:
                    fail("lost_writes", "a thread did not read back its own write", id=node,
                         found=None if got is None else got["text"])
            elif op == "history":
                node = rng.choice(live)
                versions = memory.history(node, user_id=mine.user)
                if len(versions) != mine.updates[node] + 1:
                    fail("lost_writes", "a history lacks a version the thread wrote", id=node,
                         want=mine.updates[node] + 1, found=len(versions))
            elif op == "get_all":
                memory.get_all(mine.user, kind="turn", limit=50)
            else:
                memory.search(_words(rng, 3), user_id=mine.user, k=5)
        except Exception as exc:
            err = _error(exc)
            mine.calls["locked" if err["busy"] else "error"] += 1
            fail("crashes", f"{op} raised", **err)
        mine.calls[op] += 1
        mine.latency.append(time.perf_counter() - started)


def check_threads(memory: Memory, threads: list[_Thread], result: Scenario) -> None:
    """The store must hold exactly what the threads reported."""
    q = sqlite_store(memory).conn.execute
    for user in sorted({m.user for m in threads}):
        found = q("SELECT id, text, conversation_id FROM turns WHERE user_id = ?",
                  (user,)).fetchall()
        rows = {node: text for node, text, _ in found}
        mine = [m for m in threads if m.user == user]
        wanted = {n: text for m in mine for n, text in m.texts.items() if n not in m.deleted}
        for node, text in wanted.items():
            if node not in rows:
                result.fail("lost_writes", "a reported turn is missing", id=node)
            elif rows[node] != text:
                result.fail("lost_writes", "a reported update is not there", id=node)
        for m in mine:
            for node in m.deleted & rows.keys():
                result.fail("lost_writes", "a reported delete is undone", id=node)
        convs = Counter(r[0] for r in q("SELECT conversation_id FROM turns WHERE user_id = ?"
                                        " AND conversation_id LIKE 'imp%'", (user,)))
        imports = {c: n for m in mine for c, n in m.imports.items()}
        for conv, n in imports.items():
            if convs.get(conv, 0) != n:
                result.fail("lost_writes" if convs.get(conv, 0) < n else "integrity_failures",
                            "an imported conversation is not whole", conversation=conv,
                            want=n, found=convs.get(conv, 0))
        deleted = {n for m in mine for n in m.deleted}
        for node, _, conv in found:
            if node not in wanted and node not in deleted and conv not in imports:
                result.fail("integrity_failures", "a turn nobody reported (a duplicate or a "
                            "phantom)", id=node)
        for text, n in Counter(rows.values()).items():
            if n > 1:
                result.fail("integrity_failures", "a write stored twice", text=text, times=n)
        for m in mine:
            for node, n in m.updates.items():
                if node in m.deleted:
                    continue
                found = q("SELECT count(*) FROM versions WHERE node_id = ?", (node,)).fetchone()[0]
                if found != n:
                    result.fail("lost_writes" if found < n else "integrity_failures",
                                "versions differ from the updates reported", id=node,
                                want=n, found=found)


def concurrency_threads(ctx: Context) -> Scenario:
    """T threads x C mixed calls sharing one ``Memory``; nothing lost, nothing twice,
    every thread reads its own writes."""
    from memstrata import Memory

    result = Scenario(name="concurrency_threads")
    n_threads, calls = ctx.sized(4, 8), ctx.sized(50, 1000)
    rng = random.Random(ctx.seed * 7919 + 12)
    path = ctx.work / "threads.db"
    lock = threading.Lock()
    threads = [_Thread(user=f"user{t % 2}") for t in range(n_threads)]
    with Memory.open(path) as memory:
        pool = [threading.Thread(target=thread_calls, args=(
            memory, threads[t], t, calls, rng.randrange(2**31), result, lock))
            for t in range(n_threads)]
        started = time.perf_counter()
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        wall = time.perf_counter() - started
        check_threads(memory, threads, result)
        for what, detail in index_problems(sqlite_store(memory), memory.store.embedder):
            result.fail("integrity_failures", what, **detail)
    total: Counter[str] = Counter()
    for m in threads:
        total.update(m.calls)
    latencies = [x for m in threads for x in m.latency]
    result.attempts = len(latencies)
    result.figures.update({
        "threads": n_threads, "calls_per_thread": calls, "calls": dict(total),
        "locked_surfaced": total["locked"], "calls_per_s": _rate(len(latencies), wall),
        "p50_ms": _percentile(latencies, 0.5), "p95_ms": _percentile(latencies, 0.95),
        "wall_s": round(wall, 2)})
    return result


# -- tenancy_under_load ----------------------------------------------------------------------

TENANTS = ("o'brien", 'say "hi"', "用户", "NEAR", "x; DROP TABLE items; --", "Alice",
           "alice ", "a* OR 1=1")
"""Awkward tenant ids (as in the isolation property test): quotes, CJK, FTS5 operators,
SQL, and case/space twins that must stay apart."""
CHURNED = (0, 2, 4, 6)
"""Tenants that are also wholly deleted (``delete_all``) now and then."""
IN_PROCESS = (0, 1, 2, 3, 4, 5)
"""Tenants written by this process's threads; the others by the worker processes."""

_ID = re.compile(r"\b[ti]_[0-9a-f]{24}\b")
_MARK = re.compile(r"zqtenant(\d+)q")


def tenant_marker(n: int) -> str:
    """A word that only tenant ``n``'s texts contain."""
    return f"zqtenant{n}q"


class Registry:
    """Which tenant wrote each id (ids are never reused), shared by threads."""

    def __init__(self) -> None:
        self.owner: dict[str, int] = {}
        self.by_tenant: dict[int, list[str]] = defaultdict(list)
        self.lock = threading.Lock()

    def add(self, n: int, node: str) -> None:
        """Record that tenant ``n`` wrote ``node``."""
        with self.lock:
            self.owner[node] = n
            self.by_tenant[n].append(node)

    def foreign(self, n: int, rng: random.Random, k: int = 3) -> list[str]:
        """Up to ``k`` ids other tenants wrote."""
        with self.lock:
            others = [m for m in self.by_tenant if m != n and self.by_tenant[m]]
            if not others:
                return []
            return [rng.choice(self.by_tenant[rng.choice(others)]) for _ in range(k)]


def breaches(value: Any, n: int, owner: Callable[[str], int | None],
             echoes: Sequence[str] = ()) -> list[str]:
    """How a result shows another tenant than ``n``: a ``user_id`` field, an id another
    tenant wrote (``owner`` says whose), or another tenant's text marker. ``echoes``
    (the query, the ids asked for) are removed first: a result may repeat its request."""
    found: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            user = v.get("user_id")
            if isinstance(user, str) and user != TENANTS[n]:
                found.append(f"a row of tenant {user!r}")
            for x in v.values():
                walk(x)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)

    plain = _plain(value)
    walk(plain)
    text = json.dumps(plain, ensure_ascii=False, default=str)
    for echo in echoes:
        text = text.replace(json.dumps(echo, ensure_ascii=False)[1:-1], "")
    for node in set(_ID.findall(text)):
        who = owner(node)
        if who is not None and who != n:
            found.append(f"id {node} of tenant {TENANTS[who]!r}")
    for m in set(_MARK.findall(text)):
        if int(m) != n:
            found.append(f"text of tenant {TENANTS[int(m)]!r}")
    return found


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class TenantActor:
    """Writes and reads for some tenants through one ``Memory``, checking every result.

    Writers add turns and facts (through the tools' ``mem_add``), update and delete them,
    wholly delete churned tenants now and then, and try to delete or update other
    tenants' ids. Readers search, page (``get_all``), fetch, read histories and call the
    tools for their tenant, and fetch other tenants' ids. ``report`` receives each breach
    (and ``record`` counts), so threads and worker processes share this code.
    """

    def __init__(self, memory: Memory, registry: Registry, seed: int,
                 report: Callable[..., None]) -> None:
        self.memory = memory
        self.registry = registry
        self.rng = random.Random(seed)
        self.report = report
        self.counts: Counter[str] = Counter()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.kept: dict[str, tuple[int, str]] = {}  # id -> (tenant, text) not deleted since

    def owner(self, node: str) -> int | None:
        """Whose id this is (the registry, else the store; None: unknown or gone)."""
        if node in self.registry.owner:
            return self.registry.owner[node]
        user = self.memory.store.owner(node)
        return TENANTS.index(user) if user in TENANTS else None

    def _check(self, n: int, what: str, value: Any, echoes: Sequence[str] = ()) -> None:
        self.counts["checked"] += 1
        for breach in breaches(value, n, self.owner, echoes):
            self.report(kind="breach", tenant=TENANTS[n], call=what, breach=breach)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return fn()
        except Exception as exc:
            self.report(kind="error", call=what, **_error(exc))
            return None
        finally:
            self.counts[what] += 1
            self.latency[what].append(time.perf_counter() - started)

    def write(self, n: int) -> None:
        """One write for tenant ``n``."""
        rng, memory, user = self.rng, self.memory, TENANTS[n]
        mine = self.registry.by_tenant.get(n, [])
        op = rng.choices(("add", "tool_add", "update", "delete", "foreign", "delete_all"),
                         (40, 15, 15, 10, 15, 5 if n in CHURNED else 0))[0]
        if op == "add":
            text = f"{tenant_marker(n)} said {_words(rng)}"
            events = self._call("add", lambda: memory.add(text, user_id=user, infer=False))
            if events:
                self.registry.add(n, events[0]["id"])
                self.kept[events[0]["id"]] = (n, text)
        elif op == "tool_add":
            tools = {f.__name__: f for f in memory.tools(user)}
            text = f"{tenant_marker(n)} fact {_words(rng)}"
            out = self._call("mem_add", lambda: tools["mem_add"](text=text, kind="fact"))
            if out:
                self.registry.add(n, out["id"])
                self.kept[out["id"]] = (n, text)
        elif op in ("update", "delete") and mine:
            node = rng.choice(mine)
            if op == "update":
                text = f"{tenant_marker(n)} edited {_words(rng)}"
                try:
                    memory.update(node, text, user_id=user)
                    if node in self.kept:
                        self.kept[node] = (n, text)
                except KeyError:
                    pass  # deleted meanwhile (by a delete_all)
                except Exception as exc:
                    self.report(kind="error", call="update", **_error(exc))
                self.counts["update"] += 1
            else:
                self._call("delete", lambda: memory.delete(node, user_id=user))
                self.kept.pop(node, None)
        elif op == "foreign":
            for node in self.registry.foreign(n, rng, 1):
                if self._call("foreign_delete", partial(memory.delete, node, user_id=user)):
                    self.report(kind="breach", tenant=user, call="delete",
                                breach=f"deleted id {node} of another tenant")
                try:
                    memory.update(node, f"{tenant_marker(n)} hijack", user_id=user)
                    self.report(kind="breach", tenant=user, call="update",
                                breach=f"updated id {node} of another tenant")
                except KeyError:
                    pass
                except Exception as exc:
                    self.report(kind="error", call="foreign_update", **_error(exc))
                self.counts["foreign_update"] += 1
        elif op == "delete_all":
            self._call("delete_all", lambda: memory.delete_all(user))
            for node in [k for k, (m, _) in self.kept.items() if m == n]:
                del self.kept[node]

    def read(self, n: int) -> None:
        """One read (or a few) for tenant ``n``, every result checked for other tenants."""
        rng, memory, user = self.rng, self.memory, TENANTS[n]
        other = rng.choice([m for m in range(len(TENANTS)) if m != n])
        query = f"{_words(rng, 2)} {tenant_marker(other)} {TENANTS[other]}"
        op = rng.choice(("search", "get_all", "get", "tools"))
        if op == "search":
            hits = self._call("search", lambda: memory.search(query, user_id=user, k=10))
            self._check(n, "search", hits or [], [query])
        elif op == "get_all":
            kind = rng.choice([None, "turn", "fact"])
            rows = self._call("get_all", lambda: memory.get_all(user, kind=kind, limit=50))
            self._check(n, "get_all", rows or [])
        elif op == "get":
            for node in self.registry.foreign(n, rng):
                got = self._call("get", partial(memory.get, node, user_id=user))
                if got is not None:
                    self.report(kind="breach", tenant=user, call="get",
                                breach=f"read id {node} of another tenant")
                versions = self._call("history", partial(memory.history, node, user_id=user))
                if versions:
                    self.report(kind="breach", tenant=user, call="history",
                                breach=f"read the history of id {node} of another tenant")
                self.counts["checked"] += 2
        else:
            tools = {f.__name__: f for f in memory.tools(user)}
            found = self._call("mem_search", lambda: tools["mem_search"](query=query, k=10))
            self._check(n, "mem_search", found or {}, [query])
            ids = self.registry.foreign(n, rng, 2) + [
                h["id"] for h in (found or {}).get("results", [])[:2] if isinstance(h, dict)
                and "id" in h]
            if ids:
                got = self._call("mem_get", lambda: tools["mem_get"](ids=ids))
                self._check(n, "mem_get", got or {}, ids)
                node = ids[0]
                try:
                    quoted = tools["mem_quote"](id=node)
                    self._check(n, "mem_quote", quoted, [node])
                except ValueError:  # ToolError: no such memory for this tenant
                    self.counts["checked"] += 1
                self.counts["mem_quote"] += 1


def tenancy_task(path: str, report: str, error_file: str, tenants: list[int],
                 foreign: dict[str, int], seconds: float, seed: int) -> None:
    """A ``tenancy_under_load`` worker process: writes and reads for ``tenants`` for
    ``seconds``, probing the ``foreign`` ids (id -> tenant) written by the parent."""
    from memstrata import Memory

    say = Reporter(report)
    registry = Registry()
    for node, n in foreign.items():
        registry.add(n, node)
    memory = Memory.open(path)
    actor = TenantActor(memory, registry, seed, lambda **line: say(**line))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        n = actor.rng.choice(tenants)
        actor.write(n)
        actor.read(n)
    say(kind="kept", kept={k: v for k, v in actor.kept.items()})
    say(kind="end", counts=dict(actor.counts))
    memory.close()


def tenancy_under_load(ctx: Context) -> Scenario:
    """Tenants written and deleted by threads and processes while readers check that
    every result stays inside its tenant."""
    from memstrata import Memory

    result = Scenario(name="tenancy_under_load")
    rng = random.Random(ctx.seed * 7919 + 13)
    seconds = ctx.sized(3, 30)
    path = ctx.work / "tenants.db"
    registry = Registry()
    lines: list[dict[str, Any]] = []
    lines_lock = threading.Lock()

    def report(**line: Any) -> None:
        with lines_lock:
            lines.append(line)

    with Memory.open(path) as memory:
        for n in range(len(TENANTS)):
            for _ in range(6):
                text = f"{tenant_marker(n)} seed {_words(rng)}"
                node = memory.add(text, user_id=TENANTS[n], infer=False)[0]["id"]
                registry.add(n, node)
        workers = [n for n in range(len(TENANTS)) if n not in IN_PROCESS]
        foreign = dict(registry.owner)
        actors: list[TenantActor] = []
        stop = 0.0  # set once the fork server is up: its start-up is not the run's time

        def writer(seed: int, tenants: tuple[int, ...]) -> None:
            # Each tenant has one writer, so what it last wrote is what the store holds.
            actor = TenantActor(memory, registry, seed, report)
            actors.append(actor)
            while time.monotonic() < stop:
                actor.write(actor.rng.choice(tenants))

        def reader(seed: int, tenants: tuple[int, ...]) -> None:
            actor = TenantActor(memory, registry, seed, report)
            actors.append(actor)
            while time.monotonic() < stop:
                actor.read(actor.rng.choice(tenants))

        reports = [ctx.work / f"tenancy-{w}.jsonl" for w in range(2)]
        errors = [ctx.work / f"tenancy-{w}.err" for w in range(2)]
        with ForkServer() as forks:
            stop = time.monotonic() + min(seconds, max(ctx.deadline - time.monotonic() - 15, 1))
            pids = [forks.start(f"{__name__}:tenancy_task", path=str(path),
                                report=str(reports[w]), error_file=str(errors[w]),
                                tenants=workers[w::2], foreign=foreign,
                                seconds=stop - time.monotonic(), seed=rng.randrange(2**31))
                    for w in range(2)]
            everyone = tuple(range(len(TENANTS)))  # readers read the workers' tenants too
            pool = [threading.Thread(target=fn, args=(rng.randrange(2**31), tenants))
                    for fn, tenants in ((writer, IN_PROCESS[0::2]), (writer, IN_PROCESS[1::2]),
                                        (reader, everyone), (reader, everyone))]
            started = time.perf_counter()
            for th in pool:
                th.start()
            for th in pool:
                th.join()
            ends = [forks.wait(pid, 120) for pid in pids]
            wall = time.perf_counter() - started
        for w, end in enumerate(ends):
            if end.killed or end.code != 0:
                result.fail("crashes", "a worker process failed or hung", worker=w,
                            error=child_error(errors[w]))
            lines += read_lines(reports[w])
        kept = {k: tuple(v) for line in lines if line.get("kind") == "kept"
                for k, v in line["kept"].items()}
        for actor in actors:
            kept.update(actor.kept)
        final_check(memory, kept, result)
        for what, detail in index_problems(sqlite_store(memory), memory.store.embedder):
            result.fail("integrity_failures", what, **detail)
    counts: Counter[str] = Counter()
    for actor in actors:
        counts.update(actor.counts)
    for line in lines:
        if line.get("kind") == "end":
            counts.update(line["counts"])
        elif line.get("kind") == "breach":
            result.fail("breaches", "a tenant saw or changed another tenant's data",
                        **{k: v for k, v in line.items() if k != "kind"})
        elif line.get("kind") == "error":
            result.fail("crashes", f"{line['call']} raised", error=line["error"])
    latencies = [x for a in actors for xs in a.latency.values() for x in xs]
    deletes = [x for a in actors for x in a.latency.get("delete_all", [])]
    result.attempts = counts["checked"]
    result.figures.update({
        "tenants": len(TENANTS), "seconds": round(wall, 1), "results_checked": counts["checked"],
        "calls": {k: v for k, v in counts.items() if k != "checked"},
        "locked_surfaced": sum(1 for line in lines if line.get("busy")),
        "calls_per_s_in_process": _rate(len(latencies), wall),
        "delete_all_p95_ms": _percentile(deletes, 0.95)})
    return result


def final_check(memory: Memory, kept: dict[str, tuple[int, str]], result: Scenario) -> None:
    """After the load: no row of any table stored under a tenant holds another tenant's
    marker, and every write not deleted since is there with its last text."""
    from memstrata.memory.store.forget import tenant_tables

    store = sqlite_store(memory)
    q = store.conn.execute
    for table in tenant_tables(store):
        for n, user in enumerate(TENANTS):
            for row in q(f'SELECT * FROM "{table}" WHERE user_id = ?', (user,)):
                marks = {int(m) for m in _MARK.findall(repr(row))} - {n}
                if marks:
                    result.fail("breaches", "a row stored under the wrong tenant", table=table,
                                tenant=user, holds=[TENANTS[m] for m in marks])
    for node, (n, text) in kept.items():
        got = memory.get(node, user_id=TENANTS[n])
        if got is None:
            result.fail("lost_writes", "a reported write is missing", id=node, tenant=TENANTS[n])
        elif got["text"] != text:
            result.fail("lost_writes", "a reported update is not there", id=node)


SCENARIOS: dict[str, Callable[[Context], Scenario]] = {
    "concurrency_processes": concurrency_processes,
    "concurrency_threads": concurrency_threads,
    "tenancy_under_load": tenancy_under_load,
}
