"""Packers: what enters a prompt, bounded by an explicit token budget.

``pack`` turns retrieved memories into one block of provenance-tagged lines.
"""

from .lines import MemoryLine, PackedContext, TokenCounter, from_hits, pack, render

__all__ = ["MemoryLine", "PackedContext", "TokenCounter", "from_hits", "pack", "render"]
