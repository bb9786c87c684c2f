"""The strategy bank's consolidation policy: merge, supersede, discard or add.

The ReasoningBank seed (002) asks, per newly extracted memory, for one of
merge / supersede / discard, recorded, so that the bank neither fills with restatements
nor keeps advice that later runs contradicted. :class:`ConsolidationPolicy` decides
against the tenant's *active* strategies (``valid_to`` is None) and never deletes:

1. **DISCARD generic noise**: text shorter than ``min_chars``, fewer than
   ``min_content_words`` content words (stop-words removed), or a near-copy
   (``fuzz.ratio`` >= ``generic_ratio``) of a ``generic`` phrase ("be careful") — the
   seed's "how to avoid generic noise". Noise is checked first so it never merges.
2. **Exact duplicate** (``store.duplicate_of``, the store's own folded-text key) of an
   active item of the same polarity: MERGE. The store's key ignores polarity, so an
   identical text stored with the other polarity, or only as a retired row, cannot be
   stored again (the unique key would fold it into that row): DISCARD, saying why.
3. **Fuzzy duplicate**: ``token_set_ratio`` of the folded ``title + description`` (the
   gist; title + text when there is no description) >= ``fuzzy_merge`` against an active item of the
   same polarity: MERGE. Exact before fuzzy, as the design asks. A MERGE pools uses,
   wins, evidence and tags into the existing row and stores nothing new.
4. **Same title, other guidance** (titles ``token_set_ratio`` >= ``same_title``, gists
   below ``fuzzy_merge``), same polarity: the newer one SUPERSEDES the stored one
   (``supersede``: ``valid_to`` + a ``supersedes`` edge); an older candidate is DISCARDed
   as stale.
5. **Opposite polarity, same advice**: a candidate whose text is near an active item of
   the other polarity (``token_sort_ratio`` >= ``contradiction``) SUPERSEDES it — a
   success now says to do what a guardrail forbade, or the reverse. ``token_sort_ratio``
   (whole word sets) rather than ``token_set_ratio`` on purpose: the latter scores any
   subset 100, so a complementary guardrail ("not verifying the endpoint first fails")
   would retire the strategy it backs ("verify the endpoint first").
6. Otherwise ADD.

``decide`` only reads; ``apply`` writes and logs one ``bank.consolidate`` event in the
same transaction, so the bank's history is auditable from ``store.runs.events``.
Deterministic: ties go to the higher similarity, then the older row, then the id.

Example:
    >>> from memstrata.memory import Store, StrategyItem
    >>> from memstrata.memory.bank import ConsolidationPolicy
    >>> store = Store.open(":memory:")
    >>> policy = ConsolidationPolicy()
    >>> s = StrategyItem(user_id="u", title="Probe the schema first",
    ...                  description="list classes before writing a query",
    ...                  text="Run a query listing the classes before writing the real one.")
    >>> policy.consolidate(store, "u", s).action
    'add'
    >>> policy.consolidate(store, "u", s).action
    'merge'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field
from rapidfuzz import fuzz

from . import text as textmod
from .embed import Embedder
from .models import StrategyItem, utcnow
from .store.protocol import MemoryStore
from .supersede import supersede

Action = Literal["add", "merge", "supersede", "discard"]

GENERIC_ADVICE: tuple[str, ...] = (
    "be careful", "double check your work", "check your work", "think step by step",
    "try again", "pay attention to details", "pay attention to the details",
    "read the question carefully", "make sure the answer is correct", "take your time",
    "be thorough", "verify your answer", "do your best", "follow the instructions",
)
"""The default blocklist of advice too generic to be worth a strategy slot."""


def fold(text: str) -> str:
    """Lower-cased words joined by one space (punctuation and case ignored)."""
    return " ".join(textmod.words(text))


def gist(item: StrategyItem) -> str:
    """What two strategies are compared on: folded title + description (the text when
    there is no description: a bare title is a subset of every gist with that title, and
    ``token_set_ratio`` scores a subset 100, so it would merge any two such strategies)."""
    return fold(f"{item.title} {item.description or item.text}")


def active_strategies(store: MemoryStore, user_id: str, page: int = 500) -> list[StrategyItem]:
    """The tenant's strategies still valid (``valid_to`` is None), oldest record first."""
    found: list[StrategyItem] = []
    offset = 0
    while True:
        rows = store.items(user_id, kind="strategy", limit=page, offset=offset)
        found += [r for r in rows if isinstance(r, StrategyItem) and r.valid_to is None]
        if len(rows) < page:
            break
        offset += page
    return sorted(found, key=lambda s: (_when(s), s.id))


def embedding_text(item: StrategyItem) -> str:
    """What a strategy is embedded as: title, description (when it applies), then text.

    The dense channel compares it with a task's question, and the description is the
    part written to match one ("when a question names a Brick class").
    """
    return "\n".join(p for p in (item.title, item.description, item.text) if p.strip())


