"""The L3 artefact of the query suite: an ontology guide, materialised once per ontology.

Seed 002's E4 materialises a guide (expensive to make, cheap to reuse) and injects only a
packed summary of it. This guide is computed, not written by a model, so it is the same
on every run and costs no LLM call: the sense card at full length, every prefix as a
PREFIX line, the direct subclasses of each root class, the relationships with their
inverses, and the building model's instances with their classes and labels. The L3
packer stores it whole and injects a head-and-tail summary within its budget; the agent
reads the rest with the ``ctx_*`` tools.
"""

from __future__ import annotations

from functools import lru_cache

from memstrata.bench.ontology.card import sense_card
from memstrata.bench.ontology.graph import compact, prefixes, select

_ROOTS = ("Equipment", "Point", "Location")
_PREFIX = ("PREFIX brick: <https://brickschema.org/schema/Brick#> "
           "PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#> "
           "PREFIX owl: <http://www.w3.org/2002/07/owl#> ")


def _column(query: str) -> list[list[str]]:
    return [[compact(str(cell.value)) if cell is not None else "" for cell in row]
            for row in select(_PREFIX + query)]


@lru_cache(maxsize=1)
def ontology_guide() -> str:
    """The whole guide as text (a few thousand characters), identical on every call."""
    lines = [sense_card(max_chars=4000), "", "Prefixes:"]
    lines += [f"PREFIX {name}: <{iri}>" for name, iri in sorted(prefixes().items())]
    for root in _ROOTS:
        children = _column(f"SELECT ?c WHERE {{ ?c rdfs:subClassOf brick:{root} . "
                           "FILTER NOT EXISTS { ?c owl:deprecated true } } ORDER BY ?c")
        lines += ["", f"Direct subclasses of brick:{root} ({len(children)}):",
                  " ".join(c[0] for c in children)]
    inverses = _column("SELECT ?r ?i WHERE { ?r a brick:Relationship . "
                       "OPTIONAL { ?r owl:inverseOf ?i } } ORDER BY ?r")
    lines += ["", "Relationships (inverse):",
              " ".join(f"{r}({i})" if i else r for r, i in inverses)]
    bldg = prefixes().get("bldg", "http://example.org/building#")
    instances = select(
        _PREFIX + "SELECT ?x ?c ?l WHERE { ?x a ?c . OPTIONAL { ?x rdfs:label ?l } "
        f'FILTER(STRSTARTS(STR(?x), "{bldg}")) }} ORDER BY ?x ?c')
    lines += ["", "Building instances (IRI class label):"]
    lines += [" ".join(filter(None, (compact(str(row[0].value)), compact(str(row[1].value)),
                                     f'"{row[2].value}"' if row[2] is not None else "")))
              for row in instances]
    return "\n".join(lines)
