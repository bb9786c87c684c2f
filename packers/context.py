"""The ContextBuilder: assembles a task's runtime context from the layer packers.

It is the experiments' control surface: layer toggles, per-layer budgets and the mode
are arguments, and every build checks its own output against the budgets (the result's
``violations`` list, empty unless a packer is broken).

Modes (seed 002, "Mode 1" and "Mode 2"): ``inject`` (the default) packs every enabled
layer into the prompt, since agents were observed not to call retrieval tools on their
own; ``tools`` injects only L0 and L1 plus one line saying that strategies and the
artefact are reachable with ``mem_search``/``mem_get`` and ``ctx_*``. In ``tools`` mode
L2 and L3 are still packed (the artefact is still stored), but only their ids are
recorded, in ``available``, so a trajectory can compare what the agent fetched with
what it could have.

The assembled text is, for each enabled layer with text, in the order L0..L3, a block
``HEADERS[layer] + "\\n" + layer text``, blocks joined by a blank line, with the tools
hint as a last block in ``tools`` mode. Hence the bound :func:`max_chars` checks:

    total <= sum over injected enabled layers of (budget + len(header) + 1)
             + (HINT_MAX if a hint can be shown)
             + 2 * (number of blocks - 1)

where injected enabled layers are the enabled ones of L0..L3 (``inject``) or of L0, L1
(``tools``), and a hint can be shown in ``tools`` mode when L2 or L3 is enabled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from memstrata.memory.models import StrategyItem
from memstrata.memory.retrieval import Retriever
from memstrata.memory.store import Filters
from memstrata.memory.store.protocol import MemoryStore

from .artefact import pack_l3
from .layers import (
    LAYERS,
    LayerBudgets,
    PackedLayer,
    pack_l0,
    pack_l1,
    pack_l2,
    pack_l4,
)

Mode = Literal["inject", "tools"]
HEADERS: dict[str, str] = {
    "L0": "## Ontology sense card",
    "L1": "## Constraints and anti-patterns",
    "L2": "## Strategies from past runs",
    "L3": "## Task artefact (summary)",
}
HINT = ("Memory tools: past strategies and guardrails via mem_search(query, kind='strategy',"
        " polarity='success'|'failure') then mem_get(ids)")
HINT_MAX = 240
"""The tools hint is at most this long (with the artefact's key when that fits)."""
EMPTY = "(none)"
"""What a prompt shows for an empty build (its memory input cannot be blank)."""
DEFAULT_LAYERS: frozenset[str] = frozenset({"L0", "L1", "L2", "L3"})
STRATEGY_POOL = 50  # retrieval candidates for L2, before top-K per polarity


class BuiltContext(BaseModel):
    """One build: the packed layers, the assembled text, and the budget check's verdict."""

    task: str
    scope: str | None = None
    mode: Mode
    layers: dict[str, PackedLayer] = Field(default_factory=dict, description="enabled ones")
    text: str = ""
    total_chars: int = 0
    bound: int = Field(0, description="the most chars this configuration may assemble")
    violations: list[str] = Field(default_factory=list, description="empty when in budget")
    available: dict[str, list[str]] = Field(
        default_factory=dict,
        description="per layer, ids packed but not injected (tools mode: fetchable by tools)")


def injected_layers(layers: set[str] | frozenset[str], mode: Mode) -> list[str]:
    """The enabled layers whose text enters the prompt, in order L0..L3."""
    allowed = ("L0", "L1", "L2", "L3") if mode == "inject" else ("L0", "L1")
    return [layer for layer in allowed if layer in layers]


def max_chars(layers: set[str] | frozenset[str], budgets: LayerBudgets, mode: Mode) -> int:
    """The exact upper bound on a build's ``total_chars`` (see the module docstring)."""
    shown = injected_layers(layers, mode)
    total = sum(budgets.of(layer) + len(HEADERS[layer]) + 1 for layer in shown)
    blocks = len(shown)
    if mode == "tools" and layers & {"L2", "L3"}:
        total += HINT_MAX
        blocks += 1
    return total + 2 * max(blocks - 1, 0)


class ContextBuilder:
    """Builds one tenant's runtime context for a task, layer by layer, within budgets.

    ``retriever`` ranks strategies for L2 by relevance to the task; without one, a
    lexical :class:`Retriever` over the same store is used (no embedder needed). Pass
    ``Retriever(store, embedder)`` to add the dense channel: it sees the strategies whose
    vectors are stored under that embedder's name (``memory.bank.embed_strategies``).
    """

    def __init__(self, store: MemoryStore, user_id: str, retriever: Retriever | None = None
                 ) -> None:
        self.store = store
        self.user_id = user_id
        self.retriever = retriever or Retriever(store)

    def strategies(self, task: str, scope: str | None = None
                   ) -> tuple[list[StrategyItem], dict[str, float]]:
        """The strategies relevant to ``task`` (and tagged ``scope``, if given), with scores.

        Scope is a tag (an ontology id such as "brick", or a memory scope name): when set,
        only strategies carrying it qualify, so one ontology's lessons do not leak into
        another's runs. Retired strategies (``valid_to`` set by a supersede or by the
        forgetting policy) never qualify.
        """
        # A strategy the bank superseded or forgot must not come back through L2, or
        # E10/E11 would change nothing shown; left out by the search itself, retired ones
        # cannot crowd current ones out of the pool.
        hits = self.retriever.search(self.user_id, task, k=STRATEGY_POOL, nodes=("item",),
                                     filters=Filters(kinds=["strategy"], current=["strategy"]))
        relevance = {h.id: h.score for h in hits}
        items = self.store.get_many(self.user_id, [h.id for h in hits])
        found = [i for i in items if isinstance(i, StrategyItem)
                 and (scope is None or scope in i.tags)]
        return found, relevance

    def build(self, task: str, *, scope: str | None = None,
              layers: set[str] | frozenset[str] = DEFAULT_LAYERS,
              budgets: LayerBudgets | None = None, mode: Mode = "inject",
              card: str | None = None, constraints: Sequence[str] | None = None,
              derived: Sequence[str] | None = None,
              artefact: tuple[str, str] | None = None, artefact_summary: str | None = None,
              traces: Sequence[str] = ()) -> BuiltContext:
        """Pack every enabled layer, assemble the context, and check it against the budgets.

        ``card`` is L0's text (``sense_card()``); ``constraints`` L1's curated lines and
        ``derived`` its derived ones (``derived_constraints(...)``); ``artefact`` L3's
        ``(key, full text)``, stored whole, with ``artefact_summary`` an optional summary
        to inject instead of head + tail; ``traces`` L4's ids (recorded, never injected).
        The same inputs over the same store give the same context.
        """
        unknown = set(layers) - set(LAYERS)
        if unknown:
            raise ValueError(f"unknown layers {sorted(unknown)}; layers: {', '.join(LAYERS)}")
        if mode not in ("inject", "tools"):
            raise ValueError(f"mode must be 'inject' or 'tools', got {mode!r}")
        b = budgets or LayerBudgets()
        packed: dict[str, PackedLayer] = {}
        if "L0" in layers:
            packed["L0"] = pack_l0(card, b.l0)
        if "L1" in layers:
            packed["L1"] = pack_l1(constraints or (), derived or (), budget=b.l1)
        if "L2" in layers:
            items, relevance = self.strategies(task, scope)
            packed["L2"] = pack_l2(items, budget=b.l2, k_success=b.k_success,
                                   k_failure=b.k_failure, relevance=relevance,
                                   line_chars=b.l2_line)
        if "L3" in layers and artefact is not None:
            key, full = artefact
            packed["L3"] = pack_l3(self.store, self.user_id, key, full, budget=b.l3,
                                   summary=artefact_summary)
        if "L4" in layers:
            packed["L4"] = pack_l4(traces)

        shown = [ly for ly in injected_layers(layers, mode) if ly in packed and packed[ly].text]
        blocks = [f"{HEADERS[ly]}\n{packed[ly].text}" for ly in shown]
        available: dict[str, list[str]] = {}
        for ly, p in packed.items():
            hidden = p.ids if ly not in shown else []
            if hidden or p.left_out:
                available[ly] = [*hidden, *p.left_out]
        if mode == "tools" and layers & {"L2", "L3"}:
            blocks.append(self._hint(packed.get("L3")))
        text = "\n\n".join(blocks)
        bound = max_chars(layers, b, mode)
        out = BuiltContext(task=task, scope=scope, mode=mode, layers=packed, text=text,
                           total_chars=len(text), bound=bound, available=available)
        out.violations = check(out, b)
        return out

    @staticmethod
    def _hint(l3: PackedLayer | None) -> str:
        # The artefact's key is what the agent needs to read it; add it when it fits.
        if l3 is not None and l3.blob_key:
            with_key = f"{HINT}; the task artefact via ctx_slice/ctx_find on {l3.blob_key!r}"
            if len(with_key) <= HINT_MAX:
                return with_key
        return HINT[:HINT_MAX]


def check_sent(sent_chars: int, ctx: BuiltContext) -> list[str]:
    """The budget check of what was sent: a violation when more of the context reached a
    prompt than ``ctx.bound`` allows (none otherwise).

    :func:`check` can only compare a build with itself; this one takes ``sent_chars``
    measured on the prompts the model received (``ExecutorRun.context_in_prompt``), so
    a context enlarged or replaced between the builder and the model is caught. An
    empty build is sent as :data:`EMPTY`, which is allowed in its place.
    """
    if sent_chars > max(ctx.bound, 0 if ctx.text else len(EMPTY)):
        return [f"prompt: {sent_chars} chars of context sent > bound {ctx.bound}"]
    return []


def check(ctx: BuiltContext, budgets: LayerBudgets) -> list[str]:
    """Every way ``ctx`` breaks its budgets, as messages (none for a correct build)."""
    problems: list[str] = []
    for layer, p in ctx.layers.items():
        limit = budgets.of(layer)
        if len(p.text) > limit:
            problems.append(f"{layer}: {len(p.text)} chars > budget {limit}")
        if p.chars != len(p.text):
            problems.append(f"{layer}: reports {p.chars} chars, has {len(p.text)}")
    l2 = ctx.layers.get("L2")
    if l2 is not None:
        lines = l2.text.splitlines()
        if len(lines) != len(l2.ids):
            problems.append(f"L2: {len(lines)} lines for {len(l2.ids)} ids")
        polarity = [line.split(" [", 1)[0] for line in lines]
        if polarity.count("DO") > budgets.k_success:
            problems.append(f"L2: {polarity.count('DO')} successes > k {budgets.k_success}")
        if polarity.count("AVOID") > budgets.k_failure:
            problems.append(f"L2: {polarity.count('AVOID')} failures > k {budgets.k_failure}")
    if ctx.mode == "tools":
        problems += [f"{ly}: injected in tools mode" for ly in ("L2", "L3")
                     if ly in ctx.layers and ctx.layers[ly].text and HEADERS[ly] in ctx.text]
    if ctx.total_chars > ctx.bound:
        problems.append(f"total: {ctx.total_chars} chars > bound {ctx.bound}")
    return problems
