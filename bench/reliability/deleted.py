"""Deleted text leaves no byte behind: every write verb that removes text, checked in the
file's own bytes (SQLite) or through every way of reading (PostgreSQL).

Each trial writes text carrying random marker words (one per piece of text, never seen
before), removes some of it with one verb, closes the store and looks for the removed
markers: in the SQLite file and its write-ahead log, byte for byte; on PostgreSQL, where
the server's own ``VACUUM`` reclaims space (the documented contract), the rows must be
gone from every table and no read (``get``, ``history``, ``get_all``, ``search``,
``export``) may return them. The verbs (:data:`KINDS`):

* ``delete_turn`` / ``delete_item``: ``Memory.delete`` of one turn (its neighbours keep
  their own text and context) or one item (fact or strategy);
* ``update``: a turn or item updated, then deleted: every earlier version's text too;
* ``delete_all``: a tenant with turns, an item, a blob and an event;
* ``import_replace``: ``import_conversations(..., replace=True)`` (or ``memstrata import
  --replace``) over a conversation: the replaced turns;
* ``forget_cli``: ``memstrata forget --user U --yes``.

A removed marker still found counts under ``deleted_bytes_found``. Each trial also checks
that the markers it kept are found (a detector that cannot see live text would pass
anything): a kept marker missing is a failure of the scenario itself. Markers are
consonants only, so no stemmer changes them, and matched by their middle: an FTS5 index
stores a term after the prefix it shares with the term before it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import Context, Scenario
from .fuzz import _where, run_cli
from .pgserve import postgres, unavailable

KINDS = ("delete_turn", "delete_item", "update", "delete_all", "import_replace", "forget_cli")
"""The verbs that remove text, one trial of each per round."""

_LETTERS = "bcdfghjkmnpqrtvwxz"
"""Marker letters: no vowel, ``l``, ``s`` or ``y``, so no stemming rule applies."""
COVER_TURNS = 200
"""Other tenants' turns in the file: a deletion is checked in a store that holds more."""


def marker(rng: random.Random, seen: set[str]) -> str:
    """A new 20-letter marker word (never one in ``seen``; added to it)."""
    while True:
        word = "".join(rng.choice(_LETTERS) for _ in range(20))
        if word not in seen:
            seen.add(word)
            return word


def core(word: str) -> bytes:
    """The bytes searched for: the marker's middle 12 letters."""
    return word[4:16].encode()


