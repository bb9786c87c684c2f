"""Metacognition figures of the cognitive evaluation (seed 003, 2.3), per question and
pooled.

- *effort calibration*: a question the scenario marks ``simple_recall`` is calibrated
  when it took one search round; any other when it did not stop after one round while
  the facts it had lacked a value it ``needs``, and stayed within its intent's allowance;
- *sufficiency accuracy*: each "sufficient?" decision against the truth (were all of the
  question's ``needs`` in the facts found so far);
- *search quality*: the share of the facts shown to the answer step that it cited;
- *self-corrections*: refined search rounds plus numbers the calculator corrected.
"""

from __future__ import annotations

import statistics
from typing import Any

from memstrata.memory.cognitive import CognitiveMemory
from memstrata.programs.reasoning import ReasoningTrace

from .scenarios import Question, Scenario
from .scoring import Rule, score


def _has_all(needs: list[str], texts: list[str]) -> bool:
    corpus = "\n".join(texts)
    return all(score(corpus, Rule(all=[value])) == 1.0 for value in needs)


def question_row(system: str, scenario: Scenario, question: Question, answer: str,
                 value: float, llm_calls: int, trace: ReasoningTrace | None,
                 mind: CognitiveMemory, error: str | None) -> dict[str, Any]:
    """One system's result on one question, with the reasoner's decisions judged."""
    row: dict[str, Any] = {
        "system": system, "level": scenario.level, "question_id": question.id,
        "gold_intent": question.intent, "question": question.question, "answer": answer,
        "gold": question.answer, "score": value, "llm_calls": llm_calls, "error": error,
        "steps": 1, "intent": None, "allowance": 1, "decisions": [], "premature": False,
        "used": 0, "shown": 0, "refined_queries": 0, "recomputed": 0}
    if trace is None:
        return row
    texts = {i.id: f"{i.title} {i.source} {i.text}"
             for i in mind.store.get_many(mind.user_id, trace.retrieved)}
    found: list[str] = []
    decisions = []
    first_complete = None
    for step in trace.rounds:
        found += [texts.get(i, "") for i in trace.retrieved[len(found):
                                                             len(found) + step.new_facts]]
        truth = _has_all(question.needs, found)
        if first_complete is None:
            first_complete = truth
        if step.sufficient is not None:
            decisions.append([step.sufficient, truth])
    row.update(steps=trace.steps, intent=trace.intent, model_intent=trace.model_intent,
               operands=trace.operands, subquestions=trace.subquestions,
               subvalues=trace.subvalues, expression=trace.expression,
               calculator_error=trace.calculator_error, allowance=trace.allowance,
               decisions=decisions, used=len(set(trace.used) & set(trace.shown)),
               shown=len(trace.shown), refined_queries=trace.refined_queries,
               recomputed=trace.recomputed,
               premature=bool(trace.steps == 1 and first_complete is False
                              and question.intent != "simple_recall"))
    return row


def calibrated(row: dict[str, Any]) -> bool:
    """Whether one question's effort fits it (see the module docstring)."""
    if row["gold_intent"] == "simple_recall":
        return row["steps"] == 1
    return not row["premature"] and row["steps"] <= max(row["allowance"], 1)


def metacognition(rows: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    """The pooled figures over the cognitive system's rows of every run."""
    decisions = [d for r in rows for d in r["decisions"]]
    shown = [r for r in rows if r["shown"]]
    simple = [r for r in rows if r["gold_intent"] == "simple_recall"]
    per_run: dict[Any, int] = {}
    for r in rows:
        per_run[r["run"]] = per_run.get(r["run"], 0) + r["refined_queries"] + r["recomputed"]
    l3 = [r for r in rows if r["level"] == "L3"]
    l1 = [r for r in rows if r["level"] == "L1"]
    return {
        "effort_calibration": round(sum(map(calibrated, rows)) / len(rows), 4) if rows else 0,
        "sufficiency_accuracy": round(sum(d == t for d, t in decisions) / len(decisions), 4)
        if decisions else None,
        "search_quality": round(statistics.mean(r["used"] / r["shown"] for r in shown), 4)
        if shown else None,
        "self_corrections": int(statistics.median(per_run.values())) if per_run else 0,
        "decisions": len(decisions),
        "simple_recall_one_step": round(sum(r["steps"] == 1 for r in simple) / len(simple), 4)
        if simple else None,
        "l1_one_step": round(sum(r["steps"] == 1 for r in l1) / len(l1), 4) if l1 else None,
        "l3_premature_answers": sum(r["premature"] for r in l3),
        "runs": runs,
    }
