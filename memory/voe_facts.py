"""The violation-of-expectation fact store: per user, a ring buffer of short facts.

A fact is a ``FactItem`` with ``source="voe"``: its text, 1-5 tags, when it was recorded,
and (in ``evidence``) the turn whose surprise produced it. At most ``max_facts`` are kept
per user; adding one past the cap deletes the oldest. The user's cached prediction (what
the agent expects them to say next) is a ``WorkingItem`` beside them, so both survive a
restart. Retrieval is local: rapidfuzz, no model, no index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rapidfuzz import fuzz, process, utils

from .models import FactItem, WorkingItem

if TYPE_CHECKING:
    from .store.protocol import MemoryStore

SOURCE = "voe"
PREDICTION_SOURCE = "voe:prediction"


@dataclass(frozen=True)
class ScoredFact:
    """A fact and how well it matched the needed-info keywords (0-100)."""

    fact: FactItem
    score: float


def similarity(a: str, b: str) -> float:
    """rapidfuzz ratio (0-100) of two texts after lower-casing and dropping punctuation."""
    return fuzz.ratio(a, b, processor=utils.default_process)


class VoEFacts:
    """One store's VoE facts and cached predictions (reach it as ``VoEFacts(store)``).

    Args:
        store: the store.
        max_facts: the ring buffer's size per user (``MAX_FACTS``).
    """

    def __init__(self, store: MemoryStore, max_facts: int = 200) -> None:
        if max_facts < 1:
            raise ValueError("max_facts must be at least 1")
        self.store = store
        self.max_facts = max_facts

    def add(self, user_id: str, text: str, tags: list[str], turn: str | None = None
            ) -> FactItem:
        """Append a fact (1-5 tags) and trim the user's oldest beyond ``max_facts``."""
        tags = [t.strip()[:40] for t in tags if t and t.strip()][:5]
        if not text.strip():
            raise ValueError("a fact needs text")
        if not tags:
            raise ValueError("a fact needs 1-5 tags")
        item = FactItem(user_id=user_id, text=text.strip(), tags=tags, source=SOURCE,
                        evidence=[turn] if turn else [])
        with self.store.transaction():
            fact_id = self.store.add(item)
            # Ids only (no model validation): this runs on every surprising turn.
            for old in self.store.source_ids(user_id, "fact", SOURCE, skip=self.max_facts):
                self.store.delete(user_id, old)
        stored = self.store.get(user_id, fact_id)
        assert isinstance(stored, FactItem)
        return stored

    def facts(self, user_id: str) -> list[FactItem]:
        """The user's facts, oldest first."""
        return [f for f in self.store.source_items(user_id, "fact", SOURCE)
                if isinstance(f, FactItem)]

    def delete(self, user_id: str, fact_id: str) -> bool:
        """Delete one of the user's facts; True if it existed."""
        item = self.store.get(user_id, fact_id)
        if not isinstance(item, FactItem) or item.source != SOURCE:
            return False
        return self.store.delete(user_id, fact_id)

    def search(self, facts: list[FactItem], needed: list[str], k: int, min_score: float = 0.0
               ) -> list[ScoredFact]:
        """The ``k`` best facts for the keywords: score = max over keywords of the best of
        fuzzy(text, kw) (rapidfuzz token-set ratio: a keyword inside a sentence scores
        high) and fuzzy(tag, kw) (plain ratio); ties go to the newest fact; facts below
        ``min_score`` are left out.

        ``facts`` is passed in (oldest first, as ``facts()`` returns them) so a caller can
        keep them in memory between turns.
        """
        keywords = [kw for kw in needed if kw and kw.strip()]
        if not keywords or k < 1 or not facts:
            return []
        # One C-level pass per scorer (rapidfuzz's cdist), then a max per fact.
        text = process.cdist([f.text for f in facts], keywords, scorer=fuzz.token_set_ratio,
                             processor=utils.default_process).max(axis=1)
        owners = [i for i, f in enumerate(facts) for _ in f.tags]
        if owners:
            tags = process.cdist([t for f in facts for t in f.tags], keywords,
                                 scorer=fuzz.ratio, processor=utils.default_process).max(axis=1)
            best_tag = np.zeros(len(facts))
            np.maximum.at(best_tag, owners, tags)
            text = np.maximum(text, best_tag)
        # Highest score first; among equals the newest (the highest position) first.
        order = np.lexsort((-np.arange(len(facts)), -text))
        return [ScoredFact(facts[i], round(float(text[i]), 1)) for i in order[:k]
                if text[i] >= min_score]

    def prediction(self, user_id: str) -> str | None:
        """The cached prediction of the user's next message, if any."""
        return self.store.last_source_text(user_id, "working", PREDICTION_SOURCE)

    def set_prediction(self, user_id: str, text: str) -> None:
        """Replace the cached prediction."""
        with self.store.transaction():
            for old in self.store.source_ids(user_id, "working", PREDICTION_SOURCE):
                self.store.delete(user_id, old)
            if text.strip():
                self.store.add(WorkingItem(user_id=user_id, text=text.strip(),
                                           source=PREDICTION_SOURCE,
                                           title="next user message"))
