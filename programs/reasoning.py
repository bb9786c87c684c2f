"""``AdaptiveReasoner``: effort in proportion to a question's difficulty (seed 003, 2).

Per question: classify the intent (one call) and take that intent's allowance from
``effort.EFFORT``. A simple recall is one pass: recall, then answer. Anything else runs
plan -> search -> evaluate rounds until the facts suffice or the allowance is spent,
then answers. Every plan, retrieved fact, step and evaluation is a slot of the task's
working memory, and the answer reads its facts back from those slots (what capacity
evicted is gone); the finished task becomes an episode and its slots are cleared.

Two checks keep a small model honest. Sufficiency is the model's judgement *and* a rule:
every name and number the question mentions must occur in some fact, or the round is
insufficient and the next one searches for what is missing. Arithmetic is never the
model's: a question that asks for a computed number is broken into sub-questions that
each read one number (a difference or a sum of them), ``tools.calculator`` combines them
exactly, and a stated number that disagrees is replaced (a self-correction); without
sub-values, the model's own expression is computed instead, on numbers from the facts.
Questions that compute nothing are answered by a plain program that writes no
arithmetic. Temporal and update questions see their facts in date order; a fact with a
contradicting partner is shown with it, the newer marked.

The module holds only its predictors: the memory is passed to each call.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

import dspy
from pydantic import BaseModel, Field, StringConstraints

from memstrata.memory.cognitive import CognitiveMemory, Recalled
from memstrata.memory.cognitive.procedural import procedure_text
from memstrata.memory.cognitive.values import numbers
from memstrata.memory.text import STOP_WORDS
from memstrata.tools.calculator import calculate

from .effort import EFFORT, GUIDANCE, ClassifyIntent, Effort, checked_intent
from .structured import StructuredPredict

_Query = Annotated[str, StringConstraints(max_length=80)]
_NAME = re.compile(r"\b[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*")
_NUMBER_PHRASE = re.compile(r"\b(?:[A-Za-z]+\s+)?\d[\d,]*(?:\.\d+)?\b")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_ASKS_NUMBER = re.compile(r"\b(?:how (?:many|much|far|long)|by how|what (?:is|was|were) the "
                          r"(?:total|difference|sum|average|number|gap)|how big)\b", re.I)
# A sub-question that asks to combine values ("Calculate the difference between the two
# figures") reads no value of its own: the calculator does that step.
_COMBINE = re.compile(r"^\s*(?:(?:please\s+)?(?:calculate|compute|subtract|add(?:\s+up)?|sum"
                      r"(?:\s+up)?|combine|total)\b|(?:find|determine|work\s+out|what\s+is)"
                      r"\s+the\s+(?:difference|sum|total|gap)\b)", re.I)
MAX_FACT_CHARS = 400


class PlanQueries(dspy.Signature):
    """Write short keyword search queries that find the facts needed to answer the
    question: one query per thing to look up (a name, a value at a date, a source)."""

    question: str = dspy.InputField()
    queries: Annotated[list[_Query], Field(min_length=1, max_length=3)] = dspy.OutputField()


class Decompose(dspy.Signature):
    """Break the question into simple questions that each ask for one number stated in
    the facts (one name, one day or date, one source), earliest first, and say how their
    answers combine: difference (later minus earlier, or the gap between two values),
    sum (a total), or none."""

    question: str = dspy.InputField()
    subquestions: Annotated[list[Annotated[str, StringConstraints(max_length=120)]],
                            Field(min_length=1, max_length=4)] = dspy.OutputField()
    operation: Literal["difference", "sum", "none"] = dspy.OutputField()


class ReadValue(dspy.Signature):
    """Answer with the one number the question asks for, copied from the facts."""

    facts: str = dspy.InputField()
    question: str = dspy.InputField()
    value: Annotated[str, StringConstraints(max_length=40)] = dspy.OutputField()


class EvaluateFacts(dspy.Signature):
    """Decide whether the numbered facts hold everything needed to answer the question.
    If not, say what is missing and write up to two search queries for it."""

    facts: str = dspy.InputField()
    question: str = dspy.InputField()
    sufficient: bool = dspy.OutputField()
    missing: Annotated[str, StringConstraints(max_length=120)] = dspy.OutputField()
    queries: Annotated[list[_Query], Field(max_length=2)] = dspy.OutputField()


class AnswerFromFacts(dspy.Signature):
    """Answer the question from the numbered facts, following the guidance. Copy names,
    numbers and commands exactly. Give the numbers of the facts you used."""

    guidance: str = dspy.InputField()
    facts: str = dspy.InputField()
    question: str = dspy.InputField()
    answer: Annotated[str, StringConstraints(max_length=200)] = dspy.OutputField()
    used: Annotated[list[int], Field(max_length=8)] = dspy.OutputField()


class ComputeFromFacts(dspy.Signature):
    """Answer the question from the numbered facts, following the guidance. First write
    down each value the question needs, naming what it is and its fact. Copy names and
    numbers exactly. Give the numbers of the facts you used."""

    guidance: str = dspy.InputField()
    facts: str = dspy.InputField()
    question: str = dspy.InputField()
    # Written before the expression and the answer: a small model that names each
    # operand ("Aldervik golds on day 7 = 7 [2]") picks the right ones more often.
    operands: Annotated[list[Annotated[str, StringConstraints(max_length=80)]],
                        Field(max_length=6)] = dspy.OutputField(
        desc="each needed value as: what = value [fact number]")
    expression: Annotated[str, StringConstraints(max_length=120)] = dspy.OutputField(
        desc="arithmetic on those values that gives the answer, or empty")
    answer: Annotated[str, StringConstraints(max_length=200)] = dspy.OutputField()
    used: Annotated[list[int], Field(max_length=8)] = dspy.OutputField()


class Round(BaseModel):
    """One search round: what was asked, what it found, and the sufficiency decision."""

    queries: list[str]
    new_facts: int
    model_sufficient: bool | None = None
    uncovered: list[str] = Field(default_factory=list)
    sufficient: bool | None = None


class ReasoningTrace(BaseModel):
    """What the reasoner did for one question (recorded with the run)."""

    task_id: str
    intent: str
    model_intent: str = ""
    allowance: int
    steps: int = 0
    rounds: list[Round] = Field(default_factory=list)
    retrieved: list[str] = Field(default_factory=list)
    shown: list[str] = Field(default_factory=list)
    used: list[str] = Field(default_factory=list)
    refined_queries: int = 0
    recomputed: int = 0
    operands: list[str] = Field(default_factory=list)
    subquestions: list[str] = Field(default_factory=list)
    subvalues: list[str] = Field(default_factory=list)
    expression: str = ""
    value: str | None = None
    calculator_error: str | None = None
    reminders: list[str] = Field(default_factory=list)
    slots_written: int = 0


def question_anchors(question: str) -> list[str]:
    """What some fact must contain before ``question`` can be answered: its number
    phrases ("day 7"; a number alone after a stop-word) and names (capitalised word
    runs; a question's first word is not a name)."""
    anchors = []
    for m in _NUMBER_PHRASE.finditer(question):
        words = m.group(0).split()
        # "day 7" names a value; "had 5" is just a number.
        anchors.append(m.group(0) if len(words) == 2 and words[0].casefold() not in
                       STOP_WORDS else words[-1])
    for m in _NAME.finditer(question):
        name = m.group(0)
        if m.start() == 0 and " " not in name:
            continue  # a sentence's first word is capitalised anyway
        if m.start() == 0:
            name = name.split(" ", 1)[1]
        name = re.sub(r"['’]s?$", "", name)  # "Eskerholt's" names Eskerholt
        if not any(name in a for a in anchors):  # "Day" of "Day 3"
            anchors.append(name)
    return list(dict.fromkeys(a.strip() for a in anchors if a.strip()))


def uncovered(anchors: list[str], facts: list[Recalled]) -> list[str]:
    """The anchors no fact contains (case-insensitive, whole words)."""
    corpus = " ".join(f"{f.title} {f.document} {f.source} {f.text} {' '.join(f.steps)}"
                      for f in facts).casefold()
    return [a for a in anchors
            if not re.search(rf"(?<!\w){re.escape(a.casefold())}(?!\w)", corpus)]


def render_facts(facts: list[Recalled]) -> str:
    """Facts as numbered lines ``[n] date · source · document: text``, a conflict marked
    on both sides with which report is newer."""
    number = {f.id: n for n, f in enumerate(facts, 1)}
    lines = []
    for n, f in enumerate(facts, 1):
        head = " · ".join(p for p in (f.event_time.date().isoformat() if f.event_time else "",
                                      f.source, f.document) if p)
        if f.steps and f.text == procedure_text(f.text.split("\n", 1)[0].removesuffix(":"),
                                                f.steps):
            body = f.text.replace("\n", " ")  # its name and its steps, each once, all kept
        else:
            body = f.text[:MAX_FACT_CHARS]
            if f.steps:
                body += " Steps: " + " ".join(f"{i}. {s}" for i, s in enumerate(f.steps, 1))
        for c in f.conflicts:
            if c.other_id in number:
                body += (f" [disagrees with [{number[c.other_id]}]; this report is "
                         f"{'newer' if c.newer else 'older'}]")
        lines.append(f"[{n}] {head + ': ' if head else ''}{body}")
    return "\n".join(lines)


def ordered(facts: list[Recalled], chronological: bool) -> list[Recalled]:
    """``facts`` in date order (undated last) when ``chronological``, else as given."""
    return sorted(facts, key=lambda f: (f.event_time is None, f.event_time or 0)
                  ) if chronological else facts


def _plain(value: float) -> str:
    """A number as the calculator reads it (no exponent, no trailing zeros)."""
    return f"{value:.6f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))


def value_questions(subquestions: list[str]) -> list[str]:
    """The sub-questions that each look up one value: blank ones and those that ask to
    combine values (``_COMBINE``: "Calculate the difference ...") are left out."""
    return [q for q in subquestions if q.strip() and not _COMBINE.match(q)]


def asks_for_number(question: str) -> bool:
    """Whether the question asks for a quantity ("how many", "by how much", "what is the
    total/difference..."): only then may a computed value replace the answer's number."""
    return bool(_ASKS_NUMBER.search(question))


def apply_calculation(answer: str, expression: str, trace: ReasoningTrace,
                      facts_text: str | None = None) -> str:
    """``answer`` with the calculator's value for ``expression`` in place of a stated
    number that disagrees (counted in ``trace.recomputed``).

    The expression must be arithmetic (two numbers or more) on numbers that occur in
    ``facts_text`` when it is given: a bare number or an invented operand is recorded
    in the trace, not applied. An answer that states no number is left alone.
    """
    trace.expression = expression
    operands = numbers(expression)
    if len(_NUMBER.findall(expression)) < 2:
        trace.calculator_error = "not arithmetic: fewer than two numbers"
        return answer
    if facts_text is not None:
        known = numbers(facts_text) + [float(x.replace(",", ""))
                                       for x in _NUMBER.findall(facts_text)]
        strays = [n for n in operands if not any(abs(n - k) <= 1e-9 * max(1.0, abs(k))
                                                 for k in known)]
        if strays:
            trace.calculator_error = f"operands not in the facts: {strays[:3]}"
            return answer
    result = calculate(expression)
    if "error" in result:
        trace.calculator_error = str(result["error"])
        return answer
    value = str(result["value"])
    trace.value = value
    target = float(numbers(value)[0]) if numbers(value) else None
    stated = numbers(answer)
    if target is None or any(abs(s - target) <= 1e-9 * max(1.0, abs(target))
                             for s in stated):
        return answer
    spans = list(_NUMBER.finditer(answer))
    if not spans:
        return answer
    trace.recomputed += 1
    if len(spans) == 1:
        return answer[:spans[0].start()] + value + answer[spans[0].end():]
    return f"{answer} ({expression} = {value})"


class AdaptiveReasoner(dspy.Module):
    """Classify, then recall once or plan/search/evaluate, then answer (see the module
    docstring). Call with ``question`` and the tenant's ``CognitiveMemory``; returns a
    ``dspy.Prediction`` with ``answer``, ``intent`` and ``trace`` (a ``ReasoningTrace``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.classify = StructuredPredict(ClassifyIntent, "reasoner.intent")
        self.plan = StructuredPredict(PlanQueries, "reasoner.plan")
        self.decompose = StructuredPredict(Decompose, "reasoner.decompose")
        self.read_value = StructuredPredict(ReadValue, "reasoner.value")
        self.evaluate = StructuredPredict(EvaluateFacts, "reasoner.evaluate")
        self.respond = StructuredPredict(AnswerFromFacts, "reasoner.answer")
        self.compute = StructuredPredict(ComputeFromFacts, "reasoner.compute")

    def forward(self, question: str, mind: CognitiveMemory, intent: str | None = None,
                **_: Any) -> dspy.Prediction:
        """Answer ``question`` from ``mind``; working memory is cleared afterwards.

        ``intent``: the classifier's answer when the caller already asked it (the
        classifying call is then not made again); it is checked as the classifier's is.
        """
        if not question.strip():
            raise ValueError("the question is empty")
        said = intent if intent is not None else str(self.classify(question=question).intent)
        intent = checked_intent(question, said)
        effort = EFFORT[intent]
        trace = ReasoningTrace(task_id=f"task_{uuid.uuid4().hex[:12]}", intent=intent,
                               model_intent=said, allowance=effort.max_steps)
        task = trace.task_id
        self._slot(mind, trace, "question", question, 1.0)
        trace.reminders = [i.id for i in mind.perceive(question, task_id=task)]
        found: dict[str, Recalled] = {}
        anchors = question_anchors(question)
        queries = [question]
        computes = effort.calculator and asks_for_number(question)
        operation = "none"
        if computes:
            parts = self.decompose(question=question)
            trace.subquestions = [q for q in parts.subquestions if q.strip()][:4]
            operation = str(parts.operation)
            queries = list(dict.fromkeys([question, *trace.subquestions]))
            self._slot(mind, trace, "plan",
                       f"{'; '.join(trace.subquestions)} -> {operation}", 0.9)
        elif effort.max_steps > 1:
            planned = [q for q in self.plan(question=question).queries if q.strip()]
            queries = list(dict.fromkeys([question, *planned]))
            self._slot(mind, trace, "plan", "; ".join(queries), 0.9)
        asked: set[str] = set()
        while True:
            trace.steps += 1
            before = len(found)
            for query in queries:
                asked.add(query.casefold())
                for fact in mind.recall(query, k=effort.k, hops=effort.hops):
                    found.setdefault(fact.id, fact)
            new = list(found.values())[before:]
            for rank, fact in enumerate(new):
                self._slot(mind, trace, "retrieved_fact", fact.text,
                           max(0.05, 0.85 - 0.8 * rank / max(1, len(new))))
            step = Round(queries=queries, new_facts=len(new))
            trace.rounds.append(step)
            self._slot(mind, trace, "reasoning_step",
                       f"step {trace.steps}: searched {'; '.join(queries)} -> "
                       f"{len(new)} new facts", 0.6)
            if effort.max_steps == 1:
                break
            facts = self._facts(mind, task, found)
            judged = self.evaluate(question=question, facts=render_facts(
                ordered(facts, effort.chronological)))
            step.model_sufficient = bool(judged.sufficient)
            step.uncovered = uncovered(anchors, facts)
            step.sufficient = step.model_sufficient and not step.uncovered
            self._slot(mind, trace, "evaluation",
                       f"sufficient={step.sufficient}; missing: "
                       f"{judged.missing or ', '.join(step.uncovered)}", 0.7)
            if step.sufficient or trace.steps >= effort.max_steps:
                break
            missing = [" ".join(step.uncovered)] if step.uncovered else []
            queries = [q for q in (*judged.queries, *missing)
                       if q.strip() and q.casefold() not in asked]
            if not queries:
                break
            trace.refined_queries += 1
        facts = ordered(self._facts(mind, task, found), effort.chronological)
        trace.retrieved = list(found)
        trace.shown = [f.id for f in facts]
        guidance = GUIDANCE[intent]
        if not computes:
            out = self.respond(guidance=guidance, question=question,
                               facts=render_facts(facts))
            answer = str(out.answer).strip()
        else:
            computed = self._compute(mind, trace, operation, effort)
            if computed is not None:
                guidance += f" Computed from the facts: {computed}."
            out = self.compute(guidance=guidance, question=question,
                               facts=render_facts(facts))
            trace.operands = [str(v) for v in out.operands]
            answer = str(out.answer).strip()
            if computed is not None:
                answer = apply_calculation(answer, trace.expression, trace)
            elif str(out.expression).strip():
                answer = apply_calculation(answer, str(out.expression).strip(), trace,
                                           " ".join(f.text for f in facts))
        trace.used = [facts[n - 1].id for n in out.used if 1 <= n <= len(facts)]
        mind.working.complete(task, outcome=answer)
        return dspy.Prediction(answer=answer, intent=intent, trace=trace)

    def _compute(self, mind: CognitiveMemory, trace: ReasoningTrace, operation: str,
                 effort: Effort) -> str | None:
        """Answer each sub-question with one number (a recall and a short call each),
        then combine them with the calculator (``difference``: the gap between exactly two
        values; ``sum``: all of them): a line for the answer step, or None when the
        operation is ``none``, a value is missing, or a difference is not between two
        different values (three values have no one gap, and two equal readings of a
        question that presupposes a gap are one fact read twice)."""
        subs = value_questions(trace.subquestions)
        if not subs or operation not in ("difference", "sum") or (
                operation == "difference" and len(subs) != 2):
            return None
        values: list[float] = []
        for sub in subs:
            facts = ordered(mind.recall(sub, k=effort.k), effort.chronological)
            said = str(self.read_value(question=sub, facts=render_facts(facts)).value)
            trace.subvalues.append(said)
            found = numbers(said) or [float(x.replace(",", "")) for x in _NUMBER.findall(said)]
            if not found:
                return None
            values.append(found[0])
        if operation == "difference" and values[0] == values[1]:
            trace.calculator_error = "difference of two equal readings: not computed"
            return None
        shown = [_plain(v) for v in values]
        expression = (f"abs({shown[-1]} - {shown[0]})" if operation == "difference"
                      else " + ".join(shown))
        result = calculate(expression)
        if "error" in result:
            return None
        trace.expression = expression
        lines = "; ".join(f"{q} {v}" for q, v in zip(subs, trace.subvalues, strict=True))
        self._slot(mind, trace, "reasoning_step",
                   f"computed {expression} = {result['value']}", 0.95)
        return f"{lines}; {expression} = {result['value']}"

    @staticmethod
    def _slot(mind: CognitiveMemory, trace: ReasoningTrace, slot: str, text: str,
              relevance: float) -> None:
        mind.working.push(trace.task_id, slot, text, relevance=relevance)
        trace.slots_written += 1

    @staticmethod
    def _facts(mind: CognitiveMemory, task: str, found: dict[str, Recalled]
               ) -> list[Recalled]:
        """The found facts still held in the task's working memory, best first."""
        held = {s.text for s in mind.working.slots(task, "retrieved_fact")}
        return [f for f in found.values() if f.text in held]
