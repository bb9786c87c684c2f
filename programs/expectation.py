"""``expect``: the violation-of-expectation loop for an app that brings its own model.

The VoE loop (``programs.voe``, seed 000) predicts the user, notices when they surprise
it, distils what the surprise taught into a fact and brings relevant facts back. An
application whose own model writes the replies runs it through three verbs:

1. ``Memory.add`` stores each message as it comes (no model, nothing checked there:
   ``add`` stays as fast as without the loop);
2. ``Memory.expect`` — best right after the assistant speaks — does the rest in **one
   LLM call**: it checks the first user message said since the pending expectation
   against it (locally: rapidfuzz ratio under ``fuzzy_threshold`` is a violation, no
   model), then asks the predictor (``VoEPredictor``) for the user's next move and the
   keywords of what would help answer them; after a violation the same call distils
   the surprise into a fact with tags (``VoEFacts``: a ring buffer per tenant, the
   surprising turn as its evidence). The new expectation replaces the conversation's
   pending one (a ``working`` item: its text, the turn it follows as evidence, the
   needed-info keywords as tags);
3. ``Memory.context`` shows the pending expectation and the facts that match its
   keywords or the query (its ``voe`` layer).

So a surprise costs no call of its own: it is distilled by the next ``expect``, and its
fact reaches the context of the turn after. Called again before the user says anything
new, ``expect`` checks nothing and predicts again. If the model call fails nothing is
written, and the next ``expect`` checks the same message again.

A user message is a turn whose role is ``user`` (``metadata["role"]``, else its speaker).
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from typing import Any

from pydantic import BaseModel, Field

from memstrata.memory import MemoryStore, Turn
from memstrata.memory.models import WorkingItem
from memstrata.memory.voe_facts import PREDICTION_SOURCE, VoEFacts, similarity

from .verb_calls import counting_calls
from .voe import VoEPredictor, VoESettings, history_text

USER_ROLE = "user"


class Surprise(BaseModel):
    """The check of a pending expectation against what the user then said."""

    expected: str
    actual: str
    turn: str = Field(description="the store id of the user's turn")
    score: float = Field(description="rapidfuzz ratio, 0-100")
    violation: bool


class Expectation(BaseModel):
    """What one ``expect`` did: the check, the fact distilled, the new expectation."""

    user_id: str
    conversation_id: str
    id: str | None = Field(None, description="the stored expectation (a working item)")
    prediction: str = ""
    needed_info: list[str] = Field(default_factory=list)
    checked: Surprise | None = None
    fact: str | None = None
    fact_id: str | None = None
    fact_tags: list[str] = Field(default_factory=list)
    llm_calls: int = 0
    run_id: str | None = None


def _role(turn: Turn) -> str:
    return str(turn.metadata.get("role") or turn.speaker)


def pending(store: MemoryStore, user_id: str, conversation_id: str) -> WorkingItem | None:
    """The conversation's pending expectation, or None."""
    ids = store.source_ids(user_id, "working", PREDICTION_SOURCE)
    for item in store.get_many(user_id, ids):
        if isinstance(item, WorkingItem) and item.conversation_id == conversation_id:
            return item
    return None


def _check(store: MemoryStore, user_id: str, conversation_id: str, expected: WorkingItem | None,
           threshold: float) -> Surprise | None:
    """The first user turn after ``expected``'s anchor turn, checked against it."""
    if expected is None or not expected.evidence:
        return None
    anchor = store.turn(user_id, expected.evidence[0])
    after = store.turns(user_id, conversation_id=conversation_id,
                        after_seq=anchor.seq if anchor is not None else -1)
    said = next((t for t in after if _role(t) == USER_ROLE), None)
    if said is None:
        return None
    score = round(float(similarity(expected.text, said.text)), 1)
    return Surprise(expected=expected.text, actual=said.text, turn=said.id, score=score,
                    violation=score < threshold)


def expect(store: MemoryStore, user_id: str, *, conversation_id: str, lm: Any,
           predictor: VoEPredictor | None = None, settings: VoESettings | None = None,
           lock: threading.RLock | None = None) -> Expectation:
    """Check, distil and predict for one conversation (see the module docstring); one
    LLM call (two on a parse retry). The store is read and written under ``lock``, the
    model is called outside it.

    Raises:
        ValueError: the conversation holds no turn yet.
        ProgramParseError: the model's output did not parse after the retry.
    """
    s = settings or VoESettings()
    program = predictor or VoEPredictor()
    held = lock if lock is not None else nullcontext()
    with held:
        recent = store.turns(user_id, conversation_id=conversation_id, newest=True,
                             limit=s.history_turns)
        if not recent:
            raise ValueError(f"nothing to expect: conversation {conversation_id!r} of "
                             f"{user_id!r} holds no turn (add the messages first)")
        last = recent[0]
        before = pending(store, user_id, conversation_id)
        checked = _check(store, user_id, conversation_id, before, s.fuzzy_threshold)
    history = history_text([(t.speaker, t.text) for t in reversed(recent)], s.history_turns)
    with counting_calls(lm) as counter:
        if checked is not None and checked.violation:
            out = program(history=history, expected=checked.expected, actual=checked.actual)
        else:
            out = program(history=history)
    result = Expectation(user_id=user_id, conversation_id=conversation_id,
                         prediction=str(out.prediction).strip(),
                         needed_info=[k.strip()[:40] for k in out.needed_info if k.strip()][:5],
                         checked=checked, llm_calls=counter.calls)
    with held, store.transaction():
        if checked is not None and checked.violation:
            fact = str(getattr(out, "fact", "") or "").strip()
            tags = [t for t in getattr(out, "tags", []) if t.strip()][:5]
            if fact and tags:
                stored = VoEFacts(store, s.max_facts).add(user_id, fact, tags, checked.turn)
                result.fact, result.fact_id, result.fact_tags = stored.text, stored.id, stored.tags
        if before is not None:
            store.delete(user_id, before.id)
        if result.prediction:
            result.id = store.add(WorkingItem(
                user_id=user_id, text=result.prediction, source=PREDICTION_SOURCE,
                title="next user message", conversation_id=conversation_id,
                task_id=f"voe:{conversation_id}",
                evidence=[last.id], tags=result.needed_info))
    return result
