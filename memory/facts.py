"""From an extractor's raw output to grounded facts: who said it, about whom, when, where.

The extractor (an LLM, often a small one) proposes facts, entities and question-answer
pairs for a chunk of turns. Nothing it says about provenance is taken on trust:

* **evidence** is the chunk's turn whose content words best support the claim, found by
  overlap, and a claim no turn supports is rejected. The model is not shown turn ids
  at all: SmolLM2-135M, shown "[s1:3] Ana: ..." lines, filled every field with ids;
  shown "Ana: ..." lines, it copies words from the turns, which grounding can place;
* **speaker** (who said it) is the evidence turn's speaker, never the model's guess;
* **about** (whom it concerns) is the model's subject or ``about`` resolved against the
  participants: "I"/"my" is the speaker, "you" the other participant, a first name or a
  close spelling the participant it names; anyone else stays as written;
* **time** is resolved deterministically (``timeparse``) against the evidence turn's
  date: the model's phrase when the turn says it, else the first time phrase of the turn;
* a **time or location the evidence turn does not say** is cleared (the fact stays):
  small models copy a worked example's "yesterday" or "Lyon" into every fact.

Every rejection is counted by reason, so an extractor that produces junk shows as junk.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, Field
from rapidfuzz import fuzz, process

from . import text as textmod
from .chunking import Chunk
from .dates import DEFAULT_DATE_STYLE, DateStyle, render_day
from .models import EntityItem, FactItem, QAPairItem, Turn, with_caption
from .timeparse import TimeSpan, normalise_time, resolve_times

# Bounds sized so the longest JSON the schema allows fits the extractor's 1024 tokens:
# a constrained small model tends to fill every field to its limit.
MAX_FACTS = 5
MAX_ENTITIES = 3
MAX_QA = 2
SUPPORT = 0.5
"""Share of a claim's content words a turn must hold to count as its evidence."""

_ID_LIKE = re.compile(r"^\s*\[?[A-Za-z]{0,2}\d+:\d+\]?\s*$")  # a turn id ("s1:3"), a clock
_FIRST_PERSON = {"i", "me", "my", "mine", "myself", "i'm", "i've"}
_SECOND_PERSON = {"you", "your", "yours", "yourself", "you're"}


class ExtractedFact(BaseModel):
    """One fact as the model states it (every field bounded in the JSON schema)."""

    subject: str = Field(max_length=40, description="who the fact is about: a name")
    predicate: str = Field(max_length=30, description="the relation, e.g. 'moved to'")
    object: str = Field(max_length=80, description="the value, e.g. 'Oslo', 'a puppy'")
    time: str = Field(default="", max_length=30, description="when, as said: 'last week'")
    location: str = Field(default="", max_length=30, description="where, if said")


class ExtractedEntity(BaseModel):
    """A person (or pet, place, group) the turns name, with a role or state if said."""

    name: str = Field(max_length=30)
    role: str = Field(default="", max_length=40, description="e.g. 'Ana's friend'")
    state: str = Field(default="", max_length=40, description="e.g. 'lives in Oslo'")


class ExtractedQA(BaseModel):
    """A question the turns answer, with its short answer."""

    question: str = Field(max_length=100)
    answer: str = Field(max_length=60)


class Extraction(BaseModel):
    """Everything one extractor call proposes for one chunk."""

    facts: list[ExtractedFact] = Field(default_factory=list, max_length=MAX_FACTS)
    entities: list[ExtractedEntity] = Field(default_factory=list, max_length=MAX_ENTITIES)
    qa: list[ExtractedQA] = Field(default_factory=list, max_length=MAX_QA)


class Grounded(BaseModel):
    """What survived grounding, and why the rest did not."""

    facts: list[FactItem] = Field(default_factory=list)
    qa: list[QAPairItem] = Field(default_factory=list)
    entities: list[EntityItem] = Field(default_factory=list)
    rejected: Counter[str] = Field(default_factory=Counter)
    cleared: Counter[str] = Field(default_factory=Counter)
    """Fields of kept facts that were dropped because their evidence turn does not say them."""
    unresolved_times: int = 0


def _fold(value: str) -> str:
    return " ".join(textmod.words(value))


def chunk_text(chunk: Chunk, date_style: DateStyle = DEFAULT_DATE_STYLE) -> str:
    """The chunk as the extractor reads it: a date line per day (in ``date_style``), then
    ``who: text`` lines."""
    lines: list[str] = []
    day = None
    for turn in chunk.turns:
        when = render_day(turn.event_time, date_style) if turn.event_time else "?"
        if when != day:
            lines.append(f"-- {when} --")
            day = when
        lines.append(f"{turn.speaker}: {with_caption(turn.text, turn.metadata)}")
    return "\n".join(lines)


def _support(claim: str, turns: Sequence[Turn], min_words: int = 2) -> list[float]:
    words = set(textmod.tokens(claim))
    if len(words) < min_words:  # a claim of one word ("loves") is found anywhere
        return [0.0] * len(turns)
    return [len(words & set(textmod.tokens(with_caption(t.text, t.metadata)))) / len(words)
            for t in turns]


def _evidence(claim: str, turns: Sequence[Turn], min_words: int = 2) -> list[Turn]:
    """The turn that best supports ``claim`` (the earliest on a tie), or none."""
    scores = _support(claim, turns, min_words)
    best = max(range(len(turns)), key=lambda i: (scores[i], -i), default=None)
    return [] if best is None or scores[best] < SUPPORT else [turns[best]]


