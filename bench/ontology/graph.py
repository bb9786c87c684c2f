"""The Brick ontology graph: loading, prefixes, canonical terms and guarded SPARQL execution.

The graph is Brick 1.5 as the PyPI package `brickschema` ships it (its wheel carries the
Turtle files), plus the small instance model in `data/building.ttl`, both in one default
graph so a query can join instances to the class hierarchy. It is parsed with pyoxigraph,
not rdflib: measured here on 2 cores, pyoxigraph parses Brick.ttl (62k triples) in about
0.2 s and answers a `rdfs:subClassOf*` query in about 1 ms, where rdflib takes about 1.3 s
and 180 ms. We never import `brickschema` itself (its import pulls in reasoners and SHACL
engines); we only locate its data folder.

Candidate queries come from an LLM, so `execute` never raises for a bad query: parse and
runtime errors, timeouts and oversized results come back as a status. A runaway query
(a cartesian product over 60k triples runs for minutes) cannot be interrupted inside
pyoxigraph, so with `isolate=True` it runs in a forked child that is killed at the
deadline; the child inherits the parsed store, so forking costs milliseconds, not a parse.
(Measured: ~15 ms a query.) The child only runs pyoxigraph and pipes plain tuples back,
so forking from a threaded runner is safe as long as no other thread's lock is needed
in the child; use `isolate=False` for trusted queries.
"""

from __future__ import annotations

import importlib.metadata
import math
import multiprocessing
import re
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import pyoxigraph as ox
from pydantic import BaseModel, Field

from memstrata.memory.extras import locate

BRICK_VERSION = "1.5"  # the ontology folder inside brickschema; also brickschema's default
BUILDING_NS = "http://example.org/building#"
DATA_DIR = Path(__file__).parent / "data"
BUILDING_TTL = DATA_DIR / "building.ttl"

#: A canonical RDF term: a compact IRI (`brick:Sensor`), `<iri>` when no prefix fits, a
#: quoted lexical form for a plain literal (`"Floor 1"`), a float for a numeric literal.
Key = str | float

_XSD = "http://www.w3.org/2001/XMLSchema#"
_NUMERIC = {
    _XSD + t
    for t in (
        "integer",
        "decimal",
        "double",
        "float",
        "int",
        "long",
        "short",
        "byte",
        "nonNegativeInteger",
        "positiveInteger",
        "negativeInteger",
        "nonPositiveInteger",
        "unsignedInt",
        "unsignedLong",
        "unsignedShort",
        "unsignedByte",
    )
}
_PREFIX_LINE = re.compile(r"^@prefix\s+([A-Za-z][\w.-]*)?:\s*<([^>]*)>\s*\.", re.MULTILINE)


def brick_ttl_path() -> Path:
    """Path of the Brick.ttl that the installed `brickschema` wheel carries.

    Raises:
        MissingExtraError: `brickschema` is not installed (the `ontology` extra).
        FileNotFoundError: it lacks the version.
    """
    spec = locate("brickschema", "ontology", "the ontology suite")  # without importing it
    if not spec.submodule_search_locations:
        raise FileNotFoundError(f"brickschema is not a package: {spec.origin}")
    path = Path(next(iter(spec.submodule_search_locations))) / "ontologies"
    path = path / BRICK_VERSION / "Brick.ttl"
    if not path.is_file():
        raise FileNotFoundError(f"brickschema has no Brick {BRICK_VERSION}: {path}")
    return path


@lru_cache(maxsize=1)
def load_ontology() -> ox.Store:
    """Parse Brick plus the building model once per process and return the store.

    The store is shared: treat it as read-only.
    """
    store = ox.Store()
    store.bulk_load(path=str(brick_ttl_path()), format=ox.RdfFormat.TURTLE)
    store.bulk_load(path=str(BUILDING_TTL), format=ox.RdfFormat.TURTLE)
    return store


@lru_cache(maxsize=1)
def select(query: str) -> ox.QuerySolutions:
    """The solutions of a SELECT ``query`` over the ontology.

    Raises:
        TypeError: ``query`` is not a SELECT query.
    """
    result = load_ontology().query(query)
    if not isinstance(result, ox.QuerySolutions):
        raise TypeError(f"not a SELECT query: {query[:80]!r}")
    return result


def ontology_version() -> str:
    """The loaded ontology's identity, e.g. `Brick 1.5.0 (brickschema 0.8.0)`.

    Stored beside the expected answers, so a changed ontology explains a failing gold test.
    """
    result = execute(
        "SELECT ?v WHERE { ?o a <http://www.w3.org/2002/07/owl#Ontology> ; "
        "<http://www.w3.org/2002/07/owl#versionInfo> ?v . "
        f'FILTER(STRSTARTS(STR(?o), "https://brickschema.org/schema/{BRICK_VERSION}")) }}',
        isolate=False,
    )
    brick = str(result.rows[0][0]).strip('"') if result.rows else "unknown"
    try:
        package = importlib.metadata.version("brickschema")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - found it above
        package = "unknown"
    return f"Brick {brick} (brickschema {package})"


@lru_cache(maxsize=1)
def prefixes() -> dict[str, str]:
    """Prefix -> namespace, read from the @prefix lines of Brick.ttl and building.ttl.

    Taken from the files rather than hard-coded so the names match what the ontology
    itself uses (Brick 1.5 calls quantity kinds `qudtqk:`).
    """
    found: dict[str, str] = {}
    for path in (brick_ttl_path(), BUILDING_TTL):
        with path.open(encoding="utf-8") as fh:
            head = fh.read(8192)  # prefixes sit at the top of a Turtle file
        for name, iri in _PREFIX_LINE.findall(head):
            found.setdefault(name, iri)
    return dict(sorted(found.items()))


