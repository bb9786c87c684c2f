"""One tenant's memory as one context block, every layer within its share of a budget.

What ``Memory.context`` returns: the block an application injects into its own program
(seed 002's "Mode 1: auto-inject"), LLM-free; and the block ``Memory.answer``'s personal
answerer shows its model (``programs.answer``: the conversation layer is then its own
routed, verified hits). Its layers, in the order they are shown:

- ``conversation``: what was said. The question is routed as the personal answerer
  routes it (``memory.route``: the people it names and their conversations), then the
  tenant's turns and the items extracted from them (facts, QA pairs, personas) are
  searched, and the conversation-less ones kept beside the routed ones;
- ``semantic``: what was read (``Memory.read``): semantic facts and episodes, found by
  cognitive recall (a fact another report contradicts comes with that report, each
  line naming the other's id); with ``ContextSettings.documents_k``, the best documents
  read, whole, ranked among them by score;
- ``procedures``: procedures read, with their steps (recalling one counts a use, as
  cognitive recall does everywhere);
- ``strategies``: strategies and guardrails the tenant learned (``Memory.learn``), ranked
  as the layer cake's L2 ranks them (relevance x smoothed win rate, top successes and
  top failures);
- ``voe``: the violation-of-expectation loop's pending expectation and the facts it
  distilled from surprises, matched by the expectation's needed-info keywords and the
  query (``memory.voe_facts``);
- ``intentions``: intentions that fired and are not resolved yet.

Every line is packed by the line packer (``packers.lines.pack``: skip-not-cut, the
budget counted by the caller's token counter) and opens with its provenance head,
``[id · speaker or source · date]``, where ``id`` is the store id of a turn or item
(``Memory.get`` reads it). A layer with nothing to show takes no budget; the budget of
each layer that has lines is its share of what the headers leave, and what a layer does
not use goes to the layers before it, then after it, in order. The whole block, headers
included, is at most ``budget`` tokens by the counter given, whatever the tokenizer
does across lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from memstrata.memory.bank import strategy_score
from memstrata.memory.cognitive import CognitiveMemory
from memstrata.memory.cognitive.base import ATTENDED_TO
from memstrata.memory.cognitive.recall import Recalled, recall
from memstrata.memory.dates import DEFAULT_DATE_STYLE, DateStyle
from memstrata.memory.models import ProspectiveItem, SensoryItem, StrategyItem, WorkingItem
from memstrata.memory.retrieval import DEFAULT_MIN_SCORE, Retriever
from memstrata.memory.route import Route, Router
from memstrata.memory.store import Filters
from memstrata.memory.store.protocol import MemoryStore
from memstrata.memory.text import STOP_WORDS
from memstrata.memory.voe_facts import PREDICTION_SOURCE, VoEFacts

from .context import STRATEGY_POOL
from .fit import flatten
from .lines import MemoryLine, PackedContext, TokenCounter, pack

Layer = Literal["conversation", "semantic", "procedures", "strategies", "voe", "intentions"]
LAYERS: tuple[str, ...] = ("conversation", "semantic", "procedures", "strategies", "voe",
                           "intentions")
HEADERS: dict[str, str] = {
    "conversation": "## What was said",
    "semantic": "## What was read",
    "procedures": "## Procedures",
    "strategies": "## Strategies from past runs",
    "voe": "## What to expect of the user",
    "intentions": "## Reminders",
}
SHARES: dict[str, float] = {"conversation": 0.45, "semantic": 0.2, "procedures": 0.1,
                            "strategies": 0.12, "voe": 0.08, "intentions": 0.05}
"""Each layer's share of the budget (renormalised over the layers that have lines)."""
READ_KINDS: tuple[str, ...] = ("semantic", "episodic", "consolidated")
_WORD = re.compile(r"\w+")


