"""The experiments through ``Memory``'s own door (``door: memory`` in a config).

With the default door (``layers``) the runner packs seed 002's layer cake with its
``ContextBuilder``. With ``door: memory`` the same material goes through the verbs an
application uses: the suite's L0 sense card, L1 constraints and L3 artefact are read into
the tenant's memory with ``Memory.read`` (one document each, so each line becomes a
semantic fact with its source), the seed pack's strategies are the tenant's strategies,
and each task is shown

- ``mode: inject`` (seed 002's Mode 1): ``Memory.context(question, budget=...)``, the
  budget in tokens (four characters a token, the counter a memory without a model uses)
  set to the character bound of the same layers in the layer cake, so E6 and its door
  twin show the agent at most as many characters;
- ``mode: tools`` (Mode 2): a one-line hint naming the tools, and ``Memory``'s handle
  tools (``Memory.tool_session``: the very tools ``Memory.tools`` returns, their calls in
  the run's log); every return is bounded by the session's caps.

E6 and E8 with ``--set door=memory`` are then Mode 1 against Mode 2 over one memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstrata.packers.context import HINT_MAX, BuiltContext, max_chars
from memstrata.packers.layers import PackedLayer

from .config import ExperimentConfig
from .suites import LayerSources, Suite

if TYPE_CHECKING:
    from memstrata.api import Memory

CHARS_PER_TOKEN = 4
"""The counter ``Memory.context`` packs with when the memory has no model."""
DOOR_LAYERS: tuple[str, ...] = ("conversation", "semantic", "procedures", "strategies")
"""The ``Memory.context`` layers a run shows: what the suite holds (its turns, the
documents read, the seed pack); the VoE and reminder layers have nothing to show here."""
DOOR_HINT = ("Memory tools: what was read (sense card, constraints, guide) via "
             "mem_search(query, kind='semantic'); past strategies via mem_search(query, "
             "kind='strategy', polarity='success'|'failure'); then mem_get(ids)")
assert len(DOOR_HINT) <= HINT_MAX


def read_layers(memory: Memory, suite: Suite, config: ExperimentConfig,
                sources: LayerSources) -> dict[str, str]:
    """Read the config's L0, L1 and L3 material into ``suite``'s tenant as documents
    (``Memory.read``; no LLM call); returns each document's title -> episode id.

    L2 needs no reading: the seed pack is stored as the tenant's strategies when the
    config seeds the bank, and ``Memory.context`` ranks them in its ``strategies`` layer.
    """
    layers, docs = set(config.layers), []
    if "L0" in layers and sources.card:
        docs.append(("sense card", sources.card))
    if "L1" in layers and (sources.constraints or sources.derived):
        docs.append(("constraints and anti-patterns",
                     "\n".join([*sources.constraints, *sources.derived])))
    if "L3" in layers and sources.artefact is not None:
        key, text = sources.artefact
        docs.append((key, text))
    return {title: memory.read(text, user_id=suite.user_id, title=title,
                               source=suite.name).episode_id for title, text in docs}


def token_budget(config: ExperimentConfig) -> int:
    """``Memory.context``'s budget: the layer cake's character bound for the config's
    layers injected, in tokens (so Mode 1 through the door shows no more than E6)."""
    return max_chars(set(config.layers), config.budgets, "inject") // CHARS_PER_TOKEN


def door_context(memory: Memory, suite: Suite, config: ExperimentConfig,
                 question: str) -> BuiltContext:
    """What the agent is shown for ``question`` through the door, as the runner records a
    build: inject mode packs ``Memory.context``; tools mode shows :data:`DOOR_HINT`.

    ``layers`` are keyed by ``Memory.context``'s layer names (``strategies`` holds the
    strategy ids shown; each layer's ``chars`` as the block holds them, its text is
    only in the whole block's); ``bound`` is the most characters the text may have.
    """
    if config.mode == "tools":
        return BuiltContext(task=question, scope=suite.scope, mode="tools", text=DOOR_HINT,
                            total_chars=len(DOOR_HINT), bound=HINT_MAX)
    budget = token_budget(config)
    ctx = memory.context(question, user_id=suite.user_id, budget=budget, layers=DOOR_LAYERS)
    layers = {name: PackedLayer(layer=name, ids=use.ids, chars=use.chars,
                                budget=use.budget * CHARS_PER_TOKEN, dropped=use.dropped)
              for name, use in ctx.layers.items()}
    bound = budget * CHARS_PER_TOKEN
    violations = [f"context: {ctx.tokens} tokens > budget {budget}"] \
        if ctx.tokens > budget else []
    return BuiltContext(task=question, scope=suite.scope, mode="inject", layers=layers,
                        text=ctx.text, total_chars=len(ctx.text), bound=bound,
                        violations=violations)

