"""``PersonalAnswerer``: route, retrieve, verify who did what, then answer, with provenance.

The path, per question:

1. **route** (``memory.route``): the person(s) it names, the tenant's conversations that
   hold them, or global; the time span it names;
2. **retrieve** turns and what was extracted from them (facts, QA pairs, personas) for
   that route;
3. **verify** (``memory.verify``) before any LLM call: when the question names one person
   but the memories credit what it asks about to someone else, abstain and say whose it
   was ("Not mentioned for Ana: it was Ben's charity race (s2:3)"). This is
   deterministic on purpose: the embedded model is too weak to notice a swapped name;
4. otherwise **answer** with ``QA`` over the packed memories: the tenant's memory as
   ``Memory.context`` packs it (``packers.memory_context``: what was read, the best
   documents read shown whole among their facts, procedures, strategies, the VoE loop's
   facts, reminders), the conversation layer being these verified hits, each turn named
   by its id in its conversation. A tenant holding only conversations gets its hits'
   lines alone, no layer header.

``QA``'s :class:`~memstrata.programs.qa.AnswerStyle` rules the whole path: the packed
memories are written in its date style, and the verifier's abstentions answer its
abstention phrase, so a benchmark selects its conventions once, on the ``QA`` it passes.

Every result is an :class:`AnswerWithProvenance`: the evidence ids and where they came
from, the speakers and conversation behind them, a confidence, the route and the
verification's scores, whether it answered or abstained.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import dspy
from pydantic import BaseModel, Field

from memstrata.memory import Filters, Hit, MemoryStore, Retriever
from memstrata.memory.attribution import ConversationIndex
from memstrata.memory.route import Route, Router
from memstrata.memory.verify import Verification, VerifySettings, coverage, question_terms, verify
from memstrata.packers import from_hits
from memstrata.packers.memory_context import (
    LAYERS,
    ContextSettings,
    MemoryContext,
    build_context,
)

from .binding import Live
from .qa import QA


class AnswerSettings(BaseModel):
    """Retrieval depth, memory budget, the layers shown beside what was said, and the
    verification thresholds."""

    retrieve_k: int = 40
    budget: int = 600
    verify: VerifySettings = VerifySettings()
    layers: tuple[str, ...] = Field(LAYERS, description=(
        "The layers of ``Memory.context`` the answer is shown (``conversation`` is these "
        "hits)."))
    context: ContextSettings = Field(
        # The embedded 1.5B answered better shown the document beside its facts
        # (docs/benchmarks/cognitive.md).
        default_factory=lambda: ContextSettings(documents_k=2), description=(
            "How the other layers search and share the budget (the documents read "
            "shown whole beside their facts, where they fit)."))


class EvidenceRef(BaseModel):
    """One piece of evidence: its id (a turn id or an item id), conversation and speaker.
    ``turn_id`` is a turn's id within its conversation (``D1:3``) where ``id`` is its
    store id (``Memory.answer`` gives store ids, which ``Memory.get`` reads)."""

    id: str
    conversation_id: str | None = None
    speaker: str | None = None
    turn_id: str | None = None


class AnswerWithProvenance(BaseModel):
    """An answer (or abstention) and everything it rests on.

    ``evidence_from`` says where ``evidence`` came from: ids the model ``cited``; the
    ``verifier``'s best support (its abstentions, or an answer that cited nothing); the top
    ``retrieved`` memories when neither exists; ``none`` when nothing was found at all.
    ``speakers`` are who said the evidence; ``about`` whom the attribution check credits
    it to (a listener's "what did you take away from your race?" is about the runner).
    ``confidence`` is, for a verified abstention, how far the other person's support
    beats the named one's; for an answer, how much of the question's content its evidence
    covers (only words credited to the named person, when one is named); for a model
    abstention, one minus the best coverage among the memories it was shown.
    """

    question: str
    answer: str
    abstained: bool
    answered_by: Literal["verifier", "model"]
    reason: str = ""
    evidence: list[str] = []
    evidence_from: Literal["cited", "verifier", "retrieved", "none"] = "none"
    sources: list[EvidenceRef] = []
    speakers: list[str] = []
    about: list[str] = []
    conversation_id: str | None = None
    confidence: float = 0.0
    route: Route
    verification: Verification
    retrieved: list[str] = []
    packed: list[str] = []


@dataclass(frozen=True)
class AnswerSources:
    """What ``PersonalAnswerer`` reads at call time: the store, its retrieval and routing,
    the answering model's token counter, and the lock the store's reads take (``Memory``'s;
    none for a store of one thread). Live things: never part of the program's state,
    never copied with it (see ``programs.binding``)."""

    store: MemoryStore
    retriever: Retriever
    router: Router
    count_tokens: Callable[[str], int]
    lock: threading.RLock | None = None

    @classmethod
    def over(cls, store: MemoryStore, *, retriever: Retriever | None = None,
             count_tokens: Callable[[str], int] | None = None) -> AnswerSources:
        """Sources over ``store``: lexical retrieval unless ``retriever`` is given, and a
        rough four characters a token unless ``count_tokens`` is."""
        return cls(store=store, retriever=retriever or Retriever(store), router=Router(store),
                   count_tokens=count_tokens or _rough_tokens)


_SOURCES: ContextVar[AnswerSources | None] = ContextVar("memstrata_answer_sources", default=None)


@contextmanager
def answering_from(sources: AnswerSources) -> Iterator[None]:
    """Inside the block, every ``PersonalAnswerer`` with no sources of its own (the copies
    an optimizer makes) reads ``sources``; bound programs and ``sources=`` keep theirs.

    What ``memstrata compile answerer`` runs its optimizer in: the copies stay unbound
    (they share nothing when they leave the block) while each run finds the store.
    """
    token = _SOURCES.set(sources)
    try:
        yield
    finally:
        _SOURCES.reset(token)


def _rough_tokens(text: str) -> int:
    return len(text) // 4 + 1


@dataclass(frozen=True)
class Prepared:
    """The answer path's state before any LLM call (``PersonalAnswerer.prepare``).

    ``packed`` is the block ``QA`` is shown (``Memory.context``'s, see the module), or
    ``None`` when the verifier abstains (another person holds what the question asks
    about): then ``QA`` is never asked.
    """

    question: str
    route: Route
    indexes: list[ConversationIndex]
    person: str | None
    checked: Verification
    hits: list[Hit]
    packed: MemoryContext | None

    @property
    def memories(self) -> str:
        """The packed memories (empty when the verifier abstains)."""
        return self.packed.text if self.packed is not None else ""


class PersonalAnswerer(dspy.Module):
    """Answers questions about people from one store, verifying attribution first.

    Its state as a DSPy program is ``qa``'s predictor and ``settings``; the store, the
    retriever and the router are :class:`AnswerSources`, bound with ``bind`` (or the
    constructor's ``store``) or passed per call as ``sources``. A copy an optimizer makes
    (``copy.deepcopy``) shares no store: it is unbound until bound again.

    Args:
        store: the memory store (optional: bind it later, or pass ``sources`` per call).
        retriever: hybrid retrieval over it (default: lexical only, no embedder).
        count_tokens: the answering model's token counter (for the memory budget);
            default: a rough four characters a token.
        settings: depth, budget and verification thresholds.
        qa: the answering program (default: a fresh ``QA``); its ``style`` also sets the
            packed memories' date style and the verifier's abstention answer.

    Example:
        >>> answerer = PersonalAnswerer(store)                             # doctest: +SKIP
        >>> out = answerer(question="What did Ana realize after her race?",
        ...                user_id="chat-1")
        >>> out.provenance.reason
        "Not mentioned for Ana: it was Ben's race (s2:3)"
    """

    def __init__(self, store: MemoryStore | None = None, *, retriever: Retriever | None = None,
                 count_tokens: Callable[[str], int] | None = None,
                 settings: AnswerSettings | None = None, qa: QA | None = None) -> None:
        super().__init__()
        self.settings = settings or AnswerSettings()
        self.qa = qa or QA()
        self.sources: Live[AnswerSources] = Live(what="store (AnswerSources)")
        if store is not None:
            self.bind(store, retriever=retriever, count_tokens=count_tokens)

    def bind(self, store: MemoryStore, *, retriever: Retriever | None = None,
             count_tokens: Callable[[str], int] | None = None) -> PersonalAnswerer:
        """Bind this program to ``store`` (see ``AnswerSources.over``); returns itself."""
        self.sources = Live(AnswerSources.over(store, retriever=retriever,
                                               count_tokens=count_tokens),
                            what="store (AnswerSources)")
        return self

    @property
    def store(self) -> MemoryStore:
        """The bound store."""
        return self.sources.get().store

    @property
    def retriever(self) -> Retriever:
        """The bound retriever."""
        return self.sources.get().retriever

    @property
    def router(self) -> Router:
        """The bound router (``Memory`` forgets a tenant's routing through it)."""
        return self.sources.get().router

    def prepare(self, question: str, user_id: str, conversation_id: str | None = None,
                now: datetime | None = None, *, sources: AnswerSources | None = None
                ) -> Prepared:
        """Everything the path does before any LLM call: route, retrieve, verify and, when
        the verifier does not abstain, pack the memories ``QA`` is shown.

        ``forward`` answers from it; ``bench.compile`` builds the QA trainset from it, so
        a compiled ``QA`` learns from exactly the memories it is shown when it answers.
        Reads ``sources`` when given, else the bound ones, else those of an enclosing
        :func:`answering_from` (``UnboundProgramError`` when there are none).
        """
        src = sources or (self.sources.get() if self.sources.bound else _SOURCES.get()
                          or self.sources.get())
        route = src.router.route(user_id, question, conversation_id=conversation_id, now=now)
        indexes = [src.router.index(user_id, c) for c in route.conversations]
        person = route.people[0] if len(route.people) == 1 else None
        checked = verify(indexes, question, person, settings=self.settings.verify,
                         span=route.span)
        only = route.conversations[0] if len(route.conversations) == 1 else None
        # What was said; what was read and learned comes in the block's other layers.
        hits = [h for h in src.retriever.search(user_id, question, k=self.settings.retrieve_k,
                                                 filters=Filters.said(only), now=now)
                if route.keeps(h.conversation_id)]  # a person in several conversations
        packed = None
        if not (checked.abstain and checked.other is not None):
            with src.lock if src.lock is not None else nullcontext():
                packed = build_context(
                    src.store, user_id, question, budget=self.settings.budget,
                    layers=self.settings.layers, retriever=src.retriever, router=src.router,
                    count_tokens=src.count_tokens, settings=self.settings.context,
                    conversation_id=conversation_id, now=now,
                    date_style=self.qa.style.date_style, said=from_hits(hits), route=route,
                    lone_header=False)
        return Prepared(question=question, route=route, indexes=indexes, person=person,
                        checked=checked, hits=hits, packed=packed)

    def forward(self, question: str, user_id: str, conversation_id: str | None = None,
                now: datetime | None = None, *, sources: AnswerSources | None = None
                ) -> dspy.Prediction:
        """Answer ``question`` for tenant ``user_id``, from ``sources`` when given, else
        from the bound ones (``UnboundProgramError`` when there are none).

        Returns a prediction with ``answer``, ``abstained``, ``evidence``, ``provenance``
        (:class:`AnswerWithProvenance`) and ``memories`` (the packed block shown to the
        model; empty when the verifier abstained without asking it).
        """
        ready = self.prepare(question, user_id, conversation_id, now, sources=sources)
        route, indexes, person, checked, hits = (ready.route, ready.indexes, ready.person,
                                                 ready.checked, ready.hits)
        by_id = {h.turn_id or h.id: h for h in hits}
        base = {"question": question, "route": route, "verification": checked,
                "retrieved": list(by_id)}
        packed = ready.packed
        if packed is None:
            other = checked.other
            assert other is not None  # prepare packs unless the verifier credits another
            result = AnswerWithProvenance(
                **base, answer=self.qa.style.abstain_answer, abstained=True,
                answered_by="verifier",
                reason=checked.reason, evidence=other.evidence, evidence_from="verifier",
                about=[other.person],
                confidence=round(other.score - (checked.named.score if checked.named else 0), 4))
            return self._finish(result, other.conversation_id, indexes, hits, memories="")
        pred = self.qa(question=question, memories=packed.text)
        terms = question_terms(question, [p for ix in indexes for p in ix.participants])
        evidence, source = list(pred.evidence), "cited"
        home = None
        if not evidence and checked.named is not None and checked.named.evidence:
            evidence, source = list(checked.named.evidence), "verifier"
            home = checked.named.conversation_id
        if not evidence and packed.ids:
            evidence, source = packed.ids[:3], "retrieved"
        if pred.abstained:
            confidence = 1 - max((coverage(indexes, terms, [i]) for i in packed.ids), default=0)
            reason = "The memories shown to the model do not answer it."
        else:
            confidence = coverage(indexes, terms, evidence, person)
            reason = ""
        result = AnswerWithProvenance(
            **base, answer=pred.answer, abstained=pred.abstained, answered_by="model",
            reason=reason, evidence=evidence, evidence_from=source if evidence else "none",
            confidence=round(confidence, 4), packed=packed.ids, about=[person] if person else [])
        return self._finish(result, home, indexes, hits, memories=packed.text)

    def _finish(self, result: AnswerWithProvenance, conversation_id: str | None,
                indexes: list[ConversationIndex], hits: list[Hit], memories: str
                ) -> dspy.Prediction:
        # Each evidence id with its conversation and speaker: from the hits, or, for ids
        # the verifier found, from the attribution index of its conversation (turn ids
        # like "s3:7" repeat across conversations, so the conversation is part of the key).
        by_id = {h.turn_id or h.id: h for h in hits}
        units = {(ix.conversation_id, i): u.speaker for ix in indexes for u in ix.units
                 for i in u.ids}
        sources = []
        for ev in result.evidence:
            hit = by_id.get(ev)
            if hit is not None and conversation_id in (None, hit.conversation_id):
                sources.append(EvidenceRef(id=ev, conversation_id=hit.conversation_id,
                                           speaker=hit.speaker))
                continue
            conv = conversation_id or next((c for c, i in units if i == ev), None)
            sources.append(EvidenceRef(id=ev, conversation_id=conv,
                                       speaker=units.get((conv, ev)) if conv else None))
        convs = {s.conversation_id for s in sources if s.conversation_id}
        routed = result.route.conversations
        result.sources = sources
        result.speakers = sorted({s.speaker for s in sources if s.speaker})
        result.conversation_id = (convs.pop() if len(convs) == 1 else
                                  routed[0] if len(routed) == 1 else None)
        return dspy.Prediction(answer=result.answer, abstained=result.abstained,
                               evidence=result.evidence, provenance=result, memories=memories)