class ContextSettings(BaseModel):
    """How deep each layer searches, and the shares of the budget."""

    conversation_k: int = Field(40, ge=0, le=500)
    min_score: float = Field(DEFAULT_MIN_SCORE, ge=0, le=1, description=(
        "What was said and what was read scoring under this (search's score, 0-1) is not "
        "shown: a query nothing in memory answers gets none of their lines, as search "
        "returns no hit."))
    recall_k: int = Field(10, ge=0, le=50)
    documents_k: int = Field(0, ge=0, le=10, description=(
        "Documents read (``Memory.read``'s text as it was given) shown in the read layer "
        "among their facts, by score, where one fits the layer's budget whole; 0: the "
        "facts alone."))
    k_success: int = Field(3, ge=0, le=20)
    k_failure: int = Field(3, ge=0, le=20)
    voe_k: int = Field(10, ge=0, le=100)
    voe_min_score: float = Field(50.0, ge=0, le=100)
    shares: dict[str, float] = Field(default_factory=lambda: dict(SHARES))


class LayerUse(BaseModel):
    """What one layer put in the block."""

    ids: list[str] = Field(default_factory=list, description="packed, in order")
    tokens: int = 0
    chars: int = Field(0, description="characters of its lines in the block")
    budget: int = 0
    candidates: int = Field(0, description="lines it had to choose from")
    dropped: int = Field(0, description="lines left out for the budget")


class MemoryContext(BaseModel):
    """A packed context block and what is in it.

    ``text`` is the block; ``ids`` every store id it holds, in order (each resolves with
    ``Memory.get``); ``layers`` what each layer packed, by name; ``sources`` the layer of
    each id; ``tokens`` the block's size by the counter it was packed with.
    """

    query: str
    user_id: str
    text: str = ""
    ids: list[str] = Field(default_factory=list)
    tokens: int = 0
    budget: int
    layers: dict[str, LayerUse] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict, description="id -> layer")
    route: Route | None = None


def rough_tokens(text: str) -> int:
    """About four characters a token: the counter used when no model is at hand."""
    return len(text) // 4 + 1 if text else 0


# -- candidates, per layer --------------------------------------------------------------


def conversation_lines(store: MemoryStore, retriever: Retriever, router: Router, user_id: str,
                       query: str, *, k: int, conversation_id: str | None = None,
                       now: datetime | None = None, min_score: float = DEFAULT_MIN_SCORE
                       ) -> tuple[list[MemoryLine], Route]:
    """The routed turns and conversation items for ``query`` scoring at least
    ``min_score``, best first, and the route.

    Routing is the personal answerer's (``Router.route``); a person's conversations
    keep their hits and the items that belong to no conversation."""
    route = router.route(user_id, query, conversation_id=conversation_id, now=now)
    hits = retriever.search(user_id, query, k=k, nodes=("turn", "item"),
                            filters=Filters.said(), now=now, min_score=min_score)
    return [MemoryLine(id=h.id, text=h.text, speaker=h.speaker, when=h.event_time)
            for h in hits if route.keeps(h.conversation_id)], route


def _recalled_line(r: Recalled) -> MemoryLine:
    text = r.text
    if r.steps:
        text = f"{r.title or text}: " + " ".join(f"{n}. {s}" for n, s in enumerate(r.steps, 1))
    for c in r.conflicts:
        text += f" (disagrees with {c.other_id}; this report is {'newer' if c.newer else 'older'})"
    return MemoryLine(id=r.id, text=text, speaker=r.source or r.document or None,
                      when=r.event_time)


