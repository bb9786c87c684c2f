"""Procedural memory: how to do things, as ordered steps that strengthen with use.

Every recall of a procedure adds one to its ``usage_count`` (a bookkeeping field: no new
version), and among equal matches the more used procedure ranks first, like muscle
memory. ``parse_steps`` and ``parse_prerequisites`` find a numbered procedure in free
text without an LLM.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from ..models import Edge, ProceduralItem
from ..store import Cond, Filters, Sort
from ..text import tokens
from .base import PROCEDURE_DERIVES_FROM, Lifecycle

CANDIDATES = 200
"""Most procedures a recall ranks (the lexical index's best matches for the query)."""
_PROCEDURES = Filters(kinds=["procedural"], current=["procedural"])


def procedure_text(name: str, steps: Sequence[str]) -> str:
    """A procedure as one readable, searchable text: its name, then numbered steps."""
    return "\n".join([f"{name}:", *(f"{n}. {s}" for n, s in enumerate(steps, start=1))])


class Procedural(Lifecycle):
    """A tenant's procedures: stored with their steps, recalled by usage."""

    def add(self, name: str, steps: Sequence[str], *, prerequisites: Sequence[str] = (),
            episode_id: str | None = None, event_time: datetime | None = None,
            source: str = "") -> str:
        """Store a procedure (blank steps dropped); returns its id.

        Raises:
            ValueError: ``name`` is empty or no step is non-empty.
            KeyError: ``episode_id`` is not an episodic item of this tenant (nothing is
                written).
        """
        name = name.strip()
        kept = [s.strip() for s in steps if s.strip()]
        if not name or not kept:
            raise ValueError("a procedure needs a name and at least one non-empty step")
        item = ProceduralItem(user_id=self.user_id, title=name, text=procedure_text(name, kept),
                              steps=kept, prerequisites=[p for p in prerequisites if p.strip()],
                              event_time=event_time, source=source, recorded_at=self.clock())
        with self.store.transaction():
            if episode_id is not None:
                episode = self.store.get(self.user_id, episode_id)
                if episode is None or episode.kind != "episodic":
                    raise KeyError(f"no episode {episode_id!r} for user {self.user_id!r}")
            item_id = self.store.add(item)
            if episode_id is not None:
                self.store.add_edges([Edge(user_id=self.user_id, src=item_id, dst=episode_id,
                                           relation=PROCEDURE_DERIVES_FROM)])
        return item_id

    def recall(self, query: str, k: int = 3) -> list[ProceduralItem]:
        """The ``k`` procedures sharing most query tokens with their name and steps (none
        when nothing overlaps), then the most used; each one's ``usage_count`` grows by 1
        (returned with the new count)."""
        wanted = set(tokens(query))
        if not wanted or k <= 0:
            return []
        used: list[ProceduralItem] = []
        # One write transaction: counts read and bumped under the write lock lose no use
        # another process records meanwhile.
        with self.store.transaction():
            found = self.store.lexical(self.user_id, sorted(wanted), node="item",
                                       k=CANDIDATES, filters=_PROCEDURES)
            scored: list[tuple[int, int, ProceduralItem]] = []
            for item in self.store.get_many(self.user_id, [i for i, _ in found]):
                if isinstance(item, ProceduralItem):
                    overlap = len(wanted & set(tokens(" ".join([item.title, *item.steps]))))
                    if overlap:
                        scored.append((overlap, item.usage_count, item))
            scored.sort(key=lambda s: (s[0], s[1]), reverse=True)
            for _, count, item in scored[:k]:
                new = self.store.update(self.user_id, item.id, usage_count=count + 1)
                if isinstance(new, ProceduralItem):
                    used.append(new)
        return used

    def procedures(self, limit: int = 100) -> list[ProceduralItem]:
        """The tenant's current procedures, most used first (then newest)."""
        found = self.store.kind_items(
            self.user_id, "procedural", where=[Cond("valid_to", "is null")],
            order=[Sort("usage_count", desc=True), Sort("recorded_at", desc=True)],
            limit=int(limit))
        return [r for r in found if isinstance(r, ProceduralItem)]


_STEP_LINE = re.compile(r"^[ \t]*(?:step[ \t]+)?(\d{1,2})[ \t]*[.):][ \t]+(\S.*?)\s*$",
                        re.I | re.M)
_INLINE = re.compile(r"(?:(?<=\s)|^)(?:step\s+)?(\d{1,2})[.):]\s+", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+|\n+")
_PREREQ = re.compile(r"^(?:before\b|you(?:'ll| will)? need\b|requires?\b|prerequisites?\b)",
                     re.I)


def parse_steps(text: str) -> tuple[str, list[str]] | None:
    """The first numbered procedure in ``text``: (name, steps), or None.

    Steps are numbered 1, 2, ... (at least two, consecutive): one per line ("1. ...",
    "2) ...", "Step 3: ...") or inline ("1. Install it. 2. Run it."). The name is the
    sentence just before step 1 when it introduces them, without a leading "To" or a
    trailing colon ("To publish a site with Quarry:" -> "publish a site with Quarry");
    "" if none does (a statement ending in a full stop introduces nothing).
    """
    for pattern in (_STEP_LINE, _INLINE):
        found = _numbered(text, pattern)
        if found is not None:
            start, steps = found
            return _name(text[:start]), steps
    return None


def _numbered(text: str, pattern: re.Pattern[str]) -> tuple[int, list[str]] | None:
    """(where step 1 starts, the steps) for the first run 1, 2, ... of ``pattern``."""
    marks = list(pattern.finditer(text))
    for i, first in enumerate(marks):
        if first.group(1) != "1":
            continue
        run = [first]
        for m in marks[i + 1:]:
            if int(m.group(1)) == len(run) + 1:
                run.append(m)
            elif int(m.group(1)) == 1:
                break  # a second list begins
        if len(run) < 2:
            continue
        if pattern is _STEP_LINE:
            steps = [m.group(2) for m in run]
        else:  # a step runs to the next number, the last one to its sentence's end
            ends = [m.start() for m in run[1:]] + [len(text)]
            steps = [text[m.end():end] for m, end in zip(run, ends, strict=True)]
            steps[-1] = re.split(r"(?<=[.!?])\s|\n", steps[-1], maxsplit=1)[0]
        steps = [s.strip().rstrip(" ;,.") for s in steps]
        if all(steps):
            return first.start(), steps
    return None


_HOW_TO = re.compile(r"^(?:here(?:'s| is) how to|how to|to)\s+", re.I)


def _name(before: str) -> str:
    """The last sentence of ``before`` when it introduces the steps, without "To" and the
    trailing colon: one ending in a colon, a heading (no closing stop) or a "to ..."
    phrase. A statement ("Older guides use init.") names nothing: ""."""
    sentences = [s.strip() for s in _SENTENCE_END.split(before) if s.strip()]
    if not sentences:
        return ""
    last = sentences[-1]
    if last[-1] in ".!?" and not _HOW_TO.match(last):
        return ""
    return _HOW_TO.sub("", last.rstrip(":.!? "))


def parse_prerequisites(text: str) -> list[str]:
    """Sentences of ``text`` that state what must come first: starting "Before ...",
    "You need ...", "Requires ..." or "Prerequisite(s) ...", in order."""
    sentences = (s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text))
    return [s.rstrip(".") for s in sentences if _PREREQ.match(s)]
