"""Reading a document into cognitive memory, without an LLM.

The path of seed 003's teacher agent, rule-based: the raw text is buffered as a sensory
observation; attending to it records an episode ("read X from S on D"); each sentence
becomes a semantic fact derived from that episode (``similar_to`` and ``contradicts``
edges are computed as it is written); a numbered procedure in it becomes a procedural
memory; and the text is checked against pending intentions.

Sentences are split at ``.``, ``!`` or ``?`` followed by whitespace and an upper-case
letter, digit or quote: "4.1 million" and "v2.3" stay whole; an abbreviation before a
capitalised word ("Dr. Lund") is split, which costs a fact its first words, not its
content. Numbered step lines are left to ``parse_steps``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, time
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from ..text import SENTENCE_END
from .procedural import parse_prerequisites, parse_steps

if TYPE_CHECKING:
    from .mind import Mind

_STEP_LINE = re.compile(r"^\s*(?:step\s+)?\d{1,2}\s*[.):]\s", re.IGNORECASE)
MAX_SENTENCE_CHARS = 600


class ReadReport(BaseModel):
    """What reading one document wrote."""

    sensory_id: str
    episode_id: str
    facts: list[str] = Field(default_factory=list)
    procedure_id: str | None = None
    triggered: list[str] = Field(default_factory=list)


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (see the module docstring for the rule), numbered step
    lines left out, each at most 600 characters."""
    out: list[str] = []
    for block in text.splitlines():
        if not block.strip() or _STEP_LINE.match(block):
            continue
        out += [s.strip()[:MAX_SENTENCE_CHARS] for s in SENTENCE_END.split(block.strip())
                if len(s.strip()) > 2]
    return out


def _when(value: date | datetime | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.combine(value, time(), tzinfo=UTC)


def read_document(mind: Mind, text: str, *, title: str = "", source: str = "",
                  when: date | datetime | None = None,
                  progress: Callable[[int], object] | None = None) -> ReadReport:
    """Take ``text`` in through every memory type it concerns; see the module docstring.

    ``when`` is the document's event time (its date); ``source`` who published it.
    ``progress`` is called with 1 as each of the ``len(sentences(text))`` facts is written.

    Raises:
        ValueError: the text is empty.
    """
    if not text.strip():
        raise ValueError("nothing to read: the text is empty")
    at = _when(when)
    label = source or title or "document"
    observed = mind.sensory.observe(text, modality="text", event_time=at)
    headline = " ".join(p for p in (title, f"({source})" if source else "",
                                    f"on {at.date().isoformat()}" if at else "") if p)
    said = sentences(text)
    first = said[0] if said else ""
    episode = mind.sensory.attend(observed, f"read {title or label}", source_label=label,
                                  summary=f"Read {headline}: {first}".strip())
    if title:  # recall shows each fact with the title of the document it came from
        mind.store.update(mind.user_id, episode, title=title[:300])
    facts = []
    for sentence in said:
        facts.append(mind.semantic.learn("", sentence, source=label, episode_id=episode,
                                         event_time=at, tags=[title] if title else ()))
        if progress is not None:
            progress(1)
    procedure = None
    found = parse_steps(text)
    if found is not None:
        name, steps = found
        procedure = mind.procedural.add(name or title or "procedure", steps,
                                        prerequisites=parse_prerequisites(text),
                                        episode_id=episode, event_time=at, source=label)
    fired = mind.perceive(text)
    return ReadReport(sensory_id=observed, episode_id=episode, facts=facts,
                      procedure_id=procedure, triggered=[i.id for i in fired])