def resolve_person(name: str, speaker: str, participants: Sequence[str]) -> str:
    """Whom a subject names: pronouns by who spoke, names by the closest participant.

    A possessive counts as its owner ("my sister", "Tom's job" are about me, Tom): the
    question "what does Tom's sister do?" is a question about Tom's life.
    """
    words = [w.removesuffix("'s") for w in textmod.words(name)]
    if not words or words[0] in _FIRST_PERSON:
        return speaker
    others = [p for p in participants if p != speaker]
    if words[0] in _SECOND_PERSON and len(others) == 1:
        return others[0]
    firsts = {p.split()[0].lower(): p for p in participants if p.split()}
    match = process.extractOne(words[0], list(firsts), scorer=fuzz.ratio, score_cutoff=85)
    return firsts[match[0]] if match else name.strip()


def _time(phrase: str, turn: Turn, style: DateStyle) -> TimeSpan | None:
    if turn.event_time is None:
        return None
    if phrase.strip():
        return normalise_time(phrase, turn.event_time, style)
    found = resolve_times(turn.text, turn.event_time, style)
    return found[0] if found else None


def _fact(raw: ExtractedFact, chunk: Chunk, participants: Sequence[str], user_id: str,
          source: str, out: Grounded, style: DateStyle) -> None:
    if any(_ID_LIKE.match(v) for v in (raw.subject, raw.predicate, raw.object)):
        out.rejected["id as value"] += 1
        return
    if len(raw.object.strip()) < 2 or not raw.predicate.strip():
        out.rejected["empty"] += 1
        return
    if _fold(raw.object) in {_fold(raw.predicate), _fold(raw.subject)}:
        out.rejected["repeated value"] += 1
        return
    evidence = _evidence(f"{raw.predicate} {raw.object}", chunk.turns)
    if not evidence:
        out.rejected["unsupported"] += 1
        return
    first = evidence[0]
    about = resolve_person(raw.subject, first.speaker, participants)
    said = _fold(with_caption(first.text, first.metadata))

    def stated(name: str, value: str) -> str:
        if value and _fold(value) not in said:
            out.cleared[f"{name} not in turn"] += 1
            return ""
        return value

    phrase, where = stated("time", raw.time.strip()), stated("location", raw.location.strip())
    span = _time(phrase, first, style)
    if phrase and span is None:
        out.unresolved_times += 1  # the fact stays; the words stay in time_text
    subject = about if about in participants else raw.subject.strip()
    text = f"{subject} {raw.predicate.strip()} {raw.object.strip()}"
    if where:
        text += f" in {where}"
    if span is not None:
        text += f" ({span.resolved})"
    support = max(_support(f"{raw.predicate} {raw.object}", evidence))
    out.facts.append(FactItem(
        user_id=user_id, text=text, subject=subject, predicate=raw.predicate.strip(),
        object=raw.object.strip(), location=where or None,
        speaker=first.speaker, about=about, conversation_id=chunk.conversation_id,
        session_id=first.session_id, evidence=[t.turn_id for t in evidence],
        event_time=span.start if span else first.event_time,
        time_end=span.end if span else None, granularity=span.granularity if span else None,
        time_text=phrase or (span.text if span else ""),
        confidence=round(min(1.0, support), 2), source=source,
    ))


def _qa(raw: ExtractedQA, chunk: Chunk, participants: Sequence[str], user_id: str,
        source: str, out: Grounded) -> None:
    # An answer may be one word ("Oslo"), but not just a participant's name.
    is_name = _fold(raw.answer) in {_fold(p) for p in participants}
    evidence = [] if is_name else _evidence(raw.answer, chunk.turns, min_words=1)
    if not raw.question.strip() or not evidence:
        out.rejected["qa unsupported"] += 1
        return
    first = evidence[0]
    named = [p for p in participants if p.split()[0].lower() in textmod.words(raw.question)]
    out.qa.append(QAPairItem(
        user_id=user_id, text=f"{raw.question.strip()} {raw.answer.strip()}",
        title=raw.question.strip(), question=raw.question.strip(), answer=raw.answer.strip(),
        speaker=first.speaker, about=named[0] if named else first.speaker,
        conversation_id=chunk.conversation_id, evidence=[t.turn_id for t in evidence],
        event_time=first.event_time, source=source,
    ))


def _entity(raw: ExtractedEntity, chunk: Chunk, participants: Sequence[str], user_id: str,
            source: str, out: Grounded) -> None:
    name = raw.name.strip()
    mentioned = [t for t in chunk.turns if name and name.lower() in t.text.lower()]
    person = resolve_person(name, "", participants) if name else ""
    if person not in participants and not mentioned:
        out.rejected["entity not in turns"] += 1
        return
    out.entities.append(EntityItem(
        user_id=user_id, text=f"{person} ({chunk.conversation_id})", name=person,
        conversation_id=chunk.conversation_id,
        roles=[raw.role.strip()] if raw.role.strip() else [],
        states=[raw.state.strip()] if raw.state.strip() else [],
        evidence=[t.turn_id for t in mentioned[:3]], source=source,
        event_time=chunk.turns[0].event_time,
    ))


def ground(extraction: Extraction, chunk: Chunk, participants: Sequence[str], user_id: str,
           source: str, date_style: DateStyle = DEFAULT_DATE_STYLE) -> Grounded:
    """Ground one chunk's extraction: evidence, speaker, about-whom and time checked.

    A fact's resolved time is added to its text in ``date_style`` ("... (2023-05-07)").

    Example:
        >>> ground(extraction, chunk, ["Ana", "Tom"], "u1", "extractor")  # doctest: +SKIP
    """
    out = Grounded()
    for fact in extraction.facts:
        _fact(fact, chunk, participants, user_id, source, out, date_style)
    for pair in extraction.qa:
        _qa(pair, chunk, participants, user_id, source, out)
    for entity in extraction.entities:
        _entity(entity, chunk, participants, user_id, source, out)
    return out