@lru_cache(maxsize=1)
def _namespaces_longest_first() -> list[tuple[str, str]]:
    return sorted(((ns, p) for p, ns in prefixes().items()), key=lambda x: -len(x[0]))


def compact(iri: str) -> str:
    """`https://brickschema.org/schema/Brick#Sensor` -> `brick:Sensor`; else `<iri>`."""
    for ns, name in _namespaces_longest_first():
        if iri.startswith(ns):
            local = iri[len(ns) :]
            if local and "/" not in local and "#" not in local:
                return f"{name}:{local}"
    return f"<{iri}>"


def expand(curie: str) -> str:
    """Inverse of `compact`: `brick:Sensor` -> the full IRI (a `<iri>` loses its brackets)."""
    if curie.startswith("<") and curie.endswith(">"):
        return curie[1:-1]
    name, _, local = curie.partition(":")
    return prefixes()[name] + local


def normalise_number(value: float) -> float:
    """Round away float noise so 0.1+0.2 and 0.3 compare equal as set members."""
    return float(f"{value:.12g}")


def term_key(term: Any) -> Key | None:
    """Canonical, comparable form of a pyoxigraph term (None for an unbound variable).

    Numbers compare numerically whatever their datatype ("5"^^xsd:integer == 5.0);
    language tags and xsd:string are dropped, since the tasks never hinge on them.
    """
    if term is None:
        return None
    if isinstance(term, ox.NamedNode):
        return compact(term.value)
    if isinstance(term, ox.Literal):
        if term.datatype.value in _NUMERIC:
            try:
                number = float(term.value)
            except ValueError:
                return f'"{term.value}"'
            if math.isfinite(number):
                return normalise_number(number)
        return f'"{term.value}"'
    if isinstance(term, ox.BlankNode):
        return f"_:{term.value}"
    return str(term)


Status = Literal["ok", "parse_error", "runtime_error", "timeout", "not_select"]


class QueryOutcome(BaseModel):
    """What running one query gave: rows of canonical terms, or why there are none."""

    status: Status
    variables: list[str] = Field(default_factory=list)
    rows: list[tuple[Key | None, ...]] = Field(default_factory=list)
    truncated: bool = False  # more than max_rows rows existed; only max_rows are kept
    error: str | None = None
    elapsed_s: float = 0.0


def _failed(status: Status, error: str, start: float) -> QueryOutcome:
    return QueryOutcome(status=status, error=error, elapsed_s=time.perf_counter() - start)


def _run(query: str, max_rows: int) -> QueryOutcome:
    """Execute in this process; every failure becomes a status."""
    start = time.perf_counter()
    try:
        result = load_ontology().query(query)
        if not isinstance(result, ox.QuerySolutions):
            return _failed("not_select", "only SELECT queries are scored", start)
        variables = [v.value for v in result.variables]
        rows: list[tuple[Key | None, ...]] = []
        truncated = False
        for solution in result:
            if len(rows) >= max_rows:
                truncated = True
                break
            rows.append(tuple(term_key(solution[v]) for v in variables))
    except SyntaxError as exc:
        return _failed("parse_error", str(exc), start)
    except Exception as exc:  # pyoxigraph reports evaluation failures as OSError & co.
        return _failed("runtime_error", f"{type(exc).__name__}: {exc}", start)
    return QueryOutcome(
        status="ok",
        variables=variables,
        rows=rows,
        truncated=truncated,
        elapsed_s=time.perf_counter() - start,
    )


def _child(conn: Any, query: str, max_rows: int) -> None:
    conn.send(_run(query, max_rows).model_dump())
    conn.close()


def _run_forked(query: str, timeout_s: float, max_rows: int) -> QueryOutcome:
    load_ontology()  # parse before forking, so the child inherits it
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    start = time.perf_counter()
    proc = ctx.Process(target=_child, args=(sender, query, max_rows), daemon=True)
    proc.start()
    sender.close()
    try:
        if receiver.poll(timeout_s):
            try:
                return QueryOutcome.model_validate(receiver.recv())
            except EOFError:
                return _failed("runtime_error", "query process died", start)
        return _failed("timeout", f"no result within {timeout_s:g} s", start)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        receiver.close()


def _run_threaded(query: str, timeout_s: float, max_rows: int) -> QueryOutcome:
    # Fallback where fork is missing: pyoxigraph releases the GIL, so the wait is honoured,
    # but a timed-out query keeps running in its daemon thread until it finishes.
    box: list[QueryOutcome] = []
    start = time.perf_counter()
    worker = threading.Thread(target=lambda: box.append(_run(query, max_rows)), daemon=True)
    worker.start()
    worker.join(timeout_s)
    if box:
        return box[0]
    return _failed("timeout", f"no result within {timeout_s:g} s (still running)", start)


def execute(
    query: str, *, timeout_s: float = 10.0, max_rows: int = 10_000, isolate: bool = True
) -> QueryOutcome:
    """Run a SELECT query over the ontology; never raises for a bad query.

    Args:
        query: SPARQL text. No prefixes are pre-declared: a query must declare its own.
        timeout_s: wall-clock limit (only enforced when `isolate` is true).
        max_rows: keep at most this many rows; `truncated` says more existed.
        isolate: run in a forked child killed at the deadline (a thread where fork is
            missing). False runs in-process with no time limit: for trusted gold queries.

    Example:
        >>> execute("SELECT (1 AS ?x) {}", isolate=False).rows
        [(1.0,)]
    """
    if not isolate:
        return _run(query, max_rows)
    if "fork" in multiprocessing.get_all_start_methods():
        return _run_forked(query, timeout_s, max_rows)
    return _run_threaded(query, timeout_s, max_rows)  # pragma: no cover - non-POSIX
