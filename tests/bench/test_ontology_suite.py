"""Suite (a) of issue 7: Brick query-construction tasks, gold answers, scoring, L0 card."""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.bench.ontology import (
    ANTI_PATTERNS,
    Level,
    OntologyTask,
    Shape,
    check_antipatterns,
    execute,
    gold_answers,
    load_ontology,
    load_task_file,
    load_tasks,
    ontology_version,
    score,
    sense_card,
)
from memstrata.bench.ontology import card as sense_card_module
from memstrata.bench.ontology.graph import compact, expand, term_key

TASKS = load_tasks()  # reads JSON only; the graph is parsed once, by the fixture below
BY_ID = {t.id: t for t in TASKS}
P = (
    "PREFIX brick: <https://brickschema.org/schema/Brick#>\n"
    "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>\n"
    "PREFIX bldg: <http://example.org/building#>\n"
)


@pytest.fixture(scope="module", autouse=True)
def graph() -> None:
    """Parse Brick + the building model once for the whole module."""
    assert len(load_ontology()) > 50_000


def _same(expected: object, got: object) -> bool:
    if isinstance(expected, float) and isinstance(got, float):
        return math.isclose(expected, got, rel_tol=1e-9, abs_tol=1e-12)
    return expected == got


# --- the task set ---------------------------------------------------------------------


def test_at_least_fifty_tasks_and_ten_per_level() -> None:
    assert len(TASKS) >= 50
    per_level = Counter(t.level for t in TASKS)
    assert set(per_level) == set(Level)
    assert all(n >= 10 for n in per_level.values()), per_level
    assert len(BY_ID) == len(TASKS), "task ids must be unique"
    assert {t.scope for t in TASKS} == {"ontology", "building"}
    assert {t.shape for t in TASKS} == set(Shape)


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_gold_query_rerun_matches_stored_answer(task: OntologyTask) -> None:
    got = gold_answers(task)
    stored_on = load_task_file().ontology_version
    assert _same(task.expected, got), (
        f"{task.id}: the gold SPARQL now answers {got!r}, the data file says "
        f"{task.expected!r}. The answers were computed on {stored_on}; loaded now: "
        f"{ontology_version()}. If the ontology changed on purpose, re-check the task "
        "and rewrite its expected answer."
    )


def test_gold_queries_are_free_of_anti_patterns() -> None:
    offenders = {}
    for task in TASKS:
        outcome = execute(task.gold_sparql, isolate=False)
        names = [
            f.name
            for f in check_antipatterns(task.gold_sparql, tags=set(task.tags), outcome=outcome)
        ]
        if names:
            offenders[task.id] = names
    assert offenders == {}


def test_non_empty_answers() -> None:
    assert all(t.expected != [] for t in TASKS)


# --- scoring --------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", ["L1-04", "L2-10", "L3-07", "L4-01", "L5-06", "L5-08"])
def test_gold_query_scores_as_success(task_id: str) -> None:
    task = BY_ID[task_id]
    result = score(task, task.gold_sparql)
    assert result.success and result.status == "ok" and result.f1 == 1.0
    assert result.findings == []


def test_wrong_query_fails_with_partial_credit() -> None:
    task = BY_ID["L2-01"]  # AHU-1 feeds three VAVs
    query = P + "SELECT ?x WHERE { bldg:AHU_1 brick:feeds ?x . FILTER(?x != bldg:VAV_1_3) }"
    result = score(task, query)
    assert result.status == "ok" and not result.success
    assert result.precision == 1.0 and math.isclose(result.recall, 2 / 3)


def test_syntax_error_is_a_status_not_an_exception() -> None:
    result = score(BY_ID["L1-06"], P + "SELECT ?x WHERE { brick:feeds owl:inverseOf ?x ")
    assert result.status == "parse_error" and not result.success and result.error