def read_lines(mind: CognitiveMemory, query: str, *, k: int,
               min_score: float = DEFAULT_MIN_SCORE, documents: int = 0,
               retriever: Retriever | None = None
               ) -> tuple[list[MemoryLine], list[MemoryLine]]:
    """Semantic facts and episodes, then procedures, recalled for ``query`` and scoring
    at least ``min_score``; an episode whose first sentence is a fact listed beside it is
    left out. With ``documents``, that many of the documents read (their whole text, see
    :func:`document_lines`) are ranked among the facts by score."""
    # No hops: a walk along similar_to edges costs more than the search itself on a
    # tenant of many similar facts; a contradicting report still comes with its partner.
    found = [r for r in (recall(mind, query, k=k, hops=0) if k else [])
             if r.score >= min_score]
    # An episode ("Read TITLE on DAY: its first sentence") beside that sentence's fact
    # says again what the fact's head says (the document and the day).
    said = {r.text for r in found if r.kind == "semantic"}
    found = [r for r in found if not (r.kind == "episodic" and any(
        r.text.endswith(f": {text}") for text in said))]
    ranked = [(r.score, _recalled_line(r)) for r in found if r.kind in READ_KINDS]
    if documents:
        ranked += document_lines(mind, retriever or Retriever(mind.store, mind.store.embedder),
                                 query, k=documents, min_score=min_score)
    ranked.sort(key=lambda pair: -pair[0])
    procedures = [_recalled_line(r) for r in found if r.kind == "procedural"]
    return [line for _, line in ranked], procedures


def document_lines(mind: CognitiveMemory, retriever: Retriever, query: str, *, k: int,
                   min_score: float = DEFAULT_MIN_SCORE) -> list[tuple[float, MemoryLine]]:
    """The ``k`` documents read (sensory observations attended to: ``Memory.read`` keeps
    each text whole) that best match ``query`` and score at least ``min_score``, with
    their scores; each named by its reading's source or title."""
    hits = retriever.search(mind.user_id, query, k=k, nodes=("item",), min_score=min_score,
                            filters=Filters(kinds=["sensory"]))
    kept = {i.id: i for i in mind.store.get_many(mind.user_id, [h.id for h in hits])
            if isinstance(i, SensoryItem) and i.attended}
    out: list[tuple[float, MemoryLine]] = []
    for h in hits:
        if h.id not in kept:
            continue
        edges = mind.store.edges(mind.user_id, src=h.id, relation=ATTENDED_TO, limit=1)
        episode = mind.store.get(mind.user_id, edges[0].dst) if edges else None
        name = (episode.source or episode.title or None) if episode is not None else None
        out.append((h.score, MemoryLine(id=h.id, text=kept[h.id].text, speaker=name,
                                        when=kept[h.id].event_time)))
    return out


def strategy_lines(store: MemoryStore, retriever: Retriever, user_id: str, query: str, *,
                   k_success: int, k_failure: int) -> list[MemoryLine]:
    """The top successes and failure guardrails for ``query``, ranked as L2 ranks them
    (``strategy_score`` per polarity), successes first, each ``DO: title: text`` (or
    ``AVOID: ...``)."""
    hits = retriever.search(user_id, query, k=STRATEGY_POOL, nodes=("item",),
                            filters=Filters(kinds=["strategy"], current=["strategy"]))
    relevance = {h.id: h.score for h in hits}
    items = [i for i in store.get_many(user_id, list(relevance)) if isinstance(i, StrategyItem)]

    def ranked(polarity: str, n: int) -> list[StrategyItem]:
        pool = [s for s in items if s.polarity == polarity]
        pool.sort(key=lambda s: (-strategy_score(s, relevance.get(s.id, 0.0)), -s.uses, s.id))
        return pool[:n]

    chosen = ranked("success", k_success) + ranked("failure", k_failure)
    # The title names the lesson, the text says what to do (or avoid): the actionable
    # part, where L2 shows the one-line description to save room.
    return [MemoryLine(id=s.id, text=(f"{'DO' if s.polarity == 'success' else 'AVOID'}: "
                                      + flatten(": ".join(p for p in (s.title, s.text
                                                                      or s.description) if p))))
            for s in chosen]


