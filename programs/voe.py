"""The violation-of-expectation loop: predict the user, learn from surprise (seed 000).

Per user turn, exactly two LLM calls:

1. the local VoE check (no model): the user's message against the prediction cached last
   turn, rapidfuzz ratio below ``fuzzy_threshold`` is a violation;
2. call 1, the predictor (history only): the user's likely next move and the keywords of
   the information needed to answer. When the check flagged a violation the same call
   also distils what the surprise taught, one sentence with 1-5 tags, which is stored.
   The seed asks both for "no LLM call" in the VoE logic and for an LLM distillation
   prompt, and for two calls a turn; folding the distillation into call 1 keeps all
   three: the check stays local, the fact is written by a model, and a turn costs two;
3. retrieval (no model): at most ``top_k`` facts by max(fuzzy(text, kw), fuzzy(tag, kw)),
   newest first on ties;
4. call 2, the responder (history and facts): the reply and the prediction of the user's
   next message, which is cached for the next turn's check.

History, facts and the cached prediction live in the store, so a chat survives a restart.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated

import dspy
from pydantic import BaseModel, Field, StringConstraints

from memstrata.memory import Conversation, MemoryStore, Session, Turn
from memstrata.memory.voe_facts import ScoredFact, VoEFacts, similarity

from .binding import Live
from .lm import ModelHandle
from .structured import StructuredPredict

Short = Annotated[str, StringConstraints(max_length=200)]
Keyword = Annotated[str, StringConstraints(max_length=40)]
CHAT = "chat"
MAX_MESSAGE_CHARS = 4000
NO_FACTS = "(none)"
"""What the responder is shown when no fact is retrieved (always, in the baseline)."""
HIT = 0.6
"""The similarity (0-1, ``memory.voe_facts.similarity`` / 100) at which a predicted next
message counts as a hit: the VoE benchmark's line and the VoE metric's."""


class VoESettings(BaseModel):
    """The seed's knobs.

    Attributes:
        max_facts: facts kept per user (the ring buffer; oldest trimmed).
        fuzzy_threshold: a prediction scoring below this (rapidfuzz ratio, 0-100) against
            the user's message is a violation.
        top_k: most facts put in the responder's prompt.
        min_score: facts matching no keyword at least this well are never retrieved.
        history_turns: most recent messages each call sees.
    """

    max_facts: int = Field(200, ge=1)
    fuzzy_threshold: float = Field(60.0, ge=0, le=100)
    top_k: int = Field(10, ge=0)
    min_score: float = Field(50.0, ge=0, le=100)
    history_turns: int = Field(12, ge=2)


class PredictNext(dspy.Signature):
    """Predict the user's next move in this chat, and list the few pieces of information
    about the user that would help answer their last message."""

    history: str = dspy.InputField(desc="the chat so far, oldest first")
    prediction: Short = dspy.OutputField(desc="what the user will want or say next")
    needed_info: Annotated[list[Keyword], Field(max_length=5)] = dspy.OutputField(
        desc="1-5 keywords")


class PredictAndDistil(dspy.Signature):
    """The user's last message was not what you expected. In one sentence, say what the
    difference teaches about the user, with 1-5 short tags. Then predict the user's next
    move and list the few pieces of information about the user that would help answer
    their last message."""

    history: str = dspy.InputField(desc="the chat so far, oldest first")
    expected: str = dspy.InputField(desc="what you predicted the user would say")
    actual: str = dspy.InputField(desc="what the user said")
    fact: Short = dspy.OutputField(desc="one sentence about the user")
    tags: Annotated[list[Keyword], Field(min_length=1, max_length=5)] = dspy.OutputField()
    prediction: Short = dspy.OutputField(desc="what the user will want or say next")
    needed_info: Annotated[list[Keyword], Field(max_length=5)] = dspy.OutputField(
        desc="1-5 keywords")


class Respond(dspy.Signature):
    """Reply to the user's last message, briefly and helpfully, using the facts about
    them where they matter. Then predict the user's next message, word for word as they
    would write it."""

    history: str = dspy.InputField(desc="the chat so far, oldest first")
    facts: str = dspy.InputField(desc="what you know about the user, one per line")
    reply: Annotated[str, StringConstraints(max_length=400)] = dspy.OutputField()
    next_prediction: Short = dspy.OutputField(desc="the user's next message")


class TurnResult(BaseModel):
    """What one turn did (``memstrata chat --show-internals`` prints it)."""

    reply: str
    cached_prediction: str | None
    score: float | None
    violation: bool
    fact: str | None = None
    fact_tags: list[str] = Field(default_factory=list)
    prediction: str = ""
    needed_info: list[str] = Field(default_factory=list)
    retrieved: list[dict[str, object]] = Field(default_factory=list)
    next_prediction: str = ""
    local_ms: float = 0.0
    llm_calls: int = 0


class VoEPredictor(dspy.Module):
    """Call 1 of a turn: predict the user's next move and the information needed; after a
    violation, the same call also distils what the surprise taught (``fact``, ``tags``).

    A program of predictors only (``predict``, ``predict_distil``): an optimizer tunes it,
    ``save_program`` writes it, and ``VoELoop(predictor=...)`` runs a compiled one.
    """

    def __init__(self) -> None:
        super().__init__()
        self.predict = StructuredPredict(PredictNext, "voe.predict")
        self.predict_distil = StructuredPredict(PredictAndDistil, "voe.predict+distil")

    def forward(self, history: str, expected: str | None = None,
                actual: str | None = None) -> dspy.Prediction:
        """``prediction`` and ``needed_info``; with ``expected`` and ``actual`` (a
        violation) also ``fact`` and ``tags``."""
        if expected is not None and actual is not None:
            return self.predict_distil(history=history, expected=expected, actual=actual)
        return self.predict(history=history)


class VoEResponder(dspy.Module):
    """Call 2 of a turn: the reply, and the prediction of the user's next message.

    A program of one predictor (``respond``), tunable and savable like ``VoEPredictor``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.respond = StructuredPredict(Respond, "voe.respond")

    def forward(self, history: str, facts: str) -> dspy.Prediction:
        """``reply`` and ``next_prediction`` from the history and the facts shown."""
        return self.respond(history=history, facts=facts)


