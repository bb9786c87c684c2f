"""No import loses what was there: random sequences of adds, imports and export round
trips over a few tenants, with every conversation's rows counted around each import.

Each step is one of:

* ``add``: a few messages for a tenant, into ``default`` (what ``add`` and ``import``
  both use when no conversation is named) or a named conversation;
* ``import_messages``: a messages JSONL file (its messages in ``default``, a named
  conversation or several), through ``Memory.import_conversations`` or ``memstrata
  import --format messages``, a quarter of them with ``replace``;
* ``import_again``: a messages file whose messages have their times (as an app's export
  has) imported, then the same file again (API or CLI): the second import may change no
  row count (``imports_duplicating`` otherwise);
* ``import_foreign``: one tenant's export imported into another tenant (its ids are taken:
  refused, nothing written);
* ``round_trip``: a tenant exported (``Memory.export`` or ``memstrata export``), forgotten,
  and imported back (``Memory.import_`` or ``memstrata import --format export``).

After every import, no conversation of any tenant may hold fewer turns than before, nor
any tenant fewer items, except a conversation the file names when ``replace`` was given;
each one that does counts under ``imports_losing_rows``. After a round trip the tenant's
rows per conversation and its search results (ids and texts of the top hits of a few
queries) must be what they were before the export; a difference counts under
``lost_writes``. An import refused with a one-line error loses nothing and passes.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import Context, Scenario
from .fuzz import _where, run_cli

TENANTS = ("ann", "ben", "cy")
CONVERSATIONS = (None, "default", "trip", "work")
"""Where messages go (None: no conversation named, i.e. ``default``)."""
WORDS = ("passport", "drawer", "blue", "Lisbon", "river", "dog", "Rex", "painting", "nurse",
         "hospital", "sister", "Clara", "summer", "garden", "tea", "train", "Porto", "bridge",
         "violin", "lesson", "market", "bread", "winter", "coat", "office", "meeting")
QUERIES = ("passport drawer", "Lisbon river", "dog Rex", "sister summer", "violin lesson")

Counts = dict[tuple[str, str], int]
"""Rows per (tenant, conversation); a tenant's items under (tenant, ``"#items"``)."""


def counts(path: Path) -> Counts:
    """Turns per (tenant, conversation) and items per tenant, read from the file."""
    conn = sqlite3.connect(path)
    try:
        out: Counts = {(u, c): n for u, c, n in conn.execute(
            "SELECT user_id, conversation_id, count(*) FROM turns GROUP BY 1, 2")}
        out.update({(u, "#items"): n for u, n in conn.execute(
            "SELECT user_id, count(*) FROM items GROUP BY 1")})
        return out
    finally:
        conn.close()


def losses(before: Counts, after: Counts, replaced: set[tuple[str, str]]) -> list[str]:
    """Every (tenant, conversation) that holds fewer rows after than before, but those in
    ``replaced``: ``"tenant/conversation: before -> after"``."""
    return [f"{u}/{c}: {n} -> {after.get((u, c), 0)}" for (u, c), n in sorted(before.items())
            if (u, c) not in replaced and after.get((u, c), 0) < n]