def voe_lines(store: MemoryStore, user_id: str, query: str, *, k: int, min_score: float
              ) -> list[MemoryLine]:
    """The pending expectation of the user's next message, then the VoE facts that match
    its needed-info keywords or the query's content words best (``VoEFacts.search``)."""
    lines: list[MemoryLine] = []
    # VoE keywords are a few words each: the query's content words, not the sentence.
    keywords = [w for w in _WORD.findall(query) if len(w) > 2 and w.casefold() not in STOP_WORDS]
    pending = [i for i in store.get_many(user_id, store.source_ids(user_id, "working",
                                                                   PREDICTION_SOURCE)[:1])
               if isinstance(i, WorkingItem)]
    for item in pending:
        lines.append(MemoryLine(id=item.id, text=f"Expected next: {item.text}",
                                when=item.recorded_at))
        keywords += item.tags
    facts = VoEFacts(store)
    for hit in facts.search(facts.facts(user_id), keywords, k, min_score):
        lines.append(MemoryLine(id=hit.fact.id, text=hit.fact.text, when=hit.fact.recorded_at))
    return lines


def intention_lines(mind: CognitiveMemory, limit: int = 10) -> list[MemoryLine]:
    """Intentions that fired and are not resolved, highest priority first."""
    fired: list[ProspectiveItem] = mind.prospective.triggered(limit)
    return [MemoryLine(id=i.id, text=f"Reminder: {i.action or i.text}", when=i.event_time)
            for i in fired]


# -- packing --------------------------------------------------------------------------------


def _shares(present: Sequence[str], shares: dict[str, float]) -> dict[str, float]:
    total = sum(max(shares.get(layer, 0.0), 0.0) for layer in present)
    if total <= 0:
        return {layer: 1 / len(present) for layer in present} if present else {}
    return {layer: max(shares.get(layer, 0.0), 0.0) / total for layer in present}


def pack_layers(candidates: dict[str, list[MemoryLine]], budget: int, count: TokenCounter,
                *, shares: dict[str, float] | None = None,
                date_style: DateStyle = DEFAULT_DATE_STYLE, lone_header: bool = True
                ) -> tuple[str, dict[str, PackedContext]]:
    """Pack each layer's lines (best first) into its share of ``budget`` and assemble
    the block (see the module docstring); returns the text and each shown layer's pack.

    Lines already shown by an earlier layer (same id) are not shown again. With
    ``lone_header=False`` a block of one layer is its lines alone, no header.
    """
    seen: set[str] = set()
    unique: dict[str, list[MemoryLine]] = {}
    for layer in LAYERS:
        lines = [ln for ln in candidates.get(layer, []) if ln.id not in seen]
        seen.update(ln.id for ln in lines)
        if lines:
            unique[layer] = lines
    order = list(unique)
    if budget <= 0 or not order:
        return "", {}
    headed = lone_header or len(order) > 1
    heads = sum(count(HEADERS[layer]) + 2 for layer in order) if headed else 0
    room = max(budget - heads, 0)
    part = _shares(order, shares or SHARES)
    limits = {layer: int(room * part[layer]) for layer in order}

    def pack_one(layer: str, limit: int) -> PackedContext:
        return pack(unique[layer], max(limit, 0), count, date_style=date_style,
                    resolve_times=layer != "strategies")

    packed = {layer: pack_one(layer, limits[layer]) for layer in order}
    # What a layer left unused goes to the others, in layer order, once round.
    spare = sum(limits[ly] - packed[ly].tokens for ly in order)
    for layer in order:
        if spare <= 0:
            break
        if packed[layer].dropped or packed[layer].truncated:
            before = packed[layer].tokens
            packed[layer] = pack_one(layer, packed[layer].tokens + spare)
            spare -= packed[layer].tokens - before
            limits[layer] = packed[layer].tokens
    text = _assemble(order, packed, headed)
    # Tokenizers merge across lines and headers: shed from the largest layer until the
    # block, counted whole, fits.
    while text and count(text) > budget:
        largest = max((ly for ly in order if packed[ly].ids), key=lambda ly: packed[ly].tokens,
                      default=None)
        if largest is None:
            return "", {}
        over = count(text) - budget
        packed[largest] = pack_one(largest, packed[largest].tokens - max(over, 1))
        text = _assemble(order, packed, headed)
    return text, {ly: p for ly, p in packed.items() if p.ids}