class VoELoop(dspy.Module):
    """One user's chat with the VoE loop, persisted in ``store``.

    Its programs are ``predictor`` (:class:`VoEPredictor`) and ``responder``
    (:class:`VoEResponder`); the store is held apart from them (``programs.binding``), so
    a copy of the loop shares no store (it is unbound).

    Args:
        store: where history, facts and the cached prediction live.
        user_id: the user (a tenant: nothing crosses users).
        settings: the knobs.
        use_facts: False gives the baseline of the A/B test: the same two calls a turn,
            but no fact is ever stored or shown.
        persist_history: keep the chat's messages in the store (off for replays, which
            bring their own history).
        predictor: call 1's program (default: a fresh ``VoEPredictor``; a compiled one).
        responder: call 2's program (default: a fresh ``VoEResponder``; a compiled one).
    """

    def __init__(self, store: MemoryStore, user_id: str, settings: VoESettings | None = None, *,
                 use_facts: bool = True, persist_history: bool = True,
                 predictor: VoEPredictor | None = None,
                 responder: VoEResponder | None = None) -> None:
        super().__init__()
        self.user_id = user_id
        self.settings = settings or VoESettings()
        self.use_facts = use_facts
        self.persist_history = persist_history
        self.live: Live[tuple[MemoryStore, VoEFacts]] = Live(
            (store, VoEFacts(store, self.settings.max_facts)), what="store")
        self.predictor = predictor or VoEPredictor()
        self.responder = responder or VoEResponder()
        self.messages: list[tuple[str, str]] = self._load_history() if persist_history else []
        self._facts_cache = self.facts.facts(user_id) if use_facts else []

    @property
    def store(self) -> MemoryStore:
        """The store the chat lives in."""
        return self.live.get()[0]

    @property
    def facts(self) -> VoEFacts:
        """The store's VoE facts."""
        return self.live.get()[1]

    # -- history ------------------------------------------------------------------------

    def _load_history(self) -> list[tuple[str, str]]:
        return [(t.speaker, t.text) for t in self.store.turns(self.user_id,
                                                              conversation_id=CHAT)]

    def _remember(self, speaker: str, text: str) -> str | None:
        self.messages.append((speaker, text))
        if not self.persist_history:
            return None
        seq = len(self.messages) - 1
        with self.store.transaction():
            if seq == 0:
                self.store.add_conversation(Conversation(id=CHAT, user_id=self.user_id,
                                                         title="chat"))
                self.store.add_session(Session(id=CHAT, user_id=self.user_id,
                                               conversation_id=CHAT, index=1))
            ids = self.store.add_turns([Turn(
                user_id=self.user_id, conversation_id=CHAT, session_id=CHAT,
                turn_id=f"C:{seq + 1}", seq=seq, speaker=speaker, text=text)])
        return f"C:{seq + 1}" if ids else None

    def observe(self, speaker: str, text: str) -> None:
        """Add a message the loop did not produce (a replay's real reply) to the history."""
        self._remember(speaker, text)

    def _history_text(self) -> str:
        return history_text(self.messages, self.settings.history_turns)

    # -- the turn -----------------------------------------------------------------------

    def forward(self, message: str, *, reply_to_history: bool = True,
                respond: bool = True) -> TurnResult:
        """One user turn through the loop; ``reply_to_history=False`` leaves the reply out
        of the history (a replay adds the real one with ``observe``).

        ``respond=False`` ends the chat on this message: the cached prediction is checked
        and a surprise is distilled into a fact (one call, only after a violation with
        facts on), but no prediction, fact search or reply is made (no other call) and the
        cached prediction is cleared.
        """
        text = check_message(message)
        turn_ref = self._remember("user", text)
        s = self.settings
        started = time.perf_counter()
        cached = self.facts.prediction(self.user_id)
        score = similarity(cached, text) if cached else None
        violation = score is not None and score < s.fuzzy_threshold
        local = time.perf_counter() - started
        history = self._history_text()
        fact: str | None = None
        tags: list[str] = []
        if not respond:
            if violation and self.use_facts:
                fact, tags = self._keep_fact(self.predictor(
                    history=history, expected=cached, actual=text), turn_ref)
            self.facts.set_prediction(self.user_id, "")
            return TurnResult(reply="", cached_prediction=cached, score=score,
                              violation=violation, fact=fact, fact_tags=tags,
                              local_ms=round(local * 1000, 3))
        if violation and self.use_facts:
            out = self.predictor(history=history, expected=cached, actual=text)
            fact, tags = self._keep_fact(out, turn_ref)
        else:
            out = self.predictor(history=history)
        started = time.perf_counter()
        hits: list[ScoredFact] = self.facts.search(self._facts_cache, list(out.needed_info),
                                                   s.top_k, s.min_score)
        local += time.perf_counter() - started
        shown = "\n".join(f"- {h.fact.text}" for h in hits) or NO_FACTS
        answer = self.responder(history=history, facts=shown)
        if reply_to_history:
            self._remember("assistant", answer.reply)
        self.facts.set_prediction(self.user_id, answer.next_prediction)
        return TurnResult(
            reply=answer.reply, cached_prediction=cached, score=score, violation=violation,
            fact=fact, fact_tags=tags, prediction=out.prediction,
            needed_info=list(out.needed_info),
            retrieved=[{"id": h.fact.id, "text": h.fact.text, "score": h.score} for h in hits],
            next_prediction=answer.next_prediction, local_ms=round(local * 1000, 3))

    def _keep_fact(self, out: dspy.Prediction, turn_ref: str | None
                   ) -> tuple[str | None, list[str]]:
        """Store the fact a distil call made (when it has text and tags)."""
        fact, tags = out.fact.strip(), [t for t in out.tags if t.strip()][:5]
        if fact and tags:
            self._facts_cache.append(self.facts.add(self.user_id, fact, tags, turn_ref))
            self._facts_cache = self._facts_cache[-self.settings.max_facts:]
        return fact, tags


