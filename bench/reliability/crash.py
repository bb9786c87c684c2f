"""Crash consistency: ``kill -9`` at random moments while memstrata writes, migrates or forgets.

Every scenario is a loop of kill cycles. A child process is forked from a *fork server*
(:class:`ForkServer`: a process that has memstrata and the default embedder loaded but
never opens SQLite, so a fork costs milliseconds and inherits no connection), works on
a store, and gets SIGKILL after a random delay. The parent then opens the file with a
fresh connection and checks it:

- ``crash_writes``: the child adds turns (``Memory.add``, 1-3 messages a call, now and
  then into a named session), imports whole conversations (``import_conversations``),
  adds facts, updates and deletes turns and facts. It writes one line to a report file
  before each call and one after the call returned (``os.write``), so a reported write
  is a committed one and at most one call (the last begun) was in flight. After the
  kill: the store opens; every reported write is there (else ``lost_writes``); the call
  in flight is wholly there or wholly absent; nothing else is there; no add or imported
  conversation is partial; and the indexes agree with the rows (:func:`index_problems`:
  ``integrity_check``, FTS5's own integrity check, one FTS row per turn and item holding
  what the current code would index, tags, one embedding per node equal to what the
  embedder gives for it now, no orphan vector, edge or version, no reused ``seq``).
  Every 20th worker is left to finish a short run instead: one that hangs (a lock an
  earlier killed worker left held, as tqdm's process-shared lock inside the embedder
  once did) counts under ``crashes``.
- ``crash_migration``: a store built by today's code is taken back to an older schema
  version (tables dropped, FTS terms un-prefixed, versions un-recorded: what that
  version's code wrote), and the child opens it (which migrates it) and is killed. The
  file must then be *at* a recorded version: its schema equal to that version's (built
  from ``schema.MIGRATIONS`` in memory) and its FTS terms in that version's form, never a
  mix; and it must open, fully migrated, with every row kept and the indexes agreeing.
- ``crash_forget``: the child forgets one tenant (``Memory.delete_all`` or
  ``Store.forget_user``, alternately) of a store holding several, and is killed.
  ``forget_tenant`` deletes in *one* transaction, so "atomic" means all-or-nothing
  across every table at once (stronger than per table): each table's rows of the tenant
  (the FTS rows of its turns and items and the steps of its runs included) are either
  all exactly as before or all gone, in every table together; a forget the child
  reported done is gone. The WAL checkpoint after the commit is outside that unit: a
  kill before it leaves the deletion committed in the WAL, and the next connection to
  close moves it into the file. Other tenants' rows are unchanged (a missing one is a
  lost write). Once the tenant is gone and the file closed, none of its text may remain
  in the file's bytes nor its terms in the FTS index: ``forget.py`` promises real
  forgetting, so a remnant counts under ``secrets_found``.

A child that raises instead of being killed counts under ``crashes`` (with its
traceback); a store that does not open or fails a check, under ``integrity_failures``.
"""

from __future__ import annotations

import json
import os
import random
import re
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import Context, Scenario, sqlite_store

if TYPE_CHECKING:
    from memstrata.memory import Embedder, Store

