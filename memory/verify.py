"""Verify who did what before answering: support for the named person against the others'.

A question that names a person ("What did Ana realize after her charity race?")
presupposes that the thing it asks about is hers. The check: weigh the question's
content words (its tokens less names, question scaffolding and dates) by idf over the
conversation, and find the best support each person has: the share of that weight
covered by the words credited to them (``attribution.py``) in one turn and its
neighbours (a question and its answer are often two turns). If another participant's
best support beats the named person's by ``margin`` and covers at least ``floor`` of the
weight, the memories attribute it to someone else: abstain, naming them.

No LLM and no rule about any particular name: only grammar, idf and two thresholds.
``memstrata bench verify`` measures it over every LoCoMo dev question in seconds.
LoCoMo's adversarial questions that swap a detail instead of the person ("grandpa's
gift" where it was grandma's) are outside what this check can see; the report says
how many there are.
"""

from __future__ import annotations

import calendar
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field

from . import text as textmod
from .attribution import ConversationIndex

#: Words that shape a question rather than say what it is about. Kept small and
#: generic: a word here never counts as support for or against anyone.
SCAFFOLD = frozenset(textmod.tokens(
    "name named type kind sort say said says mention mentioned describe described "
    "according recent recently think thought"))
_DATE_WORDS = frozenset(textmod.tokens(" ".join([*calendar.month_name, *calendar.month_abbr])))


class VerifySettings(BaseModel):
    """The check's knobs (calibrated on the LoCoMo dev split; see docs/benchmarks/verify.md)."""

    margin: float = Field(0.15, ge=0, description="other's support minus the named "
                          "person's, as a share of the question's weight, to abstain")
    floor: float = Field(0.4, ge=0, le=1, description="least support the other person "
                         "needs (a weak match elsewhere is no evidence of a mix-up)")
    window: int = Field(1, ge=0, description="turns either side whose credited words join "
                        "a turn's (same session)")
    date_slack_days: int = Field(14, ge=0, description="a question naming a day or month "
                                 "looks at turns this close to it")


class Support(BaseModel):
    """The best support one person has for the question's content."""

    person: str
    score: float = 0.0
    evidence: list[str] = []
    terms: list[str] = []
    conversation_id: str | None = None


class Verification(BaseModel):
    """The check's outcome, with the scores that decided it."""

    verdict: Literal["supported", "other_person", "not_checked"]
    abstain: bool = False
    person: str | None = None
    reason: str = ""
    terms: list[str] = []
    named: Support | None = None
    other: Support | None = None
    settings: VerifySettings = VerifySettings()


def question_terms(question: str, names: list[str]) -> list[str]:
    """The content tokens of a question: no names, scaffolding, dates or numbers."""
    drop = {t for n in names for t in textmod.tokens(n)} | SCAFFOLD | _DATE_WORDS
    # "Lars's" tokenises as "larss": strip possessives before tokenising.
    cleaned = question.replace("’", "'").replace("'s ", " ").replace("s' ", "s ")
    out = [t for t in dict.fromkeys(textmod.tokens(cleaned)) if t not in drop
           and not t.isdigit()]
    return out


def _in_span(when: str | None, span: tuple[datetime, datetime] | None, slack: int) -> bool:
    if span is None or when is None:
        return True
    moment = datetime.fromisoformat(when)
    return span[0] - timedelta(days=slack) <= moment <= span[1] + timedelta(days=slack)


def best_support(index: ConversationIndex, terms: list[str], person: str, *,
                 window: int = 1, span: tuple[datetime, datetime] | None = None,
                 slack: int = 14) -> Support:
    """``person``'s best idf-weighted coverage of ``terms`` by one unit and its window.

    A unit counts only if the person is credited with something in it (a window does
    not lend support to a turn that is not about them at all).
    """
    weights = {t: index.idf(t) for t in terms}
    total = sum(weights.values()) or 1.0
    best = Support(person=person, conversation_id=index.conversation_id)
    units = index.units
    for n, unit in enumerate(units):
        own = unit.people.get(person)
        if not own or not own & weights.keys() or not _in_span(unit.when, span, slack):
            continue
        covered, ids = set(own & weights.keys()), list(unit.ids)
        if unit.session is not None:
            for m in range(max(0, n - window), min(len(units), n + window + 1)):
                near = units[m]
                if m != n and near.session == unit.session:
                    extra = near.people.get(person, set()) & weights.keys()
                    if extra - covered:
                        covered |= extra
                        ids += near.ids
        score = sum(weights[t] for t in covered) / total
        if score > best.score:
            best = Support(person=person, score=round(score, 4), evidence=ids,
                           terms=[t for t in terms if t in covered],
                           conversation_id=index.conversation_id)
    return best


