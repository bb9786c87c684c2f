"""Hybrid retrieval: lexical, dense, fuzzy tags, speaker and time priors, graph expansion.

Channels each rank a candidate pool. By default each channel's scores are divided by
its best score and summed with weights ("max"); min-max normalisation ("minmax") and
weighted reciprocal-rank fusion ("rrf", Cormack et al. 2009) are the other choices.
RRF gives a weak channel's top ranks as much say as a strong one's (dense is far weaker
than bm25 on conversations); min-max blows tiny bm25 differences in a small store up to
the full range, so "max" is the default.
Priors then scale the fused score (a named speaker, a named time span, recency; among the
best candidates, a stated time when the question asks when, and less weight for sentences
that ask); a walk
of one or two hops over the edges table lets a strong hit pull in its neighbours (the
turns that answer a question, the turn a fact was derived from); last, each turn is
scaled by the best score in its session (see ``_session_prior``). With an embedder
bound, the lexical channel also re-runs with the tenant's words nearest to the query's
(see ``expand.py``).

The default weights are the ones ``memstrata bench retrieval --cv``'s knob search
(``bench/retrieval_cv.py``) chose over the LoCoMo dev split; the same search, run with
one conversation left out at a time, is how their worth on unseen conversations is
measured (docs/benchmarks/retrieval.md: `bench retrieval --cv`).

Every weight is a knob in :class:`SearchWeights`; a weight of 0 switches a channel off.

A hit's ``score`` is calibrated to [0, 1] (``Retriever._relevance``): fused scores only rank,
and their scale changes from query to query, so a caller could not cut at one. The best
hit scores the query's *relevance* (the share of the query's words it holds, or its
cosine to the query mapped to [0, 1]), and the others that relevance times their share of
the best fused score. ``min_score`` drops the hits below it; ``Memory.search`` applies
:data:`DEFAULT_MIN_SCORE`, so a query nothing in the memory answers (``"xyzzy plugh"``)
returns none there.
"""

from __future__ import annotations

import heapq
import json
import warnings
import weakref
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from functools import cache, partial
from operator import itemgetter
from typing import Any, Literal, TypedDict

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from rapidfuzz import fuzz, process

from . import text as textmod
from .embed import Embedder
from .expand import TermExpander, vocabulary_words
from .locking import stored_value
from .models import Hit, as_utc, with_caption
from .passages import PASSAGE_CHARS, best_passage
from .query import QueryAnalysis, analyse
from .reembed import EmbedderMismatchWarning, embedder_gap
from .store import Facets, Filters, Ref, node_type
from .store.protocol import MemoryStore
from .timeparse import resolve_times, says_when

DEFAULT_MIN_SCORE = 0.1
"""The calibrated score under which a hit is not returned (see ``Retriever.search``)."""
COSINE_NONE, COSINE_FULL = 0.2, 0.6
"""A dense cosine at or below ``COSINE_NONE`` says nothing of relevance; one at
``COSINE_FULL`` or above counts as fully relevant (the default static encoder's
unrelated short texts score about 0-0.2 against a question)."""

class _CommonTerms(TypedDict):
    """How a lexical search treats the query's common terms (``SearchWeights``' fields)."""

    common_share: float
    common_min_docs: int
    common_budget: int


class _Scoring(_CommonTerms):
    """Every scoring option a lexical channel passes to ``lexical_refs``."""

    context_weight: float
    idf_shift: float


Channel = tuple[str, float, list[tuple[Ref, float]]]
"""One ranked list of a search: its name (``lexical``, ``expansion``,
``speaker_lexical``, ``speaker``, ``dense``, ``speaker_dense``, ``tags``), its weight, its ``(ref,
score)`` pairs best first."""