def embed_strategies(store: MemoryStore, user_id: str, embedder: Embedder,
                     ids: Sequence[str] | None = None) -> int:
    """Store vectors under ``embedder.name`` for strategies, so dense retrieval sees them.

    Args:
        ids: the strategies just written (ids of other kinds or tenants are skipped);
            None: every active strategy of the tenant that has no vector for this model
            yet (a bank seeded or grown before an embedder was in use, or an item whose
            text was rewritten, which drops its vector).

    Returns:
        How many strategies were embedded.
    """
    if ids is None:
        have = set(store.vectors(user_id, embedder.name)[0])
        todo = [s for s in active_strategies(store, user_id) if s.id not in have]
    else:
        todo = [s for s in store.get_many(user_id, list(dict.fromkeys(ids)))
                if isinstance(s, StrategyItem)]
    if todo:
        store.set_embeddings(user_id, [s.id for s in todo],
                             embedder.encode([embedding_text(s) for s in todo]),
                             embedder.name)
    return len(todo)


def _when(item: StrategyItem) -> datetime:
    # Record time orders the bank (when we learned it); an unstored candidate is "now".
    return item.recorded_at or item.event_time or utcnow()


class Decision(BaseModel):
    """One consolidation decision: what to do with ``candidate`` and why.

    ``target_id`` is the stored item merged into or superseded (None for add, and for
    discards that matched nothing); ``similarity`` is the rapidfuzz score (0-100) that
    decided it; ``rule`` names the step that fired; ``item_id`` is filled by ``apply``
    (the row that now carries the candidate) and ``event_id`` by its log entry.
    """

    action: Action
    candidate: StrategyItem
    rule: str
    reason: str
    target_id: str | None = None
    similarity: float | None = None
    item_id: str | None = None
    event_id: int | None = None


