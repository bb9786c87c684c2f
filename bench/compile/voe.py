"""The ``voe`` compile task: the VoE loop's prediction of the user's next message, on
LoCoMo conversations replayed as ``bench voe`` replays them, split by conversation.

**Which program.** ``bench voe`` scores, at each user turn, the prediction cached the
turn before: the responder's ``next_prediction`` (``VoELoop.forward`` caches
``answer.next_prediction``; ``run_voe_bench`` scores ``result.cached_prediction``). The
predictor's ``prediction`` ("the user's next move") is never scored: it only steers
retrieval (``needed_info``) and distils facts. So ``voe`` compiles the responder,
``voe.responder`` (:class:`~memstrata.programs.voe.VoEResponder`), whose file ``memstrata
chat --program`` loads as the loop's call 2.

**The data.** Each scored prediction of a replayed session becomes ``dspy.Example(
history=..., facts="(none)", actual=...)`` (:func:`voe_examples`): ``history`` is exactly
what the responder is shown when it predicts (``bench.voe.prediction_contexts``: the same
replay, captions, speaker roles and ``history_turns`` window), ``actual`` the user's real
next message, ``id`` ``conv-26#D3:5`` (the turn predicted). The facts are the baseline
arm's: none. The VoE arm's facts are distilled by the model turn by turn, so building
them would take two model calls for every turn replayed before each example; the
baseline's context needs no model and is the same for every program compared. Each
example also carries ``next_prediction`` (the actual message, cut to the field's 200
characters) so a labelled demo shows the responder a real next message.

**The held-out score.** The program (``None``: a fresh ``VoEResponder``) predicts at
the held-out conversations' positions, chosen as the sets are (:func:`spread`), in the
same context; a prediction is scored with the bench's similarity (``bench.voe.fuzzy``,
rapidfuzz ratio / 100) and is a hit at ``programs.voe.HIT``. The headline is the mean
``similarity``: with the embedded models no prediction of ``bench voe`` has reached the
hit line in either arm, so the share of hits (``hit_rate``, reported beside it) cannot
rank two programs; a call that fails (a reply that would not parse) or an empty
prediction scores 0 and stays in the count, so a program cannot gain by failing. The
predictions are cached in ``predictions.jsonl`` keyed by model, program hash, example id
and context, so a re-run makes no call twice. One call a position: this is the
responder's part of ``bench voe``'s baseline arm, not the whole A/B test (``memstrata
bench voe``), whose facts need the loop's own calls.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import ContextWindowExceededError
from pydantic import BaseModel
from tqdm import tqdm

from memstrata.memory import Embedder, MemoryStore, SearchWeights
from memstrata.programs import ModelHandle, ProgramParseError
from memstrata.programs.cache import JsonlCache
from memstrata.programs.compiled import load_program
from memstrata.programs.compiler import (
    CompileSets,
    HeldoutScore,
    Models,
    ProgramTask,
    Split,
    SplitData,
    spread,
)
from memstrata.programs.metrics import Metric, voe_metric
from memstrata.programs.refs import ProgramRef
from memstrata.programs.voe import HIT, NO_FACTS, VoEResponder, VoESettings

from ..compile_specs import LOCOMO_SPLIT, PROGRAMS
from ..locomo import LoCoMoConversation
from ..voe import PredictionContext, fuzzy, prediction_contexts
from .qa import read_split

PREDICTION_CHARS = 200
"""``Respond.next_prediction``'s bound: a labelled demo's prediction is cut to it."""


def voe_contexts(convs: Sequence[LoCoMoConversation], settings: VoESettings,
                 limit: int | None) -> list[PredictionContext]:
    """The predictions ``bench voe`` scores in ``convs`` (every session, in order), at
    most ``limit`` of them spread over the conversations (:func:`spread`)."""
    return spread([[ctx for index, _, turns in conv.sessions
                    for ctx in prediction_contexts(conv, index, turns, settings)]
                   for conv in convs], limit)


def example_id(ctx: PredictionContext) -> str:
    """The id of the prediction of ``ctx``: its conversation and the turn predicted."""
    return f"{ctx.conversation}#{ctx.turn}"


def voe_examples(contexts: Sequence[PredictionContext]) -> list[dspy.Example]:
    """The responder's examples: inputs ``history`` and ``facts`` (the baseline arm's:
    none), labels ``actual`` (the user's real next message), ``next_prediction`` (the same,
    cut to the field's bound, for labelled demos), ``id``, ``conversation``, ``session``
    and ``predicted_at`` (the turn the prediction is made at)."""
    return [dspy.Example(
        history=ctx.history, facts=NO_FACTS, actual=ctx.actual,
        next_prediction=ctx.actual[:PREDICTION_CHARS], id=example_id(ctx),
        conversation=ctx.conversation, session=ctx.session, predicted_at=ctx.predicted_at,
    ).with_inputs("history", "facts") for ctx in contexts]


class Predicted(BaseModel):
    """One held-out prediction and its score (the cached record)."""

    key: str
    id: str
    actual: str
    predicted: str = ""
    similarity: float = 0.0
    error: str | None = None
    calls: int = 0
    seconds: float = 0.0


def _digest(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _predict(program: dspy.Module, handle: ModelHandle, key: str,
             example: dspy.Example) -> Predicted:
    """One prediction on ``handle``'s model; a reply that would not parse (or a prompt
    over the window) is recorded as a failure scoring 0, never dropped."""
    mark = handle.meter.mark()
    started = time.perf_counter()
    try:
        with dspy.context(lm=handle.lm):
            pred = program(**example.inputs())
        predicted, error = str(pred.next_prediction or "").strip(), None
    except (ProgramParseError, ContextWindowExceededError) as exc:
        predicted, error = "", str(exc)[:500]
    return Predicted(key=key, id=str(example.id), actual=str(example.actual),
                     predicted=predicted,
                     similarity=fuzzy(predicted, str(example.actual)) if predicted else 0.0,
                     error=error, calls=handle.meter.since(mark).calls,
                     seconds=round(time.perf_counter() - started, 3))


class VoETask(ProgramTask):
    """``memstrata compile voe``: the responder's prediction of the user's next message
    (``voe.responder``), in ``bench voe``'s replay context, scored by its similarity to
    the real message (and its hit rate)."""

    program = "voe.responder"
    summary = PROGRAMS["voe"].summary
    headline = "similarity"
    threshold = HIT  # a demo is a prediction the bench counts as a hit
    default_split = LOCOMO_SPLIT
    columns = ("hit_rate",)

    def __init__(self, models: Models, *, embedder: Embedder | None = None,
                 weights: SearchWeights | None = None, audit: str | Path | None = None,
                 ) -> None:
        super().__init__(models, embedder=embedder, weights=weights, audit=audit)
        # The loop's settings as ``bench voe`` runs them: its ``history_turns`` is the
        # responder's context window. (No retrieval: the embedder and weights go unused.)
        self.settings = VoESettings()

    @classmethod
    def read(cls, data: str | Path, split: Split) -> SplitData:
        return read_split(data, split)

    def student(self) -> dspy.Module:
        return VoEResponder()

    def metric(self) -> Metric:
        return voe_metric

    def options(self) -> dict[str, Any]:
        # The context the responder is shown: the history window and the facts policy.
        return {"history_turns": self.settings.history_turns, "facts": "none (baseline arm)"}

    def sets(self, store: MemoryStore, data: SplitData, limit: int | None) -> CompileSets:
        # Nothing goes into ``store``: the examples need only the replayed turns.
        def examples(ids: Sequence[str]) -> list[dspy.Example]:
            return voe_examples(voe_contexts(data.of(ids), self.settings, limit))

        sets = CompileSets(train=examples(data.split.train), val=examples(data.split.val))
        if not sets.train or not sets.val:
            raise ValueError("the train or validation set has no prediction to score (a "
                             "session needs two user turns)")
        return sets

    def score(self, data: SplitData, program: ProgramRef | None, out: Path, *,
              limit: int | None, progress: bool) -> HeldoutScore:
        handle = self.models.student
        responder = (load_program(self.program, program.path) if program is not None
                     else self.student())
        # The program's state (instructions, demos) names it: the file's hash, or the
        # uncompiled program's own state (a change to its signature predicts again).
        named = program.sha256 if program is not None else \
            f"uncompiled:{_digest(responder.dump_state())}"
        examples = voe_examples(voe_contexts(data.of(data.split.heldout), self.settings,
                                             limit))
        cache: JsonlCache[Predicted] = JsonlCache(out / "predictions.jsonl", Predicted)
        records: list[Predicted] = []
        for example in tqdm(examples, desc="voe held-out", unit="pred",
                            disable=not progress):
            context = _digest([example.history, example.facts, example.actual])
            key = f"{handle.name}|{named}|{example.id}|{context}"
            record = cache.get(key)
            if record is None:
                record = cache.put(_predict(responder, handle, key, example))
            records.append(record)
        count = len(records)
        hits = sum(r.similarity >= HIT for r in records)
        return HeldoutScore(
            score=round(sum(r.similarity for r in records) / count, 4) if count else None,
            llm_calls=sum(r.calls for r in records), items=count,
            metrics={"hit_rate": round(hits / count, 4) if count else None, "hits": hits,
                     "predictions": count,
                     "failures": sum(r.error is not None for r in records)})


__all__ = ["Predicted", "VoETask", "example_id", "voe_contexts", "voe_examples"]