class Steps:
    """The steps, over one SQLite file."""

    def __init__(self, path: Path, work: Path, rng: random.Random) -> None:
        self.path, self.work, self.rng = path, work, rng
        self.n = 0

    def sentence(self) -> str:
        self.n += 1
        words = self.rng.sample(WORDS, self.rng.randint(3, 7))
        return f"{' '.join(words)} note{self.n}"

    def memory(self) -> Any:
        from memstrata import Memory

        return Memory.open(self.path)

    def add(self, user: str) -> None:
        conv = self.rng.choice(CONVERSATIONS)
        with self.memory() as memory:
            memory.add([{"role": "user", "content": self.sentence()}
                        for _ in range(self.rng.randint(1, 3))], user_id=user,
                       conversation_id=conv, infer=False)

    def messages_file(self, timed: bool = False) -> tuple[Path, set[str]]:
        """A messages JSONL file and the conversations it names; with ``timed``, each
        message has its own time (as a chat app's export has)."""
        lines, named = [], set()
        for _ in range(self.rng.randint(1, 4)):
            conv = self.rng.choice(CONVERSATIONS)
            row: dict[str, Any] = {"role": self.rng.choice(["user", "assistant"]),
                                   "content": self.sentence()}
            if timed:
                row["timestamp"] = 1_700_000_000 + self.rng.randrange(10**8)
            if conv is not None:
                row["conversation_id"] = conv
            named.add(conv or "default")
            lines.append(json.dumps(row) + "\n")
        path = self.work / f"messages{self.n}.jsonl"
        path.write_text("".join(lines), encoding="utf-8")
        return path, named

    def import_messages(self, user: str, replace: bool, cli: bool) -> tuple[str, set[str]]:
        """Import a messages file; returns the refusal (empty when it was imported) and
        the conversations the file names."""
        path, named = self.messages_file()
        try:
            return self._import_file(path, user, replace=replace, cli=cli), named
        finally:
            path.unlink()

    def import_twice(self, user: str, cli: bool) -> tuple[str, Counts, list[str]]:
        """Import one messages file whose messages have their times, then the same file
        again: the refusal, the counts after the first import and the rows the first one
        lost. (Without times, a message appended after a conversation's turns cannot be
        told from a new one that says the same: ``add``'s repeat rule.)"""
        path, _ = self.messages_file(timed=True)
        before = counts(self.path)
        try:
            refused = self._import_file(path, user, replace=False, cli=cli)
            if refused:
                return refused, before, []
            once = counts(self.path)
            again = self._import_file(path, user, replace=False, cli=cli)
            return again, once, losses(before, once, set())
        finally:
            path.unlink()

    def _import_file(self, path: Path, user: str, *, replace: bool, cli: bool) -> str:
        """Import the messages file at ``path``: the refusal, empty when imported."""
        from memstrata.formats import read_messages

        if cli:
            return command(["import", str(path), "--format", "messages", "--user", user,
                            "--quiet", "--db", str(self.path),
                            *(["--replace"] if replace else [])])
        with self.memory() as memory:
            memory.import_conversations(read_messages(path), user_id=user,
                                        **({"replace": True} if replace else {}))
        return ""

    def export(self, user: str, cli: bool) -> Path:
        path = self.work / f"export{self.n}.jsonl"
        self.n += 1
        if cli:
            refused = command(["export", str(path), "--user", user, "--db", str(self.path)])
            if refused:
                raise RuntimeError(f"export refused: {refused}")
        else:
            with self.memory() as memory:
                memory.export(user, path)
        return path

    def import_export(self, path: Path, user: str, cli: bool) -> str:
        """Import an export into ``user``; returns the refusal (empty when imported)."""
        if cli:
            return command(["import", str(path), "--format", "export", "--user", user,
                            "--quiet", "--db", str(self.path)])
        from memstrata.formats import ImportFormatError

        try:
            with self.memory() as memory:
                memory.import_(path, user_id=user)
        except (ImportFormatError, ValueError) as exc:
            return str(exc).splitlines()[0]
        return ""

    def results(self, user: str) -> list[list[tuple[str, str]]]:
        """The top hits (id, text) of :data:`QUERIES` for ``user``."""
        with self.memory() as memory:
            return [[(h.id, h.text) for h in memory.search(q, user_id=user, k=5)]
                    for q in QUERIES]

    def forget(self, user: str) -> None:
        with self.memory() as memory:
            memory.delete_all(user)


def command(argv: list[str]) -> str:
    """Run one command in-process; its error line when it failed, else empty."""
    outcome, _, err = run_cli(argv)
    if outcome.error is not None and not isinstance(outcome.error, SystemExit):
        return _where(outcome.error)
    code = outcome.exit_code
    if code in (0, None):
        return ""
    return (str(code) if isinstance(code, str) else err.strip() or f"exit {code}")[:300]


