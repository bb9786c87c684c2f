"""What every cognitive lifecycle shares: the store, the tenant, the settings and a clock.

Each memory type of seed 003 (sensory, working, episodic, semantic, procedural,
prospective) is a small class over the one ``items``/``edges`` store, bound to one
tenant. The clock is injectable so lifecycles are tested on a fake one; no lifecycle
calls an LLM except episodic consolidation, which is handed a summariser.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from ..models import utcnow
from ..store.protocol import MemoryStore
from ..text import tokens

Clock = Callable[[], datetime]

#: Edge relations the lifecycles write (src -> dst).
ATTENDED_TO = "attended_to"  # sensory -> the episode it became
CONSOLIDATES = "consolidates"  # consolidated summary -> each episode it summarises
SIMILAR_TO = "similar_to"  # semantic <-> semantic (one edge, weight = Jaccard)
DERIVES_FROM = "derives_from"  # semantic -> the episode it came from
PROCEDURE_DERIVES_FROM = "procedure_derives_from"  # procedural -> its episode
CONTRADICTS = "contradicts"  # newer semantic -> older semantic that disagrees on a value


class CognitiveSettings(BaseModel):
    """The knobs of the six lifecycles (seed 003's defaults)."""

    model_config = ConfigDict(extra="forbid")

    sensory_ttl_s: float = Field(default=300.0, gt=0)
    working_capacity: int = Field(default=20, ge=1)
    consolidation_batch: int = Field(default=10, ge=2)
    similarity_threshold: float = Field(default=0.3, gt=0, le=1)
    compressed_weight: float = Field(default=0.5, ge=0, le=1)


class Lifecycle:
    """Base of the per-type classes: one store, one tenant, settings and a clock."""

    def __init__(self, store: MemoryStore, user_id: str, *,
                 settings: CognitiveSettings | None = None, clock: Clock = utcnow) -> None:
        if not user_id or not user_id.strip():
            raise ValueError("a lifecycle needs a tenant (user_id)")
        self.store = store
        self.user_id = user_id
        self.settings = settings or CognitiveSettings()
        self.clock = clock


@lru_cache(maxsize=4096)
def token_set(text: str) -> frozenset[str]:
    """The set of ``text``'s normalised tokens, kept: a fact being learned is compared
    with each of its candidates, and they with the next fact's."""
    return frozenset(tokens(text))


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of two texts' normalised token sets (stemmed, no stop-words)."""
    ta, tb = token_set(a), token_set(b)
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)
