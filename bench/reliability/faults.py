"""Disk and resource faults: a full disk, a read-only file or folder, a corrupt file.

The promise under test: a fault of the file surfaces as one clear error — a
``StoreError`` (a ``sqlite3.DatabaseError``) from the Python API, a non-zero exit and
ONE line on stderr (no traceback) from the command line — and what was committed before
stays there and readable, as far as SQLite can keep it.

How each fault is made without root (a small tmpfs or a loop device needs it):

* ``disk_full``: for the Python API, ``PRAGMA max_page_count`` caps the open store just
  above its size, so SQLite fails the next growth as it fails on a full disk
  (``SQLITE_FULL``); for the command line, a child process runs under ``RLIMIT_FSIZE``,
  so the kernel refuses every write past that size (``EFBIG``) to every file it writes:
  the store, its WAL, an export. (Python ignores ``SIGXFSZ``, so the write fails rather
  than killing the process.)
* ``read_only``: ``chmod 0444`` on the file, ``0555`` on its folder (a store closed
  cleanly has no ``-wal``/``-shm`` beside it, and a read-only folder stops SQLite from
  making them). Root ignores permission bits, so the trials run in a child process that
  first drops ``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH`` and ``CAP_FOWNER`` (its own
  and its children's, through ``prctl``/``capset``): the kernel then checks the bits as
  it does for anyone. A child that cannot drop them reports the fault as not in force.
* ``corrupt_file``: bytes flipped in the 100-byte header, in the pages of one table
  (found through SQLite's ``dbstat``, random pages without it), a page zeroed, the file
  cut short.

Counted: an exception other than ``StoreError`` (API) or an uncaught exception, a
traceback or a message that is not one line (command line) under ``crashes``; a row
committed before the fault that is gone or changed under ``lost_writes``; a failed
write that left rows, or a file failing ``PRAGMA integrity_check`` after a disk-full or
read-only fault, under ``integrity_failures``. A fault that could not be made (the
write went through) is a failure of the harness, counted without a headline counter.
Bytes flipped inside a stored value can read back altered without any error: SQLite
keeps no checksums, so that is measured (``rows_altered``), not counted.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from .common import Context, Scenario, sqlite_store
from .fuzz import Outcome, call_capped, integrity, judge_cli, run_cli

CAP_S = 20.0
"""A call (or a command) still running after this many seconds is a hang."""
USER = "alice"


# -- shared checks --------------------------------------------------------------------------


def judge_api_error(outcome: Outcome) -> tuple[str, str, str] | None:
    """``(counter, what, detail)`` when an API call under a fault broke its promise: it hung,
    or raised anything but a ``StoreError`` whose message names the store."""
    from memstrata.memory import StoreError

    if outcome.timed_out:
        return "crashes", "hang", f"{outcome.seconds:.1f} s"
    error = outcome.error
    if error is None:
        return None
    if not isinstance(error, StoreError):
        return "crashes", "not a StoreError", f"{type(error).__name__}: {str(error)[:200]}"
    if not str(error).startswith("store"):
        return "crashes", "unclear StoreError", str(error)[:200]
    return None


def missing_rows(path: Path, committed: dict[str, str]) -> list[str]:
    """Ids of ``committed`` (id -> text) that a fresh connection to ``path`` does not
    find with that text (all of them when the file cannot be read)."""
    conn = sqlite3.connect(path)
    found: dict[str, str] = {}
    try:
        for table in ("turns", "items"):
            for start in range(0, len(committed), 500):
                chunk = list(committed)[start:start + 500]
                found.update(conn.execute(
                    f"SELECT id, text FROM {table} WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk).fetchall())
    except sqlite3.Error:
        found = {}
    finally:
        conn.close()
    return [i for i, text in committed.items() if found.get(i) != text]


def _count(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def _seed(path: Path, turns: int, rng: random.Random, user: str = USER) -> dict[str, str]:
    """A store with ``turns`` turns, an item and a blob of ``user``; returns id -> text."""
    from memstrata import Memory
    from memstrata.memory import FactItem

    words = ["river", "stone", "lamp", "orchard", "violin", "harbour", "maple", "comet"]
    committed: dict[str, str] = {}
    with Memory.open(path) as memory:
        for n in range(turns):
            text = f"{user} note {n}: " + " ".join(rng.choice(words) for _ in range(12))
            committed[memory.add(text, user_id=user, infer=False)[0]["id"]] = text
        item = FactItem(user_id=user, text=f"{user} keeps bees", subject=user,
                        predicate="keeps", object="bees")
        committed[memory.store.add(item)] = item.text
        memory.store.blobs.put(user, "notes", "line\n" * 200)
    return committed


def _fail(result: Scenario, verdict: tuple[str, str, str] | None, **detail: Any) -> bool:
    if verdict is None:
        return False
    counter, what, why = verdict
    result.fail(counter, what, detail=why, **detail)
    return True


# -- disk_full ----------------------------------------------------------------------------------


def _fill_api(result: Scenario, path: Path, rng: random.Random, tally: Counter[str]) -> None:
    """One API trial: seed, cap the file, write until the store is full, then check."""
    from memstrata import Memory
    from memstrata.memory import FactItem
    from memstrata.tools import ToolError, ToolSession

    committed = _seed(path, rng.randint(3, 12), rng)
    turns_before = _count(path, "turns")
    memory = Memory.open(path)
    try:
        store = sqlite_store(memory)
        pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
        store.conn.execute(f"PRAGMA max_page_count = {pages + rng.randint(0, 12)}")
        session = ToolSession(store, USER)
        tools = {t.__name__: t for t in session.handle_tools()}
        added_turns = 0
        outcome = Outcome()
        for n in range(400):
            text = f"write {n} " + " ".join(f"w{rng.randrange(10**6)}" for _ in range(60))
            how = rng.choice(["add", "add", "item", "blob", "tool"])
            writes: dict[str, Callable[[], Any]] = {
                "add": partial(memory.add, text, user_id=USER, infer=False),
                "item": partial(store.add, FactItem(user_id=USER, text=text)),
                "blob": partial(store.blobs.put, USER, f"b{n}", text * 20),
                "tool": partial(tools["mem_add"], text[:1500]),
            }
            outcome = call_capped(writes[how], CAP_S)
            if outcome.error is not None or outcome.timed_out:
                tally[f"api {how}"] += 1
                break
            if how == "add":
                committed[outcome.value[0]["id"]] = text
                added_turns += 1
            elif how == "item":
                committed[outcome.value] = text
            elif how == "tool":
                committed[outcome.value["id"]] = text[:1500]
        else:
            result.fail(None, "disk-full fault not triggered", db=path.name)
            return
        if isinstance(outcome.error, ToolError):
            outcome.error = outcome.error.__cause__ or outcome.error
        _fail(result, judge_api_error(outcome), db=path.name, call=how)
        # Reads go on in the same process, and the store takes writes again once space
        # is back: no transaction left open by the failure.
        gone = [i for i, text in committed.items()
                if (memory.get(i, user_id=USER) or {}).get("text") != text]
        if gone:
            result.fail("lost_writes", "committed row unreadable after disk full",
                        db=path.name, ids=gone[:5], count=len(gone))
        store.conn.execute("PRAGMA max_page_count = 1073741823")
        after = call_capped(lambda: memory.add("after the fault", user_id=USER, infer=False),
                            CAP_S)
        if after.error is not None:
            result.fail("crashes", "store unusable after disk full", db=path.name,
                        detail=f"{type(after.error).__name__}: {after.error}")
        else:
            committed[after.value[0]["id"]] = "after the fault"
            added_turns += 1
    finally:
        memory.close()
    _check_file(result, path, committed)
    if _count(path, "turns") != turns_before + added_turns:
        result.fail("integrity_failures", "a failed write left rows", db=path.name)


def _check_file(result: Scenario, path: Path, committed: dict[str, str]) -> None:
    """The file opens fresh, passes ``integrity_check`` and holds every committed row."""
    check = integrity(path)
    if check != "ok":
        result.fail("integrity_failures", "integrity check failed", db=path.name, detail=check)
    if gone := missing_rows(path, committed):
        result.fail("lost_writes", "committed row missing after the fault", db=path.name,
                    ids=gone[:5], count=len(gone))


_FILL_CHILD = """
import json, resource, sys
from memstrata.bench.reliability.fuzz import judge_cli, run_cli
spec = json.load(sys.stdin)
resource.setrlimit(resource.RLIMIT_FSIZE, (spec["limit"], spec["limit"]))
ids, failed = [], None
for n in range(spec["writes"]):
    argv = ["add", f"line {n} " + "filler " * spec["words"], "--user", spec["user"],
            "--db", spec["db"]]
    outcome, out, err = run_cli(argv)
    ids += [json.loads(line)["id"] for line in out.splitlines() if line.startswith("{")]
    verdict = judge_cli(outcome, out, err, secrets=[], argv=argv, tenant_bound=False)
    code = outcome.exit_code
    if verdict or code:
        failed = {"verdict": verdict, "code": str(code), "err": err[-300:]}
        break
