"""Two profiles of one name side by side: what they share, what differs, what clashes.

All deterministic; the reconciler's tools return these and its guard reads them.

* **Shared, strong**: a named value of a relation both state (the same spouse, child,
  pet or relative by name; the same employer, home or origin), and *own* names both
  introduced into their conversations (a name the partner brought in is the partner's:
  Ben's dog Rex is no evidence about Tom). ``shared_distinctive`` counts these.
* **Shared, weak**: distinctive terms in both top lists, names both merely mention.
* ``overlap_score`` = 0.45·min(1, relations/2) + 0.35·min(1, own names/3)
  + 0.20·(shared terms / k): strong evidence dominates; topics alone reach 0.2 at most,
  because two different people often talk about the same things.
* **Contradictions**: two values of a single-valued relation (married/unmarried, spouse,
  job, home, origin) whose spans overlap — both cannot hold of one person at once — and
  two places on the same day. Different values at separate times are **changes**: they
  may be one life evolving (a new job, a move), so they are reported, not counted.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from .person_patterns import Observation
from .profile import Profile, Segment, same_value

NAMED_RELATIONS = ("spouse", "children", "relative", "pet")
VALUE_RELATIONS = ("job", "home", "origin")


def day(when: datetime | None) -> str | None:
    """An ISO date, or None."""
    return when.date().isoformat() if when else None


class Shared(BaseModel):
    """One thing both profiles hold, with where each side says it."""

    kind: str = Field(description="relation name, 'name' or 'term'")
    value: str
    a: str = Field(description="turn id in conversation a")
    b: str = Field(description="turn id in conversation b")


class Comparison(BaseModel):
    """What two same-name profiles share and where they differ."""

    time_overlap_days: int
    shared: list[Shared]
    shared_weak: list[Shared]
    differing: dict[str, dict[str, list[str]]]
    shared_distinctive: int
    term_overlap: float
    overlap_score: float


class Claim(BaseModel):
    """One side of a clash: a value and the span it held in."""

    value: str
    start: str | None
    end: str | None
    evidence: list[str]


class Clash(BaseModel):
    """Two values of one relation; a contradiction when their spans overlap."""

    relation: str
    a: Claim
    b: Claim
    why: str


def _values(p: Profile, relation: str) -> dict[str, str]:
    """Named values of a relation (value -> first turn id)."""
    out: dict[str, str] = {}
    for o in p.observations:
        named = o.value and (relation not in NAMED_RELATIONS or o.value[:1].isupper())
        if o.relation == relation and named:
            out.setdefault(o.value, o.evidence)
    return out


def compare(a: Profile, b: Profile) -> Comparison:
    """Shared and differing attributes of two profiles, and the overlap score."""
    shared: list[Shared] = []
    differing: dict[str, dict[str, list[str]]] = {}
    for relation in (*NAMED_RELATIONS, *VALUE_RELATIONS):
        va, vb = _values(a, relation), _values(b, relation)
        pairs = [(x, y) for x in va for y in vb if same_value(x, y)]
        shared += [Shared(kind=relation, value=x, a=va[x], b=vb[y]) for x, y in pairs]
        rest_a = sorted(set(va) - {x for x, _ in pairs})[:4]
        rest_b = sorted(set(vb) - {y for _, y in pairs})[:4]
        if rest_a or rest_b:
            differing[relation] = {"a": rest_a, "b": rest_b}
    n_relations = len(shared)
    taken = {s.value.casefold() for s in shared}
    own: list[Shared] = []
    weak: list[Shared] = []
    for name in sorted(set(a.names) & set(b.names)):
        if name.casefold() in taken:
            continue  # already counted as a relation's value
        item = Shared(kind="name", value=name, a=a.names[name][1], b=b.names[name][1])
        (own if a.names[name][2] and b.names[name][2] else weak).append(item)
    terms_b = dict(b.terms)
    k = max(len(a.terms), len(b.terms), 1)
    common = [t for t, _ in a.terms if t in terms_b]
    weak += [Shared(kind="term", value=t, a=a.term_evidence.get(t, ""),
                    b=b.term_evidence.get(t, "")) for t in common]
    term_overlap = round(len(common) / k, 3)
    score = (0.45 * min(1.0, n_relations / 2) + 0.35 * min(1.0, len(own) / 3)
             + 0.20 * term_overlap)
    overlap = 0
    if a.first and a.last and b.first and b.last:
        overlap = max(0, (min(a.last, b.last) - max(a.first, b.first)).days + 1)
    return Comparison(time_overlap_days=overlap, shared=shared + own, shared_weak=weak,
                      differing=differing, shared_distinctive=n_relations + len(own),
                      term_overlap=term_overlap, overlap_score=round(score, 3))


def _overlaps(x: Segment, y: Segment) -> bool:
    lo = max((s for s in (x.start, y.start) if s is not None), default=None)
    hi = min((e for e in (x.end, y.end) if e is not None), default=None)
    return lo is None or hi is None or lo <= hi


def _claim(s: Segment) -> Claim:
    return Claim(value=" / ".join(s.values), start=day(s.start), end=day(s.end),
                 evidence=list(s.evidence[:4]))


def _locations(p: Profile) -> list[Observation]:
    return [o for o in p.observations if o.relation == "location" and o.value and o.when]


def clashes(a: Profile, b: Profile) -> tuple[list[Clash], list[Clash]]:
    """(contradictions, changes) between two profiles of one name."""
    contradictions: list[Clash] = []
    changes: list[Clash] = []
    for x in a.segments:
        for y in b.segments:
            if x.relation != y.relation or any(
                    same_value(u, v) for u in x.values for v in y.values):
                continue
            if _overlaps(x, y):
                label = "marital status" if x.relation == "marital" else x.relation
                why = (f"{a.name}'s {label} is '{' / '.join(x.values)}' in "
                       f"{a.conversation_id} and '{' / '.join(y.values)}' in "
                       f"{b.conversation_id} over the same time")
                contradictions.append(Clash(relation=x.relation, a=_claim(x), b=_claim(y),
                                            why=why))
            else:
                changes.append(Clash(relation=x.relation, a=_claim(x), b=_claim(y),
                                     why="different values at separate times: may be a change"
                                         " in one life (evolution), or two people"))
    for la in _locations(a):
        for lb in _locations(b):
            if la.when and lb.when and la.when.date() == lb.when.date() and not same_value(
                    la.value, lb.value):
                contradictions.append(Clash(
                    relation="location",
                    a=Claim(value=la.value, start=day(la.when), end=day(la.when),
                            evidence=[la.evidence]),
                    b=Claim(value=lb.value, start=day(lb.when), end=day(lb.when),
                            evidence=[lb.evidence]),
                    why=f"in two places on the same day, {day(la.when)}"))
    return contradictions, changes
