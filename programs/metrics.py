"""Metrics with feedback, one per program, for DSPy's optimizers.

Each metric follows GEPA's feedback protocol, ``metric(gold, pred, trace=None,
pred_name=None, pred_trace=None)``, and returns ``dspy.Prediction(score=..., feedback=...)``:
a score in [0, 1] and a short text saying why (GEPA's reflection LM reads it). A
``Prediction`` with a ``score`` adds, compares and converts to ``float``, so MIPROv2,
SIMBA and ``dspy.Evaluate`` take it as it is; BootstrapFewShot treats any returned object
as a pass, so give it :func:`as_score` (the float) with a ``metric_threshold``.

The scores are the benchmarks' own, never a second copy: LoCoMo's token F1
(``programs.answer_scores``), the extractor's grounding (``memory.facts.ground``) and the
VoE similarity (``memory.voe_facts.similarity``) with its hit line (``programs.voe.HIT``).
A program a benchmark defines brings its own metric (the ontology suite's SPARQL agent:
``bench.compile.sparql.sparql_metric``), built with :func:`metric_result`. What is scored
per program:

* ``qa_metric`` (QA and the answerer): LoCoMo's per-category F1 (token F1 without a
  category); an unanswerable question (no gold answer, or category 5) scores 1 for an
  abstention and 0 otherwise. Feedback: the gold words missed, whether the cited ids
  hold the gold evidence (and whether the memories shown held it at all), whether an
  abstention was right. Citations are feedback only, so the score stays the bench's F1.
* ``extractor_metric``: half the share of proposed facts that survive grounding, half
  the share of the chunk's gold evidence turns a grounded fact rests on (without gold
  evidence: grounded facts up to three). Feedback: each fact that failed and why.
* ``voe_metric``: the rapidfuzz similarity (0-1) of the predicted next message with the
  real one, the VoE bench's measure; feedback names the hit line (0.6) and the words the
  user wrote that the prediction missed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dspy

from memstrata.memory.dates import DEFAULT_DATE_STYLE
from memstrata.memory.facts import Extraction, ground
from memstrata.memory.voe_facts import similarity

from .answer_scores import locomo_f1, missed_tokens, token_f1
from .qa import cited_ids, is_abstention
from .voe import HIT

Metric = Callable[..., dspy.Prediction]


def metric_result(score: float, parts: list[str]) -> dspy.Prediction:
    """A metric's return value: ``score`` rounded to 4 places, the non-empty ``parts``
    joined as its ``feedback``."""
    return dspy.Prediction(score=round(float(score), 4), feedback=" ".join(p for p in parts if p))


def as_score(metric: Metric, threshold: float | None = None) -> Callable[..., float | bool]:
    """``metric`` returning its score alone (``threshold``: whether it reaches it), for
    optimizers that read the return value as a number or a pass (BootstrapFewShot)."""

    def scored(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None,
               *args: Any, **kwargs: Any) -> float | bool:
        value = float(metric(gold, pred, trace))
        return value if threshold is None else value >= threshold

    scored.__name__ = getattr(metric, "__name__", "metric")
    return scored


def _abstained(pred: Any) -> bool:
    flag = getattr(pred, "abstained", None)
    return bool(flag) if flag is not None else is_abstention(str(getattr(pred, "answer", "")))


def qa_metric(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None,
              pred_name: str | None = None, pred_trace: Any = None) -> dspy.Prediction:
    """Score and feedback for one QA (or answerer) prediction.

    ``gold`` holds ``answer`` (``None`` or empty: the question has no answer), optionally
    ``category`` (LoCoMo's 1-5), ``evidence`` (the gold turn ids) and ``memories`` (what
    the program was shown; the answerer's prediction carries its own).

    Example:
        >>> gold = dspy.Example(question="Where?", answer="Oslo", evidence=["s1:2"],
        ...                     memories="[s1:2 · Ana · 2023-05-01] I live in Oslo")
        >>> out = qa_metric(gold, dspy.Prediction(answer="Bergen", evidence=["s1:2"],
        ...                                       abstained=False))
        >>> out.score, "missed the gold words: oslo" in out.feedback
        (0.0, True)
    """
    truth = gold.get("answer")
    category = gold.get("category")
    answer = str(getattr(pred, "answer", "") or "")
    abstained = _abstained(pred)
    memories = str(getattr(pred, "memories", None) or gold.get("memories") or "")
    shown = cited_ids(memories)
    gold_ids = [str(e) for e in gold.get("evidence") or []]
    cited = [str(e) for e in getattr(pred, "evidence", None) or []]
    held = [e for e in gold_ids if e in shown]
    if not truth or category == 5:
        right = abstained
        return metric_result(float(right), [
            "Right to abstain: the memories do not answer this question." if right else
            f"Answered {answer!r}, but this question has no answer in the conversation: "
            "the right reply is an abstention."])
    truth = str(truth)
    score = (locomo_f1(answer, truth, int(category)) if category in (1, 2, 3, 4)
             else token_f1(answer, truth))
    parts = [f"F1 {score:.2f} against the gold answer {truth!r}."]
    if abstained and held:
        parts.append(f"Abstained, but the memories shown hold the evidence "
                     f"({', '.join(held)}): answer from them.")
    elif abstained and gold_ids and memories:
        parts.append("Abstained; the evidence was not among the memories shown, so "
                     "abstaining was the honest reply.")
    elif abstained:
        parts.append("Abstained, but the question has an answer.")
    else:
        missed = missed_tokens(answer, truth)
        if missed:
            parts.append(f"The answer {answer!r} missed the gold words: {', '.join(missed)}.")
    if gold_ids and not abstained:
        right_cites = [c for c in cited if c in gold_ids]
        if right_cites:
            parts.append(f"Cited the evidence {', '.join(right_cites)}.")
        elif cited:
            parts.append(f"Cited {', '.join(cited)}, which do not hold the evidence "
                         f"({', '.join(gold_ids)}" + (", shown in the memories)." if held
                                                     else ", not among the memories shown)."))
        else:
            parts.append(f"Cited no memory; the evidence is {', '.join(gold_ids)}"
                         + (" (shown in the memories)." if held else
                            " (not among the memories shown)."))
    return metric_result(score, parts)


def extractor_metric(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None,
                     pred_name: str | None = None, pred_trace: Any = None) -> dspy.Prediction:
    """Score and feedback for one extraction.

    ``gold`` holds ``chunk`` (the ``Chunk`` extracted), ``participants`` (the
    conversation's speakers), optionally ``evidence`` (gold turn ids in the chunk: turns
    questions are asked about), ``user_id`` and ``date_style``. Each proposed fact is
    grounded alone with ``memory.facts.ground``, so the feedback can name why each failed.
    """
    extraction: Extraction = pred.extraction
    chunk = gold.chunk
    participants = list(gold.get("participants") or sorted({t.speaker for t in chunk.turns}))
    user_id = str(gold.get("user_id") or "metric")
    style = gold.get("date_style") or DEFAULT_DATE_STYLE
    kept_evidence: set[str] = set()
    failed: list[str] = []
    kept = 0
    for fact in extraction.facts:
        out = ground(Extraction(facts=[fact]), chunk, participants, user_id, "metric", style)
        label = f"({fact.subject} | {fact.predicate} | {fact.object})"
        if out.facts:
            kept += 1
            kept_evidence.update(out.facts[0].evidence)
            cleared = ", ".join(out.cleared)
            if cleared:
                failed.append(f"{label} kept, but dropped: {cleared} (copy them from the turn)")
        else:
            reasons = ", ".join(out.rejected) or "rejected"
            failed.append(f"{label} failed grounding: {reasons}")
    proposed = len(extraction.facts)
    precision = kept / proposed if proposed else 0.0
    gold_ids = [str(e) for e in gold.get("evidence") or []]
    if gold_ids:
        covered = [e for e in gold_ids if e in kept_evidence]
        coverage = len(covered) / len(gold_ids)
        missing = [e for e in gold_ids if e not in kept_evidence]
    else:
        coverage, missing = min(1.0, kept / 3), []
    parts = [f"{kept} of {proposed} proposed facts were grounded in the turns."]
    if not proposed:
        parts.append("No fact was proposed: these turns hold facts worth remembering.")
    parts += failed
    if missing:
        turns = {t.turn_id: f"{t.speaker}: {t.text[:80]}" for t in chunk.turns}
        parts.append("No grounded fact rests on the turns questions are asked about: "
                     + "; ".join(f"{e} ({turns.get(e, '?')})" for e in missing) + ".")
    return metric_result((precision + coverage) / 2, parts)


def voe_metric(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None,
               pred_name: str | None = None, pred_trace: Any = None) -> dspy.Prediction:
    """Score and feedback for a VoE prediction of the user's next message.

    ``gold.actual`` is what the user really wrote next; the prediction is the responder's
    ``next_prediction`` or the predictor's ``prediction``.
    """
    predicted = str(getattr(pred, "next_prediction", None) or getattr(pred, "prediction", "")
                    or "")
    actual = str(gold.actual)
    score = similarity(predicted, actual) / 100
    verdict = "a hit" if score >= HIT else f"below the hit line {HIT}"
    parts = [f"Similarity {score:.2f} ({verdict}): predicted {predicted!r}, the user wrote "
             f"{actual!r}."]
    missed = missed_tokens(predicted, actual)
    if missed and score < HIT:
        parts.append(f"Words the user used that the prediction lacks: {', '.join(missed[:12])}."
                     " Predict the message word for word, as the user writes.")
    return metric_result(score, parts)


#: The metric of each program of ``programs.compiled.BUILDERS``.
METRICS: dict[str, Metric] = {
    "qa": qa_metric, "answerer": qa_metric, "extractor": extractor_metric,
    "voe.predictor": voe_metric, "voe.responder": voe_metric,
}

__all__ = ["METRICS", "Metric", "as_score", "extractor_metric", "metric_result", "qa_metric",
           "voe_metric"]
