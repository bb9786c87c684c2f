"""The query-construction tasks over Brick: the model, the data file, and gold answers.

Each task carries its gold SPARQL and the answer that gold query gave when the data file
was written (`expected`), so a changed ontology shows up as a gold answer that no longer
matches, not as silently moving targets.
"""

from __future__ import annotations

import json
from enum import IntEnum, StrEnum
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from memstrata.bench.ontology.graph import DATA_DIR, Key, QueryOutcome, execute

TASKS_JSON = DATA_DIR / "ontology_tasks.json"


class Level(IntEnum):
    """How hard a task is, by the query shape it needs."""

    ENTITY_LOOKUP = 1  # one entity's own attributes
    RELATIONSHIPS = 2  # one hop between entities
    MULTI_HOP = 3  # paths of several hops, transitive closures
    FILTERING = 4  # FILTER on values, units, text, absence
    AGGREGATION = 5  # COUNT / SUM / AVG / MAX, GROUP BY, HAVING


class Shape(StrEnum):
    """What form the answer takes, and so how a candidate's result is compared."""

    SET = "set"  # a set of terms: some column of the result must equal it
    NUMBER = "number"  # one number: a single-row result holding it
    TABLE = "table"  # a set of tuples: some choice of columns must equal it


#: A canonical answer: a sorted list of terms (SET), a float (NUMBER), a sorted list of
#: rows (TABLE). Terms are `graph.Key`s: compact IRIs, quoted literals, floats; a TABLE
#: row's unbound cell is None.
Answer = list[Key] | float | list[list[Key | None]]


class OntologyTask(BaseModel):
    """One natural-language question with its gold SPARQL and expected answer.

    `scope` says what the question is over: "ontology" (Brick's classes and properties
    only) or "building" (the instance model in `data/building.ttl`, usually joined to the
    class hierarchy). The tag "transitive" marks questions whose correct answer needs the
    class hierarchy closed over (`rdfs:subClassOf*`); the anti-pattern checks use it.
    """

    id: str
    level: Level
    scope: str = Field(pattern="^(ontology|building)$")
    question: str
    gold_sparql: str
    shape: Shape
    expected: Answer
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _expected_fits_shape(self) -> OntologyTask:
        ok = {
            Shape.NUMBER: isinstance(self.expected, float),
            Shape.SET: isinstance(self.expected, list)
            and all(not isinstance(x, list) for x in self.expected),
            Shape.TABLE: isinstance(self.expected, list)
            and all(isinstance(x, list) for x in self.expected),
        }[self.shape]
        if not ok:
            raise ValueError(f"{self.id}: expected {self.expected!r} is not a {self.shape}")
        return self


class TaskFile(BaseModel):
    """The data file: the ontology version its answers were computed on, and the tasks."""

    ontology_version: str
    tasks: list[OntologyTask]


@lru_cache(maxsize=4)
def _load(path: Path) -> TaskFile:
    return TaskFile.model_validate(json.loads(path.read_text(encoding="utf-8")))


def load_task_file(path: Path | None = None) -> TaskFile:
    """The parsed task file (cached); `path` defaults to the packaged one."""
    return _load(path or TASKS_JSON)


def load_tasks(path: Path | None = None) -> list[OntologyTask]:
    """All tasks, in file order."""
    return list(load_task_file(path).tasks)


def _sort_key(key: Key | None) -> tuple[int, float, str]:
    if isinstance(key, float):
        return (0, key, "")
    return (1, 0.0, "" if key is None else key)


def answer_from_rows(shape: Shape, outcome: QueryOutcome) -> Answer:
    """Read a canonical answer off a result whose columns are exactly the answer's.

    SET takes the first column (unbound cells dropped), NUMBER the single row's first
    cell, TABLE every column in order. Used on gold queries, which project just that.

    Raises:
        ValueError: the result does not have the shape (e.g. NUMBER with two rows).
    """
    if outcome.status != "ok":
        raise ValueError(f"query failed: {outcome.status}: {outcome.error}")
    if shape is Shape.SET:
        values = {row[0] for row in outcome.rows if row and row[0] is not None}
        return sorted(values, key=_sort_key)
    if shape is Shape.NUMBER:
        if len(outcome.rows) != 1 or not isinstance(outcome.rows[0][0], float):
            raise ValueError(f"expected one numeric cell, got {outcome.rows[:3]!r}")
        return outcome.rows[0][0]
    table = {tuple(row) for row in outcome.rows}
    return [list(row) for row in sorted(table, key=lambda r: [_sort_key(k) for k in r])]


def gold_answers(task: OntologyTask) -> Answer:
    """Run the task's gold SPARQL now and return its canonical answer.

    Example:
        >>> task = load_tasks()[0]
        >>> gold_answers(task) == task.expected
        True
    """
    return answer_from_rows(task.shape, execute(task.gold_sparql, isolate=False))


def regenerate_expected(path: Path | None = None) -> int:
    """Re-run every gold query and write the answers (and the ontology version) back.

    For a deliberate ontology upgrade: review the diff of the data file afterwards, since
    every changed answer is a changed task. Returns how many answers changed.
    """
    from memstrata.bench.ontology.graph import ontology_version

    target = path or TASKS_JSON
    current = load_task_file(target)
    changed = 0
    tasks = []
    for task in current.tasks:
        answer = gold_answers(task)
        changed += answer != task.expected
        tasks.append(task.model_copy(update={"expected": answer}))
    updated = current.model_copy(update={"ontology_version": ontology_version(),
                                         "tasks": tasks})
    target.write_text(json.dumps(updated.model_dump(mode="json"), indent=1,
                                 ensure_ascii=False) + "\n", encoding="utf-8")
    _load.cache_clear()
    return changed