class ConsolidationPolicy(BaseModel):
    """Merge / supersede / discard / add a new strategy against the active bank.

    Defaults: ``fuzzy_merge`` 90 and ``same_title`` 90 follow the fact dedup of
    ``hierarchy`` (90 keeps "probe the schema first" and "probe schema first" together
    but not two strategies that only share a topic word); ``contradiction`` 85 on
    ``token_sort_ratio`` lets one added "never"/"avoid" through but not a longer
    complementary sentence; ``generic_ratio`` 85 catches punctuation and spelling
    variants of a blocklisted phrase, not a longer specific sentence that contains it;
    ``min_distinct`` 0.4 flags text of 8+ content words of which fewer than 40% are
    distinct (a loop, not a lesson; ordinary advice is above 0.7).
    """

    fuzzy_merge: float = Field(default=90.0, ge=0, le=100)
    same_title: float = Field(default=90.0, ge=0, le=100)
    contradiction: float = Field(default=85.0, ge=0, le=100)
    generic_ratio: float = Field(default=85.0, ge=0, le=100)
    min_chars: int = Field(default=20, ge=0)
    min_content_words: int = Field(default=3, ge=0)
    min_distinct: float = Field(default=0.4, ge=0, le=1)
    generic: list[str] = Field(default_factory=lambda: list(GENERIC_ADVICE))

    def decide(self, store: MemoryStore, user_id: str, candidate: StrategyItem) -> Decision:
        """The decision for ``candidate``; reads the store, writes nothing.

        Raises:
            ValueError: the candidate belongs to another tenant.
        """
        if candidate.user_id != user_id:
            raise ValueError(f"candidate belongs to {candidate.user_id!r}, not {user_id!r}")

        def made(action: Action, rule: str, reason: str, target: StrategyItem | None = None,
                 similarity: float | None = None) -> Decision:
            return Decision(action=action, candidate=candidate, rule=rule, reason=reason,
                            target_id=target.id if target else None, similarity=similarity)

        noise = self.noise(candidate)
        if noise is not None:
            return made("discard", noise[0], noise[1], similarity=noise[2])
        exact = self._exact(store, user_id, candidate)
        if exact is not None:
            same = exact.polarity == candidate.polarity
            if same and exact.valid_to is None:
                return made("merge", "exact", "identical text already in the bank", exact,
                            100.0)
            why = (f"identical text is stored as a {exact.polarity} item" if not same
                   else "identical text was retired or superseded")
            return made("discard", "exact_conflict", why, exact, 100.0)
        active = active_strategies(store, user_id)
        mine = [s for s in active if s.polarity == candidate.polarity]
        score, twin = _best(gist(candidate), mine, gist, fuzz.token_set_ratio)
        if twin is not None and score >= self.fuzzy_merge:
            return made("merge", "fuzzy", f"near-duplicate of '{twin.title}'", twin, score)
        title = fold(candidate.title)
        if title:
            score, twin = _best(title, [s for s in mine if fold(s.title)],
                                lambda s: fold(s.title), fuzz.token_set_ratio)
            if twin is not None and score >= self.same_title:
                if _when(candidate) >= _when(twin):
                    return made("supersede", "same_title",
                                f"same title as '{twin.title}', newer guidance", twin, score)
                return made("discard", "stale", f"older than '{twin.title}' with the same "
                            "title and other guidance", twin, score)
        others = [s for s in active if s.polarity != candidate.polarity]
        score, twin = _best(fold(candidate.text), others, lambda s: fold(s.text),
                            fuzz.token_sort_ratio)
        if twin is not None and score >= self.contradiction:
            return made("supersede", "contradiction", f"{candidate.polarity} contradicts "
                        f"{twin.polarity} item '{twin.title}'", twin, score)
        return made("add", "novel", "no duplicate, conflict or noise found")

    def apply(self, store: MemoryStore, user_id: str, decision: Decision) -> Decision:
        """Carry out ``decision`` and log it, in one transaction; returns it completed."""
        cand = decision.candidate
        done = decision.model_copy()
        with store.transaction():
            if decision.action == "merge" and decision.target_id is not None:
                old = store.get(user_id, decision.target_id)
                if not isinstance(old, StrategyItem):
                    raise KeyError(f"no strategy {decision.target_id!r} for {user_id!r}")
                store.update(user_id, old.id, uses=old.uses + cand.uses,
                             wins=old.wins + cand.wins,
                             evidence=list(dict.fromkeys([*old.evidence, *cand.evidence])),
                             tags=list(dict.fromkeys([*old.tags, *cand.tags])),
                             confidence=max(old.confidence, cand.confidence))
                done.item_id = old.id
            elif decision.action in ("add", "supersede"):
                done.item_id = store.add(cand)
                if decision.action == "supersede" and decision.target_id is not None:
                    supersede(store, user_id, decision.target_id, done.item_id,
                              f"{decision.rule}: {decision.reason}")
            done.event_id = store.runs.log_event(user_id, {
                "type": "bank.consolidate", "action": done.action, "rule": done.rule,
                "reason": done.reason, "target_id": done.target_id, "item_id": done.item_id,
                "similarity": done.similarity, "title": cand.title,
                "polarity": cand.polarity}, agent_id=cand.agent_id)
        return done

    def consolidate(self, store: MemoryStore, user_id: str, candidate: StrategyItem) -> Decision:
        """``decide`` then ``apply``: the one call a closed loop makes per new strategy."""
        return self.apply(store, user_id, self.decide(store, user_id, candidate))

    def noise(self, candidate: StrategyItem) -> tuple[str, str, float | None] | None:
        """Why ``candidate`` is generic noise, as (rule, reason, similarity), or None.

        The extraction policy drops noise with this same rule before it counts items.
        """
        text = candidate.text.strip()
        for phrase in self.generic:
            score = fuzz.ratio(fold(text), fold(phrase))
            if score >= self.generic_ratio:
                return "generic", f"generic advice ('{phrase}')", score
        if len(text) < self.min_chars:
            return "too_short", f"text shorter than {self.min_chars} characters", None
        content = textmod.tokens(text)
        if len(content) < self.min_content_words:
            return "no_content", f"fewer than {self.min_content_words} content words", None
        # Degenerate loops ("1.1.1.1...", "the next thought is that the next thought...")
        # are what small models emit when they have nothing to say.
        distinct = len(set(content)) / len(content)
        if len(content) >= 8 and distinct < self.min_distinct:
            return "repetitive", f"only {distinct:.0%} of its words are distinct", None
        return None

    @staticmethod
    def _exact(store: MemoryStore, user_id: str, candidate: StrategyItem) -> StrategyItem | None:
        found = store.duplicate_of(candidate)
        item = store.get(user_id, found) if found else None
        return item if isinstance(item, StrategyItem) else None


def _best(key: str, pool: list[StrategyItem], text_of: Callable[[StrategyItem], str],
          scorer: Callable[..., float]) -> tuple[float, StrategyItem | None]:
    """The most similar item of ``pool`` to ``key`` (ties: the oldest, since ``pool`` is
    oldest first and only a strictly higher score replaces the best)."""
    best: tuple[float, StrategyItem | None] = (-1.0, None)
    for item in pool:
        score = float(scorer(key, text_of(item)))
        if score > best[0]:
            best = (score, item)
    return best


__all__ = ["GENERIC_ADVICE", "ConsolidationPolicy", "Decision", "active_strategies", "fold",
           "gist"]


def strategy_score(item: StrategyItem, relevance: float = 1.0) -> float:
    """How strongly to prefer a strategy: relevance x smoothed win rate.

    The win rate has a Beta(1, 1) prior, ``(wins + 1) / (uses + 2)``: an unused strategy
    scores 0.5, one that won 9 of 10 uses 0.83, one that lost 10 of 10 0.08, so evidence
    moves a strategy gradually and new ones still get tried. For a failure guardrail
    ``wins`` counts the runs it was shown in that succeeded, so the same formula ranks
    guardrails that helped. ``relevance`` is the retriever's score for the task (1.0
    when there was no retrieval). Ties are broken by more uses, then by id.
    """
    uses = max(item.uses, 0)
    wins = min(max(item.wins, 0), uses)
    return max(relevance, 0.0) * (wins + 1) / (uses + 2)
