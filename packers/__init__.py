"""Packers: what enters a prompt, bounded by an explicit budget.

``pack`` turns retrieved memories into one block of provenance-tagged lines within a
token budget; the layer cake's packers (L0-L4) and ``ContextBuilder`` count characters,
the unit the layers' budgets are written in.
"""

from .lines import MemoryLine, PackedContext, TokenCounter, from_hits, pack, parse, render

__all__ = [
    "MemoryLine", "PackedContext", "TokenCounter", "from_hits", "pack", "parse", "render",
]

# The layer cake (L0-L4), one packer per layer in chars, and the ContextBuilder.
from .artefact import pack_l3, summarise_artefact
from .context import BuiltContext, ContextBuilder, max_chars
from .layers import (
    LayerBudgets,
    PackedLayer,
    derived_constraints,
    pack_l0,
    pack_l1,
    pack_l2,
    pack_l4,
    strategy_score,
)

__all__ += [
    "BuiltContext", "ContextBuilder", "LayerBudgets", "PackedLayer", "derived_constraints",
    "max_chars", "pack_l0", "pack_l1", "pack_l2", "pack_l3", "pack_l4", "strategy_score",
    "summarise_artefact",
]
