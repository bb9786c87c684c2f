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

from .intervals import paired_difference, paired_ratio
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


def shown(answer: Answer) -> list[str]:
    """The turn ids an answer's model was shown: the record's own (the baselines'), or
    its provenance's packed block (memstrata's and the door's answers carry it there)."""
    if answer.packed:
        return answer.packed
    prov = answer.provenance
    return list(prov.packed) if prov is not None and prov.answered_by == "model" else []


def _reached(q: Question, answer: Answer) -> bool:
    return bool(q.evidence) and set(q.evidence) <= set(shown(answer))


def _f1(q: Question, answer: Answer) -> float:
    return score_answer(answer.answer, q.answer, q.category)["f1"]


def _evidence(rows: list[tuple[Question, Answer]]) -> dict[str, Any] | None:
    # Scored questions with labelled evidence; None for a system that packs no turns.
    scored = [(q, a) for q, a in rows if q.category in SCORED and q.answer and q.evidence]
    if not any(shown(a) for _, a in scored):
        return None
    hit = [(q, a) for q, a in scored if _reached(q, a)]
    miss = [(q, a) for q, a in scored if not _reached(q, a)]
    return {
        "questions": len(scored),
        "all_shown": _by_category([(q.category, float(_reached(q, a))) for q, a in scored],
                                  with_five=False),
        "f1_when_shown": _mean([_f1(q, a) for q, a in hit]),
        "f1_when_not": _mean([_f1(q, a) for q, a in miss]),
    }


def _path(answer: Answer) -> str | None:
    return getattr(answer.provenance, "path", None)


def against_baseline(results: dict[str, list[tuple[Question, Answer]]], baseline: str,
                     systems: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Each system (of ``systems``, default all) against ``baseline`` on the questions
    both answered (categories 1-4, original key): F1 difference and ratio with paired 95%
    intervals; the questions split by which of the two showed its model every evidence
    turn, with both F1s in each cell (where one system's extra evidence does or does not
    reach the answer); and, for a routed system, both F1s on the questions each path
    took."""
    if baseline not in results:
        return {}
    base = {q.qid: (q, a) for q, a in results[baseline]}
    out: dict[str, Any] = {}
    for system, rows in results.items():
        if systems is not None and system not in systems:
            continue
        pairs = [(q, a, base[q.qid][1]) for q, a in rows
                 if system != baseline and q.qid in base and q.category in SCORED and q.answer]
        if not pairs:
            continue
        mine, theirs = [_f1(q, a) for q, a, _ in pairs], [_f1(q, b) for q, _, b in pairs]
        diff, diff_ci = paired_difference(mine, theirs)
        ratio, ratio_ci = paired_ratio(mine, theirs)
        # Cell name -> (the system's F1s, the baseline's F1s) of its questions.
        cells: dict[str, tuple[list[float], list[float]]] = {}
        paths: dict[str, tuple[list[float], list[float]]] = {}
        for (q, a, b), f_a, f_b in zip(pairs, mine, theirs, strict=True):
            chosen = [(paths, _path(a))]
            if q.evidence:
                chosen.append((cells, CELLS[(_reached(q, a), _reached(q, b))]))
            for split, key in chosen:
                if key is not None:
                    split.setdefault(key, ([], []))[0].append(f_a)
                    split[key][1].append(f_b)
        out[system] = {
            "questions": len(pairs), "f1_difference": diff, "difference_ci": diff_ci,
            "f1_ratio": ratio, "ratio_ci": ratio_ci,
            "evidence_shown": _cells(cells), "by_path": _cells(paths)}
    return out


def _cells(cells: dict[str, tuple[list[float], list[float]]]) -> dict[str, Any]:
    return {k: {"questions": len(mine), "f1": _mean(mine), "baseline_f1": _mean(theirs)}
            for k, (mine, theirs) in cells.items()}


CELLS = {(False, False): "neither", (True, False): "system only",
         (False, True): "baseline only", (True, True): "both"}
"""The evidence split's cells by (the system showed every evidence turn, the baseline did)."""


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
        # None where turns were shown but their tokens not counted (the routed door's
        # record counts its calls' prompts, not the memory block within them).
        "context_tokens_per_question":
            None if not n or (any(shown(a) for a in answers)
                              and not any(a.context_tokens for a in answers))
            else round(sum(a.context_tokens for a in answers) / n, 1),
        "llm_calls": sum(a.calls for a in answers),
        "failures": sum(1 for _, a in rows if a.error),
        "latency_s": percentiles([a.seconds for a in answers]),
        "evidence": _evidence(rows),
        # One F1 per scored question (categories 1-4, original key), keyed by question id,
        # so two systems' answers to the same questions can be compared pairwise.
        "f1_by_question": {q.qid: round(score_answer(a.answer, q.answer, q.category)["f1"], 4)
                           for q, a in rows if q.category in SCORED and q.answer is not None},
    }
