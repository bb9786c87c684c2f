"""A tenant's vectors made by another embedder, and the check that says when they are needed.

A store keeps each node's vector under the name of the model that made it, and the dense
channel reads only the vectors of the embedder it searches with: a store written with the
static default and opened with ``embedder="minilm"`` (or the reverse) has a dense channel
that sees none of the rows written before. :func:`embedder_gap` says so in a sentence (the
retriever warns with it, once per tenant); :func:`reembed` gives every turn and item of a
tenant its vector of the new model, embedding what the write paths embed (a turn with the
end of the turn before it, ``contextual_texts``; a strategy with the bank's
``embedding_text``; any other item its text), so the tenant then searches as though it had
been written with that embedder. Vectors of other models are left in place: opening the
store with the old embedder again still works.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel

from memstrata.errors import MemstrataWarning

from .bank import embedding_text
from .embed import DeferredEmbedder, short_name
from .models import StrategyItem

if TYPE_CHECKING:
    from .embed import Embedder
    from .store.protocol import MemoryStore

REEMBED_BATCH = 256
"""Rows embedded and written per transaction: an interrupted run keeps what it wrote."""


class EmbedderMismatchWarning(MemstrataWarning):
    """Another model has vectors for more of a tenant's rows than the one searching them:
    the dense channel sees only the rows that model embedded."""


class ReembedReport(BaseModel):
    """What :func:`reembed` did for one tenant."""

    user_id: str
    model: str
    turns: int
    """Turns given a vector of ``model`` now."""
    items: int
    """Items (facts, strategies, ...) given one now."""
    already: int
    """Rows that had one (a run that stopped part-way is finished by the next)."""


def embedder_gap(store: MemoryStore, user_id: str, embedder: Embedder) -> str | None:
    """One sentence naming the gap when another model has vectors for more of the
    tenant's rows than ``embedder`` has, and how to close it; None when there is none."""
    models = store.vector_models(user_id)
    mine = models.get(embedder.name, 0)
    others = {m: n for m, n in models.items() if m != embedder.name}
    if not others or max(others.values()) <= mine:
        return None
    model, count = next(iter(others.items()))  # most vectors first
    rows = f"{count:,} row has" if count == 1 else f"{count:,} rows have"
    return (f"tenant {user_id!r}: {rows} vectors of {model} and {mine:,} of "
            f"{embedder.name}, the embedder searching them, so its dense channel sees only "
            f"those {mine:,}; open the store with embedder={short_name(model)!r}, or give "
            f"the rows vectors of {embedder.name} with Memory.reembed(user_id={user_id!r}) "
            f"(CLI: memstrata reembed --user {user_id} --embedder "
            f"{short_name(embedder.name)})")


def stored_embedder(store: MemoryStore) -> DeferredEmbedder | None:
    """The embedder that made most of the store's vectors, when that is one memstrata names
    (``minilm``, ``mpnet``) rather than the shipped static model, loaded on first use (a
    store opened to count rows never loads it; without its extra, that first use raises
    ``MissingExtraError`` saying so). None when the static model made most of them, the
    store has none, or they are a model :func:`~memstrata.memory.embed.embedder_by_name`
    cannot load from its name alone (a model2vec folder's: the first search then says
    which model to open with).
    """
    models = store.vector_models(None)
    if not models:
        return None
    name = short_name(next(iter(models)))  # most vectors first
    return DeferredEmbedder(name) if name in ("minilm", "mpnet") else None


def reembed(store: MemoryStore, user_id: str, embedder: Embedder, *,
            progress: Callable[[int], object] | None = None) -> ReembedReport:
    """Give each of the tenant's turns and items that has no vector of ``embedder``'s model
    one (see the module), :data:`REEMBED_BATCH` rows per transaction; ``progress`` is
    called with the rows looked at after each batch. No LLM call.

    Rows written while it runs are embedded by the store's own embedder; run it again to
    catch any that embedder is not ``embedder``.
    """
    have = set(store.vectors(user_id, embedder.name)[0])
    counts = store.counts(user_id)
    done = {"turns": 0, "items": 0}
    for offset in range(0, counts["turns"], REEMBED_BATCH):
        turns = [t for t in store.turns(user_id, limit=REEMBED_BATCH, offset=offset)
                 if t.id not in have]
        if turns:
            store.set_embeddings(user_id, [t.id for t in turns],
                                 embedder.encode(store.contextual_texts(turns)), embedder.name)
            done["turns"] += len(turns)
        if progress is not None:
            progress(min(REEMBED_BATCH, counts["turns"] - offset))
    for offset in range(0, counts["items"], REEMBED_BATCH):
        items = [i for i in store.items(user_id, limit=REEMBED_BATCH, offset=offset)
                 if i.id not in have]
        if items:
            store.set_embeddings(user_id, [i.id for i in items], embedder.encode(
                [embedding_text(i) if isinstance(i, StrategyItem) else i.text
                 for i in items]), embedder.name)
            done["items"] += len(items)
        if progress is not None:
            progress(min(REEMBED_BATCH, counts["items"] - offset))
    return ReembedReport(user_id=user_id, model=embedder.name, turns=done["turns"],
                         items=done["items"], already=len(have))


__all__ = ["REEMBED_BATCH", "EmbedderMismatchWarning", "ReembedReport", "embedder_gap",
           "reembed"]