_FORK_ENV = {"TOKENIZERS_PARALLELISM": "false", "OPENBLAS_NUM_THREADS": "1",
             "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""The fork server runs single-threaded: a fork copies only the forking thread, so a lock
held by another thread (a BLAS or tokenizer pool) would stay locked in the child."""

WORDS = ("garden", "bees", "honey", "trail", "marathon", "bakery", "museum", "violin",
         "harbour", "lantern", "orchard", "pottery", "kayak", "recipe", "chess", "novel",
         "tram", "island", "festival", "glacier", "Sweden", "adoption", "sunset", "quilt")


def _sentence(rng: random.Random, tag: str, n: int = 6) -> str:
    return f"{tag} " + " ".join(rng.choice(WORDS) for _ in range(n))


# -- the fork server ---------------------------------------------------------------------


@dataclass
class Exit:
    """How a child ended: ``killed`` by our SIGKILL while it ran, or by itself
    (``code``); ``ms`` from its fork to its end."""

    killed: bool
    code: int | None
    signal: int | None
    ms: float


class ForkServer:
    """A process that forks workers with memstrata already loaded.

    It imports memstrata, loads the default embedder and warms it, and never opens
    SQLite, so each fork is cheap and inherits no connection. Workers are named tasks
    (``"package.module:function"``, imported in the server before the fork) called with
    keyword arguments; a worker that raises writes its traceback to ``args["error_file"]``
    (when given) and exits with status 3.

    Use as a context manager; :meth:`close` ends the server and any worker still alive.
    """

    def __init__(self) -> None:
        env = {**os.environ, **_FORK_ENV}
        self._proc = subprocess.Popen(
            [sys.executable, "-c",
             "from memstrata.bench.reliability.crash import serve_forks; serve_forks()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
        hello = self._reply(timeout_s=180)
        self.threads: int = hello["threads"]
        """OS threads in the server when it forks (1 is the safe value)."""

    def _reply(self, timeout_s: float) -> dict[str, Any]:
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
        line = self._proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"the fork server did not answer (exit {self._proc.poll()})")
        return json.loads(line)

    def _ask(self, timeout_s: float = 120, **command: Any) -> dict[str, Any]:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(command) + "\n")
        self._proc.stdin.flush()
        return self._reply(timeout_s)

    def start(self, task: str, **args: Any) -> int:
        """Fork a worker running ``task(**args)``; returns its pid."""
        return int(self._ask(cmd="start", task=task, args=args)["pid"])

    def kill(self, pid: int, after_s: float) -> Exit:
        """SIGKILL the worker ``after_s`` seconds after its fork (unless it ended first)."""
        return Exit(**self._ask(cmd="kill", pid=pid, after=after_s, timeout_s=after_s + 120))

    def wait(self, pid: int, timeout_s: float) -> Exit:
        """Wait for the worker to end; SIGKILL it after ``timeout_s`` seconds."""
        return Exit(**self._ask(cmd="wait", pid=pid, after=timeout_s, timeout_s=timeout_s + 120))

    def close(self) -> None:
        """End the server (it kills the workers it still has)."""
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_forks() -> None:
    """The fork server's main loop (see :class:`ForkServer`): JSON commands on stdin, one
    JSON answer per line on stdout."""
    import importlib

    for key, value in _FORK_ENV.items():
        os.environ.setdefault(key, value)
    import memstrata.api  # noqa: F401 - loaded once here, inherited by every worker
    from memstrata.memory import default_embedder

    default_embedder().encode(["warm up the tokenizer"])
    out = sys.stdout

    def answer(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    tasks: dict[str, Callable[..., None]] = {}
    born: dict[int, float] = {}
    task_dir = Path("/proc/self/task")
    answer({"threads": len(os.listdir(task_dir)) if task_dir.exists() else 1})
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["cmd"] == "start":
                if cmd["task"] not in tasks:
                    module, name = cmd["task"].split(":")
                    tasks[cmd["task"]] = getattr(importlib.import_module(module), name)
                pid = os.fork()
                if pid == 0:
                    _worker(tasks[cmd["task"]], cmd["args"])
                born[pid] = time.monotonic()
                answer({"pid": pid})
            else:
                pid = cmd["pid"]
                answer(_end(pid, born.pop(pid), cmd["after"], kill=cmd["cmd"] == "kill"))
    finally:
        for pid in born:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass


def _end(pid: int, born: float, after: float, *, kill: bool) -> dict[str, Any]:
    """Reap ``pid``; SIGKILL it ``after`` seconds after ``born`` if it still runs."""
    deadline = born + after
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            killed = False
            break
        now = time.monotonic()
        if now >= deadline:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            break
        # A kill sleeps to its moment; a wait polls, so an early end is seen at once.
        time.sleep(deadline - now if kill else min(0.005, deadline - now))
    return {"killed": killed,
            "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "ms": round((time.monotonic() - born) * 1000, 2)}


def _worker(fn: Callable[..., None], args: dict[str, Any]) -> None:
    """Run one task in a forked child and leave with ``os._exit`` (never returns)."""
    code = 0
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)  # the server's answer pipe is not the worker's to write
        fn(**args)
    except BaseException:
        code = 3
        if args.get("error_file"):
            with open(args["error_file"], "a", encoding="utf-8") as fh:
                fh.write(traceback.format_exc())
    finally:
        os._exit(code)


class Reporter:
    """Lines a worker appends to its report file, each with one ``os.write`` (a line
    written is on disk whatever happens to the process after)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def __call__(self, **obj: Any) -> None:
        """Append one JSON line."""
        os.write(self.fd, (json.dumps(obj) + "\n").encode())


def read_lines(path: str | Path) -> list[dict[str, Any]]:
    """The complete JSON lines of a report file (a torn last line is dropped)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for raw in data.split(b"\n")[:-1]:
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue
    return out


def child_error(path: str | Path) -> str:
    """The last lines of a worker's traceback file ("" when it wrote none)."""
    try:
        return Path(path).read_text(encoding="utf-8")[-1500:]
    except FileNotFoundError:
        return ""


# -- what a store must hold after any crash ----------------------------------------------


@contextmanager
def opened(path: str | Path) -> Iterator[Store]:
    """The store at ``path`` opened fresh (no embedder: nothing is written), then closed."""
    from memstrata.memory import Store

    store = Store.open(path, embedder=None)
    try:
        yield store
    finally:
        store.close()


def index_problems(store: Store, embedder: Embedder | None) -> list[tuple[str, dict[str, Any]]]:
    """Every way the store's indexes disagree with its rows, as ``(what, detail)``.

    Checks ``PRAGMA integrity_check`` and FTS5's ``integrity-check``; one ``turns_fts`` row
    per turn holding exactly what the current code indexes for it (body, and the context
    of its session neighbours) and one ``items_fts`` row per item, no FTS row without its
    row; ``item_tags`` equal to the items' tags; no embedding of a missing node; with an
    ``embedder``, one vector per turn and item equal (to 1e-4) to what ``embedder`` gives
    now for its contextual text; every edge's ends and every version's node are rows of
    the same tenant, versions numbered 1..n; every turn's session and conversation exist;
    no ``seq`` used twice in a conversation. Reads only.
    """
    import numpy as np

    from memstrata.memory.store import tenant_token
    from memstrata.memory.text import context_of, index_text

    q = store.conn.execute
    problems: list[tuple[str, dict[str, Any]]] = []

    def bad(what: str, **detail: Any) -> None:
        problems.append((what, detail))

    check = [r[0] for r in q("PRAGMA integrity_check").fetchall()]
    if check != ["ok"]:
        bad("integrity_check is not ok", result="; ".join(map(str, check[:5])))
    for fts in ("turns_fts", "items_fts"):
        try:
            q(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as exc:
            bad("FTS5 integrity-check failed", table=fts, error=str(exc))

    users = [r[0] for r in q("SELECT DISTINCT user_id FROM turns UNION "
                             "SELECT DISTINCT user_id FROM items")]
    turns = [t for u in users for t in store.turns(u)]
    turns.sort(key=lambda t: (t.user_id, t.conversation_id, t.session_id, t.seq))
    turn_rowid = {i: r for r, i in q("SELECT rowid, id FROM turns")}
    items = [i for u in users for i in store.items(u, limit=10**9)]
    item_rowid = {i: r for r, i in q("SELECT rowid, id FROM items")}
    owner = {t.id: t.user_id for t in turns} | {i.id: i.user_id for i in items}

    # Turns' FTS rows: body and neighbours' context, as Store._index_turns writes them.
    want: dict[int, tuple[str, str]] = {}
    sessions: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for t in turns:
        sessions[(t.user_id, t.conversation_id, t.session_id)].append(t)
    for (user, _, _), group in sessions.items():
        token = tenant_token(user)
        texts = [t.indexed_text() for t in group]  # the speaker is a field, not a word
        for n, t in enumerate(group):
            want[turn_rowid[t.id]] = (index_text(texts[n], token),
                                      index_text(context_of(texts, n), token))
    have = {r[0]: (r[1], r[2]) for r in q("SELECT rowid, body, context FROM turns_fts")}
    by_rowid = {turn_rowid[t.id]: t.id for t in turns}
    _compare_fts(bad, "turn", want, have, by_rowid)

    want_items = {item_rowid[i.id]: (index_text(" ".join([i.title, i.text, *i.tags]),
                                                tenant_token(i.user_id)),) for i in items}
    have_items = {r[0]: (r[1],) for r in q("SELECT rowid, body FROM items_fts")}
    _compare_fts(bad, "item", want_items, have_items, {item_rowid[i.id]: i.id for i in items})
    tags_want = {(i.user_id, t.casefold(), item_rowid[i.id]) for i in items for t in i.tags}
    tags_have = set(q("SELECT user_id, tag, item_rowid FROM item_tags").fetchall())
    if tags_want != tags_have:
        bad("item_tags disagree with the items' tags", missing=len(tags_want - tags_have),
            extra=len(tags_have - tags_want))

    vectors: dict[tuple[str, str], tuple[str, int, bytes]] = {
        (n, m): (u, d, v) for n, m, u, d, v in
        q("SELECT node_id, model, user_id, dim, vector FROM embeddings")}
    for node, model in vectors:
        if node not in owner:
            bad("embedding of a node that is not there", node=node, model=model)
        elif vectors[(node, model)][0] != owner[node]:
            bad("embedding under another tenant", node=node)
    if embedder is not None:
        nodes = [t.id for t in turns] + [i.id for i in items]
        texts = store.contextual_texts(turns) + [i.text for i in items]
        expected = embedder.encode(texts) if texts else np.zeros((0, embedder.dim))
        for node, vec in zip(nodes, expected, strict=True):
            row = vectors.get((node, embedder.name))
            if row is None:
                bad("node without its embedding", node=node)
            elif row[1] != embedder.dim or len(row[2]) != 4 * embedder.dim:
                bad("embedding of the wrong size", node=node, dim=row[1], bytes=len(row[2]))
            elif float(np.abs(np.frombuffer(row[2], dtype=np.float32) - vec).max()) > 1e-4:
                bad("stale embedding (not the vector of the node's current text)", node=node)

    for user, src, dst, relation in q("SELECT user_id, src, dst, relation FROM edges"):
        if owner.get(src) != user or owner.get(dst) != user:
            bad("edge to a node that is not there", src=src, dst=dst, relation=relation)
    for node, user, count, top in q("SELECT node_id, user_id, count(*), max(version)"
                                    " FROM versions GROUP BY node_id, user_id"):
        if owner.get(node) != user:
            bad("versions of a node that is not there", node=node)
        elif count != top:
            bad("version numbers with gaps or repeats", node=node, count=count, max=top)
    known_sessions = set(q("SELECT user_id, conversation_id, id FROM sessions").fetchall())
    known_convs = set(q("SELECT user_id, id FROM conversations").fetchall())
    for user, conv, session in sessions:
        if (user, conv, session) not in known_sessions:
            bad("turns of a session that has no row", conversation=conv, session=session)
        if (user, conv) not in known_convs:
            bad("turns of a conversation that has no row", conversation=conv)
    for _, conv, seq, count in q("SELECT user_id, conversation_id, seq, count(*) FROM turns"
                                    " GROUP BY 1, 2, 3 HAVING count(*) > 1"):
        bad("seq used twice in a conversation", conversation=conv, seq=seq, count=count)
    return problems


def _compare_fts(bad: Callable[..., None], node: str, want: Mapping[int, tuple[str, ...]],
                 have: Mapping[int, tuple[str, ...]], ids: dict[int, str]) -> None:
    for rowid in want.keys() - have.keys():
        bad(f"{node} without its FTS row", id=ids[rowid])
    for rowid in have.keys() - want.keys():
        bad(f"FTS row of a {node} that is not there", rowid=rowid)
    for rowid in want.keys() & have.keys():
        if want[rowid] != have[rowid]:
            bad(f"stale FTS row of a {node} (not what its current text indexes)", id=ids[rowid])


# -- crash_writes ----------------------------------------------------------------------

USERS = ("ana", "o'brien")
OPS = ("add", "import", "item", "update", "delete")
WEIGHTS = (45, 8, 12, 25, 10)


def writes_task(path: str, report: str, error_file: str, seed: int, cycle: int,
                turns: list[str], items: list[str], max_s: float = 20.0) -> None:
    """The ``crash_writes`` worker: random writes until killed (or ``max_s``), each call
    reported (``begin`` line before, ``done`` line after it returned)."""
    from memstrata import Memory
    from memstrata.formats import ConversationRecord, Message, SessionRecord
    from memstrata.memory import FactItem

    rng = random.Random(seed)
    say = Reporter(report)
    memory = Memory.open(path)
    targets = {"turn": list(turns), "item": list(items)}
    deadline = time.monotonic() + max_s
    n = 0
    while time.monotonic() < deadline:
        n += 1
        tag = f"k{cycle}n{n}"
        user = rng.choice(USERS)
        op = rng.choices(OPS, WEIGHTS)[0]
        if op in ("update", "delete") and not (targets["turn"] or targets["item"]):
            op = "add"
        if op == "add":
            size = rng.randint(1, 3)
            texts = [_sentence(rng, f"{tag}m{m}") for m in range(size)]
            conv = f"c{rng.randrange(3)}"
            session = rng.choice([None, None, None, f"s{rng.randint(1, 3)}"])
            say(n=n, op="add", user=user, conv=conv, batch=tag, texts=texts)
            events = memory.add([{"role": rng.choice(["user", "assistant"]), "content": t}
                                 for t in texts], user_id=user, conversation_id=conv,
                                session_id=session, metadata={"batch": tag, "size": size},
                                infer=False)
            ids = [e["id"] for e in events]
            say(n=n, done=True, ids=ids)
            targets["turn"] += ids
        elif op == "import":
            size = rng.randint(2, 6)
            texts = [_sentence(rng, f"{tag}m{m}") for m in range(size)]
            cut = rng.randint(1, size)
            parts = [texts[:cut], texts[cut:]] if cut < size else [texts]
            conv = f"imp{tag}z{size}"
            record = ConversationRecord(id=conv, sessions=[
                SessionRecord(id=f"s{s + 1}", messages=[
                    Message(speaker=rng.choice(["Ann", "Bob"]), content=t) for t in part])
                for s, part in enumerate(parts)])
            say(n=n, op="import", user=user, conv=conv, texts=texts)
            memory.import_conversations([record], user_id=user)
            say(n=n, done=True)
        elif op == "item":
            text = _sentence(rng, tag)
            tags = rng.sample(WORDS[:6], rng.randint(0, 2))
            say(n=n, op="item", user=user, text=text)
            item_id = memory.store.add(FactItem(user_id=user, text=text, tags=tags))
            say(n=n, done=True, id=item_id)
            targets["item"].append(item_id)
        else:
            kind = rng.choice([k for k in ("turn", "item") if targets[k]])
            target = rng.choice(targets[kind])
            if op == "update":
                text = _sentence(rng, f"{tag}u")
                say(n=n, op="update", id=target, text=text)
                memory.update(target, text)
                say(n=n, done=True)
            else:
                say(n=n, op="delete", id=target)
                ok = memory.delete(target)
                say(n=n, done=True, ok=ok)
                targets[kind].remove(target)
    memory.close()


@dataclass
class _Node:
    text: str
    user: str
    group: str | None = None
    versions: int = 0


@dataclass
class WriteModel:
    """What the store must hold: every write the workers reported, and the in-flight
    calls found committed. Groups are the all-or-nothing units (one ``add`` call, one
    imported conversation) with their sizes."""

    turns: dict[str, _Node] = field(default_factory=dict)
    items: dict[str, _Node] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    groups: dict[str, int] = field(default_factory=dict)
    group_deleted: Counter[str] = field(default_factory=Counter)
    reported: int = 0
    in_flight: Counter[str] = field(default_factory=Counter)

    def node(self, node_id: str) -> _Node | None:
        """The turn or item ``node_id`` (None when not held)."""
        return self.turns.get(node_id) or self.items.get(node_id)


def _db_state(store: Store) -> dict[str, Any]:
    q = store.conn.execute
    turns = {r[0]: (r[1], r[2], r[3], json.loads(r[4])) for r in q(
        "SELECT id, user_id, conversation_id, text, metadata FROM turns ORDER BY user_id,"
        " conversation_id, seq")}
    items = {r[0]: (r[1], r[2]) for r in q("SELECT id, user_id, text FROM items")}
    versions = dict(q("SELECT node_id, count(*) FROM versions GROUP BY node_id").fetchall())
    return {"turns": turns, "items": items, "versions": versions}


def _group_of(user: str, conv: str, meta: dict[str, Any]) -> tuple[str, int] | None:
    if "batch" in meta:
        return str(meta["batch"]), int(meta["size"])
    m = re.fullmatch(r"imp.*z(\d+)", conv)
    return (f"{user}/{conv}", int(m[1])) if m else None


def _group_rows(db: dict[str, Any], group: str) -> list[tuple[str, str]]:
    """(id, text) of the DB's turns of one group, in conversation order."""
    out = []
    for tid, (user, conv, text, meta) in db["turns"].items():
        g = _group_of(user, conv, meta)
        if g is not None and g[0] == group:
            out.append((tid, text))
    return out


def _text(db: dict[str, Any], node_id: str) -> str | None:
    """The stored text of a turn or item (None when it is not there)."""
    if node_id in db["turns"]:
        return db["turns"][node_id][2]
    return db["items"][node_id][1] if node_id in db["items"] else None


def _apply(model: WriteModel, op: dict[str, Any], db: dict[str, Any] | None) -> None:
    """Apply a reported op to the model (``db``: resolve ids of an import from the file)."""
    kind = op["op"]
    if kind == "add":
        model.groups[op["batch"]] = len(op["texts"])
        for tid, text in zip(op["ids"], op["texts"], strict=True):
            model.turns[tid] = _Node(text, op["user"], op["batch"])
    elif kind == "import":
        group = f"{op['user']}/{op['conv']}"
        model.groups[group] = len(op["texts"])
        rows = _group_rows(db, group) if db is not None else []
        if [t for _, t in rows] == op["texts"]:
            for (tid, _), text in zip(rows, op["texts"], strict=True):
                model.turns[tid] = _Node(text, op["user"], group)
        # else: left out; the comparison reports the conversation lost or partial
    elif kind == "item":
        model.items[op["id"]] = _Node(op["text"], op["user"])
    elif kind == "update":
        node = model.node(op["id"])
        if node is not None:
            node.text = op["text"]
            node.versions += 1
    elif kind == "delete" and op.get("ok", True):
        node = model.turns.pop(op["id"], None) or model.items.pop(op["id"], None)
        model.deleted.add(op["id"])
        if node is not None and node.group is not None:
            model.group_deleted[node.group] += 1


def _resolve(model: WriteModel, op: dict[str, Any], db: dict[str, Any], result: Scenario
             ) -> None:
    """Decide from the file whether the in-flight call committed; apply it if it did. A
    call found partly applied is a failure."""
    kind, committed = op["op"], False
    if kind in ("add", "import"):
        group = op["batch"] if kind == "add" else f"{op['user']}/{op['conv']}"
        rows = _group_rows(db, group)
        if rows:
            committed = [t for _, t in rows] == op["texts"]
            if not committed:
                result.fail("integrity_failures", f"the {kind} in flight is partly there",
                            group=group, found=len(rows), size=len(op["texts"]))
            elif kind == "add":
                op = {**op, "ids": [i for i, _ in rows]}
    elif kind == "item":
        found = [i for i, (u, t) in db["items"].items() if u == op["user"] and t == op["text"]]
        if found:
            committed, op = True, {**op, "id": found[0]}
    elif kind == "update":
        committed = _text(db, op["id"]) == op["text"]
    elif kind == "delete":
        committed = op["id"] not in db["turns"] and op["id"] not in db["items"]
    model.in_flight["committed" if committed else "absent"] += 1
    if committed:
        _apply(model, op, db)


def compare_writes(model: WriteModel, db: dict[str, Any], result: Scenario) -> None:
    """Count every difference between the model and the file: a reported write missing
    (``lost_writes``), a row nobody wrote or a partial group (``integrity_failures``)."""
    for table, held in (("turns", model.turns), ("items", model.items)):
        rows = db[table]
        for node_id, node in held.items():
            text = _text(db, node_id)
            if node_id not in rows:
                result.fail("lost_writes", f"a reported {table[:-1]} is missing", id=node_id)
            elif text != node.text:
                result.fail("lost_writes", "a reported update is not there", id=node_id,
                            want=node.text, found=text)
            versions = db["versions"].get(node_id, 0)
            if versions < node.versions:
                result.fail("lost_writes", "a reported update's version is missing",
                            id=node_id, want=node.versions, found=versions)
            elif versions > node.versions:
                result.fail("integrity_failures", "more versions than updates", id=node_id,
                            want=node.versions, found=versions)
        for node_id in rows.keys() - held.keys():
            if node_id in model.deleted:
                result.fail("lost_writes", "a reported delete is undone", id=node_id)
            else:
                result.fail("integrity_failures", f"a {table[:-1]} nobody reported (a "
                            "duplicate or a phantom)", id=node_id)
    sizes: Counter[str] = Counter()
    for user, conv, _, meta in db["turns"].values():
        g = _group_of(user, conv, meta)
        if g is not None:
            sizes[g[0]] += 1
            model.groups.setdefault(g[0], g[1])
    for group, count in sizes.items():
        if count + model.group_deleted[group] != model.groups[group]:
            result.fail("integrity_failures", "a partial add or conversation", group=group,
                        found=count, deleted=model.group_deleted[group],
                        size=model.groups[group])


def check_cycle(path: Path, model: WriteModel, lines: list[dict[str, Any]], result: Scenario,
                embedder: Embedder | None) -> None:
    """After one kill: apply the reported writes, resolve the one in flight, then compare
    the model with the file and check its indexes."""
    ops: dict[int, dict[str, Any]] = {}
    for line in lines:
        if "op" in line:
            ops[line["n"]] = dict(line)
        elif line["n"] in ops:
            ops[line["n"]].update(line)
    done = [op for op in ops.values() if op.get("done")]
    pending = [op for op in ops.values() if not op.get("done")]
    from memstrata.memory import Store

    try:
        store = Store.open(path, embedder=None)
    except Exception as exc:
        result.fail("integrity_failures", "the store does not open after the kill",
                    error=f"{type(exc).__name__}: {exc}")
        return
    try:
        db = _db_state(store)
        for op in done:
            model.reported += 1
            _apply(model, op, db)
        for op in pending[:-1]:  # only the last one begun can be in flight
            result.fail("crashes", "a call began but neither finished nor was killed", op=op)
        if pending:
            _resolve(model, pending[-1], db, result)
        compare_writes(model, db, result)
        for what, detail in index_problems(store, embedder):
            result.fail("integrity_failures", what, **detail)
    finally:
        store.close()


def crash_writes(ctx: Context) -> Scenario:
    """Kill a worker that adds, imports, updates and deletes, at random moments; check
    after every kill (see the module's docstring). Every :data:`PROBE_EVERY` th worker is
    left to finish instead (a short run): one that cannot, because an earlier kill left
    something held, is a hang the kills alone would not show."""
    from memstrata.memory import default_embedder

    result = Scenario(name="crash_writes")
    rng = random.Random(ctx.seed * 7919 + 1)
    kills = ctx.sized(5, 300)
    rotate = 30  # a fresh file every this many cycles: bounds the cost of a full check
    embedder = default_embedder()
    exits: Counter[str] = Counter()
    lifetimes: list[float] = []
    check_s: list[float] = []
    model = WriteModel()
    totals = Counter[str]()
    path = ctx.work / "writes-0.db"
    started = time.perf_counter()
    with ForkServer() as forks:
        result.figures["fork_server_threads"] = forks.threads
        for cycle in range(kills + kills // PROBE_EVERY):
            if ctx.expired():
                result.stopped_early = True
                break
            if cycle and cycle % rotate == 0:
                totals.update(reported=model.reported, **model.in_flight)
                _remove_store(path)
                path = ctx.work / f"writes-{cycle}.db"
                model = WriteModel()
            report, errors = ctx.work / "report.jsonl", ctx.work / "error.txt"
            report.unlink(missing_ok=True)
            errors.unlink(missing_ok=True)
            probe = cycle % PROBE_EVERY == PROBE_EVERY - 1
            pid = forks.start(f"{__name__}:writes_task", path=str(path), report=str(report),
                              error_file=str(errors), seed=rng.randrange(2**31), cycle=cycle,
                              turns=sorted(model.turns), items=sorted(model.items),
                              max_s=0.2 if probe else 20.0)
            if probe:
                end = forks.wait(pid, PROBE_TIMEOUT_S)
                check_probe(end, result)
            else:
                end = forks.kill(pid, _kill_delay(rng))
                result.attempts += 1
                lifetimes.append(end.ms)
            exits["killed" if end.killed else f"exit {end.code}"] += 1
            if not end.killed and end.code != 0:
                result.fail("crashes", "the worker raised", error=child_error(errors))
            t0 = time.perf_counter()
            check_cycle(path, model, read_lines(report), result, embedder)
            check_s.append(time.perf_counter() - t0)
    totals.update(reported=model.reported, **model.in_flight)
    _remove_store(path)
    wall = time.perf_counter() - started
    result.figures.update({
        "kills": len(lifetimes), "exits": dict(exits),
        "writes_reported": totals["reported"],
        "in_flight_committed": totals["committed"], "in_flight_absent": totals["absent"],
        "kill_after_ms_median": _median(lifetimes), "check_ms_median": _median(check_s, 1000),
        "kills_per_s": round(len(lifetimes) / wall, 2) if wall else 0.0})
    return result


PROBE_EVERY = 20
PROBE_TIMEOUT_S = 30.0
"""A probe worker writes for 0.2 s; past this it is taken as hung (and killed)."""


def check_probe(end: Exit, result: Scenario, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Count a probe worker that had to be killed: it hung (a lock left held by a killed
    worker, seen once with tqdm's process-shared lock inside the embedder)."""
    if end.killed:
        result.fail("crashes", "a writer hung after the kills before it",
                    waited_s=timeout_s)


def _kill_delay(rng: random.Random) -> float:
    """A random moment: log-uniform from 2 ms to 600 ms after the fork (opening the
    store, the first writes, and many writes later are all hit)."""
    return float(2 ** rng.uniform(1, 9.23)) / 1000


class _Span:
    """How long a worker runs when nothing kills it: calibrated once, then moved toward
    the lifetime of each worker that finished before its kill (the machine's load, and so
    the duration, changes over a run). Kill moments are drawn across it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def moment(self, rng: random.Random) -> float:
        """A random kill moment, from the fork to a little past the usual end."""
        return rng.uniform(0.0, 1.1 * self.seconds)

    def saw(self, end: Exit) -> None:
        """Learn from a worker's end (only an unkilled one tells how long a run takes)."""
        if not end.killed:
            self.seconds = 0.7 * self.seconds + 0.3 * end.ms / 1000


def _median(values: list[float], scale: float = 1.0) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[len(ordered) // 2] * scale, 2)


def _remove_store(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


# -- crash_migration ------------------------------------------------------------------------


def migrate_task(path: str, error_file: str) -> None:
    """The ``crash_migration`` worker: open the store (which migrates it) and close it."""
    from memstrata.memory import Store

    Store.open(path, embedder=None).close()


@cache
def schema_at(version: int) -> list[tuple[Any, ...]]:
    """The schema (objects, and each table's columns) that migrations 1..``version``
    build, from ``schema.MIGRATIONS`` run on an empty in-memory database."""
    from memstrata.memory.schema import MIGRATIONS, applied_versions

    conn = sqlite3.connect(":memory:")
    applied_versions(conn)
    for v, _, sql in MIGRATIONS:
        if v > version:
            continue
        if callable(sql):
            sql(conn)  # a data step on an empty database: the schema is unchanged
        else:
            for statement in filter(str.strip, sql.split(";")):
                conn.execute(statement)
    try:
        return schema_of(conn)
    finally:
        conn.close()


def schema_of(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """A database's schema: (type, name, table) of every object, then the columns of
    every table (name, type, not null, default, key)."""
    objects = sorted(conn.execute(
        "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall())
    columns = [(name, *c[1:]) for kind, name, _ in objects if kind == "table"
               for c in conn.execute(f'PRAGMA table_info("{name}")')]
    return [*objects, *columns]


def _unprefix(text: str | None) -> str | None:
    """FTS terms without their tenant prefix (``u3f..9ax`` + term -> term)."""
    from memstrata.memory.text import TENANT_JOIN

    if not text:
        return text
    return " ".join(t.split(TENANT_JOIN, 1)[1] for t in text.split())


def downgrade(path: Path, version: int) -> None:
    """Take a store written by today's code back to schema ``version``: what that
    version's code would have left (later tables and indexes dropped, ``turns.updated_at``
    removed, FTS terms un-prefixed with the tenant token back in the ``tenant`` column)."""
    from memstrata.memory.store import tenant_token

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    drops = {8: ["versions"], 7: ["turns_instances", "items_instances"],
             5: ["turns_vocab", "items_vocab"], 4: ["run_steps", "runs", "blobs", "events"],
             3: ["embeddings"], 2: ["item_tags", "items_fts", "items", "edges"],
             11: ["jobs"], 12: ["api_keys"]}
    from memstrata.memory.schema import LATEST_VERSION

    for v in range(LATEST_VERSION, version, -1):
        if v == 6:
            for table, fts, columns in (("turns", "turns_fts", ("body", "context")),
                                        ("items", "items_fts", ("body",))):
                rows = conn.execute(f"SELECT f.rowid, t.user_id, {', '.join(columns)} FROM"
                                    f" {fts} f JOIN {table} t ON t.rowid = f.rowid").fetchall()
                sets = ", ".join(f"{c} = ?" for c in columns)
                conn.executemany(
                    f"UPDATE {fts} SET tenant = ?, {sets} WHERE rowid = ?",
                    [(tenant_token(r[1]), *map(_unprefix, r[2:]), r[0]) for r in rows])
        for table in drops.get(v, []):
            conn.execute(f"DROP TABLE {table}")
        if v == 14:
            conn.execute("DROP INDEX turns_facets")
        if v == 9:
            conn.execute("DROP INDEX items_tenant_about")
        if v == 8:
            conn.execute("ALTER TABLE turns DROP COLUMN updated_at")
    conn.execute("DELETE FROM schema_migrations WHERE version > ?", (version,))
    conn.execute("COMMIT")
    conn.execute("VACUUM")
    conn.close()


def _fts_rows(conn: sqlite3.Connection) -> dict[str, dict[int, tuple[Any, ...]]]:
    """The FTS rows, by table and rowid (an unused ``tenant`` column reads as '': today's
    code leaves it NULL where migration 6 emptied it)."""
    out = {"turns_fts": {r[0]: r[1:] for r in conn.execute(
        "SELECT rowid, coalesce(tenant, ''), body, context FROM turns_fts")}}
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'items_fts'").fetchone():
        out["items_fts"] = {r[0]: r[1:] for r in conn.execute(
            "SELECT rowid, coalesce(tenant, ''), body FROM items_fts")}
    return out


def _row_digest(conn: sqlite3.Connection) -> dict[str, int]:
    """Row counts of the data tables a migration must keep."""
    names = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('conversations',"
        " 'sessions', 'turns', 'items', 'edges', 'item_tags', 'embeddings', 'blobs')")]
    return {n: conn.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in names}


@dataclass
class MigrationTemplate:
    """An old-schema store and what each migration stage must hold."""

    path: Path
    version: int
    rows: dict[str, int]
    fts_old: dict[str, dict[int, tuple[Any, ...]]]
    fts_new: dict[str, dict[int, tuple[Any, ...]]]
    texts: dict[str, str]


def build_old_store(work: Path, version: int, turns: int, seed: int) -> MigrationTemplate:
    """A store written by today's code through ``Memory`` (two tenants, conversations,
    facts with tags, updates, a blob), taken back to schema ``version``."""
    from memstrata import Memory
    from memstrata.formats import ConversationRecord, Message, SessionRecord
    from memstrata.memory import FactItem

    rng = random.Random(seed)
    path = work / f"template-v{version}.db"
    _remove_store(path)
    with Memory.open(path) as memory:
        for user in USERS:
            records = [ConversationRecord(id=f"conv{c}", sessions=[SessionRecord(
                id=f"s{s}", messages=[Message(speaker=rng.choice(["Ann", "Bob"]),
                                              content=_sentence(rng, f"c{c}s{s}m{m}"))
                                      for m in range(50)]) for s in range(turns // 200 or 1)])
                for c in range(2)]
            memory.import_conversations(records, user_id=user)
            ids = memory.store.add_many(FactItem(user_id=user, text=_sentence(rng, f"f{f}"),
                                                 tags=rng.sample(WORDS[:6], 2))
                                        for f in range(turns // 10))
            for node in ids[:5]:
                memory.update(node, _sentence(rng, "edited"))
            memory.store.blobs.put(user, "notes", _sentence(rng, "blob", 50))
        conn = sqlite_store(memory).conn.raw
        fts_new = _fts_rows(conn)
        texts = dict(conn.execute("SELECT id, text FROM turns").fetchall())
    downgrade(path, version)
    conn = sqlite3.connect(path)
    try:
        if schema_of(conn) != schema_at(version):
            raise RuntimeError(f"downgrade to v{version} did not give v{version}'s schema")
        fts_old, rows = _fts_rows(conn), _row_digest(conn)
    finally:
        conn.close()
    return MigrationTemplate(path, version, rows, fts_old, fts_new, texts)


def check_migration(path: Path, template: MigrationTemplate, result: Scenario) -> int | None:
    """After a kill: the file must be at one recorded version (schema and FTS form of
    exactly that version, no row lost), then open fully migrated with its indexes in
    agreement. Returns the version found before reopening (None if unreadable)."""
    from memstrata.memory.schema import LATEST_VERSION

    conn = sqlite3.connect(path)
    try:
        recorded = [r[0] for r in conn.execute("SELECT version FROM schema_migrations"
                                               " ORDER BY 1")]
        at = max(recorded, default=0)
        if recorded != list(range(1, at + 1)) or at < template.version:
            result.fail("integrity_failures", "recorded migrations are not a prefix",
                        recorded=recorded)
        elif schema_of(conn) != schema_at(at):
            result.fail("integrity_failures", "half-applied migration: the schema is not "
                        "that of the recorded version", version=at)
        else:
            want = template.fts_new if at >= 6 else template.fts_old
            have = _fts_rows(conn)
            for table, rows in want.items():
                if have.get(table) != rows:
                    result.fail("integrity_failures", "half-applied migration: FTS rows not "
                                "in the recorded version's form", version=at, table=table)
        for table, count in template.rows.items():
            found = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            if found != count:
                result.fail("lost_writes", "rows lost while migrating", table=table,
                            want=count, found=found)
    except sqlite3.DatabaseError as exc:
        result.fail("integrity_failures", "the killed file cannot be read",
                    error=f"{type(exc).__name__}: {exc}")
        return None
    finally:
        conn.close()
    try:
        with opened(path) as store:
            raw = store.conn.raw
            versions = [r[0] for r in raw.execute("SELECT version FROM schema_migrations")]
            if sorted(versions) != list(range(1, LATEST_VERSION + 1)):
                result.fail("integrity_failures", "not fully migrated after reopening",
                            versions=versions)
            elif schema_of(raw) != schema_at(LATEST_VERSION):
                result.fail("integrity_failures", "the migrated schema is not the latest")
            elif _fts_rows(raw) != template.fts_new:
                result.fail("integrity_failures", "migrated FTS rows differ from today's")
            texts = dict(raw.execute("SELECT id, text FROM turns").fetchall())
            if texts != template.texts:
                result.fail("lost_writes", "turns changed or lost by the migration",
                            missing=len(template.texts.keys() - texts.keys()))
            for what, detail in index_problems(store, None):
                result.fail("integrity_failures", what, **detail)
    except Exception as exc:
        result.fail("integrity_failures", "the store does not open after the kill",
                    error=f"{type(exc).__name__}: {exc}")
    return at


def crash_migration(ctx: Context) -> Scenario:
    """Kill a worker while it migrates an old-schema store; check after every kill."""
    from memstrata.memory.schema import LATEST_VERSION

    result = Scenario(name="crash_migration")
    rng = random.Random(ctx.seed * 7919 + 2)
    kills = ctx.sized(5, 250)
    turns = ctx.sized(400, 2000)
    templates = [build_old_store(ctx.work, v, turns, ctx.seed + v) for v in (2, 5, 7)]
    path = ctx.work / "migrating.db"
    with ForkServer() as forks:
        spans: dict[int, _Span] = {}
        for template in templates:  # calibrate: how long a whole migration takes
            _copy_store(template.path, path)
            end = forks.wait(forks.start(f"{__name__}:migrate_task", path=str(path),
                                         error_file=str(ctx.work / "error.txt")), 120)
            spans[template.version] = _Span(end.ms / 1000)
            if end.code != 0:
                result.fail("crashes", "migrating an old store failed",
                            error=child_error(ctx.work / "error.txt"))
            check_migration(path, template, result)
        result.figures["migration_ms"] = {f"v{v}": round(s.seconds * 1000, 1)
                                          for v, s in spans.items()}
        stages: Counter[str] = Counter()
        for cycle in range(kills):
            if ctx.expired():
                result.stopped_early = True
                break
            template = templates[cycle % len(templates)]
            _copy_store(template.path, path)
            errors = ctx.work / "error.txt"
            errors.unlink(missing_ok=True)
            pid = forks.start(f"{__name__}:migrate_task", path=str(path),
                              error_file=str(errors))
            end = forks.kill(pid, spans[template.version].moment(rng))
            spans[template.version].saw(end)
            result.attempts += 1
            if not end.killed and end.code != 0:
                result.fail("crashes", "the worker raised instead of being killed",
                            error=child_error(errors))
            at = check_migration(path, template, result)
            if not end.killed:
                stages["finished before the kill"] += 1
            elif at == template.version:
                stages["killed before any migration committed"] += 1
            elif at is not None and at < LATEST_VERSION:
                stages["killed between migrations"] += 1
            else:
                stages["killed after the last migration"] += 1
    result.figures.update({"kills": sum(v for k, v in stages.items() if k.startswith("killed")),
                           "stages": dict(stages),
                           "turns_per_store": templates[0].rows["turns"]})
    return result


def _copy_store(src: Path, dst: Path) -> None:
    _remove_store(dst)
    shutil.copyfile(src, dst)


# -- crash_forget ---------------------------------------------------------------------------

TENANTS = ("ana", "o'brien", "用户 x", 'say "hi"')


def marker(n: int) -> str:
    """A word only tenant ``n``'s texts contain (found in raw file bytes if left)."""
    return f"zqmark{n}q"


def forget_task(path: str, report: str, error_file: str, victim: str, how: str) -> None:
    """The ``crash_forget`` worker: forget one tenant, reporting before and after."""
    from memstrata import Memory

    say = Reporter(report)
    memory = Memory.open(path)
    say(op="forget", victim=victim)
    if how == "delete_all":
        memory.delete_all(victim)
    else:
        memory.store.forget_user(victim)
    say(done=True)
    memory.close()


def build_tenants(path: Path, turns: int, seed: int) -> None:
    """A store with every tenant of :data:`TENANTS`: conversations, facts with tags and
    versions, edges, a blob, a run with steps and an event; tenant n's texts carry
    :func:`marker` (n)."""
    from datetime import UTC, datetime

    from memstrata import Memory
    from memstrata.formats import ConversationRecord, Message, SessionRecord
    from memstrata.memory import FactItem
    from memstrata.memory.runs import RunRecord, StepRecord

    rng = random.Random(seed)
    _remove_store(path)
    with Memory.open(path) as memory:
        for n, user in enumerate(TENANTS):
            mark = marker(n)
            memory.import_conversations([ConversationRecord(id=f"conv{c}", sessions=[
                SessionRecord(id="s1", messages=[Message(
                    speaker=rng.choice(["Ann", "Bob"]),
                    content=_sentence(rng, f"{mark} c{c}m{m}")) for m in range(turns // 4)])])
                for c in range(4)], user_id=user)
            ids = memory.store.add_many(FactItem(user_id=user, text=_sentence(rng, f"{mark} f{f}"),
                                                 tags=rng.sample(WORDS[:6], 2))
                                        for f in range(max(turns // 10, 2)))
            for node in ids[:3]:
                memory.update(node, _sentence(rng, f"{mark} edited"))
            memory.store.blobs.put(user, "notes", _sentence(rng, f"{mark} blob", 40))
            runs = memory.store.runs
            runs.start(RunRecord(id=f"run-{n}", user_id=user, program="bench",
                                 task=f"{mark} task", started_at=datetime.now(UTC)))
            runs.add_steps(f"run-{n}", [StepRecord(kind="tool", name="mem_search",
                                                   input=f"{mark} query", output=f"{mark} out")])
            runs.log_event(user, {"note": f"{mark} event"})


def tenant_rows(conn: sqlite3.Connection, fts_rowids: dict[str, dict[str, list[int]]]
                ) -> dict[str, dict[str, list[tuple[Any, ...]]]]:
    """Every row of every tenant, per tenant and table: each table with a ``user_id``
    column, ``run_steps`` of the tenant's runs, and the FTS rows at ``fts_rowids``
    (the rowids its turns and items had before)."""
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'")]
    tables = [t for t in tables if any(c[1] == "user_id"
                                       for c in conn.execute(f'PRAGMA table_info("{t}")'))]
    out: dict[str, dict[str, list[tuple[Any, ...]]]] = {}
    for user in TENANTS:
        rows = {t: sorted(conn.execute(f'SELECT * FROM "{t}" WHERE user_id = ?', (user,)),
                          key=repr) for t in tables}
        rows["run_steps"] = sorted(conn.execute(
            "SELECT * FROM run_steps WHERE run_id IN (SELECT id FROM runs WHERE user_id = ?)",
            (user,)), key=repr)
        for fts, rowids in fts_rowids.get(user, {}).items():
            marks = ",".join("?" * len(rowids))
            rows[fts] = sorted(conn.execute(
                f"SELECT rowid, * FROM {fts} WHERE rowid IN ({marks})", rowids), key=repr)
        out[user] = rows
    return out


def check_forget(path: Path, before: dict[str, dict[str, list[tuple[Any, ...]]]], victim: str,
                 reported: bool, result: Scenario) -> str:
    """After a kill: the victim wholly there or wholly gone (gone if reported done),
    the others untouched, the file intact; its terms out of the FTS index once gone;
    once a reported forget's file is closed, no byte of its text. Returns ``"there"``,
    ``"gone"``, ``"gone, text left on disk"`` (killed before the scrub ended) or
    ``"broken"``."""
    from memstrata.memory.store import tenant_token

    fts_rowids = {u: {t: [r[0] for r in rows[t]] for t in ("turns_fts", "items_fts")}
                  for u, rows in before.items()}
    state = "broken"
    try:
        with opened(path) as store:
            raw = store.conn.raw
            after = tenant_rows(raw, fts_rowids)
            for what, detail in index_problems(store, None):
                result.fail("integrity_failures", what, **detail)
            tables = {t: ("there" if after[victim][t] == rows else
                          "gone" if not after[victim][t] else "changed")
                      for t, rows in before[victim].items() if rows}
            states = set(tables.values())
            if len(states) != 1 or "changed" in states:
                result.fail("integrity_failures", "forget half-applied: the tenant is partly "
                            "there", victim=victim, tables=json.dumps(tables))
            else:
                state = states.pop()
                if state == "there" and reported:
                    result.fail("lost_writes", "a reported forget is undone", victim=victim)
            token = tenant_token(victim)
            terms = raw.execute("SELECT count(*) FROM turns_vocab WHERE term >= ? AND term < ?",
                                (token + "x", token + "y")).fetchone()[0]
            if state == "gone" and terms:
                result.fail("secrets_found", "a forgotten tenant's terms remain in the FTS "
                            "index", victim=victim, terms=terms)
            for user in TENANTS:
                if user == victim:
                    continue
                for table, rows in before[user].items():
                    now = after[user][table]
                    if now != rows:
                        lost = len(set(rows) - set(now))
                        result.fail("lost_writes" if lost else "integrity_failures",
                                    "another tenant's rows changed by a forget", tenant=user,
                                    table=table, lost=lost)
    except Exception as exc:
        result.fail("integrity_failures", "the store does not open after the kill",
                    error=f"{type(exc).__name__}: {exc}")
        return "broken"
    if state == "gone":  # closed: the WAL is checkpointed into the file and removed
        mark = marker(TENANTS.index(victim)).encode()
        for suffix in ("", "-wal"):
            file = Path(f"{path}{suffix}")
            if file.exists() and mark in file.read_bytes():
                if not reported:  # killed between the commit and the end of the scrub
                    return "gone, text left on disk"
                result.fail("secrets_found", "a forgotten tenant's text is still in the file",
                            victim=victim, file=file.name)
    return state


def crash_forget(ctx: Context) -> Scenario:
    """Kill a worker while it forgets a tenant; check after every kill."""
    result = Scenario(name="crash_forget")
    rng = random.Random(ctx.seed * 7919 + 3)
    kills = ctx.sized(5, 200)
    template = ctx.work / "tenants.db"
    build_tenants(template, ctx.sized(120, 600), ctx.seed)
    conn = sqlite3.connect(template)
    rowids = {u: {"turns_fts": [r[0] for r in conn.execute(
                  "SELECT rowid FROM turns WHERE user_id = ?", (u,))],
                  "items_fts": [r[0] for r in conn.execute(
                      "SELECT rowid FROM items WHERE user_id = ?", (u,))]} for u in TENANTS}
    before = tenant_rows(conn, rowids)
    conn.close()
    path, report, errors = ctx.work / "forget.db", ctx.work / "report.jsonl", ctx.work / "e.txt"
    states: Counter[str] = Counter()
    with ForkServer() as forks:
        spans = []
        for how in ("delete_all", "forget_user"):  # calibrate, and check the plain case
            _copy_store(template, path)
            report.unlink(missing_ok=True)
            end = forks.wait(forks.start(f"{__name__}:forget_task", path=str(path),
                                         report=str(report), error_file=str(errors),
                                         victim=TENANTS[0], how=how), 120)
            spans.append(end.ms / 1000)
            if end.code != 0:
                result.fail("crashes", "forgetting a tenant failed", error=child_error(errors))
            if check_forget(path, before, TENANTS[0], True, result) == "there":
                result.fail("lost_writes", "a finished forget left the tenant", how=how)
        span = _Span(min(spans))
        result.figures["forget_ms"] = round(span.seconds * 1000, 1)
        for cycle in range(kills):
            if ctx.expired():
                result.stopped_early = True
                break
            victim = rng.choice(TENANTS)
            how = ("delete_all", "forget_user")[cycle % 2]
            _copy_store(template, path)
            report.unlink(missing_ok=True)
            errors.unlink(missing_ok=True)
            pid = forks.start(f"{__name__}:forget_task", path=str(path), report=str(report),
                              error_file=str(errors), victim=victim, how=how)
            end = forks.kill(pid, span.moment(rng))
            span.saw(end)
            result.attempts += 1
            if not end.killed and end.code != 0:
                result.fail("crashes", "the worker raised instead of being killed",
                            error=child_error(errors))
            reported = any(line.get("done") for line in read_lines(report))
            state = check_forget(path, before, victim, reported, result)
            states[f"{'killed' if end.killed else 'finished'}, {state}"] += 1
    result.figures.update({"kills": sum(v for k, v in states.items() if k.startswith("killed")),
                           "outcomes": dict(states)})
    return result


SCENARIOS: dict[str, Callable[[Context], Scenario]] = {
    "crash_writes": crash_writes,
    "crash_migration": crash_migration,
    "crash_forget": crash_forget,
}
