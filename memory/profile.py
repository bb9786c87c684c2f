"""A person as one conversation knows them: statements in time, names, distinctive words.

Built from raw turns alone, deterministically; stored facts about the person are used
too when an extractor left some. Three things are read:

* **statements** (``person_patterns.observe``) on the person's own turns, and, for
  the single-valued relations, **segments**: which value held from when to when. A
  value holds from its first mention until another value of the same relation is
  said or the conversation ends; "lost my job at X" says X held up to that day (naming a
  job begun earlier without a name); a wedding says the person was unmarried from the
  conversation's start (or the last marital statement) until then.
* **names** the person says, and whether they brought each one into the conversation;
* **distinctive terms**: what the person says more than everyone else in the tenant.

How names and terms are found is in ``corpus.py``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache

from rapidfuzz import fuzz

from . import text as textmod
from .corpus import Corpus
from .models import FactItem, Turn
from .person_patterns import SINGLE_VALUED, Observation, observe

__all__ = ["Corpus", "Profile", "Segment", "build_profile", "fact_relation", "same_value"]
_FACT_RELATIONS = {
    "spouse": ("married", "wife", "husband", "spouse"),
    "job": ("work", "job", "employ", "career", "occupation", "profession"),
    "home": ("live", "moved", "reside"), "origin": ("hometown", "grew up", "comes from"),
    "children": ("son", "daughter", "child", "kid"), "pet": ("dog", "cat", "pet", "puppy"),
}
SAME_VALUE = 80.0
"""rapidfuzz ``token_set_ratio`` at which two values of a relation are one value."""


_CLOSED = frozenset({"married", "unmarried"})


def same_value(a: str, b: str) -> bool:
    """Whether two relation values name the same thing (case-folded fuzzy match; exact
    for closed vocabularies, where "married" and "unmarried" are 87% alike)."""
    a, b = a.casefold(), b.casefold()
    if a in _CLOSED or b in _CLOSED:
        return a == b
    return bool(a and b) and fuzz.token_set_ratio(a, b) >= SAME_VALUE


@lru_cache(maxsize=65536)
def _stem(word: str) -> tuple[str, ...]:
    return tuple(textmod.tokens(word))


@dataclass(frozen=True)
class Segment:
    """A value of a single-valued relation and the span it held in (None: open)."""

    relation: str
    values: tuple[str, ...]
    start: datetime | None
    end: datetime | None
    evidence: tuple[str, ...]


@dataclass
class Profile:
    """Everything the reconciler's tools know of one person in one conversation."""

    name: str
    conversation_id: str
    partners: list[str]
    first: datetime | None
    last: datetime | None
    sessions: int
    turns: list[Turn]
    observations: list[Observation]
    segments: list[Segment]
    names: dict[str, tuple[int, str, bool]] = field(default_factory=dict)
    """name -> (times said, first turn id, whether this person introduced it)."""
    terms: list[tuple[str, float]] = field(default_factory=list)
    term_evidence: dict[str, str] = field(default_factory=dict)
    facts: list[FactItem] = field(default_factory=list)


def _segments(relation: str, obs: list[Observation], start: datetime | None,
              end: datetime | None) -> list[Segment]:
    """Which value held when, for one single-valued relation (module docstring rules)."""
    done: list[Segment] = []
    cur: dict | None = None
    boundary = start

    def close(at: datetime | None) -> None:
        nonlocal cur, boundary
        if cur is not None:
            done.append(Segment(relation, tuple(cur["values"]), cur["start"], at,
                                tuple(dict.fromkeys(cur["evidence"]))))
            boundary, cur = at, None

    for o in sorted(obs, key=lambda o: (o.when is None, o.when)):
        if relation == "origin":
            done.append(Segment(relation, (o.value,), None, None, (o.evidence,)))
        elif o.kind == "wedding":
            if cur is None or cur["values"] != ["unmarried"]:
                close(o.when)
                cur = {"values": ["unmarried"], "start": boundary, "evidence": []}
            cur["start"] = boundary  # unmarried since the last marital statement, or the start
            cur["evidence"].append(o.evidence)
            close(o.when)
            cur = {"values": ["married"], "start": o.when, "evidence": [o.evidence]}
        elif o.kind == "end":
            if cur is not None and (not any(cur["values"]) or any(
                    same_value(o.value, v) for v in cur["values"])):
                cur["values"] = [v for v in cur["values"] if v] or [o.value]
                cur["evidence"].append(o.evidence)
                close(o.when)
            else:
                first = boundary if cur is None else o.when
                close(o.when)
                done.append(Segment(relation, (o.value,), first, o.when, (o.evidence,)))
        elif cur is not None and (o.when == cur["start"] or (o.kind == "state" and (
                not o.value or any(same_value(o.value, v) for v in cur["values"])))):
            if o.value and not any(same_value(o.value, v) for v in cur["values"]):
                cur["values"] = [v for v in cur["values"] if v] + [o.value]
            cur["evidence"].append(o.evidence)
        else:
            close(o.when)
            cur = {"values": [o.value], "start": o.when, "evidence": [o.evidence]}
    close(end)
    return [s for s in done if any(s.values)]


