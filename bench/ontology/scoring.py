"""Score a candidate SPARQL query against a task: run it safely, compare, find anti-patterns.

Comparison is by result set, not by query text: two different queries with the same
answer both succeed. Row order and duplicates never matter; IRIs compare in compact form,
numbers numerically. Extra columns are allowed (an agent that also returns labels is not
wrong): a SET answer matches when any one column equals it, a TABLE answer when some
choice of columns does.
"""

from __future__ import annotations

import math
from itertools import permutations

from pydantic import BaseModel, Field

from memstrata.bench.ontology.antipatterns import Finding, check_antipatterns
from memstrata.bench.ontology.graph import QueryOutcome, Status, execute
from memstrata.bench.ontology.tasks import OntologyTask, Shape

MAX_TABLE_COLUMNS = 6  # columns tried when matching a TABLE answer (bounds permutations)


class TaskScore(BaseModel):
    """The verdict on one candidate query for one task.

    `success` is an exact result-set match; `precision`/`recall`/`f1` give partial
    credit (best column or column choice). `status` is "ok" when the query ran; otherwise
    `error` says why (a syntax error is a status here, never an exception).
    """

    task_id: str
    success: bool
    status: Status
    error: str | None = None
    precision: float = 0.0
    recall: float = 0.0
    f1: float = 0.0
    n_rows: int = 0
    truncated: bool = False
    elapsed_s: float = 0.0
    findings: list[Finding] = Field(default_factory=list)

    @property
    def finding_names(self) -> list[str]:
        """The anti-pattern names found, in report order."""
        return [f.name for f in self.findings]


def _prf(gold: set[object], got: set[object]) -> tuple[float, float, float]:
    if not gold and not got:
        return 1.0, 1.0, 1.0
    hit = len(gold & got)
    p = hit / len(got) if got else 0.0
    r = hit / len(gold) if gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def _best(gold: set[object], candidates: list[set[object]]) -> tuple[bool, float, float, float]:
    best = (False, 0.0, 0.0, 0.0)
    for got in candidates or [set()]:
        p, r, f = _prf(gold, got)
        if got == gold:
            return True, 1.0, 1.0, 1.0
        if f > best[3]:
            best = (False, p, r, f)
    return best


def _candidates(task: OntologyTask, outcome: QueryOutcome) -> tuple[set[object], list[set[object]]]:
    """The gold set and the result's candidate sets (SET: each column; TABLE: each choice
    of columns), for a result that ran and was not truncated, and a SET or TABLE task."""
    rows = outcome.rows
    width = len(outcome.variables)
    expected = task.expected
    assert not isinstance(expected, float)
    if task.shape is Shape.SET:
        gold: set[object] = set(expected)
        return gold, [{row[i] for row in rows if row[i] is not None} for i in range(width)]
    gold_rows: set[object] = {tuple(r) for r in expected if isinstance(r, list)}
    arity = len(expected[0]) if expected and isinstance(expected[0], list) else width
    usable = range(min(width, MAX_TABLE_COLUMNS))
    return gold_rows, [{tuple(row[i] for i in cols) for row in rows}
                       for cols in permutations(usable, arity)]


def compare(task: OntologyTask, outcome: QueryOutcome) -> tuple[bool, float, float, float]:
    """(success, precision, recall, f1) of a result against the task's expected answer."""
    if outcome.status != "ok" or outcome.truncated:
        return False, 0.0, 0.0, 0.0
    rows = outcome.rows
    expected = task.expected
    if isinstance(expected, float):  # Shape.NUMBER
        ok = len(rows) == 1 and any(
            isinstance(cell, float) and math.isclose(cell, expected, rel_tol=1e-6, abs_tol=1e-9)
            for cell in rows[0]
        )
        return ok, float(ok), float(ok), float(ok)
    return _best(*_candidates(task, outcome))


def difference(task: OntologyTask, outcome: QueryOutcome) -> tuple[list[object], list[object]]:
    """(missing, extra): what the gold answer has that the result lacks, and what the
    result has beyond it, for the result's best-matching column (choice), as ``compare``
    picks it. A NUMBER task's missing is the expected number unless the result holds it,
    its extra the first row's cells then. A result that did not run lacks everything."""
    if outcome.status != "ok":
        expected = task.expected
        return ([expected] if isinstance(expected, float) else list(expected)), []
    if isinstance(task.expected, float):
        if compare(task, outcome)[0]:
            return [], []
        return [task.expected], list(outcome.rows[0]) if outcome.rows else []
    gold, candidates = _candidates(task, outcome)
    got = max(candidates or [set()], key=lambda c: (_prf(gold, c)[2], -len(c ^ gold)))
    return (sorted(gold - got, key=repr), sorted(got - gold, key=repr))


def score(
    task: OntologyTask,
    query: str,
    *,
    timeout_s: float = 10.0,
    max_rows: int = 10_000,
    outcome: QueryOutcome | None = None,
) -> TaskScore:
    """Run `query` for `task` in an isolated, time-limited process and judge it.

    Never raises for a bad query: syntax errors, runtime errors, timeouts and non-SELECT
    queries come back as `status` with `success=False`; anti-pattern checks run in every
    case (those that need the result only when there is one).

    Args:
        task: the task, with its expected answer and tags.
        query: the candidate SPARQL text.
        timeout_s: wall-clock limit of the run.
        max_rows: rows kept; a truncated result never succeeds.
        outcome: `execute(query, timeout_s=..., max_rows=...)` already run by the caller
            (who also needed the rows), so the query is not run a second time; when given,
            `timeout_s` and `max_rows` are not used.

    Example:
        >>> from memstrata.bench.ontology import load_tasks
        >>> task = load_tasks()[0]
        >>> score(task, task.gold_sparql).success
        True
    """
    if outcome is None:
        outcome = execute(query, timeout_s=timeout_s, max_rows=max_rows, isolate=True)
    success, p, r, f = compare(task, outcome)
    findings = check_antipatterns(query, tags=set(task.tags), outcome=outcome)
    return TaskScore(
        task_id=task.id,
        success=success,
        status=outcome.status,
        error=outcome.error,
        precision=p,
        recall=r,
        f1=f,
        n_rows=len(outcome.rows),
        truncated=outcome.truncated,
        elapsed_s=outcome.elapsed_s,
        findings=findings,
    )
