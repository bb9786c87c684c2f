"""The store: schema and migrations, items of every kind, edges, provenance, retrieval.

``memory`` is the lowest layer: it imports nothing of memstrata but ``memstrata.errors``,
and everything above reaches the store through it.
"""

from .embed import (
    DEFAULT_MODEL,
    Embedder,
    MiniLMEmbedder,
    MPNetEmbedder,
    StaticMiniLMEmbedder,
    StaticModelEmbedder,
    default_embedder,
    embedder_by_name,
)
from .locking import StoreError
from .models import (
    ITEM_KINDS,
    ConsolidatedItem,
    Conversation,
    Edge,
    EntityItem,
    EpisodicItem,
    FactItem,
    Hit,
    Item,
    PersonaItem,
    ProceduralItem,
    ProspectiveItem,
    QAPairItem,
    SemanticItem,
    SensoryItem,
    Session,
    StrategyItem,
    Turn,
    WorkingItem,
)
from .query import QueryAnalysis, analyse
from .reembed import EmbedderMismatchWarning, ReembedReport
from .retrieval import Retriever, SearchWeights
from .store import Filters, Store
from .store.protocol import MemoryStore

__all__ = [
    "DEFAULT_MODEL", "ITEM_KINDS", "ConsolidatedItem", "Conversation", "Edge", "Embedder",
    "EmbedderMismatchWarning", "EntityItem", "EpisodicItem", "FactItem", "Filters", "Hit",
    "Item", "MPNetEmbedder", "MemoryStore", "MiniLMEmbedder", "PersonaItem", "ProceduralItem",
    "ProspectiveItem", "QAPairItem", "QueryAnalysis", "ReembedReport", "Retriever",
    "SearchWeights", "SemanticItem", "SensoryItem", "Session", "StaticMiniLMEmbedder",
    "StaticModelEmbedder", "Store", "StoreError", "StrategyItem", "Turn", "WorkingItem",
    "analyse", "default_embedder", "embedder_by_name",
]