def fact_relation(predicate: str) -> str:
    """The relation a fact's predicate names ("works at" -> ``job``), else ``fact``."""
    folded = predicate.casefold()
    return next((r for r, cues in _FACT_RELATIONS.items() if any(c in folded for c in cues)),
                "fact")


def _fact_observations(facts: list[FactItem]) -> list[Observation]:
    """Stored facts as observations: a relation when the predicate names one ("works at"
    is a job), else ``fact``. Superseded facts count too: their successor, later in
    time, ends their segment, so the history reads as a change, not a clash."""
    out = []
    for f in facts:
        predicate, ev = f.predicate, f.evidence[0] if f.evidence else f"fact:{f.id}"
        relation = fact_relation(predicate)
        value = f.object.strip()[:80] if relation != "fact" else f.text[:80]
        out.append(Observation(relation, value, "state", f.event_time, ev, f.text[:120]))
        if relation == "spouse":
            out.append(Observation("marital", "married", "state", f.event_time, ev,
                                   f.text[:120]))
    return out


def build_profile(corpus: Corpus, conversation_id: str, name: str, *,
                  facts: list[FactItem] | None = None, exclude: set[str] | None = None,
                  k_terms: int = 25) -> Profile:
    """The profile of ``name`` in one conversation.

    Args:
        corpus: the tenant's turns.
        conversation_id: the conversation.
        name: the speaker, as the conversation spells it.
        facts: stored facts about or by the person in that conversation (may be empty).
        exclude: speaker names whose turns stay out of the background of the distinctive
            terms (when comparing two Bens, neither Ben is the other's background).
        k_terms: how many distinctive terms to keep.
    """
    key = (conversation_id, name)
    turns = corpus.by_person.get(key, [])
    obs = [o for t in turns for o in observe(t.text, t.event_time, t.turn_id)]
    obs += _fact_observations(facts or [])
    dates = corpus.dates.get(conversation_id) or []
    first, last = min(dates, default=None), max(dates, default=None)
    segments = [s for rel in SINGLE_VALUED for s in _segments(
        rel, [o for o in obs if o.relation == rel], first, last)]
    names: dict[str, tuple[int, str, bool]] = {}
    for t in turns:
        for n in corpus.names_in(t.text):
            count, ev, _ = names.get(n, (0, t.turn_id, False))
            names[n] = (count + 1, ev, corpus.introduced.get((conversation_id, n)) == name)
    skip = {(c, s) for (c, s) in corpus.by_person if s in (exclude or set())}
    terms = corpus.distinctive(key, skip, k_terms)
    wanted = {term for term, _ in terms}
    where: dict[str, str] = {}
    surface: dict[str, Counter[str]] = defaultdict(Counter)
    for t in turns:
        for word in textmod.words(t.text):
            stem = _stem(word)
            if stem and stem[0] in wanted:
                surface[stem[0]][word] += 1
                where.setdefault(stem[0], t.turn_id)
    # Show each stem as the word the person used most ("communiti" -> "community").
    terms = [(surface[term].most_common(1)[0][0] if surface[term] else term, z)
             for term, z in terms]
    where = {surface[s_].most_common(1)[0][0] if surface[s_] else s_: ev
             for s_, ev in where.items()}
    return Profile(name=name, conversation_id=conversation_id,
                   partners=[p for p in corpus.people(conversation_id) if p != name],
                   first=first, last=last, sessions=len(corpus.sessions[conversation_id]),
                   turns=turns, observations=obs, segments=segments, names=names,
                   terms=terms, term_evidence=where, facts=list(facts or []))
