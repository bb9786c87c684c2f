"""The ontology suite's extra, checked before any module of the suite imports it.

``pip install 'memstrata[ontology]'`` brings pyoxigraph (parses Brick and runs SPARQL),
rdflib (parses candidate queries for the anti-pattern checks) and brickschema (whose wheel
carries Brick.ttl; never imported). Importing the suite without them raises
``MissingExtraError`` naming the extra, instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

from memstrata.memory.extras import locate, require

WHAT = "the ontology suite"

require("pyoxigraph", "ontology", WHAT)
require("rdflib", "ontology", WHAT)
locate("brickschema", "ontology", WHAT)
