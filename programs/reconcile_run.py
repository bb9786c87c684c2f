"""Running the reconciler over every pair of a person's conversations, and storing each
decision (edges and a person entity, ``memory/entities.py``; the event log)."""

from __future__ import annotations

import itertools
from typing import Any

import dspy
from pydantic import BaseModel

from memstrata.memory import MemoryStore
from memstrata.memory.entities import (
    conversation_facts,
    record_merge,
    record_separate,
    supersede_across,
)
from memstrata.tools import ToolSession
from memstrata.tools.personal_tools import corpus
from memstrata.trajectories import redact_text

from .errors import ProgramParseError
from .lm import ModelHandle
from .reconciler import ReconcileDecision, Reconciler, ReconcilerSettings


class PairResult(BaseModel):
    """One pair's outcome: a stored decision, or the error that stopped it (loudly)."""

    conversation_a: str
    conversation_b: str
    decision: ReconcileDecision | None = None
    error: str | None = None


def store_decision(store: MemoryStore, user_id: str, decision: ReconcileDecision) -> dict[str, Any]:
    """Write a decision: MERGE -> person entity + ``same_as`` edges, and the merged
    person's facts superseded in time order (``supersede_across``); SEPARATE -> a
    ``distinct_from`` edge; both -> an event-log entry. Returns what was written.

    The reason is the model's words: secrets in it are masked before it is written
    (``trajectories.redact``)."""
    ids = [c.entity_id for c in decision.candidates]
    decision = decision.model_copy(update={
        "reason": redact_text(decision.reason),
        "proposal": decision.proposal.model_copy(
            update={"reason": redact_text(decision.proposal.reason)})})
    meta = {"confidence": decision.confidence, "overridden": decision.overridden,
            "proposal": decision.proposal.decision, "model": decision.model,
            "guard": decision.guard.reason[:300]}
    if decision.decision == "MERGE":
        written: dict[str, Any] = {"person_id": record_merge(store, user_id, ids,
                                                             decision.reason, meta),
                                   "edges": "same_as"}
        # One person now: a later fact of a single-valued relation ends an earlier one.
        facts = [f for c in decision.candidates for f in conversation_facts(
            store, user_id, c.conversation_id, c.name)]
        convs = "/".join(c.conversation_id for c in decision.candidates)
        written["superseded"] = supersede_across(store, user_id, facts,
                                                 f"merged across {convs}")
    else:
        record_separate(store, user_id, ids[0], ids[1], decision.reason, meta)
        written = {"edges": "distinct_from"}
    written["event_id"] = store.runs.log_event(user_id, {
        "type": "reconcile", "decision": decision.decision, "entities": ids,
        "conversations": [c.conversation_id for c in decision.candidates],
        "reason": decision.reason, "proposal": decision.proposal.model_dump(),
        "guard": decision.guard.model_dump(exclude={"evidence"}),
        "llm_calls": decision.llm_calls, "model": decision.model})
    return written


def person_conversations(session: ToolSession, name: str, conversations: list[str]
                         ) -> list[str]:
    """Those of ``conversations`` in which someone called ``name`` speaks (in order)."""
    c = corpus(session.binding)
    folded = name.casefold()
    return [conv for conv in conversations
            if any(p.casefold() == folded for p in c.people(conv))]


def reconcile_person(session: ToolSession, handle: ModelHandle, name: str,
                     conversations: list[str], settings: ReconcilerSettings | None = None,
                     *, store: bool = True) -> list[PairResult]:
    """Run the reconciler on every pair of ``name``'s conversations and store each decision.

    A pair whose model output cannot be parsed gets ``error`` set (and nothing stored);
    the other pairs still run. Raises ``ValueError`` when fewer than two of the
    conversations have someone called ``name``.
    """
    found = person_conversations(session, name, conversations)
    if len(found) < 2:
        raise ValueError(f"{name!r} speaks in {len(found)} of {conversations}; a decision "
                         "needs two conversations")
    agent = Reconciler(session, settings)
    results = []
    for a, b in itertools.combinations(found, 2):
        try:
            with dspy.context(lm=handle.lm):
                decision = agent(name=name, conversation_a=a, conversation_b=b)
        except ProgramParseError as exc:
            results.append(PairResult(conversation_a=a, conversation_b=b, error=str(exc)[:1000]))
            continue
        if store:
            decision.stored = store_decision(session.binding.store, session.user_id, decision)
        results.append(PairResult(conversation_a=a, conversation_b=b, decision=decision))
    return results