def test_non_select_and_timeout_and_row_cap() -> None:
    task = BY_ID["L5-09"]
    assert score(task, "ASK { ?s ?p ?o }").status == "not_select"
    product = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }"
    slow = score(task, product, timeout_s=0.5)
    assert slow.status == "timeout" and not slow.success
    capped = score(BY_ID["L3-07"], P + "SELECT ?c WHERE { ?c rdfs:subClassOf+ ?d }", max_rows=5)
    assert capped.truncated and capped.n_rows == 5 and not capped.success


def test_extra_columns_and_column_order_do_not_matter() -> None:
    labelled = P + ("SELECT ?label ?x WHERE { bldg:AHU_1 brick:feeds ?x . ?x rdfs:label ?label }")
    assert score(BY_ID["L2-01"], labelled).success
    swapped = P + (
        "SELECT (COUNT(DISTINCT ?r) AS ?n) ?z WHERE { ?z a <https://w3id.org/rec#HVACZone> ; "
        "brick:hasPart ?r } GROUP BY ?z"
    )
    assert score(BY_ID["L5-12"], swapped).success
    counted = P + "SELECT (COUNT(*) AS ?n) WHERE { ?c rdfs:subClassOf brick:Point }"
    assert score(BY_ID["L5-01"], counted).success  # "6"^^xsd:integer == 6.0


# --- anti-patterns --------------------------------------------------------------------


def _names(task_id: str, query: str) -> list[str]:
    return score(BY_ID[task_id], query).finding_names


def test_missing_prefix_is_flagged_with_its_namespace() -> None:
    result = score(BY_ID["L1-06"], "SELECT ?x WHERE { brick:feeds owl:inverseOf ?x }")
    assert result.status == "parse_error"
    assert result.finding_names == ["missing_prefix", "missing_prefix"]
    assert "<https://brickschema.org/schema/Brick#>" in result.findings[0].message
    iri_hash = "SELECT ?x WHERE { <https://brickschema.org/schema/Brick#feeds> ?p ?x } # a:b"
    assert "missing_prefix" not in _names("L1-06", iri_hash)


def test_unbounded_select_star_is_flagged() -> None:
    assert "select_star_unbounded" in _names("L1-03", P + "SELECT * WHERE { ?c rdfs:label ?l }")
    limited = P + "SELECT * WHERE { ?c rdfs:label ?l } LIMIT 10"
    assert "select_star_unbounded" not in _names("L1-03", limited)


def test_rdf_type_without_subclass_closure_is_flagged() -> None:
    naive = P + "SELECT ?s WHERE { ?s a brick:Temperature_Sensor }"
    assert "type_without_subclass_closure" in _names("L3-04", naive)
    closed = P + "SELECT ?s WHERE { ?s a/rdfs:subClassOf* brick:Temperature_Sensor }"
    assert _names("L3-04", closed) == []


def test_single_hop_subclass_is_flagged_on_transitive_tasks() -> None:
    direct = P + "SELECT ?c WHERE { ?c rdfs:subClassOf brick:Air_Temperature_Sensor }"
    result = score(BY_ID["L3-07"], direct)
    assert "subclass_not_transitive" in result.finding_names and not result.success
    assert "subclass_not_transitive" not in _names("L1-02", direct)  # not a transitive task


def test_regex_where_an_iri_would_do_is_flagged() -> None:
    by_name = P + (
        "SELECT ?c WHERE { ?c rdfs:subClassOf+ ?d . "
        'FILTER(regex(str(?d), "Air_Temperature_Sensor$")) }'
    )
    assert "regex_instead_of_iri" in _names("L3-07", by_name)
    anchored = P + 'SELECT ?x WHERE { ?x rdfs:label ?l . FILTER(regex(?l, "^AHU-1$")) }'
    assert "regex_instead_of_iri" in _names("L1-11", anchored)
    namespace = P + (
        'SELECT ?x WHERE { ?x a ?c . FILTER(STRSTARTS(STR(?x), "http://example.org/building#")) }'
    )
    assert "regex_instead_of_iri" not in _names("L1-11", namespace)


