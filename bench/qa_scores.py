"""Per-system summaries of LoCoMo answers: quality by category, and cost.

``overall`` averages categories 1-4 (multi-hop, temporal, open-domain, single-hop), as
mem0 and most published LoCoMo tables do: category 5 (adversarial) has no answer to
score by overlap, so it is reported on its own (``"5"``, 1 = abstained) and as
``abstention_cat5``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from memstrata.programs.answer_scores import score_answer

from .metrics import percentiles

if TYPE_CHECKING:
    from .locomo import Question
    from .qa_types import Answer

SCORED = (1, 2, 3, 4)
COLUMNS = ("overall", "1", "2", "3", "4", "5")


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _by_category(values: list[tuple[int, float]], with_five: bool = True) -> dict[str, Any]:
    cats: dict[str, list[float]] = defaultdict(list)
    for category, value in values:
        cats[str(category)].append(value)
        if category in SCORED:
            cats["overall"].append(value)
    cols = COLUMNS if with_five else COLUMNS[:-1]
    return {c: _mean(cats.get(c, [])) for c in cols}


def _quality(rows: list[tuple[Question, Answer]], corrected: bool, judged: bool
             ) -> dict[str, Any]:
    per: dict[str, list[tuple[int, float]]] = defaultdict(list)
    verdicts: list[tuple[int, float]] = []
    for q, a in rows:
        gold = q.corrected_answer if corrected and q.corrected_answer else q.answer
        if q.category != 5 and gold is None:
            continue
        for metric, value in score_answer(a.answer, gold, q.category).items():
            per[metric].append((q.category, value))
        if judged and a.judge is not None:
            verdicts.append((q.category, float(a.judge["corrected" if corrected else "original"])))
    return {
        "f1": _by_category(per["f1"]),
        "em": _by_category(per["em"]),
        "bleu1": _by_category(per["bleu1"]),
        "judge": _by_category(verdicts, with_five=False) if judged else None,
    }


def summarise(rows: list[tuple[Question, Answer]], *, judged: bool) -> dict[str, Any]:
    """Quality (original and corrected key) and cost of one system's answers."""
    n = len(rows)
    answers = [a for _, a in rows]
    cat5 = [a for q, a in rows if q.category == 5]
    others = [a for q, a in rows if q.category != 5]
    return {
        "questions": n,
        **_quality(rows, corrected=False, judged=judged),
        "corrected": _quality(rows, corrected=True, judged=judged),
        "abstention_cat5": _mean([float(a.abstained) for a in cat5]),
        "abstention_cat1_4": _mean([float(a.abstained) for a in others]),
        "tokens_per_question": round(sum(a.input_tokens for a in answers) / n, 1) if n else None,
        "output_tokens_per_question":
            round(sum(a.output_tokens for a in answers) / n, 1) if n else None,
        "context_tokens_per_question":
            round(sum(a.context_tokens for a in answers) / n, 1) if n else None,
        "llm_calls": sum(a.calls for a in answers),
        "failures": sum(1 for _, a in rows if a.error),
        "latency_s": percentiles([a.seconds for a in answers]),
        # One F1 per scored question (categories 1-4, original key), keyed by question id,
        # so two systems' answers to the same questions can be compared pairwise.
        "f1_by_question": {q.qid: round(score_answer(a.answer, q.answer, q.category)["f1"], 4)
                           for q, a in rows if q.category in SCORED and q.answer is not None},
    }
