"""The SPARQL grammar probe: the pattern compiles for llama.cpp, admits the subset it
names and nothing else, and the probe grades what a (scripted) model writes under it."""

from __future__ import annotations

import json
import re
from typing import Any

import dspy
import pytest

from memstrata.bench.ontology.grammar_probe import run_probe, sparql_pattern
from memstrata.bench.ontology.graph import prefixes

B = "PREFIX brick: <https://brickschema.org/schema/Brick#> "
R = "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#> "


def _admits(pattern: str, query: str) -> bool:
    # The grammar reads the JSON-encoded string, quotes escaped: match what it sees.
    return re.fullmatch(pattern, json.dumps(query)[1:-1]) is not None


@pytest.fixture(scope="module")
def pattern() -> str:
    return sparql_pattern(prefixes())


def test_the_pattern_compiles_to_a_llama_cpp_grammar(pattern: str) -> None:
    from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

    gbnf = json_schema_to_gbnf(json.dumps({"type": "string", "pattern": pattern}))
    assert "PREFIX" in gbnf and "SELECT" in gbnf
    LlamaGrammar.from_string(gbnf, verbose=False)  # raises on a grammar llama.cpp refuses


@pytest.mark.parametrize("query", [
    B + "SELECT ?d WHERE { brick:Air_Temperature_Sensor brick:hasQuantity ?d . }",
    B + R + "SELECT DISTINCT ?c WHERE { ?c rdfs:subClassOf+ brick:Sensor . }",
    B + R + 'SELECT ?u WHERE { ?p rdfs:label "AHU-2 temp" ; brick:hasUnit ?u . }',
    B + "SELECT (COUNT(DISTINCT ?r) AS ?n) WHERE { ?r a brick:Relationship . }",
    B + "SELECT ?x WHERE { ?x brick:area/brick:value ?a . FILTER(?a > 40) } LIMIT 10",
])
def test_the_subset_is_admitted(pattern: str, query: str) -> None:
    assert _admits(pattern, query)


@pytest.mark.parametrize("query", [
    "SELECT * FROM Brick_Room WHERE id = 1",  # SQL, what SmolLM2 writes unconstrained
    "SELECT ?d WHERE { brick:X brick:hasQuantity ?d . }",  # no PREFIX line
    "PREFIX ex: <http://example.org/> SELECT ?d WHERE { ex:X ex:p ?d . }",  # unknown prefix
    B + "SELECT ?d WHERE { brick:X brick:hasQuantity ?d . }\nDROP GRAPH <g>",
])
def test_everything_else_is_refused(pattern: str, query: str) -> None:
    assert not _admits(pattern, query)


def test_the_probe_sends_the_pattern_and_grades_the_answers(scripted: Any) -> None:
    seen: list[dict[str, Any]] = []
    gold = B + "SELECT ?q WHERE { brick:Supply_Air_Flow_Sensor brick:hasQuantity ?q . }"

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        seen.append(schema or {})
        return {"sparql": gold}

    handle = scripted(reply)
    with dspy.context(lm=handle.lm):
        out = run_probe(limit=4)
    sent = seen[0]["properties"]["sparql"]
    assert sent["pattern"].startswith("^(PREFIX (") and "maxLength" not in sent
    # L1-04 asks exactly this; the other three tasks get a wrong (but valid) answer.
    assert out["tasks"] == 4 and out["successes"] == 1
    assert [r["success"] for r in out["rows"]] == [False, False, False, True]