def test_cartesian_product_and_all_variable_pattern_are_flagged() -> None:
    product = P + "SELECT ?a ?b WHERE { ?a brick:feeds bldg:Zone_1A . ?b brick:feeds bldg:Zone_2A }"
    assert "cartesian_product" in _names("L2-05", product)
    grouped = P + "SELECT ?a ?b WHERE { { ?a brick:feeds bldg:Zone_1A } { ?b brick:isPartOf ?f } }"
    assert "cartesian_product" in _names("L2-05", grouped)
    scan = P + "SELECT ?s WHERE { ?s ?p ?o . FILTER(?o = bldg:Zone_1B) }"
    assert "all_variable_pattern" in _names("L2-05", scan)


def test_duplicate_rows_are_flagged() -> None:
    dupes = P + "SELECT ?ahu WHERE { ?ahu brick:feeds ?vav . ?vav brick:feeds ?zone }"
    result = score(BY_ID["L2-01"], dupes)
    assert "duplicate_rows" in result.finding_names


def test_every_flag_is_a_declared_anti_pattern() -> None:
    query = 'SELECT * WHERE { ?s ?p ?o . ?a brick:feeds ?b FILTER(regex(str(?a), "AHU")) }'
    names = {f.name for f in check_antipatterns(query, tags={"transitive"})}
    assert names and names <= set(ANTI_PATTERNS)


# --- terms ----------------------------------------------------------------------------


def test_terms_compact_and_compare_numerically() -> None:
    iri = "https://brickschema.org/schema/Brick#Air_Temperature_Sensor"
    assert compact(iri) == "brick:Air_Temperature_Sensor" and expand(compact(iri)) == iri
    assert compact("http://nowhere.example/x") == "<http://nowhere.example/x>"
    rows = execute('SELECT ?a ?b ?c WHERE { BIND(5 AS ?a) BIND(5.0 AS ?b) BIND("5" AS ?c) }').rows
    assert rows == [(5.0, 5.0, '"5"')]
    assert term_key(None) is None


# --- the L0 sense card ----------------------------------------------------------------


def test_sense_card_default_budget_content() -> None:
    card = sense_card()
    assert len(card) <= 600
    assert ontology_version() in card
    assert "brick: <https://brickschema.org/schema/Brick#>" in card
    assert "brick:Point(" in card and "brick:feeds/isFedBy" in card


def test_sense_card_is_deterministic_across_recomputation() -> None:
    first = sense_card(900)
    sense_card_module._items.cache_clear()
    sense_card_module._namespace_rank.cache_clear()
    assert sense_card(900) == first


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=-5, max_value=3000))
def test_sense_card_respects_any_budget(max_chars: int) -> None:
    card = sense_card(max_chars)
    assert len(card) <= max(max_chars, 0)
    assert card == sense_card(max_chars)


# --- packaging ------------------------------------------------------------------------


def test_data_files_ship_as_package_data() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    setuptools = pyproject["tool"]["setuptools"]
    assert "memstrata.bench.ontology" in setuptools["packages"]
    globs = setuptools["package-data"]["memstrata.bench.ontology"]
    data = Path(sense_card_module.__file__).parent
    shipped = {p.name for g in globs for p in data.glob(g)}
    assert {"ontology_tasks.json", "building.ttl"} <= shipped
    deps = " ".join(pyproject["project"]["optional-dependencies"]["ontology"])
    assert "brickschema" in deps and "pyoxigraph" in deps and "rdflib" in deps


def test_regenerate_rewrites_stale_answers_and_the_version(tmp_path) -> None:
    import json

    from memstrata.bench.ontology.tasks import TASKS_JSON, load_tasks, regenerate_expected

    copy = tmp_path / "tasks.json"
    doc = json.loads(TASKS_JSON.read_text(encoding="utf-8"))
    doc["ontology_version"] = "stale"
    doc["tasks"][0]["expected"] = ["\"not the answer\""]
    copy.write_text(json.dumps(doc), encoding="utf-8")
    assert regenerate_expected(copy) == 1
    fresh = json.loads(copy.read_text(encoding="utf-8"))
    assert fresh["ontology_version"] != "stale"
    assert [t.expected for t in load_tasks(copy)] == [t.expected for t in load_tasks()]
