"""One packer per layer of the memory layer cake, each with an explicit character budget.

The layers (seed 002): L0 the ontology sense card, L1 constraints and anti-patterns,
L2 procedural strategies (top-K successes plus top-K failure guardrails), L3 a packed
summary of a materialised task artefact whose full text stays in the store, and L4
traces, which are recorded but never injected. Every packer returns a
:class:`PackedLayer` whose ``text`` is at most its budget in characters, for any input;
the budget is a property test in ``tests/packers/test_layers.py``.

The packers take their sources as inputs (the card's text, constraint lines, strategy
items) rather than computing them, so this package depends neither on the ontology
suite nor on DSPy; the L0 card comes from ``bench.ontology.card.sense_card``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from memstrata.memory.bank import strategy_score
from memstrata.memory.models import StrategyItem

from .fit import MARK, cut_words, defuse, defuse_lines, fit_lines, flatten

LAYERS: tuple[str, ...] = ("L0", "L1", "L2", "L3", "L4")


class LayerBudgets(BaseModel):
    """Characters each layer may inject, and how many strategies L2 picks per polarity.

    L0, L1 and L3 default to the seed's limits, which are also their ceilings (a config
    may shrink a layer, never grow it past the design): a 600-char card, 1000 chars of
    constraints, 1000 chars of artefact summary (the guide's head + tail summary is
    ~940). L2's 1200 is our choice, with no fixed ceiling: three success and three
    failure lines at ~200 chars each. L4 is never injected (budget 0).
    """

    l0: int = Field(600, ge=0, le=600, description="L0 sense card")
    l1: int = Field(1000, ge=0, le=1000, description="L1 constraints and anti-patterns")
    l2: int = Field(1200, ge=0, description="L2 strategies")
    l3: int = Field(1000, ge=0, le=1000, description="L3 artefact summary")
    k_success: int = Field(3, ge=0, description="L2: at most this many success strategies")
    k_failure: int = Field(3, ge=0, description="L2: at most this many failure guardrails")
    l2_line: int = Field(300, ge=1, description="L2: one strategy line is cut to this")

    def of(self, layer: str) -> int:
        """The budget of ``layer`` ("L0" .. "L4"); L4's is always 0."""
        if layer not in LAYERS:
            raise ValueError(f"unknown layer {layer!r}; layers: {', '.join(LAYERS)}")
        return 0 if layer == "L4" else int(getattr(self, layer.lower()))


class PackedLayer(BaseModel):
    """What one packer put in (``text``, ``ids``) and what it left out, against its budget."""

    layer: str
    text: str = ""
    ids: list[str] = Field(default_factory=list, description="sources injected, in order")
    chars: int = 0
    budget: int
    dropped: int = Field(0, description="sources (or lines) left out for the budget")
    truncated: bool = Field(False, description="some source was cut to fit")
    left_out: list[str] = Field(
        default_factory=list, description="ids of sources not injected (reachable by tools)")
    blob_key: str | None = Field(None, description="L3: the key of the stored full artefact")


def packed_layer(layer: str, text: str, budget: int, **kw: object) -> PackedLayer:
    """A :class:`PackedLayer` whose ``chars`` is its text's length (the one source of it)."""
    return PackedLayer.model_validate(
        {"layer": layer, "text": text, "chars": len(text), "budget": budget, **kw})


# -- L0 -------------------------------------------------------------------------------------


def pack_l0(card: str | None, budget: int) -> PackedLayer:
    """The sense card as given, cut after its last whole line that fits (then a mark).

    The card is built deterministically elsewhere (``sense_card(max_chars=...)``), which
    already respects a budget; this packer guarantees it regardless of the card's source.
    """
    lines = defuse_lines((card or "").strip().splitlines())
    text, dropped, truncated = fit_lines(lines, budget)
    return packed_layer("L0", text, budget, ids=["card"] if text else [], dropped=dropped,
                   truncated=truncated)


# -- L1 -------------------------------------------------------------------------------------


def derived_constraints(descriptions: Mapping[str, str]) -> list[str]:
    """Constraint lines from named checks (anti-pattern name -> what to do instead).

    Sorted by name so the same checks always give the same lines in the same order.
    """
    return [f"avoid {name}: {flatten(desc)}" for name, desc in sorted(descriptions.items())
            if flatten(desc)]


def pack_l1(curated: Sequence[str] = (), derived: Sequence[str] = (), *,
            budget: int) -> PackedLayer:
    """Constraint bullets, curated ones first (they were chosen by a person), then derived.

    Duplicates (same text, whitespace and case aside) are dropped. A bullet that does not
    fit is skipped whole, so a shorter later one can still go in; if none fits, the first
    is cut at a word boundary. ids are ``curated:i`` / ``derived:i`` (input positions).
    """
    sources = [(f"curated:{i}", flatten(t)) for i, t in enumerate(curated)]
    sources += [(f"derived:{i}", flatten(t)) for i, t in enumerate(derived)]
    seen: set[str] = set()
    unique: list[tuple[str, str]] = []
    for sid, text in sources:
        if text and text.lower() not in seen:
            seen.add(text.lower())
            unique.append((sid, f"- {text}"))
    return _greedy("L1", unique, budget)


