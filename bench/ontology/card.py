"""The L0 "sense card": a short, deterministic orientation to the ontology for a prompt.

Layer 0 of the memory layer cake is what an agent knows before it remembers anything:
here, which namespaces exist, where the class hierarchy starts, which relationships and
class annotations carry the facts, and how to reach instances and values. Everything
counted is computed from the loaded graph, so a new Brick release changes the card by
itself. The card is assembled from atomic items in priority order and an item that does
not fit is left out whole, so the card never exceeds its budget and never ends mid-IRI.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from memstrata.bench.ontology.graph import (
    compact,
    load_ontology,
    ontology_version,
    prefixes,
    select,
)

WELL_KNOWN = ("rdf", "rdfs", "owl", "skos", "xsd")  # named, not spelled out: LLMs know them
# Namespaces left off the card: SHACL shape machinery (validation, not answers) and Brick's
# tag vocabulary (a parallel, coarser classification that the tasks never need).
SKIPPED = ("sh", "bsh", "tag")
_Q = (
    "PREFIX brick: <https://brickschema.org/schema/Brick#> "
    "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#> "
    "PREFIX owl: <http://www.w3.org/2002/07/owl#> "
)


def _rows(query: str) -> list[list[str]]:
    return [[str(cell.value) for cell in row] for row in select(_Q + query)]


@lru_cache(maxsize=1)
def _namespace_rank() -> list[str]:
    """Prefixes ranked by how many distinct IRIs of the graph they name (ties by name)."""
    namespaces = sorted(prefixes().items(), key=lambda kv: -len(kv[1]))
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    for quad in load_ontology():
        for term in (quad.subject, quad.predicate, quad.object):
            value = getattr(term, "value", "")
            if not isinstance(value, str) or not value.startswith("http") or value in seen:
                continue
            seen.add(value)
            for name, ns in namespaces:
                if value.startswith(ns):
                    counts[name] += 1
                    break
    return sorted(counts, key=lambda name: (-counts[name], name))


@lru_cache(maxsize=1)
def _items() -> tuple[tuple[int, str, str], ...]:
    """(priority, section, text) items in display order; lower priority number first in."""
    items: list[tuple[int, str, str]] = [
        (
            0,
            "head",
            f"{ontology_version()} + building instances, one default graph, "
            f"{len(load_ontology())} triples. Declare every PREFIX.",
        )
    ]
    ns = prefixes()
    ranked = [p for p in _namespace_rank() if p not in WELL_KNOWN + SKIPPED]
    for i, name in enumerate(ranked[:6]):
        items.append((1 if i < 4 else 4, "ns", f"{name}: <{ns[name]}>"))
    items.append((4, "ns", "+ " + " ".join(p for p in WELL_KNOWN if p in ns)))
    roots = _rows(
        "SELECT ?r (COUNT(DISTINCT ?c) AS ?n) WHERE { ?r rdfs:subClassOf brick:Class . "
        "?c rdfs:subClassOf+ ?r } GROUP BY ?r ORDER BY DESC(?n) ?r"
    )
    items += [(1, "roots", f"{compact(root)}({n})") for root, n in roots]
    # Relationships ranked by use between individuals (not classes, not to tags): the ones
    # a building model is made of come first.
    relations = _rows(
        "SELECT ?r ?i (COUNT(?s) AS ?n) WHERE { ?r a brick:Relationship ; owl:inverseOf ?i . "
        "OPTIONAL { ?s ?r ?o FILTER NOT EXISTS { ?s a owl:Class } "
        "FILTER NOT EXISTS { ?o a brick:Tag } } "
        "FILTER(STR(?r) < STR(?i)) } GROUP BY ?r ?i ORDER BY DESC(?n) ?r"
    )
    for i, (rel, inv, _) in enumerate(relations[:6]):
        items.append((2 if i < 4 else 4, "rels", f"{compact(rel)}/{compact(inv).split(':', 1)[1]}"))
    annotations = _rows(
        "SELECT ?p (COUNT(*) AS ?n) WHERE { ?c a owl:Class ; ?p ?o . "
        "FILTER(?p IN (rdfs:label, <http://www.w3.org/2004/02/skos/core#definition>, "
        "brick:hasQuantity, brick:hasSubstance, owl:deprecated, brick:isReplacedBy, "
        "brick:aliasOf)) } GROUP BY ?p ORDER BY DESC(?n) ?p"
    )
    items += [(3, "class", compact(pred)) for pred, _ in annotations]
    items += [
        (2, "how", "instances: ?x rdf:type/rdfs:subClassOf* brick:Sensor"),
        (2, "how", "readings: ?pt brick:lastKnownValue/brick:value ?v ; brick:hasUnit ?u"),
        (3, "how", "locations use rec: classes (brick:Room etc. are deprecated)"),
    ]
    return tuple(items)


_LABELS = {
    "head": "",
    "ns": "Namespaces: ",
    "roots": "Roots (subclasses): ",
    "rels": "Relations: ",
    "class": "Class facts: ",
    "how": "Patterns: ",
}
_JOIN = {"ns": " ", "roots": " ", "rels": " ", "class": " ", "how": "; ", "head": " "}


def _render(chosen: list[tuple[str, str]]) -> str:
    sections: dict[str, list[str]] = {}
    for section, text in chosen:
        sections.setdefault(section, []).append(text)
    return "\n".join(_LABELS[s] + _JOIN[s].join(texts) for s, texts in sections.items())


def sense_card(max_chars: int = 600) -> str:
    """The L0 card, at most `max_chars` characters, identical on every call.

    Items are added in priority order while the rendered card still fits; one that does
    not fit is skipped whole (a later, shorter one may still fit). The header always
    comes first: below its length the card is the header cut at a word boundary.

    Example:
        >>> len(sense_card(300)) <= 300
        True
    """
    items = _items()
    header = items[0][2]
    if len(header) > max_chars:
        cut = header[: max(max_chars, 0)]
        return cut.rsplit(" ", 1)[0] if " " in cut else cut
    chosen = {0}
    for index in sorted(range(1, len(items)), key=lambda i: (items[i][0], i)):
        trial = chosen | {index}
        if len(_render([items[i][1:] for i in sorted(trial)])) <= max_chars:
            chosen = trial
    return _render([items[i][1:] for i in sorted(chosen)])