class SearchWeights(BaseModel):
    """Fusion knobs. Channel weights scale each channel's part of the fused score (under
    either ``fusion``: ``max`` or ``rrf``); boosts multiply fused scores. An unknown knob
    is an error."""

    model_config = ConfigDict(extra="forbid")  # a misspelt knob would change nothing

    lexical: float = Field(1.0, ge=0, description="bm25 over turns and items")
    idf_shift: float = Field(
        1.0, ge=0, description="added to every query term's bm25 idf: how much one more "
        "matched query word counts, whatever its rarity")
    dense: float = Field(0.4, ge=0, description="cosine over stored embeddings")
    speaker_channels: float = Field(
        0.25, ge=0, description="lexical + dense restricted to the speakers the query names"
    )
    tags: float = Field(0.5, ge=0, description="fuzzy match of query words to item tags")
    context: float = Field(
        0.5, ge=0, description="bm25 weight of the turns just before and after a turn"
    )
    expansion: float = Field(
        1.0, ge=0, description="bm25 re-run with the tenant's words nearest to the query's "
        "in the embedder's space (needs an embedder; see expand.py)")
    expansion_sim: float = Field(
        0.45, ge=-1, le=1, description="least cosine of an expansion word to a query word")
    expansion_per_word: int = Field(3, ge=0, description="expansion words per query word")
    max_query_terms: int = Field(
        16, ge=0, description="a query with more distinct content words is searched by its "
        "rarest this many, without the expansion re-run (0 = no cap)")
    expansion_max_rows: int = Field(
        50_000, ge=0, description="skip expansion for tenants with more rows than this "
        "(their vocabulary would be read inside a query; 0 = never skip)")
    session: float = Field(
        0.6, ge=0, description="x(1+w*s) for turns, s = the best score in the turn's session "
        "over the best score overall")
    speaker_boost: float = Field(1.0, ge=0, description="x(1+w) for hits by a named speaker")
    speaker_field: float = Field(
        0.3, ge=0, description="bm25 added to a lexical hit said by a speaker the question "
        "names or means: the speaker as a field of one word")
    role_boost: float = Field(
        1.0, ge=0, description="x(1+w) for hits by a chat role the question means by "
        "pronoun: the user for \"I\"/\"my\", the assistant for \"you\" (query.py)")
    time_boost: float = Field(
        2.0, ge=0, description="x(1+w) for hits said inside a named time span, or (among the "
        "text_pool best) saying a time inside it")
    when_boost: float = Field(
        0.4, ge=0, description="x(1+w) for hits that state a time or a length of time, when "
        "the question asks when or how long (see Retriever._text_priors)")
    where_boost: float = Field(
        0.4, ge=0, description="x(1+w) for hits that name a place, when the question asks "
        "where or which city, country, ... (see Retriever._text_priors)")
    asking: float = Field(
        0.35, ge=0, le=1, description="x(1-w*q) for hits, q the share of their words in "
        "sentences that ask a question (see Retriever._text_priors)")
    text_pool: int = Field(30, ge=0, description="best candidates whose text the when, "
                                                 "asking and told-of time priors read")
    recency: float = Field(
        0.0, ge=0, description="x(1+w*r), r in [0,1] the hit's event-time rank, newest = 1"
    )
    graph: float = Field(0.1, ge=0, description="share of a seed's score given to neighbours")
    graph_seeds: int = Field(10, ge=0, description="top hits whose neighbours are expanded")
    graph_second: float = Field(
        1.0, ge=0, description="share given to nodes two edges from a seed, relative to "
        "direct neighbours (0 = one hop only)")
    fusion: Literal["rrf", "minmax", "max"] = Field(
        "max", description="score sum scaled by each channel's best (max), min-max, or RRF"
    )
    rrf_k: int = Field(60, ge=1, description="RRF constant")
    pool: int = Field(200, ge=1, description="candidates taken from each channel")
    tag_cutoff: float = Field(85.0, ge=0, le=100, description="rapidfuzz ratio for a tag match")
    common_share: float = Field(
        0.02, ge=0, le=1, description="query terms in more than this share of an index's "
        "rows only add to rows that hold a rarer query term (0 = never); see Store.lexical")
    common_min_docs: int = Field(
        20_000, ge=0, description="index size from which common terms are treated so")
    common_budget: int = Field(
        20_000, ge=0, description="also common: the terms past this many matched rows, "
        "rarest terms first (0 = no budget), once the index has common_min_docs rows; "
        "see Store.lexical")


