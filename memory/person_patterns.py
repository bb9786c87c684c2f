"""What a person says about themselves, read from their own turns with fixed patterns.

No model is asked: a handful of first-person English patterns find the statements that
tell one person from another — a spouse or partner, a wedding, children, relatives, pets,
a job (held, started, lost), where one lives or comes from, where one is right now.
Each match becomes an :class:`Observation` with the turn's id and date. The patterns
only read the speaker's own turns ("my wife", "I work at"), so what one person says
about another is never attributed to the wrong one.

Precision over recall: a pattern that misses a statement costs a weaker comparison; a
pattern that invents one could invent a contradiction. Job roles must end in a common
occupational suffix ("-er", "-ist", "guard", ...), so "I'm a big fan of" is no job.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

NAME = r"([A-Z][a-z'’-]+(?:\s[A-Z][a-z'’-]+){0,2})"
# A lower-case phrase (an employer, a team), ended by punctuation or a joining word.
PHRASE = (r"([\w&'’-]+(?:\s[\w&'’-]+){0,4}?)(?=\s*(?:[.,!?;:()\-–—]|$)|\s(?:and|but|after|"
          r"since|because|so|who|which|that|when|where|in|on|last|this|for|to|now|I)\b)")
ROLE = r"((?:[a-z-]+\s){0,2}[a-z-]+)"
_DET = r"(?:the\s+|a\s+|an\s+|my\s+)?"
_ME = r"I(?:'m|’m|\sam)"
_OCCUPATION = re.compile(
    r"(?:er|or|ist|ian|ant|ent|eer|man|woman|person|guard|chef|nurse|coach|lead|cook|"
    r"clerk|pilot|intern|student|officer|agent|doctor|vet|founder|owner|staff|analyst)$")
_NOT_NAME_WORDS = ("I I'm I've I'll I'd The A An And But So Oh Hey Hi Yes No Not It It's This "
                   "That My We Our You Your He She They Thanks Thank Wow Yeah Ok Okay Mom Dad")
_NOT_NAMES = frozenset(_NOT_NAME_WORDS.split())

SINGLE_VALUED = ("marital", "spouse", "job", "home", "origin")
"""Relations a person holds one value of at a time: two values at once cannot both hold."""


@dataclass(frozen=True)
class Observation:
    """One thing a person said about themselves.

    Attributes:
        relation: ``marital``, ``spouse``, ``partner``, ``children``, ``relative``, ``pet``,
            ``job``, ``home``, ``origin`` or ``location``.
        value: the normalised value ("married", "Sara", "mechanical engineering company");
            empty when the statement names none ("my new job").
        kind: ``state`` (holds from now on), ``start`` (begins now: "got a new job",
            "signed with"), ``end`` (ended now: "lost my job at X"), ``wedding``.
        when: the turn's date (its session's event time).
        evidence: the turn id, e.g. ``s28:1`` (``fact:<id>`` when it came from a fact).
        text: the words matched, cut to 120 characters.
    """

    relation: str
    value: str
    kind: str
    when: datetime | None
    evidence: str
    text: str


def _clean(value: str | None) -> str:
    value = re.sub(r"['’]s$", "", (value or "").strip(" .,'’")).strip(" '’")
    value = re.sub(r"^(?:the|a|an|my|our)\s+", "", value, flags=re.I)
    return value if value not in _NOT_NAMES else ""


def _role(role: str, org: str) -> str:
    role, org = _clean(role).lower(), _clean(org).lower()
    return f"{role} @ {org}" if org else role


# (relation, kind, pattern, value builder from the match's groups)
_Rule = tuple[str, str, re.Pattern[str], Callable[[tuple[Any, ...]], str]]
_RULES: list[_Rule] = [
    ("spouse", "state", re.compile(
        rf"(?i:\b(?:my|the)\s+(?:wife|husband|spouse|hubby|missus))\b(?:,?\s+{NAME})?"),
     lambda g: _clean(g[0])),
    ("partner", "state", re.compile(
        rf"(?i:\bmy\s+(?:girlfriend|boyfriend|fianc[eé]e?))\b(?:,?\s+{NAME})?"),
     lambda g: _clean(g[0])),
    ("marital", "wedding", re.compile(
        r"(?i:\b(?:(?:we|I)\s+(?:just\s+)?got\s+married|(?:our|my)\s+wedding\b|"
        r"(?:girlfriend|boyfriend|fianc[eé]e?)(?:\s+\w+)?\s+and\s+I\s+(?:had|got|celebrated)\s+"
        r"(?:\w+\s){0,4}wedding|tied\s+the\s+knot))"), lambda g: "married"),
    ("children", "state", re.compile(
        rf"(?i:\bmy\s+(?:kids|children|son|sons|daughter|daughters|baby|twins|stepson|"
        rf"stepdaughter))\b(?:(?:'s|’s)?\s+{NAME})?"), lambda g: _clean(g[0])),
    ("relative", "state", re.compile(
        rf"(?i:\bmy\s+(mom|mother|mum|dad|father|sister|brother|grandma|grandmother|grandpa|"
        rf"grandfather|aunt|uncle|cousin|niece|nephew))\b(?:,?\s+{NAME})?"),
     lambda g: _clean(g[1]) or g[0].lower()),
    ("pet", "state", re.compile(
        rf"(?i:\bmy\s+(?:dog|cat|pup|puppy|kitten|pet|turtle|hamster|parrot|horse|rabbit|"
        rf"bunny|snake))\b(?:,?\s+{NAME})?"), lambda g: _clean(g[0])),
    ("pet", "state", re.compile(
        rf"(?i:\b(?:dog|cat|pup|puppy|kitten|pet|turtle|horse)\s+(?:named|called))\s+{NAME}"),
     lambda g: _clean(g[0])),
    ("job", "state", re.compile(
        rf"\b{_ME}\s+(?:now\s+|currently\s+|working\s+as\s+)?an?\s+{ROLE}\s+"
        rf"(?i:at|for|with)\s+{_DET}{PHRASE}"), lambda g: _role(g[0], g[1])),
    ("job", "state", re.compile(
        rf"(?i:\bI\s+(?:work|worked|am\s+working|'m\s+working|’m\s+working)\s+as\s+an?)\s+"
        rf"{ROLE}\b"), lambda g: _role(g[0], "")),
    ("job", "state", re.compile(
        rf"(?i:\bI\s+(?:work|worked|am\s+working|'m\s+working|’m\s+working)\s+(?:at|for))\s+"
        rf"{_DET}{PHRASE}"), lambda g: _clean(g[0]).lower()),
    ("job", "state", re.compile(
        rf"(?i:\bmy\s+(?:current\s+|old\s+|previous\s+)?job\s+(?:at|as|with))\s+{_DET}{PHRASE}"),
     lambda g: _clean(g[0]).lower()),
    ("job", "start", re.compile(
        rf"(?i:\b(?:got|found|started|landed|accepted)\s+(?:a|my|the)\s+(?:new\s+|dream\s+)?"
        rf"job)(?:\s+(?i:at|with)\s+{_DET}{PHRASE})?"), lambda g: _clean(g[0]).lower()),
    ("job", "start", re.compile(rf"(?i:\bmy\s+new\s+job)\b(?:\s+(?i:at)\s+{_DET}{PHRASE})?"),
     lambda g: _clean(g[0]).lower()),
    ("job", "start", re.compile(
        rf"(?i:\bsigned\s+(?:a\s+contract\s+|a\s+deal\s+)?with)\s+{_DET}{PHRASE}"),
     lambda g: _clean(g[0]).lower()),
    ("job", "end", re.compile(
        rf"(?i:\b(?:lost|left|quit)\s+my\s+(?:([\w-]+)\s+)?job)(?:\s+(?i:at)\s+{_DET}{PHRASE})?"),
     lambda g: _clean(g[1]).lower() or (f"{g[0]} job" if g[0] else "")),
    ("home", "state", re.compile(
        rf"(?i:\bI\s+(?:live|am\s+living|'m\s+living|’m\s+living)\s+in)\s+{NAME}"),
     lambda g: _clean(g[0])),
    ("home", "start", re.compile(rf"(?i:\b(?:I|we)\s+(?:just\s+)?moved\s+(?:to|into))\s+{NAME}"),
     lambda g: _clean(g[0])),
    ("origin", "state", re.compile(
        rf"(?:\b{_ME}\s+(?i:originally\s+)?from|(?i:\bI\s+grew\s+up\s+in)|"
        rf"(?i:\bmy\s+hometown(?:,|\s+of|\s+is)?))\s+{NAME}"), lambda g: _clean(g[0])),
    ("location", "state", re.compile(
        rf"(?i:\b(?:I'm|I’m|I\s+am|we're|we’re|we\s+are)\s+(?:currently\s+|now\s+|still\s+)?"
        rf"(?:in|at))\s+{NAME}|(?i:\bhere\s+in)\s+{NAME}"), lambda g: _clean(g[0] or g[1])),
]


def observe(text: str, when: datetime | None, evidence: str) -> list[Observation]:
    """The observations in one turn of the person (their own words)."""
    matches = [(relation, kind, build, m) for relation, kind, pattern, build in _RULES
               for m in pattern.finditer(text)]
    ends = [m.span() for relation, kind, _, m in matches if (relation, kind) == ("job", "end")]
    found: list[Observation] = []
    for relation, kind, build, match in matches:
        value = build(match.groups())
        if (relation, kind) == ("job", "state"):
            if " @ " in value and not _OCCUPATION.search(value.split(" @ ")[0]):
                continue  # "I'm a big fan of ...": not an occupation
            if any(a <= match.start() < b for a, b in ends):
                continue  # "lost my job at X": the end says it, not a new state
        snippet = " ".join(match.group(0).split())[:120]
        found.append(Observation(relation, value, kind, when, evidence, snippet))
        if relation in ("spouse", "partner"):  # either also says the marital status
            status = "married" if relation == "spouse" else "unmarried"
            found.append(Observation("marital", status, "state", when, evidence, snippet))
    return found
