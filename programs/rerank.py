"""``Reranker``: an LLM reorders a retriever's top passages for a question (optional stage).

The LLM-free hybrid stays memstrata's default retrieval; this stage is a separate system
(``memstrata+rerank`` in ``bench retrieval --rerank-lm``), so its gain is always shown
beside its cost. One listwise call per query: the model sees the top ``depth`` passages,
numbered, and names the useful ones, most useful first; those move to the front in that
order and the rest keep the retriever's order behind them. A number out of range or
repeated is ignored; a reply that names nothing leaves the retriever's order as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import dspy
from pydantic import Field

from memstrata.memory import Hit, Retriever

from .lm import ModelHandle
from .structured import StructuredPredict

MAX_PASSAGE_CHARS = 240
MAX_PICKS = 10


class RankPassages(dspy.Signature):
    """Which numbered passages help answer the question? List their numbers, the most
    useful first; leave out passages that do not help."""

    question: str = dspy.InputField()
    passages: str = dspy.InputField()
    useful: Annotated[list[int], Field(max_length=MAX_PICKS)] = dspy.OutputField()


class Reranker(dspy.Module):
    """Reorders hits by one listwise LLM call (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.rank = StructuredPredict(RankPassages, "rerank", max_tokens=64)

    def forward(self, question: str, hits: Sequence[Hit]) -> dspy.Prediction:
        """``hits`` reordered (``prediction.hits``) and the numbers the model chose."""
        lines = "\n".join(f"[{n}] {(h.speaker + ': ') if h.speaker else ''}"
                          f"{' '.join(h.text.split())[:MAX_PASSAGE_CHARS]}"
                          for n, h in enumerate(hits, 1))
        picked = [int(n) for n in self.rank(question=question, passages=lines).useful]
        return dspy.Prediction(hits=reorder(hits, picked), picked=picked)


def reorder(hits: Sequence[Hit], picked: Sequence[int]) -> list[Hit]:
    """The hits named by ``picked`` (1-based) first in that order, then the others."""
    chosen: list[int] = []
    for n in picked:
        if 1 <= n <= len(hits) and n - 1 not in chosen:
            chosen.append(n - 1)
    rest = [i for i in range(len(hits)) if i not in chosen]
    return [hits[i] for i in chosen + rest]


class RerankingRetriever:
    """A retriever whose top ``depth`` hits are reordered by :class:`Reranker` on ``handle``.

    ``search`` has the retriever's signature; every call costs one LLM call on the
    handle's LM, counted by its meter, and its reply is kept in ``replies`` (the query
    and the numbers picked). Hits below ``depth`` keep their order.
    """

    def __init__(self, retriever: Retriever, handle: ModelHandle, depth: int = 20) -> None:
        if depth < 2:
            raise ValueError(f"rerank depth must be 2 or more, not {depth}")
        self.retriever = retriever
        self.handle = handle
        self.depth = depth
        self.program = Reranker()
        self.replies: list[dict[str, object]] = []

    def search(self, user_id: str, query: str, k: int = 10, **kwargs: Any) -> list[Hit]:
        """The retriever's hits for ``query``, its top ``depth`` reordered by the LLM."""
        hits = self.retriever.search(user_id, query, k=max(k, self.depth), **kwargs)
        if len(hits) < 2:
            return hits[:k]
        with dspy.context(lm=self.handle.lm):
            found = self.program(question=query, hits=hits[: self.depth])
        self.replies.append({"query": query, "picked": found.picked})
        return (found.hits + hits[self.depth:])[:k]
