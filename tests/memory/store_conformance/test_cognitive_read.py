"""Reading documents into cognitive memory links their facts alike on every backend."""

from __future__ import annotations

from typing import Any

from memstrata.memory.cognitive import CognitiveMemory
from memstrata.memory.cognitive.base import CONTRADICTS, SIMILAR_TO


def test_two_documents_that_disagree_link_their_facts(backend: Any) -> None:
    mind = CognitiveMemory(backend, "u")
    first = mind.read("The stadium holds 40,000 fans. The club captain is Ola Berg.",
                      title="2023 guide")
    mind.read("The river walk is three kilometres long.", title="walks")
    second = mind.read("The stadium holds 52,000 fans. The club captain is Siri Dahl.",
                       title="2024 guide")
    texts = {i: backend.get("u", i).text for i in first.facts + second.facts}
    links = sorted((e.relation, texts[e.src], texts[e.dst])
                   for i in second.facts for e in backend.edges("u", src=i)
                   if e.relation in (SIMILAR_TO, CONTRADICTS))
    assert links == [
        (CONTRADICTS, "The club captain is Siri Dahl.", "The club captain is Ola Berg."),
        (CONTRADICTS, "The stadium holds 52,000 fans.", "The stadium holds 40,000 fans."),
        (SIMILAR_TO, "The club captain is Siri Dahl.", "The club captain is Ola Berg."),
        (SIMILAR_TO, "The stadium holds 52,000 fans.", "The stadium holds 40,000 fans."),
    ]
