"""``answer_routed``: one question, the path its intent calls for, one answer type.

The adaptive reasoner's intent check decides (``programs.effort``: the classifier's
intent, checked against the question's words). A simple recall takes the personal
answerer (``programs.answer``: route, retrieve, verify who said what, then ``QA`` over
the block ``Memory.context`` packs, what was read and learned beside what was said); a
computation, a temporal comparison, a multi-source synthesis, a contradiction or an
update takes the adaptive reasoner (``programs.reasoning``) over the same memory
(``memory.cognitive.whole.WholeMemory``: what was read and what was said), with its
allowance of calls, its calculator and its chronological order. Either way the result
is a :class:`RoutedAnswer`, an ``AnswerWithProvenance`` with the path, the intent and
the calls it took; its evidence ids follow the answerer's convention (a turn by its
turn id, ``s3:7``; an item by its id).

LLM calls: with ``route="auto"``, one to classify, then one for the answerer (none when
the verifier abstains) or the reasoner's own (two to about ten, by its allowance);
``"rules"`` classifies by the question's words alone (no call); ``"answerer"`` and
``"reasoner"`` force a path (the reasoner then classifies once itself). A parse retry
adds a call.

The store is read through guarded parts (``memory.guarded``): whoever passes a lock
holds it for each read or write, never across a model call.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime
from typing import Literal, TypeVar

from memstrata.memory import MemoryStore, Retriever
from memstrata.memory.cognitive.whole import WholeMemory
from memstrata.memory.dates import DateStyle, parse_day, render_day
from memstrata.memory.guarded import guarded
from memstrata.memory.route import Router
from memstrata.memory.store import node_type
from memstrata.memory.verify import Verification

from .answer import AnswerSources, AnswerWithProvenance, EvidenceRef, PersonalAnswerer
from .effort import checked_intent
from .errors import ProgramParseError
from .reasoning import AdaptiveReasoner, ReasoningTrace
from .verb_calls import counting_calls

T = TypeVar("T")

RouteChoice = Literal["auto", "rules", "answerer", "reasoner"]
ROUTES: tuple[str, ...] = ("auto", "rules", "answerer", "reasoner")
_ISO_DAY = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")


class RoutedAnswer(AnswerWithProvenance):
    """An answer with its provenance, the path that gave it and what that cost.

    ``path`` is ``answerer`` or ``reasoner``; ``intent`` the checked intent that chose
    it (``model_intent`` what the classifier said; empty when it was not asked);
    ``llm_calls`` the calls made for this answer, in this thread; ``reasoning`` the
    reasoner's trace on its path; ``run_id`` the run record, when one was written.
    """

    path: Literal["answerer", "reasoner"] = "answerer"
    intent: str = ""
    model_intent: str = ""
    llm_calls: int = 0
    reasoning: ReasoningTrace | None = None
    run_id: str | None = None


def restyle_dates(answer: str, style: DateStyle) -> str:
    """``answer`` with its ISO days (``2023-05-08``) written in ``style`` (the reasoner
    shows its facts' dates in ISO; the answer follows the answerer's style)."""
    if style == "iso":
        return answer

    def day(m: re.Match[str]) -> str:
        when = parse_day(m.group(0))
        return render_day(when, style) if when is not None else m.group(0)

    return _ISO_DAY.sub(day, answer)


def choose_path(question: str, route: RouteChoice, reasoner: AdaptiveReasoner
                ) -> tuple[str, str, str]:
    """(path, checked intent, the classifier's intent or "") for ``question``; the
    classifier is asked (one call) only with ``route="auto"``, and when its output
    cannot be read (twice) the question's words decide, as with ``"rules"``."""
    if route not in ROUTES:
        raise ValueError(f"route must be one of {', '.join(ROUTES)}, not {route!r}")
    if route == "answerer":
        return "answerer", "simple_recall", ""
    if route == "reasoner":
        return "reasoner", "", ""
    said = ""
    if route == "auto":
        try:
            said = str(reasoner.classify(question=question).intent)
        except ProgramParseError:  # an unreadable classifier: the question's words decide
            said = ""
    intent = checked_intent(question, said or "simple_recall")
    return ("answerer" if intent == "simple_recall" else "reasoner"), intent, said


def answer_routed(question: str, user_id: str, *, store: MemoryStore, answerer: PersonalAnswerer,
                  reasoner: AdaptiveReasoner, retriever: Retriever, router: Router,
                  lm: object, count_tokens: Callable[[str], int],
                  lock: threading.RLock | None = None,
                  route: RouteChoice = "auto", conversation_id: str | None = None,
                  now: datetime | None = None) -> RoutedAnswer:
    """Answer ``question`` for ``user_id`` on the path its intent calls for (see the
    module docstring); ``lm`` is the DSPy LM every call goes to.

    Raises:
        ValueError: an empty question or an unknown ``route``.
        ProgramParseError: the model's output did not parse after the retry.
    """
    if not question.strip():
        raise ValueError("the question is empty")

    def safe(obj: T) -> T:
        return guarded(obj, lock) if lock is not None else obj

    with counting_calls(lm) as counter:
        path, intent, said = choose_path(question, route, reasoner)
        if path == "answerer":
            sources = AnswerSources(store=store, retriever=safe(retriever),
                                    router=safe(router), count_tokens=count_tokens, lock=lock)
            pred = answerer(question=question, user_id=user_id, conversation_id=conversation_id,
                            now=now, sources=sources)
            result = RoutedAnswer.model_validate({
                **pred.provenance.model_dump(), "path": "answerer", "intent": intent,
                "model_intent": said})
        else:
            mind = WholeMemory(store, user_id, retriever=retriever, lock=lock)
            pred = reasoner(question=question, mind=mind, intent=said or None)
            result = _from_reasoner(question, user_id, pred.answer, pred.trace, store,
                                    safe(router), lock, answerer, conversation_id, now)
    result.llm_calls = counter.calls
    return result


def _from_reasoner(question: str, user_id: str, answer: str, trace: ReasoningTrace,
                   store: MemoryStore, router: Router, lock: threading.RLock | None,
                   answerer: PersonalAnswerer, conversation_id: str | None,
                   now: datetime | None) -> RoutedAnswer:
    """The reasoner's answer as a :class:`RoutedAnswer` (evidence: the facts it used, or
    the first three it was shown; turns named by their turn ids)."""
    style = answerer.qa.style
    used = trace.used or trace.shown[:3]
    with lock if lock is not None else nullcontext():
        route = router.route(user_id, question, conversation_id=conversation_id, now=now)
        refs = _refs(store, user_id, list(dict.fromkeys([*used, *trace.shown,
                                                         *trace.retrieved])))
    evidence = [refs[i].id for i in used if i in refs]
    text = restyle_dates(answer.strip(), style.date_style)
    abstained = text.rstrip(".").casefold() == style.abstain_answer.rstrip(".").casefold()
    sources = [refs[i] for i in used if i in refs]
    convs = {s.conversation_id for s in sources if s.conversation_id}
    return RoutedAnswer(
        question=question, answer=text, abstained=abstained, answered_by="model",
        reason="" if trace.used else "The reasoner cited no fact; evidence is what it saw.",
        evidence=evidence,
        evidence_from=("cited" if trace.used else "retrieved") if evidence else "none",
        sources=sources, speakers=sorted({s.speaker for s in sources if s.speaker}),
        conversation_id=convs.pop() if len(convs) == 1 else None,
        route=route, verification=Verification(verdict="not_checked"),
        retrieved=[refs[i].id for i in trace.retrieved if i in refs],
        packed=[refs[i].id for i in trace.shown if i in refs],
        path="reasoner", intent=trace.intent, model_intent=trace.model_intent,
        reasoning=trace)


def _refs(store: MemoryStore, user_id: str, ids: list[str]) -> dict[str, EvidenceRef]:
    """Each store id as the evidence ref the answerer would give it."""
    out: dict[str, EvidenceRef] = {}
    for node_id in ids:
        if node_type(node_id) == "turn":
            turn = store.turn(user_id, node_id)
            if turn is not None:
                out[node_id] = EvidenceRef(id=turn.turn_id or turn.id,
                                           conversation_id=turn.conversation_id,
                                           speaker=turn.speaker)
            continue
        item = store.get(user_id, node_id)
        if item is not None:
            out[node_id] = EvidenceRef(id=item.id, conversation_id=item.conversation_id,
                                       speaker=item.speaker or item.source or None)
    return out
