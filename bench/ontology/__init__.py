"""Suite (a) of issue 7: SPARQL query construction over the Brick ontology.

At least 50 tasks over five levels (entity lookup, relationships, multi-hop, filtering,
aggregation), each with gold SPARQL and its stored answer; `score` runs a candidate query
safely and reports success plus named anti-patterns; `sense_card` is the deterministic
L0 card for the memory layer cake.

Example:
    >>> from memstrata.bench.ontology import load_tasks, score
    >>> task = load_tasks()[0]
    >>> score(task, task.gold_sparql).success
    True
"""

from memstrata.bench.ontology import _extra  # noqa: F401  (first: a missing extra names itself)
from memstrata.bench.ontology.antipatterns import ANTI_PATTERNS, Finding, check_antipatterns
from memstrata.bench.ontology.card import sense_card
from memstrata.bench.ontology.graph import (
    QueryOutcome,
    execute,
    load_ontology,
    ontology_version,
    prefixes,
)
from memstrata.bench.ontology.scoring import TaskScore, compare, score
from memstrata.bench.ontology.tasks import (
    Level,
    OntologyTask,
    Shape,
    gold_answers,
    load_task_file,
    load_tasks,
)

__all__ = [
    "ANTI_PATTERNS",
    "Finding",
    "Level",
    "OntologyTask",
    "QueryOutcome",
    "Shape",
    "TaskScore",
    "check_antipatterns",
    "compare",
    "execute",
    "gold_answers",
    "load_ontology",
    "load_task_file",
    "load_tasks",
    "ontology_version",
    "prefixes",
    "score",
    "sense_card",
]
