"""Anti-pattern checks on a candidate SPARQL query, each reported as a named finding.

The checks look at the query text (for what a parser would reject or hide: undeclared
prefixes, `SELECT *`) and at rdflib's SPARQL algebra (for the shape of the patterns).
rdflib is used only to analyse; execution is pyoxigraph's (see `graph`). The names are
stable: the experiment runner counts them, and memory layers may learn from them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel
from rdflib import RDF, RDFS, BNode, URIRef, Variable
from rdflib import Literal as RDFLiteral
from rdflib.paths import AlternativePath, InvPath, MulPath, NegatedPath, SequencePath
from rdflib.plugins.sparql.algebra import translateQuery
from rdflib.plugins.sparql.parser import parseQuery
from rdflib.plugins.sparql.parserutils import CompValue

from memstrata.bench.ontology.graph import QueryOutcome, prefixes

MISSING_PREFIX = "missing_prefix"
SELECT_STAR_UNBOUNDED = "select_star_unbounded"
TYPE_WITHOUT_SUBCLASS_CLOSURE = "type_without_subclass_closure"
SUBCLASS_NOT_TRANSITIVE = "subclass_not_transitive"
REGEX_INSTEAD_OF_IRI = "regex_instead_of_iri"
CARTESIAN_PRODUCT = "cartesian_product"
ALL_VARIABLE_PATTERN = "all_variable_pattern"
DUPLICATE_ROWS = "duplicate_rows"

ANTI_PATTERNS = (
    MISSING_PREFIX,
    SELECT_STAR_UNBOUNDED,
    TYPE_WITHOUT_SUBCLASS_CLOSURE,
    SUBCLASS_NOT_TRANSITIVE,
    REGEX_INSTEAD_OF_IRI,
    CARTESIAN_PRODUCT,
    ALL_VARIABLE_PATTERN,
    DUPLICATE_ROWS,
)

ADVICE: dict[str, str] = {
    MISSING_PREFIX: "declare every prefix the query uses with a PREFIX line",
    SELECT_STAR_UNBOUNDED: "project the answer variables; add LIMIT while exploring",
    TYPE_WITHOUT_SUBCLASS_CLOSURE: "match instances with rdf:type/rdfs:subClassOf*",
    SUBCLASS_NOT_TRANSITIVE: "use rdfs:subClassOf+ (or *) to reach every subclass",
    REGEX_INSTEAD_OF_IRI: "compare IRIs directly instead of REGEX/CONTAINS on strings",
    CARTESIAN_PRODUCT: "join every triple pattern to the rest through a shared variable",
    ALL_VARIABLE_PATTERN: "bind the predicate or a node; ?s ?p ?o matches the whole graph",
    DUPLICATE_ROWS: "SELECT DISTINCT when the answer is a set",
}
"""Each anti-pattern's advice as a fixed line (the messages above vary with the query):
the derived constraints of the L1 layer."""

LARGE_RESULT = 100  # rows from which an unbounded SELECT * counts as "large"

# Strings, IRIs and comments are blanked before the text checks, so a `#` inside an IRI
# or `foo:` inside a string literal is not read as a comment or a prefix.
_TOKENS = re.compile(
    r'"""(?:.|\n)*?"""|\'\'\'(?:.|\n)*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\''
    r'|<[^<>"{}|^`\\\s]*>|#[^\n]*'
)
_PNAME = re.compile(r"(?<![\w?$:.\-])([A-Za-z](?:[\w.\-]*\w)?)?:")
_DECLARED = re.compile(r"(?i)\bPREFIX\s+([A-Za-z](?:[\w.\-]*\w)?)?:")
_SELECT_STAR = re.compile(r"(?i)\bSELECT\s+(?:DISTINCT\s+|REDUCED\s+)?\*")
_LIMIT = re.compile(r"(?i)\bLIMIT\s+\d+")
_REGEX_META = re.compile(r"[.*+?()\[\]{}|\\]")
_STRING_MATCHERS = ("Builtin_REGEX", "Builtin_CONTAINS", "Builtin_STRSTARTS", "Builtin_STRENDS")


class Finding(BaseModel):
    """One anti-pattern found in a query: a stable name, a severity and advice."""

    name: str
    severity: Literal["error", "warning", "info"]
    message: str


def _blank(text: str) -> str:
    def repl(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("#"):
            return " "
        return "<>" if token.startswith("<") else '""'

    return _TOKENS.sub(repl, text)


def _text_findings(query: str, outcome: QueryOutcome | None) -> list[Finding]:
    text = _blank(query)
    found: list[Finding] = []
    declared = {m or "" for m in _DECLARED.findall(text)}
    used = {m or "" for m in _PNAME.findall(_DECLARED.sub(" ", text))}
    known = prefixes()
    for name in sorted(used - declared):
        hint = f" <{known[name]}>" if name in known else ""
        found.append(
            Finding(
                name=MISSING_PREFIX,
                severity="error",
                message=f"prefix '{name}:' is used but not declared: add PREFIX {name}:{hint}",
            )
        )
    if _SELECT_STAR.search(text) and not _LIMIT.search(text) and outcome is not None:
        large = outcome.truncated or outcome.status == "timeout"
        if large or len(outcome.rows) >= LARGE_RESULT:
            found.append(
                Finding(
                    name=SELECT_STAR_UNBOUNDED,
                    severity="warning",
                    message="SELECT * with no LIMIT returned a large result: project the "
                    "answer variables and add LIMIT while exploring",
                )
            )
    return found


def _nodes(node: Any) -> Iterator[CompValue]:
    """Every algebra node under `node` (NOT EXISTS graphs and subqueries included)."""
    if isinstance(node, CompValue):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list | tuple):
        for item in node:
            yield from _nodes(item)


def _path_parts(path: Any) -> Iterator[tuple[URIRef, str]]:
    """(IRI, modifier) for each IRI inside a property path; modifier '' when plain."""
    if isinstance(path, URIRef):
        yield path, ""
    elif isinstance(path, MulPath):
        for iri, _ in _path_parts(path.path):
            yield iri, path.mod
    elif isinstance(path, SequencePath | AlternativePath):
        for arg in path.args:
            yield from _path_parts(arg)
    elif isinstance(path, InvPath):
        yield from _path_parts(path.arg)
    elif isinstance(path, NegatedPath):
        for arg in path.args:
            yield from _path_parts(arg)


def _is_var(term: Any) -> bool:
    return isinstance(term, Variable | BNode)


def _components(triples: list[tuple[Any, Any, Any]]) -> int:
    """Connected groups of triple patterns (joined by shared variables or blank nodes)."""
    groups: list[set[Any]] = []
    for triple in triples:
        terms = {t for t in triple if _is_var(t)}
        if not terms:
            continue  # a fully bound pattern is a check, not a product
        joined = [g for g in groups if g & terms]
        merged = terms.union(*joined)
        groups = [g for g in groups if not g & terms] + [merged]
    return len(groups)


def _algebra_findings(query: str, tags: set[str]) -> list[Finding]:
    try:
        algebra = translateQuery(parseQuery(query), initNs=prefixes()).algebra
    except Exception:
        return []  # not parseable: the execution status already says so
    nodes = list(_nodes(algebra))
    triples = [t for n in nodes if n.name == "BGP" for t in (n.get("triples") or [])]
    found: list[Finding] = []

    if any(_components(n.get("triples") or []) > 1 for n in nodes if n.name == "BGP") or any(
        n.name == "Join" and _disjoint_join(n) for n in nodes
    ):
        found.append(
            Finding(
                name=CARTESIAN_PRODUCT,
                severity="warning",
                message="some triple patterns share no variable with the rest: the result "
                "is a cartesian product; join them through a shared variable",
            )
        )
    if any(all(isinstance(t, Variable) for t in triple) for triple in triples):
        found.append(
            Finding(
                name=ALL_VARIABLE_PATTERN,
                severity="warning",
                message="a pattern like ?s ?p ?o matches every triple in the graph: "
                "bind the predicate or a node",
            )
        )
    if "transitive" in tags:
        found.extend(_hierarchy_findings(triples))
    if _string_match_on_iri(nodes, triples):
        found.append(
            Finding(
                name=REGEX_INSTEAD_OF_IRI,
                severity="warning",
                message="string matching (REGEX/CONTAINS/STRSTARTS) stands in for an exact "
                "match: compare the IRI directly (?x = brick:Foo) or use the term itself",
            )
        )
    return found


def _disjoint_join(node: CompValue) -> bool:
    left, right = node.get("p1"), node.get("p2")
    lv = set(getattr(left, "_vars", set()) or set())
    rv = set(getattr(right, "_vars", set()) or set())
    return bool(lv) and bool(rv) and not lv & rv


def _hierarchy_findings(triples: list[tuple[Any, Any, Any]]) -> list[Finding]:
    closure = plain_subclass = typed_constant = False
    for _, pred, obj in triples:
        for iri, mod in _path_parts(pred):
            if iri == RDFS.subClassOf:
                if mod in ("*", "+"):
                    closure = True
                else:
                    plain_subclass = True
            elif iri == RDF.type and not _is_var(obj) and not isinstance(pred, SequencePath):
                typed_constant = True
    if closure:
        return []
    if typed_constant:
        return [
            Finding(
                name=TYPE_WITHOUT_SUBCLASS_CLOSURE,
                severity="error",
                message="rdf:type with a fixed class misses instances of its subclasses: "
                "use ?x rdf:type/rdfs:subClassOf* brick:Class",
            )
        ]
    if plain_subclass:
        return [
            Finding(
                name=SUBCLASS_NOT_TRANSITIVE,
                severity="error",
                message="rdfs:subClassOf without * or + finds direct subclasses only: "
                "use rdfs:subClassOf+ (or * to include the class itself)",
            )
        ]
    return []


def _string_match_on_iri(nodes: list[CompValue], triples: list[tuple[Any, Any, Any]]) -> bool:
    # A variable in subject position, or the object of rdf:type / rdfs:subClassOf, holds
    # an IRI: matching a name inside its string form is a slow, brittle stand-in for
    # naming the IRI. Testing its namespace (STRSTARTS with "...#" or "/") is legitimate.
    iri_vars = {s for s, _, _ in triples if isinstance(s, Variable)}
    iri_vars |= {
        o
        for _, p, o in triples
        if isinstance(o, Variable)
        and any(i in (RDF.type, RDFS.subClassOf) for i, _ in _path_parts(p))
    }
    for node in nodes:
        if node.name not in _STRING_MATCHERS:
            continue
        regex = node.name == "Builtin_REGEX"
        subject = node.get("text") if regex else node.get("arg1")
        pattern = node.get("pattern") if regex else node.get("arg2")
        if not isinstance(pattern, RDFLiteral):
            continue  # a computed pattern, e.g. STR(bldg:), is a namespace test
        text = str(pattern)
        inner = text[1:-1] if regex and text.startswith("^") and text.endswith("$") else ""
        if inner and not _REGEX_META.search(inner):
            return True  # an anchored pattern with no metacharacters is an equality
        on_iri = (
            isinstance(subject, CompValue)
            and subject.name == "Builtin_STR"
            and subject.get("arg") in iri_vars
        )
        if on_iri and not text.lstrip("^").endswith(("#", "/")):
            return True
    return False


def _duplicate_findings(outcome: QueryOutcome | None) -> list[Finding]:
    if outcome is None or outcome.status != "ok":
        return []
    if len(set(outcome.rows)) < len(outcome.rows):
        return [
            Finding(
                name=DUPLICATE_ROWS,
                severity="info",
                message="the result repeats rows: SELECT DISTINCT gives the set once",
            )
        ]
    return []


def check_antipatterns(
    query: str,
    *,
    tags: set[str] | frozenset[str] = frozenset(),
    outcome: QueryOutcome | None = None,
) -> list[Finding]:
    """All anti-patterns in `query`, in a stable order.

    Args:
        query: the SPARQL text.
        tags: the task's tags; "transitive" enables the class-hierarchy checks.
        outcome: the execution result, when there is one; the result-size and duplicate
            checks need it.

    Example:
        >>> [f.name for f in check_antipatterns("SELECT ?x WHERE { ?x a brick:Sensor }")]
        ['missing_prefix']
    """
    return (
        _text_findings(query, outcome)
        + _algebra_findings(query, set(tags))
        + _duplicate_findings(outcome)
    )
