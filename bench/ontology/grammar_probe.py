"""A probe: does constraining a small model's decoding to SPARQL make it solve suite (a)?

Not part of any experiment. It answers one question behind issue 7's blocked target:
could the embedded SmolLM2-135M write working queries if its output were held to a
SPARQL shape? ``sparql_pattern`` builds a JSON-schema ``pattern`` (a regular expression
llama.cpp compiles into a decoding grammar) for a SPARQL SELECT subset: PREFIX lines
drawn from the graph's own prefixes, a projection with optional aggregates, triple
patterns with property paths, FILTER and NOT EXISTS, GROUP BY / ORDER BY / LIMIT.
``run_probe`` asks the model for each task's query under it and grades the answers.

Run: ``python -m memstrata.bench.ontology.grammar_probe [--memory card] [--tasks N]``.
Measured with SmolLM2 (docs/benchmarks/experiments.md, issue 7): queries that parse but
loop, 0 of 62.

The pattern is matched against the JSON-encoded string, so a literal's quotes are
``\\"`` there; and the regex subset llama-cpp-python converts has no ``\\.`` escape,
so a dot is written ``[.]``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Annotated, Any

import dspy
from pydantic import StringConstraints, WithJsonSchema

from .graph import prefixes
from .scoring import score
from .tasks import load_tasks


def _literal(text: str) -> str:
    # Escape what the converter's regex subset treats as syntax; a dot must be a class.
    return re.sub(r"([()\[\]{}*+?|])", r"\\\1", text).replace(".", "[.]")


def sparql_pattern(namespaces: dict[str, str]) -> str:
    """An anchored regular expression for a SPARQL SELECT subset over ``namespaces``."""
    declared = "|".join(f"{_literal(p)}: <{_literal(ns)}>" for p, ns in namespaces.items())
    names = "|".join(_literal(p) for p in namespaces)
    var = r"\?[a-z][a-zA-Z0-9_]{0,15}"
    iri = rf"({names}):[A-Za-z][A-Za-z0-9_-]{{0,50}}"
    term = rf'({var}|{iri}|\\"[^"\\]{{1,40}}\\"|[0-9]{{1,6}}([.][0-9]{{1,3}})?)'
    step = rf"(({iri}|a)[+*?]?)"
    path = rf"({step}([/|]{step}){{0,2}}|{var})"
    triple = rf"{term} {path} {term}( ; {path} {term}){{0,1}} [.] "
    aggregate = rf"\((COUNT|SUM|AVG|MIN|MAX)\((DISTINCT )?{var}\) AS {var}\)"
    condition = rf'FILTER( NOT EXISTS \{{ ({triple}){{1,2}}\}}|\([^"\\{{}}]{{1,60}}\)) '
    tail = rf"( GROUP BY ({var} ?){{1,2}})?( ORDER BY (DESC\()?{var}\)?)?( LIMIT [0-9]{{1,3}})?"
    return (rf"^(PREFIX ({declared}) ){{1,4}}SELECT (DISTINCT )?(({var}|{aggregate}) ){{1,3}}"
            rf"WHERE \{{ ({triple}|{condition}){{1,3}}\}}{tail}$")


class ProbeSparql(dspy.Signature):
    """Write one SPARQL SELECT query over the Brick building graph that answers the
    question. Declare every prefix you use."""

    question: str = dspy.InputField()
    memory: str = dspy.InputField(desc="what memory holds for this task")
    sparql: str = dspy.OutputField(desc="the final SPARQL query")


def probe_signature(pattern: str) -> type[dspy.Signature]:
    """``ProbeSparql`` with its answer's decoding held to ``pattern``.

    The pattern reaches the JSON schema only (``WithJsonSchema``), not validation: it
    describes the JSON-encoded text, which pydantic never sees.
    """
    return ProbeSparql.with_updated_fields("sparql", type_=Annotated[
        str, StringConstraints(max_length=1500),
        WithJsonSchema({"type": "string", "pattern": pattern})])


def run_probe(memory: str = "(none)", limit: int | None = None) -> dict[str, Any]:
    """Every task (or the first ``limit``) under the grammar on the configured LM."""
    from memstrata.programs import ProgramParseError
    from memstrata.programs.structured import StructuredPredict

    predict = StructuredPredict(probe_signature(sparql_pattern(prefixes())), "grammar_probe")
    rows: list[dict[str, Any]] = []
    for task in load_tasks()[:limit]:
        try:
            query = predict(question=task.question, memory=memory).sparql
        except ProgramParseError as exc:
            rows.append({"task": task.id, "status": "no_output", "error": str(exc)[:200]})
            continue
        graded = score(task, query)
        rows.append({"task": task.id, "success": graded.success, "status": graded.status,
                     "query": query[:300]})
    return {"tasks": len(rows), "successes": sum(bool(r.get("success")) for r in rows),
            "statuses": {s: sum(r["status"] == s for r in rows)
                         for s in sorted({r["status"] for r in rows})}, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    """Run the probe on the embedded model (or ``--lm``) and print JSON."""
    from memstrata.programs import setup_lm

    from .card import sense_card

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", default="local/smollm2", help="model (default: SmolLM2)")
    parser.add_argument("--memory", choices=("none", "card"), default="none",
                        help="what the memory input holds: nothing, or the L0 card")
    parser.add_argument("--tasks", type=int, help="first N tasks only")
    args = parser.parse_args(argv)
    handle = setup_lm(args.lm, max_tokens=400)
    with dspy.context(lm=handle.lm):
        out = run_probe(sense_card() if args.memory == "card" else "(none)", args.tasks)
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