# (tenant, model) pairs whose vectors were checked, per store: once, however many
# retrievers search it (the cognitive recall makes one a call).
_CHECKED: weakref.WeakKeyDictionary[Any, set[tuple[str, str]]] = weakref.WeakKeyDictionary()


class Retriever:
    """Searches one store. Bind an embedder to enable the dense channel.

    Example:
        >>> r = Retriever(store, embedder)                       # doctest: +SKIP
        >>> r.search("u1", "When did Ana go to the support group?", k=5)
    """

    def __init__(
        self, store: MemoryStore, embedder: Embedder | None = None,
        weights: SearchWeights | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.weights = weights or SearchWeights()
        self._expander: TermExpander | None = None

    def analyse(self, user_id: str, query: str, now: datetime | None = None) -> QueryAnalysis:
        """The query understanding step alone (useful for debugging a search)."""
        return analyse(query, self.store.speakers(user_id), now)

    def search(
        self,
        user_id: str,
        query: str,
        k: int = 10,
        *,
        filters: Filters | None = None,
        nodes: Sequence[str] = ("turn", "item"),
        now: datetime | None = None,
        min_score: float = 0.0,
    ) -> list[Hit]:
        """The ``k`` best turns and items of one tenant for ``query``, best first.

        Each hit's ``score`` is in [0, 1], the best hit's being the query's relevance to
        the memory (see the module); hits scoring under ``min_score`` are left out, so a
        search may return fewer than ``k`` hits, or none. The default, 0, keeps every hit
        any channel scored above zero, as the programs that read a ranking want;
        ``Memory.search`` applies :data:`DEFAULT_MIN_SCORE`.

        The first search of a tenant in a store warns (:class:`~.reembed.EmbedderMismatchWarning`)
        when another model embedded more of its rows than the bound embedder did: the
        dense channel reads only that embedder's vectors (see :mod:`~.reembed`)."""
        if k <= 0:
            return []
        if self.embedder is not None and (user_id, self.embedder.name) not in (
                checked := _CHECKED.setdefault(self.store, set())):
            checked.add((user_id, self.embedder.name))
            if gap := embedder_gap(self.store, user_id, self.embedder):
                warnings.warn(gap, EmbedderMismatchWarning, stacklevel=3)  # Memory.search's caller
        with self.store.reading():
            hits = self._search(user_id, query, k, filters, nodes, now)
        return [h for h in hits if h.score >= min_score]

    def _search(self, user_id: str, query: str, k: int, filters: Filters | None,
                nodes: Sequence[str], now: datetime | None) -> list[Hit]:
        w = self.weights
        filters = filters or Filters()
        qa = self._bounded(user_id, self.analyse(user_id, query, now))
        allowed = self.store.allowed_refs(user_id, filters) if filters.active() else None
        rankings: list[Channel] = []

        query_vec = self._query_vector(query) if (w.dense or w.speaker_channels) else None
        # A big tenant's dense pass runs on another core while the index is read (the
        # SQLite store's ``dense_ahead``; PostgreSQL ranks in the database).
        ahead = getattr(self.store, "dense_ahead", None)
        started = (ahead(user_id, self.embedder.name, query_vec, w.pool,
                         qa.speakers if w.speaker_channels and "turn" in nodes else ())
                   if ahead is not None and query_vec is not None and w.dense
                   and allowed is None and self.embedder is not None else None)
        # Expansion terms are found after the first bm25 run (``_lexical_channels``), so
        # that run's index reads overlap a dense pass started ahead; once a search.
        expand = cache(partial(self._expansion_terms, user_id, qa))
        for node in nodes:
            rankings += self._lexical_channels(user_id, qa, node, filters, expand)
        expansion = expand()
        if started is not None:
            started.result()
        if query_vec is not None:
            rankings += self._dense_channels(user_id, qa, query_vec, allowed, nodes)
        if w.tags and "item" in nodes:
            rankings.append(("tags", w.tags, self._tag_channel(user_id, qa, allowed)))
        if w.speaker_channels and qa.speakers and "turn" in nodes and not any(
                ranked for _, _, ranked in rankings):
            # No word matched ("Caroline", "Melanie's favourite food?" in a memory that never
            # says food): the speakers are fields, not words, so their newest turns answer.
            for name in qa.speakers:
                refs = self.store.allowed_refs(user_id, _narrowed(filters, name))
                newest = heapq.nlargest(w.pool, (r for r in refs if r[0] == "turn"))
                rankings.append(("speaker", w.speaker_channels, [(r, 1.0) for r in newest]))

        scores, parts = _fuse(rankings, w.fusion, w.rrf_k)
        if not scores:
            return []
        # The priors read each candidate's speaker and time: skip the lookup (hundreds of
        # ids) when no prior can apply.
        info: dict[Ref, Facets] = {}
        if (w.speaker_boost and qa.speakers) or (w.time_boost and qa.start) or w.recency:
            info = self.store.facets(user_id, list(scores))
            self._apply_priors(scores, info, qa)
        rows: dict[str, dict[str, Any]] = {}
        if w.text_pool and (w.asking or (w.when_boost and qa.asks_when)
                            or (w.where_boost and qa.asks_where)
                            or (w.time_boost and qa.start)):
            rows = self._text_priors(user_id, scores, qa)
        self._expand_graph(user_id, scores, allowed, nodes)
        if w.session:
            self._session_prior(user_id, scores, info, k)

        # A candidate nothing scored above zero (only an opposed vector found it) is no
        # hit: a search returns fewer hits rather than zero-score filler.
        best = heapq.nlargest(k, ((r, s) for r, s in scores.items() if s > 0),
                              key=itemgetter(1))
        ids = self.store.ids(user_id, [r for r, _ in best])
        top = [(ids[r], score, r) for r, score in best if r in ids]
        # The text priors' rows are this search's rows too: read only the others.
        rows = {i: rows[i] for i, _, _ in top if i in rows}
        rows |= self.store.nodes(user_id, [i for i, _, _ in top if i not in rows])
        words = _content_words(qa)
        hits = [_hit(node_id, fused, rows[node_id], _contributions(ref, parts), words)
                for node_id, fused, ref in top if node_id in rows]
        cosines = {ref: c for name, _, ranked in rankings if name == "dense" for ref, c in ranked}
        by_id = {node_id: ref for node_id, _, ref in top}
        relevance = self._relevance(user_id, qa, hits, [cosines.get(by_id[h.id]) for h in hits],
                                    expansion)
        top_fused = hits[0].fused if hits else 0.0
        for hit in hits:
            hit.score = (round(relevance * hit.fused / top_fused, 6) if top_fused > 0
                         else 0.0)
        return hits

    def _relevance(self, user_id: str, qa: QueryAnalysis, hits: list[Hit],
                   cosines: list[float | None], expansion: Sequence[str] = ()) -> float:
        """How well the query matches this memory at all, in [0, 1]: its best hit's
        relevance (``Hit.score`` is that times the hit's share of the best fused score,
        so scores fall as the ranking does).

        A hit's relevance is the larger of two. The share of the query's content words
        (less the speakers it names or means) its text holds: a word it lacks counts half
        when the hit holds one of the query's expansion words instead (an expansion being
        the encoder's too), a tag the tag channel matched holds one word, and a query of
        nothing but speakers is fully answered by their turns. And its dense cosine mapped
        from ``COSINE_NONE``..``COSINE_FULL`` to 0..1, scaled by the share of the content
        words the memory or the encoder knows: a word neither has ever seen ("xyzzy")
        carries no meaning an encoder could match, whatever cosine its sub-word pieces
        reach.
        """
        words = _content_words(qa)
        known = 1.0
        if words and any(c is not None for c in cosines):
            held = {t for t, n in self.store.term_docs(user_id, sorted(words), cap=1).items()
                    if n}
            knows = getattr(self.embedder, "knows", None)
            unknown = [w for w in words if w not in held
                       and not (knows is not None and knows(w))]
            known = 1.0 - len(unknown) / len(words)
        near = set(expansion)
        best = 0.0
        for hit, cosine in zip(hits, cosines, strict=True):
            if words:
                held = set(textmod.tokens(hit.text))
                matched = min(len(words & held) + ("tags" in hit.channels), len(words))
                stand_ins = min(len(near & held), len(words) - matched)
                lexical = (matched + 0.5 * known * stand_ins) / len(words)
            else:
                lexical = float(hit.speaker in qa.speakers)
            dense = 0.0 if cosine is None else known * min(max(
                (cosine - COSINE_NONE) / (COSINE_FULL - COSINE_NONE), 0.0), 1.0)
            best = max(best, lexical, dense)
        return best

    def _bounded(self, user_id: str, qa: QueryAnalysis) -> QueryAnalysis:
        """A query of more than ``max_query_terms`` distinct content words (a pasted error
        message, a paragraph) searched by its rarest ones in the tenant (ties: the
        earlier first), and marked ``bounded``: the expansion re-run exists for short
        questions that lack words, and on a long query it costs a search and brings
        nothing the query does not already say."""
        limit = self.weights.max_query_terms
        words = list(dict.fromkeys(t for t in qa.tokens if t in _content_words(qa)))
        if not limit or len(words) <= limit:
            return qa
        docs = self.store.term_docs(user_id, words)
        keep = set(sorted(words, key=lambda t: docs.get(t, 0))[:limit])  # stable: ties in order
        keep |= set(qa.tokens) - set(words)  # the speakers' names stay
        return replace(qa, tokens=[t for t in qa.tokens if t in keep], bounded=True)

    # -- channels -------------------------------------------------------------------------

    def _lexical_channels(self, user_id: str, qa: QueryAnalysis, node: str, filters: Filters,
                          expand: Callable[[], list[str]] | None = None) -> list[Channel]:
        """bm25, its expansion re-run (``expand`` gives the expansion terms, called after
        the first run), and bm25 within each named speaker's turns."""
        w = self.weights
        scoring: _Scoring = {"context_weight": w.context, "idf_shift": w.idf_shift,
                             "common_share": w.common_share,
                             "common_min_docs": w.common_min_docs,
                             "common_budget": w.common_budget}
        out: list[Channel] = []
        lexical = self.store.lexical_refs
        if w.lexical:
            hits = lexical(user_id, qa.tokens, node=node, k=w.pool, filters=filters,
                           **scoring)
            if w.speaker_field and node == "turn" and qa.speakers and hits:
                hits = self._speaker_field(user_id, qa, hits)
            out.append(("lexical", w.lexical, hits))
            expansion = expand() if expand is not None else []
            if expansion:
                # The query's own words stay in: the new words add candidates that share
                # the query's topic; alone they drift (a word's neighbours are not all apt).
                out.append(("expansion", w.expansion, lexical(
                    user_id, qa.content_tokens + expansion, node=node, k=w.pool,
                    filters=filters, **scoring)))
        if w.speaker_channels and node == "turn":
            for name in qa.speakers:
                out.append(("speaker_lexical", w.speaker_channels, lexical(
                    user_id, qa.content_tokens, node=node, k=w.pool,
                    filters=_narrowed(filters, name), **scoring)))
        return out

    def _speaker_field(self, user_id: str, qa: QueryAnalysis,
                       hits: list[tuple[Ref, float]]) -> list[tuple[Ref, float]]:
        """bm25's hits, each said by a speaker the question names or means raised by
        ``speaker_field``: the speaker scores as a field of its turn, as the name did (on
        every turn's text) before it was one."""
        said = self.store.facets(user_id, [r for r, _ in hits])
        lift = self.weights.speaker_field
        out = [(r, s + lift if r in said and said[r].speaker in qa.speakers else s)
               for r, s in hits]
        return sorted(out, key=lambda pair: -pair[1])  # stable: bm25's tie order stays

    def _dense_channels(self, user_id: str, qa: QueryAnalysis, query_vec: np.ndarray,
                        allowed: set[Ref] | None, nodes: Sequence[str]) -> list[Channel]:
        """Cosine over all the tenant's vectors, and within each named speaker's turns
        (``Store.dense_refs``: NumPy over the cached matrix, or pgvector in PostgreSQL)."""
        w = self.weights
        assert self.embedder is not None  # the query vector came from it
        name = self.embedder.name
        dense = self.store.dense_refs
        out: list[Channel] = []
        if w.dense:
            out.append(("dense", w.dense, dense(user_id, name, query_vec, w.pool,
                                                allowed=allowed, nodes=nodes)))
        if w.speaker_channels and qa.speakers and "turn" in nodes:
            for person in qa.speakers:
                out.append(("speaker_dense", w.speaker_channels, dense(
                    user_id, name, query_vec, w.pool, allowed=allowed, nodes=("turn",),
                    speaker=person)))
        return out

    def _expansion_terms(self, user_id: str, qa: QueryAnalysis) -> list[str]:
        """Index terms of the tenant's text nearest to the query's words (see expand.py)."""
        w = self.weights
        if self.embedder is None or qa.bounded or not (
                w.lexical and w.expansion and w.expansion_per_word):
            return []
        if self._expander is None or self._expander.max_rows != w.expansion_max_rows:
            self._expander = TermExpander(self.store, self.embedder,
                                          max_rows=w.expansion_max_rows)
        # Names are not concepts: a person's nearest words are other names.
        names = {t for s in self.store.speakers(user_id) for t in textmod.words(s)}
        words = [t for t in vocabulary_words(qa.text) if t not in names]
        exclude = {t for s in self.store.speakers(user_id) for t in textmod.tokens(s)}
        return self._expander.expand(user_id, words, min_sim=w.expansion_sim,
                                     per_word=w.expansion_per_word, exclude=exclude)

    def _query_vector(self, query: str) -> np.ndarray | None:
        if self.embedder is None or not query.strip():
            return None
        return self.embedder.encode([query])[0]

    def _tag_channel(self, user_id: str, qa: QueryAnalysis, allowed: set[Ref] | None
                     ) -> list[tuple[Ref, float]]:
        vocabulary = self.store.tag_vocabulary(user_id)
        if not vocabulary:
            return []
        words = sorted({w for w in textmod.words(qa.text) if w not in textmod.STOP_WORDS})
        if not words:
            return []
        # All words against all tags in one C call (process.extract per word cost 2.7x as
        # much at 2,000 tags); then, as extract(limit=5) did, each word's 5 best tags,
        # ties in vocabulary order.
        cutoff = self.weights.tag_cutoff
        scores = process.cdist(words, vocabulary, scorer=fuzz.ratio, score_cutoff=cutoff,
                               dtype=np.float32, workers=1)
        matched: set[str] = set()
        for row in scores:
            hits = np.flatnonzero(row >= cutoff)
            for j in hits[np.argsort(-row[hits], kind="stable")[:5]]:
                matched.add(vocabulary[j])
        refs = self.store.tagged(user_id, sorted(matched), self.weights.pool)
        return [(r, 1.0) for r in refs if allowed is None or r in allowed]

    # -- priors and expansion -------------------------------------------------------------

    def _apply_priors(self, scores: dict[Ref, float], info: dict[Ref, Facets],
                      qa: QueryAnalysis) -> None:
        w = self.weights
        start = qa.start.isoformat() if qa.start else None
        end = qa.end.isoformat() if qa.end else None
        recency: dict[Ref, float] = {}
        if w.recency:  # ranks every candidate by time: skipped when it would weigh nothing
            newest = sorted(info, key=lambda i: info[i].event_time or "")
            recency = {node_id: n / max(len(newest) - 1, 1) for n, node_id in enumerate(newest)}
        for node_id, row in info.items():
            factor = 1.0 + w.recency * recency.get(node_id, 0.0)
            if w.speaker_boost and qa.speakers and row.speaker in qa.speakers:
                factor *= 1.0 + (w.speaker_boost if row.speaker not in qa.addressed
                                 else w.role_boost)
            when = row.event_time
            if w.time_boost and start and end and when and start <= when <= end:
                factor *= 1.0 + w.time_boost
            scores[node_id] *= factor

    def _text_priors(self, user_id: str, scores: dict[Ref, float], qa: QueryAnalysis
                     ) -> dict[str, dict[str, Any]]:
        """Priors on what the ``text_pool`` best candidates say, read once.

        - A "when" or "how long" question is answered by a hit that says when ("last May",
          "two days ago", "for a month"), whatever else it talks about: x(1+``when_boost``)
          (the answer-type matching of question answering, with time as the one type).
        - A sentence that asks a question is rarely the answer to one: a hit is scaled by
          1 - ``asking`` x the share of its words in such sentences (``text.asking_share``).
        - A question that names a time span asks when a thing happened, and people tell of
          a thing after it happened ("last Tuesday I ..."): a hit said outside the span
          that names a time inside it, read against when it was said
          (``timeparse.resolve_times``), gets the time prior (x(1+``time_boost``)) that
          the hits said inside the span got.

        Only the best candidates are read: these priors reorder the top of the ranking,
        and reading every candidate's text would cost a query hundreds of rows. Returns
        the rows read, by id.
        """
        w = self.weights
        ids = self.store.ids(user_id, heapq.nlargest(w.text_pool, scores,
                                                      key=scores.__getitem__))
        rows = self.store.nodes(user_id, list(ids.values()))
        when = w.when_boost if qa.asks_when else 0.0
        where = w.where_boost if qa.asks_where else 0.0
        span = (qa.start, qa.end) if w.time_boost and qa.start and qa.end else None
        for ref, node_id in ids.items():
            if (row := rows.get(node_id)) is None:
                continue
            factor = 1.0 - w.asking * textmod.asking_share(row["text"]) if w.asking else 1.0
            if when and says_when(row["text"]):
                factor *= 1.0 + when
            if where and textmod.names_place(row["text"]):
                factor *= 1.0 + where
            if span and _tells_of(row, *span):
                factor *= 1.0 + w.time_boost
            scores[ref] *= factor
        return rows

    def _session_prior(self, user_id: str, scores: dict[Ref, float],
                       info: dict[Ref, Facets], k: int | None = None) -> None:
        """Scale each turn by how well the best turn of its session scored.

        Passage retrieval gains from the score of the document around a passage (Callan
        1994); a conversation's session is that document: it keeps to a few topics, and
        the turns that answer a question sit near the turn that matched it best. (A
        session's best turn scored better as its measure than the sum of its best three
        or ten turns.)

        With ``k`` (the search's last step is its top ``k``), a turn that cannot reach the
        top ``k`` even at the largest factor, x(1+``session``), is left unscaled and its
        session is not read: every factor is at least 1, so the ``k``-th best score now
        is a floor under the ``k``-th best after, and such a turn is never its session's
        best beside a turn that can reach it. The top ``k`` is then the same as scaling
        every turn (a search's candidates are hundreds; its turns worth scaling, dozens).
        """
        best_overall = max(scores.values(), default=0.0)
        if best_overall <= 0:
            return
        turns = [r for r in scores if r[0] == "turn"]
        positive = [s for s in scores.values() if s > 0]
        if k is not None and 0 < k < len(positive):
            least, top = heapq.nlargest(k, positive)[-1], 1.0 + self.weights.session
            turns = [r for r in turns if scores[r] * top >= least]
        if not turns:
            return
        missing = [i for i in turns if i not in info]
        if missing:
            info.update(self.store.facets(user_id, missing))
        best: dict[tuple[str | None, str | None], float] = defaultdict(float)
        for node_id in turns:
            if (row := info.get(node_id)) is not None:
                key = (row.conversation_id, row.session_id)
                best[key] = max(best[key], scores[node_id])
        for node_id in turns:
            if (row := info.get(node_id)) is not None:
                share = best[(row.conversation_id, row.session_id)] / best_overall
                scores[node_id] *= 1.0 + self.weights.session * share

    def _expand_graph(self, user_id: str, scores: dict[Ref, float], allowed: set[Ref] | None,
                      nodes: Sequence[str]) -> None:
        """Give each neighbour of the ``graph_seeds`` best hits ``graph`` x the edge
        weight x its seed's score; with ``graph_second`` > 0 the walk takes a second hop,
        at that share again (in a conversation: the turns two away from a hit, where the
        answer to a question asked about the hit often sits)."""
        w = self.weights
        if not w.graph or not w.graph_seeds:
            return
        seeds = self.store.ids(user_id, heapq.nlargest(w.graph_seeds, scores,
                                                        key=scores.__getitem__))
        seed_refs = {node_id: ref for ref, node_id in seeds.items()}
        reached = self.store.neighbors(user_id, list(seeds.values()),
                                       hops=2 if w.graph_second else 1)
        refs = self.store.refs(user_id, [n for n in reached if node_type(n) in nodes])
        for node_id, (depth, weight, seed) in reached.items():
            ref = refs.get(node_id)
            if ref is None or (allowed is not None and ref not in allowed):
                continue
            share = w.graph * (1.0 if depth == 1 else w.graph_second)
            scores[ref] = scores.get(ref, 0.0) + share * weight * scores[seed_refs[seed]]


def _tells_of(row: dict[str, Any], start: datetime, end: datetime) -> bool:
    """Whether a node said outside ``start``..``end`` names a time inside it (its time
    phrases read against when it was said; one said inside was lifted by the time prior)."""
    if not row.get("event_time") or not says_when(row["text"]):  # cached, and most say none
        return False
    said = as_utc(datetime.fromisoformat(row["event_time"]))
    if said is None or start <= said <= end:
        return False
    return any(s.start <= end and s.end >= start for s in resolve_times(row["text"], said))


def _fuse(rankings: list[Channel], how: str, k: int
          ) -> tuple[dict[Ref, float], list[tuple[str, dict[Ref, float]]]]:
    """Weighted fusion of several named, ranked ``(ref, score)`` lists, by rank or by
    score: the fused scores, and what each channel added to each of its refs."""
    scores: dict[Ref, float] = defaultdict(float)
    parts: list[tuple[str, dict[Ref, float]]] = []
    for name, weight, ranked in rankings:
        if not ranked:
            continue
        part: dict[Ref, float] = {}
        if how == "rrf":
            for rank, (node_id, _) in enumerate(ranked, start=1):
                part[node_id] = weight / (k + rank)
        else:
            values = [s for _, s in ranked]
            top = max(values)
            # Scaled by the channel's best score; floored at 0 so no hit costs a candidate.
            low = 0.0 if how == "max" else min(values)
            span = top - low
            for node_id, score in ranked:
                # All hits tied (one hit, or tags matched): each gets the full weight.
                part[node_id] = weight * (max(score - low, 0.0) / span if span > 0 else 1.0)
        for node_id, value in part.items():
            scores[node_id] += value
        parts.append((name, part))
    return dict(scores), parts


def _contributions(ref: Ref, parts: list[tuple[str, dict[Ref, float]]]) -> dict[str, float]:
    """What each channel added to ``ref``'s fused score (a speaker channel summed over the
    speakers named), before the priors scaled it and the graph added to it."""
    out: dict[str, float] = defaultdict(float)
    for name, part in parts:
        if part.get(ref):
            out[name] += part[ref]
    return {name: round(value, 6) for name, value in out.items()}


def _narrowed(filters: Filters, speaker: str) -> Filters:
    """``filters`` narrowed to one speaker's turns."""
    return Filters(kinds=filters.kinds, speaker=speaker, conversation_id=filters.conversation_id,
                   start=filters.start, end=filters.end)


def _content_words(qa: QueryAnalysis) -> set[str]:
    """The query's index tokens less the speakers it names or means."""
    return set(qa.content_tokens) - {t for s in qa.speakers for t in textmod.tokens(s)}


def _hit(node_id: str, fused: float, row: dict[str, Any], channels: dict[str, float],
         words: set[str]) -> Hit:
    """A hit with its ``fused`` score (``score`` is set by the calibration)."""
    with stored_value(node_id):
        text = with_caption(row["text"], json.loads(row.get("metadata") or "{}"))
        quote = best_passage(text, words)[0] if len(text) > PASSAGE_CHARS else None
        return Hit(
            id=node_id, node=node_type(node_id), kind=row["kind"], text=text, score=0.0,
            fused=fused, quote=quote,
            speaker=row.get("speaker"), conversation_id=row.get("conversation_id"),
            turn_id=row.get("turn_id"),
            event_time=(datetime.fromisoformat(row["event_time"]) if row.get("event_time")
                        else None),
            channels=channels,
        )