def _phrase(question: str, matched: list[str]) -> str:
    # The longest run of consecutive question words whose stems were matched: "charity
    # race" from "What did Ana realize after her charity race?".
    best: list[str] = []
    run: list[str] = []
    for word in question.replace("?", " ").split():
        stem = textmod.tokens(word)
        if stem and stem[0] in matched:
            run.append(word.strip(",.!\"'"))
            best = run if len(run) > len(best) else best
        else:
            run = []
    return " ".join(best)


def verify(indexes: list[ConversationIndex], question: str, person: str | None, *,
           settings: VerifySettings | None = None,
           span: tuple[datetime, datetime] | None = None) -> Verification:
    """Check whether the memories support ``question`` for the ``person`` it names.

    Args:
        indexes: the conversations the question was routed to.
        question: as asked.
        person: the one person it names (None: nothing to verify).
        settings: margin, floor, window, date slack.
        span: the time span the question names, if any (``query.time_range``).
    """
    settings = settings or VerifySettings()
    if person is None or not any(person in ix.participants for ix in indexes):
        # Nobody named, or someone who never speaks here (a pet, a friend mentioned in
        # passing): who-said-what cannot tell their things from the speakers'.
        return Verification(verdict="not_checked", person=person, settings=settings)
    names = sorted({p for ix in indexes for p in ix.participants} | {person})
    terms = question_terms(question, names)
    if not terms:
        return Verification(verdict="not_checked", person=person, settings=settings)
    def support(ix: ConversationIndex, who: str) -> Support:
        return best_support(ix, terms, who, window=settings.window, span=span,
                            slack=settings.date_slack_days)

    named = max((support(ix, person) for ix in indexes if person in ix.participants),
                key=lambda s: s.score, default=Support(person=person))
    others = [support(ix, p) for ix in indexes for p in ix.participants if p != person]
    other = max(others, key=lambda s: s.score, default=None)
    return decide(Verification(verdict="supported", person=person, terms=terms, named=named,
                               other=other, settings=settings), question)


def decide(result: Verification, question: str = "") -> Verification:
    """Apply the thresholds in ``result.settings`` to its scores (cheap: a threshold
    sweep scores once and decides many times)."""
    settings, named, other = result.settings, result.named, result.other
    result = result.model_copy(update={"abstain": False, "reason": "",
                                       "verdict": "supported" if named else result.verdict})
    if named is None or other is None:
        return result
    if other.score - named.score > settings.margin and other.score >= settings.floor:
        what = _phrase(question, other.terms) or " ".join(other.terms)
        cited = ", ".join(other.evidence[:3])
        result.verdict, result.abstain = "other_person", True
        result.reason = (f"Not mentioned for {result.person}: it was {other.person}'s {what}"
                         f" ({cited})")
    return result


def coverage(indexes: list[ConversationIndex], terms: list[str], ids: list[str],
             person: str | None = None) -> float:
    """The idf-weighted share of ``terms`` that the units ``ids`` cover (only the words
    credited to ``person`` when one is given): how much of a question some evidence
    speaks to, in [0, 1]."""
    best = 0.0
    wanted = set(ids)
    for index in indexes:
        weights = {t: index.idf(t) for t in terms}
        total = sum(weights.values()) or 1.0
        covered: set[str] = set()
        for unit in index.units:
            if wanted & set(unit.ids):
                words = (unit.people.get(person, set()) if person
                         else set().union(*unit.people.values()) if unit.people else set())
                covered |= words & weights.keys()
        best = max(best, sum(weights[t] for t in covered) / total)
    return round(best, 4)