json.dump({"ids": ids, "failed": failed}, sys.stdout)
"""


def _fill_cli(result: Scenario, path: Path, rng: random.Random, tally: Counter[str]) -> None:
    """One command-line trial: ``memstrata add`` under ``RLIMIT_FSIZE`` until it fails."""
    from memstrata import Memory

    committed = _seed(path, rng.randint(3, 8), rng)
    limit = path.stat().st_size + rng.randint(1, 16) * 4096
    words = rng.choice([5, 200, 2000])
    spec = {"limit": limit, "writes": 60, "words": words, "user": USER, "db": str(path)}
    proc = subprocess.run([sys.executable, "-c", _FILL_CHILD], input=json.dumps(spec),
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not proc.stdout.strip():
        result.fail("crashes", "child died", db=path.name, detail=proc.stderr[-300:])
        return
    report = json.loads(proc.stdout)
    failed = report["failed"]
    if failed is None:
        result.fail(None, "disk-full fault not triggered", db=path.name, limit=limit)
    elif failed["verdict"]:
        counter, what, why = failed["verdict"]
        result.fail(counter, what, db=path.name, detail=why, stderr=failed["err"])
    else:
        tally["cli add"] += 1
    # The real command, as a user runs it, on the full store: exit 2 and one line.
    real = subprocess.run([sys.executable, "-m", "memstrata.cli", "add", "one more " * words,
                           "--user", USER, "--db", str(path)], capture_output=True, text=True,
                          timeout=120, preexec_fn=lambda: _fsize(limit))
    lines = [ln for ln in real.stderr.splitlines() if ln.strip()]
    if real.returncode == 0:
        committed.update({json.loads(ln)["id"]: json.loads(ln)["memory"]
                          for ln in real.stdout.splitlines() if ln.startswith("{")})
    elif "Traceback" in real.stderr or len(lines) != 1:
        result.fail("crashes", "command on a full disk: not one line", db=path.name,
                    detail=" | ".join(lines)[-300:])
    with Memory.open(path) as memory:  # what the command printed as added is there
        for i in report["ids"]:
            got = memory.get(i, user_id=USER)
            if got is not None:
                committed[i] = got["text"]
            else:
                result.fail("lost_writes", "an add the command reported is missing",
                            db=path.name, id=i)
    _check_file(result, path, committed)


def _fsize(limit: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def disk_full(ctx: Context) -> Scenario:
    """Fill stores through the API (``max_page_count``) and the command line
    (``RLIMIT_FSIZE``); check the error, the committed rows and the file."""
    result = Scenario(name="disk_full")
    rng = random.Random(ctx.seed)
    tally: Counter[str] = Counter()
    started = time.perf_counter()
    api_trials, cli_trials = ctx.sized(3, 40), ctx.sized(1, 6)
    for n in range(max(api_trials, cli_trials)):
        if ctx.expired():
            result.stopped_early = True
            break
        if n < api_trials:
            result.attempts += 1
            _fill_api(result, ctx.work / f"api{n}.db", rng, tally)
        if n < cli_trials:
            result.attempts += 1
            _fill_cli(result, ctx.work / f"cli{n}.db", rng, tally)
    result.figures = {"seconds": round(time.perf_counter() - started, 1), "faults": dict(tally),
                      "how": "API: PRAGMA max_page_count; command line: RLIMIT_FSIZE"}
    return result


# -- read_only --------------------------------------------------------------------------------

READ_ONLY_CASES = ("file", "folder", "both", "file_hot_wal")
"""What is made read-only: the file (0444), its folder (0555), both; ``file_hot_wal``: the
file, with the -wal and -shm of a process still holding it open left beside it."""


def drop_privilege() -> bool:
    """Drop the capabilities that let root ignore permission bits (from this process
    and every child it starts). True when none are left in force (already so for any
    other user); False when they could not be dropped."""
    if os.geteuid() != 0:
        return True
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        dac = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        for cap in dac:
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP: children cannot regain them

        class Header(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

        class Data(ctypes.Structure):
            _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                        ("inheritable", ctypes.c_uint32)]

        header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
        if libc.capget(ctypes.byref(header), data) != 0:
            return False
        mask = ~sum(1 << c for c in dac) & 0xFFFFFFFF
        for word in data[:1]:
            word.effective &= mask
            word.permitted &= mask
            word.inheritable &= mask
        return libc.capset(ctypes.byref(header), data) == 0
    except (OSError, AttributeError):
        return False


def read_only_trial(path: Path, committed: dict[str, str], out: Path, real: bool = True
                    ) -> list[dict[str, Any]]:
    """Every call on a read-only store, judged; returns the broken promises as
    ``{"counter", "what", "detail", "call"}``. Runs where the fault is in force; ``real``
    also runs the console command in a process of its own."""
    from memstrata import Memory

    found: list[dict[str, Any]] = []

    def note(verdict: tuple[str | None, str, str] | None, call: str) -> None:
        if verdict is not None:
            found.append({"counter": verdict[0], "what": verdict[1], "detail": verdict[2],
                          "call": call})

    if os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
        found.append({"counter": None, "what": "read-only fault not in force",
                      "detail": "the file and its folder are writable", "call": "access"})
        return found
    opened = call_capped(lambda: Memory.open(path), CAP_S)
    note(judge_api_error(opened), "Memory.open")
    if opened.error is None and not opened.timed_out:
        memory = opened.value
        for i, text in committed.items():
            got = call_capped(partial(memory.get, i, user_id=USER), CAP_S)
            note(judge_api_error(got), "Memory.get")
            if got.error is None and (got.value or {}).get("text") != text:
                note(("lost_writes", "committed row unreadable on a read-only store", i),
                     "Memory.get")
        note(judge_api_error(call_capped(
            lambda: memory.search("river", user_id=USER), CAP_S)), "Memory.search")
        wrote = call_capped(lambda: memory.add("no room", user_id=USER, infer=False), CAP_S)
        if wrote.error is None and not wrote.timed_out:
            note((None, "a write went through on a read-only store", str(wrote.value)[:100]),
                 "Memory.add")
        note(judge_api_error(wrote), "Memory.add")
        memory.close()
    some = next(iter(committed))
    for argv in (["stats"], ["get", some], ["search", "river", "--user", USER],
                 ["export", str(out / "x.jsonl"), "--user", USER],
                 ["add", "no room", "--user", USER], ["delete", some, "--user", USER],
                 ["forget", "--user", USER, "--yes"]):
        argv = [*argv, "--db", str(path)]
        outcome, stdout, stderr = run_cli(argv, cap_s=CAP_S)
        note(judge_cli(outcome, stdout, stderr, secrets=[], argv=argv, tenant_bound=False),
             " ".join(argv[:1]))
        code = outcome.exit_code
        if argv[0] in ("add", "delete", "forget") and code in (0, None):
            note((None, "a write command succeeded on a read-only store", stdout[:100]),
                 argv[0])
    if real:
        proc = subprocess.run([sys.executable, "-m", "memstrata.cli", "add", "x", "--user",
                               USER, "--db", str(path)], capture_output=True, text=True,
                              timeout=120)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        if proc.returncode == 0 or "Traceback" in proc.stderr or len(lines) != 1:
            note(("crashes", "command on a read-only store: not exit 2 and one line",
                  " | ".join(lines)[-300:]), "memstrata add")
    return found


def read_only_child() -> int:
    """Entry of the child process: drop the privilege, run the trials named on stdin,
    print what broke as JSON."""
    spec = json.load(sys.stdin)
    if not drop_privilege():
        json.dump({"dropped": False, "found": []}, sys.stdout)
        return 0
    found = {case["name"]: read_only_trial(Path(case["db"]), case["committed"],
                                           Path(spec["out"]), case["real"])
             for case in spec["cases"]}
    json.dump({"dropped": True, "found": found}, sys.stdout)
    return 0


def _make_read_only(folder: Path, db: Path, case: str) -> None:
    if case in ("file", "both", "file_hot_wal"):
        db.chmod(0o444)
    if case in ("folder", "both"):
        folder.chmod(0o555)


def _restore(folder: Path) -> None:
    folder.chmod(0o755)
    for f in folder.iterdir():
        f.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)


def read_only(ctx: Context) -> Scenario:
    """Read-only file, folder and both, through the API and the command line, in a child
    process without the privilege to ignore permissions."""
    result = Scenario(name="read_only")
    started = time.perf_counter()
    rng = random.Random(ctx.seed)
    rounds = ctx.sized(1, 3)
    (ctx.work / "out").mkdir(exist_ok=True)
    stats: Counter[str] = Counter()
    for r in range(rounds):
        if ctx.expired():
            result.stopped_early = True
            break
        cases: list[dict[str, Any]] = []
        holders: list[sqlite3.Connection] = []
        for fault in READ_ONLY_CASES:
            folder = ctx.work / f"{fault}{r}"
            folder.mkdir()
            db = folder / "store.db"
            committed = _seed(db, rng.randint(3, 10), rng)
            if fault == "file_hot_wal":  # a reader holds it: -wal and -shm stay beside it
                holder = sqlite3.connect(db)
                holder.execute("SELECT count(*) FROM turns").fetchone()
                holders.append(holder)
            _make_read_only(folder, db, fault)
            # One case a round also runs the console command as its own process.
            cases.append({"name": f"{fault}{r}", "db": str(db), "committed": committed,
                          "folder": folder, "real": len(cases) == r % len(READ_ONLY_CASES)})
        spec = {"out": str(ctx.work / "out"),
                "cases": [{k: v for k, v in c.items() if k != "folder"} for c in cases]}
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "memstrata.bench.reliability.faults", "read_only"],
                input=json.dumps(spec), capture_output=True, text=True, timeout=300)
        finally:
            for holder in holders:
                holder.close()
            for case in cases:
                _restore(case["folder"])
        result.attempts += len(cases)
        if proc.returncode != 0 or not proc.stdout.strip():
            result.fail("crashes", "read-only child died", detail=proc.stderr[-400:])
            continue
        report = json.loads(proc.stdout)
        if not report["dropped"]:
            result.fail(None, "read-only fault not in force: could not drop the privilege")
            continue
        for case in cases:
            for f in report["found"][case["name"]]:
                result.fail(f["counter"], f["what"], case=case["name"], call=f["call"],
                            detail=f["detail"])
            stats[case["name"].rstrip("0123456789")] += 1
            _check_file(result, Path(case["db"]), case["committed"])
    result.figures = {"seconds": round(time.perf_counter() - started, 1), "cases": dict(stats),
                      "root": os.geteuid() == 0,
                      "how": "chmod; as root, a child without CAP_DAC_OVERRIDE"}
    return result


# -- corrupt_file -----------------------------------------------------------------------------

CORRUPTIONS = ("header", "table_page", "zero_page", "truncate", "random_bytes")


def _pages(path: Path) -> dict[str, list[int]]:
    """Page numbers of every table and index (empty where ``dbstat`` is not compiled in)."""
    conn = sqlite3.connect(path)
    try:
        pages: dict[str, list[int]] = {}
        for name, page in conn.execute("SELECT name, pageno FROM dbstat"):
            pages.setdefault(name, []).append(page)
        return pages
    except sqlite3.Error:
        return {}
    finally:
        conn.close()


def corrupt(path: Path, how: str, rng: random.Random, pages: dict[str, list[int]]) -> str:
    """Damage ``path`` in place one way of :data:`CORRUPTIONS`; returns what was hit."""
    data = bytearray(path.read_bytes())
    size = 4096
    count = max(len(data) // size, 2)
    if how == "header":
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(100)] ^= 1 << rng.randrange(8)
        hit = "header"
    elif how in ("table_page", "zero_page"):
        hit = rng.choice(sorted(pages)) if pages else "page"
        page = rng.choice(pages[hit]) - 1 if pages else rng.randrange(1, count)
        if how == "zero_page":
            data[page * size:(page + 1) * size] = bytes(size)
        else:
            for _ in range(rng.choice([1, 4, 16])):
                data[page * size + rng.randrange(size)] ^= 1 << rng.randrange(8)
    elif how == "truncate":
        data = data[: rng.randrange(size, len(data))]
        hit = "end of file"
    else:
        for _ in range(rng.randint(8, 64)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        hit = "anywhere"
    path.write_bytes(bytes(data))
    return hit


def corrupt_trial(result: Scenario, path: Path, committed: dict[str, str], how: str,
                  hit: str, figures: Counter[str], cli: bool) -> None:
    """Every read and a write on a damaged store: each returns the right data or raises a
    ``StoreError``; the command line exits 0 or prints one line."""
    from memstrata import Memory

    opened = call_capped(lambda: Memory.open(path), CAP_S)
    if _fail(result, judge_api_error(opened), db=path.name, how=how, hit=hit, call="open"):
        return
    if opened.error is not None:
        figures["open refused"] += 1
    else:
        memory = opened.value
        for i, text in committed.items():
            got = call_capped(partial(memory.get, i, user_id=USER), CAP_S)
            if _fail(result, judge_api_error(got), db=path.name, how=how, hit=hit,
                     call="get"):
                continue
            value = None if got.error else (got.value or {}).get("text")
            figures["rows readable" if value == text else "rows altered" if value
                    else "rows refused"] += 1
        for call, fn in (("search", lambda: memory.search("river lamp", user_id=USER)),
                         ("get_all", lambda: memory.get_all(USER, kind="turn", limit=1000)),
                         ("export", lambda: memory.export(USER, path.with_suffix(".jsonl"))),
                         ("add", lambda: memory.add("after", user_id=USER, infer=False))):
            _fail(result, judge_api_error(call_capped(fn, CAP_S)), db=path.name, how=how,
                  hit=hit, call=call)
        close = call_capped(memory.close, CAP_S)
        _fail(result, judge_api_error(close), db=path.name, how=how, hit=hit, call="close")
    if not cli:
        return
    some = next(iter(committed))
    for argv in (["stats"], ["get", some], ["search", "river", "--user", USER, "--no-dense"],
                 ["export", str(path.with_suffix(".cli.jsonl")), "--user", USER],
                 ["add", "after", "--user", USER]):
        argv = [*argv, "--db", str(path)]
        outcome, out, err = run_cli(argv, cap_s=CAP_S)
        _fail(result, judge_cli(outcome, out, err, secrets=[], argv=argv, tenant_bound=False),
              db=path.name, how=how, hit=hit, call=argv[0])


def corrupt_file(ctx: Context) -> Scenario:
    """Damage copies of a store and read them through the API and the command line."""
    result = Scenario(name="corrupt_file")
    started = time.perf_counter()
    rng = random.Random(ctx.seed)
    base = ctx.work / "base.db"
    committed = _seed(base, ctx.sized(20, 60), rng)
    _seed(base, 10, rng, user="bob")
    pages = _pages(base)
    figures: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    trials = ctx.sized(16 * len(CORRUPTIONS), 400)
    for n in range(trials):
        if ctx.expired():
            result.stopped_early = True
            break
        how = CORRUPTIONS[n % len(CORRUPTIONS)]
        path = ctx.work / f"c{n}.db"
        shutil.copyfile(base, path)
        hit = corrupt(path, how, rng, pages)
        result.attempts += 1
        kinds[how] += 1
        corrupt_trial(result, path, committed, how, hit, figures, cli=n % 4 == 0)
        for f in ctx.work.glob(f"c{n}.*"):
            f.unlink(missing_ok=True)  # closing its last connection may remove -wal, -shm
    # One real process per kind of damage a user meets first: a bad header.
    path = ctx.work / "real.db"
    shutil.copyfile(base, path)
    corrupt(path, "header", random.Random(1), pages)
    path.write_bytes(b"not a SQLite file at all" + path.read_bytes()[24:])
    real = subprocess.run([sys.executable, "-m", "memstrata.cli", "stats", "--db", str(path)],
                          capture_output=True, text=True, timeout=120)
    lines = [ln for ln in real.stderr.splitlines() if ln.strip()]
    if real.returncode == 0 or "Traceback" in real.stderr or len(lines) != 1:
        result.fail("crashes", "command on a corrupt file: not exit 2 and one line",
                    detail=" | ".join(lines)[-300:])
    rows = sum(figures[k] for k in ("rows readable", "rows altered", "rows refused"))
    result.figures = {"seconds": round(time.perf_counter() - started, 1), "kinds": dict(kinds),
                      **{k.replace(" ", "_"): v for k, v in figures.items()},
                      "readable_share": round(figures["rows readable"] / rows, 3) if rows else None,
                      "dbstat": bool(pages)}
    return result


SCENARIOS: dict[str, Callable[[Context], Scenario]] = {
    "disk_full": disk_full, "read_only": read_only, "corrupt_file": corrupt_file}

if __name__ == "__main__":
    sys.exit(read_only_child() if sys.argv[1:] == ["read_only"] else 2)
