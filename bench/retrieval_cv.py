"""Leave-one-conversation-out tuning of the retriever's knobs (``bench retrieval --cv``).

For each conversation in turn, the knobs in :data:`KNOBS` are chosen by coordinate ascent
on the questions of the *other* conversations, and the chosen weights then rank the
held-out conversation's questions. Pooled, those held-out rankings give the
cross-validated recall: what a default tuned this way is worth on a conversation nobody
tuned on. The same search over all the conversations gives the tuned in-sample figure
beside it; the gap between the two is how much of a tuning is fitted to its data.

The searches themselves are delegated to an ``evaluate`` callable, so this module holds
only the protocol: which questions may choose a knob, and which are scored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from memstrata.memory import SearchWeights

from .metrics import recall_at_k


class Question(Protocol):
    """What the protocol reads of a question (LoCoMo's and ``bench.corpus``'s both have it):
    its id, the conversation (tenant) it is asked of, and its evidence ids."""

    @property
    def qid(self) -> str: ...

    @property
    def sample_id(self) -> str: ...

    @property
    def evidence(self) -> list[str]: ...

# Each knob's candidate values; the current value is always a candidate too. Channel
# weights and priors only: structural settings (fusion, pool, the big-tenant guards) are
# not tuned on conversation-sized data.
KNOBS: dict[str, tuple[float, ...]] = {
    "idf_shift": (0.0, 1.0, 2.0),
    "dense": (0.2, 0.4, 0.7),
    "speaker_channels": (0.1, 0.25, 0.5),
    "context": (0.25, 0.5, 0.8),
    "expansion": (0.5, 1.0, 1.5),
    "expansion_sim": (0.4, 0.45, 0.5),
    "session": (0.3, 0.6, 1.0),
    "speaker_boost": (0.6, 1.0, 1.5),
    "speaker_field": (0.15, 0.3, 0.6),
    "time_boost": (1.0, 2.0, 3.0),
    "when_boost": (0.0, 0.4, 0.8),
    "where_boost": (0.0, 0.4, 0.8),
    "role_boost": (0.5, 1.0, 1.5),
    "asking": (0.0, 0.35, 0.6),
    "graph": (0.0, 0.1, 0.3),
    "graph_second": (0.0, 0.5, 1.0),
}

Q = TypeVar("Q", bound=Question)

#: qid -> that question's ranked turn ids, for the given weights and questions.
Evaluate = Callable[[SearchWeights, Sequence[Q]], Mapping[str, list[str]]]


def mean_recall(rankings: Mapping[str, list[str]], questions: Sequence[Question],
                k: int) -> float:
    """Mean recall@k over the questions that have evidence (0.0 when none has)."""
    scored = [recall_at_k(rankings[q.qid], q.evidence, k) for q in questions if q.evidence]
    return sum(scored) / len(scored) if scored else 0.0


def tune(evaluate: Evaluate[Q], questions: Sequence[Q], start: SearchWeights,
         knobs: Mapping[str, Sequence[float]] | None = None, rounds: int = 2, k: int = 10,
         ) -> tuple[SearchWeights, float]:
    """Coordinate ascent on mean recall@k over ``questions``; returns (weights, score).

    Each round tries every value of every knob with the others held; a value replaces the
    current one only if it scores strictly higher, so ties keep the starting weights.
    Stops early when a round changes nothing. ``knobs`` defaults to :data:`KNOBS`.
    """
    knobs = KNOBS if knobs is None else knobs
    best = start
    best_score = mean_recall(evaluate(best, questions), questions, k)
    for _ in range(rounds):
        improved = False
        for knob, values in knobs.items():
            for value in values:
                if getattr(best, knob) == value:
                    continue
                candidate = best.model_copy(update={knob: value})
                score = mean_recall(evaluate(candidate, questions), questions, k)
                if score > best_score + 1e-12:
                    best, best_score, improved = candidate, score, True
        if not improved:
            break
    return best, best_score


def changed(start: SearchWeights, chosen: SearchWeights) -> dict[str, Any]:
    """The knobs whose chosen value differs from the starting one."""
    before, after = start.model_dump(), chosen.model_dump()
    return {key: value for key, value in after.items() if before[key] != value}


def cross_validate(evaluate: Evaluate[Q], questions: Sequence[Q], start: SearchWeights,
                   knobs: Mapping[str, Sequence[float]] | None = None, rounds: int = 2,
                   k: int = 10) -> dict[str, Any]:
    """Leave-one-conversation-out: knobs chosen on the others, scored on the one left out.

    Returns ``{"rankings": {qid: ranked ids of the held-out fold}, "folds": [...],
    "tuned": {"changed": ..., "rankings": ...}}``, ``tuned`` being the same search over
    every conversation (the in-sample figure). ``knobs`` defaults to :data:`KNOBS`.
    Raises ValueError with fewer than two conversations: nothing would be left to
    choose on.
    """
    knobs = KNOBS if knobs is None else knobs
    conversations = sorted({q.sample_id for q in questions})
    if len(conversations) < 2:
        raise ValueError(f"cross-validation needs two conversations or more; "
                         f"the questions come from {len(conversations)}")
    held_out: dict[str, list[str]] = {}
    folds = []
    for conversation in conversations:
        train = [q for q in questions if q.sample_id != conversation]
        test = [q for q in questions if q.sample_id == conversation]
        chosen, train_score = tune(evaluate, train, start, knobs, rounds, k)
        ranked = dict(evaluate(chosen, test))
        held_out.update(ranked)
        folds.append({
            "held_out": conversation, "questions": len(test), "changed": changed(start, chosen),
            f"train_recall@{k}": round(train_score, 4),
            f"held_out_recall@{k}": round(mean_recall(ranked, test, k), 4),
        })
    tuned, _ = tune(evaluate, questions, start, knobs, rounds, k)
    return {"rankings": held_out, "folds": folds,
            "tuned": {"changed": changed(start, tuned),
                      "rankings": dict(evaluate(tuned, questions))}}