def import_no_loss(ctx: Context) -> Scenario:
    """``sized(40, 600)`` random steps over three tenants, every import checked."""
    result = Scenario(name="import_no_loss")
    started = time.perf_counter()
    rng = random.Random(ctx.seed)
    steps = Steps(ctx.work / "imports.db", ctx.work, rng)
    tally: dict[str, dict[str, int]] = {}

    def note(kind: str, outcome: str) -> None:
        row = tally.setdefault(kind, {})
        row[outcome] = row.get(outcome, 0) + 1

    for user in TENANTS:  # every tenant starts with a conversation of its own
        steps.add(user)
    for _ in range(ctx.sized(40, 600)):
        if ctx.expired():
            result.stopped_early = True
            break
        kind = rng.choices(["add", "import_messages", "import_again", "import_foreign",
                            "round_trip"], weights=[3, 4, 1, 1, 1])[0]
        user = rng.choice(TENANTS)
        cli = rng.random() < 0.5
        try:
            if kind == "add":
                steps.add(user)
                note(kind, "done")
                continue
            result.attempts += 1
            before = counts(steps.path)
            if kind == "import_messages":
                replace = rng.random() < 0.25
                refused, named = steps.import_messages(user, replace, cli)
                kind = f"{kind}{'_replace' if replace else ''}{'_cli' if cli else ''}"
                # With replace, the conversations the file names may shrink; no other.
                spared = {(user, c) for c in named} if replace else set()
                lost = losses(before, counts(steps.path), spared)
            elif kind == "import_again":
                refused, once, lost = steps.import_twice(user, cli)
                kind = f"{kind}{'_cli' if cli else ''}"
                if not refused and counts(steps.path) != once:
                    result.fail("imports_duplicating", "the same file imported again "
                                "stored rows again", step=kind)
            elif kind == "import_foreign":
                source = rng.choice([t for t in TENANTS if t != user])
                path = steps.export(source, cli)
                refused = steps.import_export(path, user, cli)
                path.unlink()
                lost = losses(before, counts(steps.path), set())
            else:
                refused, lost = _round_trip(result, steps, user, cli, before)
            note(kind, "refused" if refused else "imported")
            for what in lost:
                result.fail("imports_losing_rows", "an import lowered a row count",
                            step=kind, rows=what, refused=refused)
        except Exception as exc:
            result.fail("crashes", "a step raised", step=kind, detail=_where(exc))
    for kind, row in sorted(tally.items()):
        result.note(step=kind, **row)
    final = counts(steps.path)
    result.figures.update({"seed": ctx.seed, "imports": result.attempts,
                           "turns_at_end": sum(n for (_, c), n in final.items()
                                               if c != "#items"),
                           "steps_per_s": round(sum(sum(r.values()) for r in tally.values())
                                                / max(time.perf_counter() - started, 1e-9), 1)})
    return result


def _round_trip(result: Scenario, steps: Steps, user: str, cli: bool, before: Counts
                ) -> tuple[str, list[str]]:
    """Export ``user``, forget it, import the export back; the refusal and the rows lost
    (of other tenants: the forgotten one is compared whole, with its search results)."""
    searched = steps.results(user)
    path = steps.export(user, cli)
    steps.forget(user)
    refused = steps.import_export(path, user, cli)
    path.unlink()
    after = counts(steps.path)
    mine = {k: n for k, n in before.items() if k[0] == user}
    back = {k: n for k, n in after.items() if k[0] == user}
    if refused:
        result.fail("lost_writes", "a round trip's import was refused", tenant=user,
                    refused=refused)
    elif back != mine:
        result.fail("lost_writes", "a round trip did not restore the tenant's rows",
                    tenant=user, rows_before=str(mine), rows_after=str(back))
    else:
        for query, was, now in zip(QUERIES, searched, steps.results(user), strict=True):
            if now != was:
                result.fail("lost_writes", "a round trip changed a search's results",
                            tenant=user, query=query, before=str(was), after=str(now))
                break
    return refused, losses({k: n for k, n in before.items() if k[0] != user}, after, set())


SCENARIOS: dict[str, Callable[[Context], Scenario]] = {"import_no_loss": import_no_loss}