def _greedy(layer: str, lines: Sequence[tuple[str, str]], budget: int,
            truncated: bool = False, dropped: Sequence[str] = ()) -> PackedLayer:
    # Skip-not-cut packing in priority order; lines are joined by one newline each.
    # ``dropped``: ids the caller already left out (counted and listed with the rest).
    kept: list[tuple[str, str]] = []
    left: list[str] = []
    used = 0
    for sid, line in lines:
        cost = len(line) + (1 if kept else 0)
        if used + cost <= budget:
            kept.append((sid, line))
            used += cost
        else:
            left.append(sid)
    if not kept and lines and budget > 0:
        cut = cut_words(lines[0][1], budget)
        # A strategy line cut before its id says nothing the agent can act on or fetch.
        if cut and cut != MARK and (layer != "L2" or f"[{lines[0][0]}]" in cut):
            kept, left, truncated = [(lines[0][0], cut)], left[1:], True
    left = [*dropped, *left]
    return packed_layer(layer, "\n".join(line for _, line in kept), budget,
                        ids=[sid for sid, _ in kept], dropped=len(left), truncated=truncated,
                        left_out=left)


# -- L2 -------------------------------------------------------------------------------------


def strategy_line(item: StrategyItem) -> str:
    """``DO [id] title: description`` (or ``AVOID ...`` for a failure), on one line.

    The id leads so that a cut line still names what the agent can fetch in full; the
    description (the one-line gist) is preferred over the body text.
    """
    verb = "DO" if item.polarity == "success" else "AVOID"
    # Learned strategies are model output: defused, they cannot forge a second line or
    # an id of their own (see ``fit.defuse``).
    body = defuse(item.description) or defuse(item.text)
    title = defuse(item.title)
    return f"{verb} [{item.id}] {title}: {body}" if title else f"{verb} [{item.id}] {body}"


def pack_l2(strategies: Sequence[StrategyItem], *, budget: int, k_success: int = 3,
            k_failure: int = 3, relevance: Mapping[str, float] | None = None,
            line_chars: int = 300) -> PackedLayer:
    """Top-``k_success`` successes and top-``k_failure`` failure guardrails, within budget.

    Each polarity is ranked on its own by :func:`strategy_score` (``relevance[id]``,
    default 1.0), so guardrails are never crowded out by successes at selection time.
    Lines are then admitted alternating by rank (success 1, failure 1, success 2, ...)
    so that, when the budget is tight, the lowest-ranked of each side go first; a line
    that does not fit is skipped whole. One line is cut to ``line_chars`` first, so one
    long strategy cannot take the whole layer. Text shows the DO lines, then the AVOID
    lines, each in rank order. Duplicate ids are taken once.
    """
    rel = relevance or {}

    def ranked(polarity: str, k: int) -> list[StrategyItem]:
        pool = {s.id: s for s in strategies if s.polarity == polarity}.values()
        order = sorted(pool, key=lambda s: (-strategy_score(s, rel.get(s.id, 1.0)),
                                            -s.uses, s.id))
        return order[:max(k, 0)]

    good, bad = ranked("success", k_success), ranked("failure", k_failure)
    turns: list[StrategyItem] = []
    for i in range(max(len(good), len(bad))):
        turns += good[i:i + 1] + bad[i:i + 1]
    cut_any = False
    lines: list[tuple[str, str]] = []
    nameless: list[str] = []
    for s in turns:
        line = strategy_line(s)
        short = cut_words(line, line_chars)
        if f"[{s.id}]" not in short:  # line_chars too small to keep even the id
            nameless.append(s.id)
            continue
        cut_any = cut_any or short != line
        lines.append((s.id, short))
    packed = _greedy("L2", lines, budget, truncated=cut_any, dropped=nameless)
    # Display order: successes before guardrails, each in rank order.
    rank = {s.id: (s.polarity != "success", i) for i, s in enumerate(turns)}
    by_id = dict(zip(packed.ids, packed.text.split("\n"), strict=False)) if packed.ids else {}
    ids = sorted(packed.ids, key=lambda i: rank[i])
    text = "\n".join(by_id[i] for i in ids)
    chosen = {s.id for s in turns}
    unpicked = sorted({s.id for s in strategies} - chosen)
    return packed.model_copy(update={"text": text, "ids": ids, "chars": len(text),
                                     "left_out": packed.left_out + unpicked})


# -- L4 -------------------------------------------------------------------------------------


def pack_l4(trace_ids: Sequence[str] = ()) -> PackedLayer:
    """Traces are for observability, never context: empty text, the ids recorded as left out."""
    return packed_layer("L4", "", 0, dropped=len(trace_ids), left_out=list(trace_ids))