def _assemble(order: Sequence[str], packed: dict[str, PackedContext], headed: bool = True
              ) -> str:
    if not headed:
        return "\n\n".join(packed[ly].text for ly in order if packed[ly].text)
    return "\n\n".join(f"{HEADERS[ly]}\n{packed[ly].text}" for ly in order
                       if packed[ly].text)


def _has(store: MemoryStore, user_id: str, kinds: Sequence[str]) -> bool:
    """Whether the tenant holds an item of any of ``kinds`` (a layer without one skips
    its search)."""
    return any(store.kind_items(user_id, kind, limit=1) for kind in kinds)


def build_context(store: MemoryStore, user_id: str, query: str, *, budget: int = 600,
                  layers: Sequence[str] = LAYERS, retriever: Retriever | None = None,
                  router: Router | None = None,
                  count_tokens: Callable[[str], int] | None = None,
                  settings: ContextSettings | None = None,
                  conversation_id: str | None = None, now: datetime | None = None,
                  date_style: DateStyle = DEFAULT_DATE_STYLE,
                  said: Sequence[MemoryLine] | None = None, route: Route | None = None,
                  lone_header: bool = True) -> MemoryContext:
    """One tenant's :class:`MemoryContext` for ``query``; reads the store, calls no model.

    ``said`` (with its ``route``) are the conversation layer's lines when the caller has
    routed and retrieved them itself (the personal answerer: its routed, verified hits,
    each turn named by its id in its conversation, which ``QA`` cites); the layer is not
    searched then. ``lone_header=False``: a block of one layer carries no header.

    Raises:
        ValueError: a layer that does not exist, or a negative budget.
    """
    if unknown := [ly for ly in layers if ly not in LAYERS]:
        raise ValueError(f"no layer {', '.join(map(repr, unknown))}; layers: "
                         f"{', '.join(LAYERS)}")
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    s = settings or ContextSettings()
    count = count_tokens or rough_tokens
    retriever = retriever or Retriever(store, store.embedder)
    router = router or Router(store)
    mind = CognitiveMemory(store, user_id)
    wanted = set(layers)
    candidates: dict[str, list[MemoryLine]] = {}
    if said is not None and "conversation" in wanted:
        candidates["conversation"] = list(said)
    elif "conversation" in wanted:
        candidates["conversation"], route = conversation_lines(
            store, retriever, router, user_id, query, k=s.conversation_k,
            conversation_id=conversation_id, now=now, min_score=s.min_score)
    if wanted & {"semantic", "procedures"} and _has(store, user_id, ("semantic", "procedural")):
        facts, procedures = read_lines(mind, query, k=s.recall_k, min_score=s.min_score,
                                       documents=s.documents_k, retriever=retriever)
        candidates["semantic"] = facts if "semantic" in wanted else []
        candidates["procedures"] = procedures if "procedures" in wanted else []
    if "strategies" in wanted and _has(store, user_id, ("strategy",)):
        candidates["strategies"] = strategy_lines(store, retriever, user_id, query,
                                                  k_success=s.k_success, k_failure=s.k_failure)
    if "voe" in wanted:
        candidates["voe"] = voe_lines(store, user_id, query, k=s.voe_k,
                                      min_score=s.voe_min_score)
    if "intentions" in wanted:
        candidates["intentions"] = intention_lines(mind)
    text, packed = pack_layers(candidates, budget, count, shares=s.shares,
                               date_style=date_style, lone_header=lone_header)
    used = {ly: LayerUse(ids=p.ids, tokens=p.tokens, chars=len(p.text), budget=p.budget,
                         candidates=len(candidates.get(ly, [])), dropped=p.dropped)
            for ly, p in packed.items()}
    ids = [i for p in packed.values() for i in p.ids]
    return MemoryContext(query=query, user_id=user_id, text=text, ids=ids,
                         tokens=count(text) if text else 0, budget=budget, layers=used,
                         sources={i: ly for ly, p in packed.items() for i in p.ids},
                         route=route)