def history_text(messages: Sequence[tuple[str, str]], turns: int) -> str:
    """The ``history`` both calls of a turn see: the last ``turns`` of ``messages``
    (speaker, text), oldest first, one ``speaker: text`` line each."""
    recent = list(messages)[-turns:]
    return "\n".join(f"{who}: {text}" for who, text in recent) or "(empty)"


def check_message(message: str) -> str:
    """The message, stripped; a ``ValueError`` saying why when it cannot be used."""
    text = message.strip()
    if not text:
        raise ValueError("the message is empty: type something")
    if len(text) > MAX_MESSAGE_CHARS:
        raise ValueError(f"the message is {len(text):,} characters; the limit is "
                         f"{MAX_MESSAGE_CHARS:,}: split it and send the parts")
    return text


def run_turn(loop: VoELoop, handle: ModelHandle, message: str, *,
             reply_to_history: bool = True, respond: bool = True) -> TurnResult:
    """One turn on ``handle``'s model, with its LLM calls counted into the result
    (``respond`` as in ``VoELoop.forward``)."""
    mark = handle.meter.mark()
    with dspy.context(lm=handle.lm):
        result = loop(message, reply_to_history=reply_to_history, respond=respond)
    result.llm_calls = handle.meter.since(mark).calls
    return result