def file_bytes(path: Path) -> bytes:
    """The SQLite file and whatever journal or write-ahead log lies beside it."""
    parts = [path.read_bytes()]
    for suffix in ("-wal", "-journal"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            parts.append(side.read_bytes())
    return b"".join(parts)


@dataclass
class Trial:
    """What one trial removed and what it kept (markers), and the ids it removed."""

    kind: str
    user: str
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    refused: str = ""


def _said(words: list[str]) -> list[dict[str, str]]:
    return [{"role": "user" if n % 2 == 0 else "assistant",
             "content": f"The note says {w} and the blue drawer"} for n, w in enumerate(words)]


def _fact(user: str, text_word: str, object_word: str) -> Any:
    from memstrata.memory import FactItem

    return FactItem(user_id=user, text=f"Ben keeps {text_word} in the drawer", subject="Ben",
                    predicate="keeps", object=object_word)


def _strategy(user: str, word: str) -> Any:
    from memstrata.memory import StrategyItem

    return StrategyItem(user_id=user, text=f"Check {word} before answering",
                        description=f"why {word}", polarity="success")


class Verbs:
    """One trial of each kind against one store (``db``: a path or a URL)."""

    def __init__(self, db: str, work: Path, rng: random.Random) -> None:
        self.db, self.work, self.rng = db, work, rng
        self.seen: set[str] = set()
        self.n = 0

    def new(self, count: int) -> list[str]:
        """``count`` fresh markers."""
        return [marker(self.rng, self.seen) for _ in range(count)]

    def run(self, kind: str) -> Trial:
        """One trial of ``kind``; the store is closed when it returns."""
        from memstrata import Memory

        self.n += 1
        trial = Trial(kind=kind, user=f"u{self.n % 7}")
        if kind in ("delete_all", "forget_cli"):
            trial.user = f"gone{self.n}"
        memory = Memory.open(self.db)
        try:
            getattr(self, kind)(memory, trial)
        finally:
            memory.close()
        return trial

    def delete_turn(self, memory: Any, trial: Trial) -> None:
        words = self.new(3)
        events = memory.add(_said(words), user_id=trial.user,
                            conversation_id=f"c{self.n}", infer=False)
        victim = self.rng.randrange(3)
        trial.removed, trial.ids = [words[victim]], [events[victim]["id"]]
        trial.kept = [w for n, w in enumerate(words) if n != victim]
        if not memory.delete(events[victim]["id"], user_id=trial.user):
            trial.refused = "delete returned False"

    def delete_item(self, memory: Any, trial: Trial) -> None:
        words = self.new(3)
        if self.rng.random() < 0.5:
            victim = memory.store.add(_fact(trial.user, words[0], words[1]))
        else:
            victim = memory.store.add(_strategy(trial.user, words[0]))
            trial.kept.append(words[1])
            memory.store.add(_fact(trial.user, words[1], "tea"))
        trial.kept.append(words[2])
        memory.store.add(_strategy(trial.user, words[2]))
        trial.removed = [words[0]] + ([] if words[1] in trial.kept else [words[1]])
        trial.ids = [victim]
        if not memory.delete(victim, user_id=trial.user):
            trial.refused = "delete returned False"

    def update(self, memory: Any, trial: Trial) -> None:
        words = self.new(4)
        if self.rng.random() < 0.5:
            events = memory.add(_said(words[:2]), user_id=trial.user,
                                conversation_id=f"c{self.n}", infer=False)
            victim, trial.kept = events[0]["id"], [words[1]]
        else:
            victim = memory.store.add(_fact(trial.user, words[0], "tea"))
            memory.store.add(_fact(trial.user, words[1], "tea"))
            trial.kept = [words[1]]
        for word in words[2:]:
            memory.update(victim, f"Now the note says {word}", user_id=trial.user)
        trial.removed = [words[0], *words[2:]]
        trial.ids = [victim]
        if not memory.delete(victim, user_id=trial.user):
            trial.refused = "delete returned False"

    def _tenant(self, memory: Any, trial: Trial) -> None:
        words = self.new(5)
        events = memory.add(_said(words[:2]), user_id=trial.user, infer=False)
        trial.ids = [e["id"] for e in events]
        trial.ids.append(memory.store.add(_fact(trial.user, words[2], "tea")))
        memory.store.blobs.put(trial.user, f"notes{self.n}", f"blob text {words[3]}\n" * 20)
        memory.store.runs.log_event(trial.user, {"type": "note", "text": words[4]})
        trial.removed = words

    def delete_all(self, memory: Any, trial: Trial) -> None:
        self._tenant(memory, trial)
        if not memory.delete_all(trial.user):
            trial.refused = "delete_all deleted nothing"

    def forget_cli(self, memory: Any, trial: Trial) -> None:
        self._tenant(memory, trial)
        memory.close()  # the command opens the store itself
        self._command(trial, ["forget", "--user", trial.user, "--yes", "--db", self.db])

    def import_replace(self, memory: Any, trial: Trial) -> None:
        from memstrata.formats import read_messages

        old, new, other = self.new(3), self.new(2), self.new(1)
        conv = f"r{self.n}"
        memory.add(_said(old), user_id=trial.user, conversation_id=conv, infer=False)
        memory.add(_said(other), user_id=trial.user, conversation_id=f"keep{self.n}",
                   infer=False)
        trial.removed, trial.kept = old, [*new, *other]
        path = self.work / f"replace{self.n}.jsonl"
        path.write_text("".join(
            f'{{"conversation_id": "{conv}", "role": "user", "content": "{m["content"]}"}}\n'
            for m in _said(new)), encoding="utf-8")
        if self.rng.random() < 0.5:
            counts = memory.import_conversations(read_messages(path), user_id=trial.user,
                                                 replace=True)
            if counts.get("turns") != len(new):
                trial.refused = f"import wrote {counts}"
        else:
            memory.close()
            self._command(trial, ["import", str(path), "--format", "messages", "--user",
                                  trial.user, "--replace", "--quiet", "--db", self.db])
        path.unlink()

    def _command(self, trial: Trial, argv: list[str]) -> None:
        outcome, _, err = run_cli(argv)
        code = outcome.exit_code
        if outcome.error is not None and not isinstance(outcome.error, SystemExit):
            trial.refused = _where(outcome.error)
        elif code not in (0, None):
            trial.refused = f"exit {code}: {(err or str(code)).strip()[:200]}"


def on_sqlite(ctx: Context, result: Scenario, rng: random.Random, per_kind: int,
              counts: dict[str, int], kinds: tuple[str, ...] = KINDS) -> None:
    """The SQLite half: every trial's removed markers searched in the file's bytes."""
    from memstrata import Memory

    path = ctx.work / "deleted.db"
    with Memory.open(path) as memory:
        memory.add([{"role": "user", "content": f"cover text {i} about Lisbon and the river"}
                    for i in range(COVER_TURNS)], user_id="cover", infer=False)
    verbs = Verbs(str(path), ctx.work, rng)
    removed: dict[str, str] = {}

    def check(trial: Trial) -> None:
        data = file_bytes(path)
        for word in trial.removed:
            removed[word] = trial.kind
            if core(word) in data:
                result.fail("deleted_bytes_found", "deleted text still in the file",
                            kind=trial.kind, marker=word, copies=data.count(core(word)))
        for word in trial.kept:
            if core(word) not in data:
                result.fail("crashes", "a kept marker is not in the file (detector blind)",
                            kind=trial.kind, marker=word)

    _rounds(ctx, result, rng, verbs, per_kind, counts, check, kinds)
    # Nothing removed comes back later (a rewrite of a neighbour, a merge of segments).
    data = file_bytes(path)
    late = [w for w in removed if core(w) in data]
    for word in late:
        result.fail("deleted_bytes_found", "deleted text back in the file at the end",
                    kind=removed[word], marker=word)
    result.figures["sqlite_file_bytes"] = len(data)


def _rounds(ctx: Context, result: Scenario, rng: random.Random, verbs: Verbs, per_kind: int,
            counts: dict[str, int], check: Callable[[Trial], None],
            kinds: tuple[str, ...] = KINDS) -> None:
    """``per_kind`` rounds of one trial of each of ``kinds`` (shuffled), each checked."""
    for _ in range(per_kind):
        order = list(kinds)
        rng.shuffle(order)
        for kind in order:
            if ctx.expired():
                result.stopped_early = True
                return
            result.attempts += 1
            try:
                trial = verbs.run(kind)
            except Exception as exc:
                result.fail("crashes", "a verb raised", kind=kind, detail=_where(exc))
                continue
            if trial.refused:
                result.fail("crashes", "a verb did not remove", kind=kind,
                            detail=trial.refused)
                continue
            counts[kind] = counts.get(kind, 0) + 1
            try:
                check(trial)
            except Exception as exc:
                result.fail("crashes", "a read of the store raised", kind=kind,
                            detail=_where(exc))


def _tables(admin: str) -> list[str]:
    import psycopg

    with psycopg.connect(admin) as conn:
        return [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]


def on_postgres(ctx: Context, result: Scenario, rng: random.Random, per_kind: int,
                counts: dict[str, int]) -> None:
    """The PostgreSQL half: removed rows gone from every table, and unreadable."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from memstrata import Memory

    reason = unavailable()
    if reason is not None:
        result.figures["postgres"] = f"skipped: {reason}"
        result.note(postgres=f"skipped: {reason}")
        return
    with postgres() as pg:
        url = pg.new_database()
        admin = make_conninfo(pg.admin, dbname=conninfo_to_dict(url)["dbname"])
        verbs = Verbs(url, ctx.work, rng)
        with Memory.open(url) as memory:  # the schema, before its tables are listed
            memory.add("cover text about Lisbon", user_id="cover", infer=False)
        tables = _tables(admin)

        def check(trial: Trial) -> None:
            seen = _readable(url, trial)
            with psycopg.connect(admin) as conn:
                for word in trial.removed:
                    rows = [t for t in tables if conn.execute(
                        f'SELECT 1 FROM "{t}" AS r WHERE strpos(r::text, %s) > 0 LIMIT 1',
                        (core(word).decode(),)).fetchone()]
                    if rows or word in seen:
                        result.fail("deleted_bytes_found", "deleted text still readable",
                                    kind=trial.kind, marker=word, tables=rows,
                                    through=seen.get(word, ""))

        _rounds(ctx, result, rng, verbs, per_kind, counts, check)


def _readable(url: str, trial: Trial) -> dict[str, str]:
    """The removed markers that some read of the tenant returns (marker -> which read)."""
    from memstrata import Memory
    from memstrata.memory.models import ITEM_KINDS

    found: dict[str, str] = {}
    with Memory.open(url) as memory:
        texts: list[tuple[str, str]] = []
        for id_ in trial.ids:
            texts.append(("get", repr(memory.get(id_))))
            texts.append(("history", repr(memory.history(id_))))
        for kind in ("turn", *ITEM_KINDS):
            texts += [("get_all", repr(r)) for r in memory.get_all(trial.user, kind=kind,
                                                                    limit=1000)]
        for word in trial.removed:
            texts += [("search", h.text) for h in memory.search(word, user_id=trial.user)]
        texts.append(("export", trial_export(memory, trial)))
    for word in trial.removed:
        for how, text in texts:
            if word in text:
                found[word] = how
                break
    return found


def trial_export(memory: Any, trial: Trial) -> str:
    """The tenant's export, as text (empty when it has nothing left)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="msrel-export-") as folder:
        path = Path(folder) / "export.jsonl"
        memory.export(trial.user, path)
        return path.read_text(encoding="utf-8") if path.exists() else ""


def deleted_bytes(ctx: Context) -> Scenario:
    """Every verb that removes text, ``sized(3, 500)`` trials each on SQLite (bytes) and
    ``sized(2, 50)`` on PostgreSQL (rows and reads)."""
    result = Scenario(name="deleted_bytes")
    started = time.perf_counter()
    rng = random.Random(ctx.seed)
    sqlite_counts: dict[str, int] = {}
    pg_counts: dict[str, int] = {}
    on_sqlite(ctx, result, rng, ctx.sized(3, 500), sqlite_counts)
    sqlite_s = time.perf_counter() - started
    on_postgres(ctx, result, rng, ctx.sized(2, 50), pg_counts)
    result.figures.update({
        "seed": ctx.seed, "deletes_sqlite": sqlite_counts, "deletes_postgres": pg_counts,
        "min_deletes_per_kind_sqlite": min(sqlite_counts.get(k, 0) for k in KINDS),
        "sqlite_s": round(sqlite_s, 1),
        "postgres_s": round(time.perf_counter() - started - sqlite_s, 1)})
    return result


SCENARIOS: dict[str, Callable[[Context], Scenario]] = {"deleted_bytes": deleted_bytes}
