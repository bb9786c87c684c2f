"""Hybrid retrieval: channels, filters, priors, graph expansion, and the fake embedder."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import numpy as np
import pytest

from memstrata.memory import (
    Edge,
    Embedder,
    FactItem,
    Filters,
    Retriever,
    SearchWeights,
    SemanticItem,
    Store,
    Turn,
)

U = "retrieval-user"
LEXICAL_OFF = SearchWeights(lexical=0, speaker_channels=0, tags=0, graph=0, speaker_boost=0,
                            time_boost=0)


def _turns(store: Store) -> list[str]:
    rows = [
        ("Caroline", "I went to the LGBTQ support group yesterday", datetime(2023, 5, 8)),
        ("Melanie", "That sounds lovely, was it helpful?", datetime(2023, 5, 8)),
        ("Caroline", "Yes, it really was", datetime(2023, 5, 8)),
        ("Melanie", "I painted a lake sunrise last year", datetime(2023, 7, 1)),
        ("Caroline", "My grandma gave me a necklace from Sweden", datetime(2023, 7, 1)),
    ]
    return store.add_turns([
        Turn(user_id=U, conversation_id="conv", session_id=f"s{when.month}", turn_id=f"D1:{n}",
             seq=n, speaker=speaker, text=text, event_time=when)
        for n, (speaker, text, when) in enumerate(rows)
    ])


def test_fake_embedder_is_deterministic_unit_and_meaningful(embedder) -> None:
    assert isinstance(embedder, Embedder)
    vecs = embedder.encode(["violin lessons today", "violin lessons tomorrow",
                            "pottery class", "", "🎻"])
    assert vecs.dtype == np.float32 and vecs.shape == (5, 64)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0)
    assert np.array_equal(vecs, embedder.encode(["violin lessons today", "violin lessons tomorrow",
                                                 "pottery class", "", "🎻"]))
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]
    assert embedder.encode([]).shape == (0, 64)


def test_lexical_search_ranks_the_matching_turn_first(store: Store) -> None:
    ids = _turns(store)
    hits = Retriever(store).search(U, "When did Caroline go to the LGBTQ support group?", k=3)
    assert hits[0].id == ids[0]
    assert hits[0].node == "turn" and hits[0].kind == "turn"
    assert hits[0].turn_id == "D1:0"
    assert hits[0].speaker == "Caroline"
    assert hits[0].conversation_id == "conv"
    assert hits[0].event_time == datetime(2023, 5, 8, tzinfo=UTC)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_context_column_finds_the_answer_to_a_question(store: Store) -> None:
    ids = _turns(store)
    # turn 2 ("Yes, it really was") shares no word with the query; its predecessor does
    hits = Retriever(store, weights=SearchWeights(graph=0)).search(U, "helpful", k=5)
    assert ids[2] in [h.id for h in hits]
    no_context = Retriever(store, weights=SearchWeights(graph=0, context=0))
    assert [h.id for h in no_context.search(U, "helpful", k=5)] == [ids[1]]


def test_dense_channel_alone_finds_shared_words(store: Store, embedder) -> None:
    a = store.add(SemanticItem(user_id=U, text="violin lessons on tuesday"))
    b = store.add(SemanticItem(user_id=U, text="pottery class on friday"))
    store.set_embeddings(U, [a, b], embedder.encode(["violin lessons on tuesday",
                                                     "pottery class on friday"]), embedder.name)
    hits = Retriever(store, embedder, LEXICAL_OFF).search(U, "violin lessons", k=2)
    assert hits[0].id == a
    assert Retriever(store, None, LEXICAL_OFF).search(U, "violin lessons", k=2) == []
    assert Retriever(store, embedder, LEXICAL_OFF).search(U, "   ", k=2) == []


def test_nodes_argument_restricts_result_types(store: Store, embedder) -> None:
    turn_ids = _turns(store)
    item = store.add(FactItem(user_id=U, text="Caroline's necklace is from Sweden",
                              tags=["necklace"]))
    texts = [r["text"] for r in store.nodes(U, [*turn_ids, item]).values()]
    store.set_embeddings(U, [*turn_ids, item], embedder.encode(texts), embedder.name)
    store.add_edges([Edge(user_id=U, src=item, dst=turn_ids[4], relation="derived_from")])
    retriever = Retriever(store, embedder)
    only_turns = retriever.search(U, "necklace Sweden", k=10, nodes=("turn",))
    only_items = retriever.search(U, "necklace Sweden", k=10, nodes=("item",))
    assert only_turns and all(h.node == "turn" for h in only_turns)
    assert [h.id for h in only_items] == [item]
    both = retriever.search(U, "necklace Sweden", k=10)
    assert {item, turn_ids[4]} <= {h.id for h in both}


def test_filters_speaker_kind_conversation_and_time(store: Store, embedder) -> None:
    turn_ids = _turns(store)
    fact = store.add(FactItem(user_id=U, text="Caroline went to a support group",
                              speaker="Caroline"))
    note = store.add(SemanticItem(user_id=U, text="support groups help people",
                                  speaker="Melanie"))
    texts = [r["text"] for r in store.nodes(U, [*turn_ids, fact, note]).values()]
    store.set_embeddings(U, [*turn_ids, fact, note], embedder.encode(texts), embedder.name)
    r = Retriever(store, embedder)
    facts = r.search(U, "support group", k=10, filters=Filters(kinds=["fact"]))
    assert [h.id for h in facts] == [fact]
    turns = r.search(U, "support group", k=10, filters=Filters(kinds=["turn"]))
    assert turns and all(h.node == "turn" for h in turns)
    mel = r.search(U, "support group lake", k=10, filters=Filters(speaker="Melanie"))
    assert mel and all(h.speaker == "Melanie" for h in mel)
    july = r.search(U, "support group necklace lake", k=10,
                    filters=Filters(start=datetime(2023, 7, 1), end=datetime(2023, 7, 31)))
    assert {h.id for h in july} == {turn_ids[3], turn_ids[4]}
    assert r.search(U, "support group", k=10, filters=Filters(conversation_id="nope")) == []


def _twins(store: Store, filler: bool = False) -> list[str]:
    """Two turns with the same words (Jon in January, Gina in June), plus a weaker match."""
    rows = [("Jon", "I opened the dance studio", datetime(2023, 1, 5)),
            ("Gina", "I opened the dance studio", datetime(2023, 6, 5))]
    if filler:
        rows.append(("Ann", "a studio, somewhere, with lots of other words in it",
                     datetime(2022, 3, 3)))
    return store.add_turns([
        Turn(user_id=U, conversation_id="c", session_id=f"s{n}", turn_id=f"D{n}:1", seq=n,
             speaker=speaker, text=text, event_time=when)
        for n, (speaker, text, when) in enumerate(rows)
    ])


def test_named_speaker_ranks_that_speakers_turn_first(store: Store) -> None:
    jon, gina = _twins(store)
    plain = Retriever(store, weights=SearchWeights(graph=0))
    assert plain.search(U, "Did Gina open the dance studio?", k=2)[0].id == gina
    assert plain.search(U, "Did Jon open the dance studio?", k=2)[0].id == jon


def test_time_span_prior_lifts_the_hit_inside_the_span(store: Store) -> None:
    jon, gina, _ = _twins(store, filler=True)
    plain = Retriever(store, weights=SearchWeights(graph=0))
    assert plain.search(U, "Who opened the dance studio in June 2023?", k=3)[0].id == gina
    assert plain.search(U, "Who opened the dance studio in January 2023?", k=3)[0].id == jon


def test_time_span_prior_breaks_a_tie_between_the_only_matches(store: Store) -> None:
    """Two equally good (and the only) matches: the one inside the named span must win."""
    jon, gina = _twins(store)
    plain = Retriever(store, weights=SearchWeights(graph=0))
    june = plain.search(U, "Who opened the dance studio in June 2023?", k=2)
    january = plain.search(U, "Who opened the dance studio in January 2023?", k=2)
    assert june[0].id == gina and june[0].fused > june[1].fused
    assert january[0].id == jon and january[0].fused > january[1].fused


def test_graph_expansion_pulls_in_a_neighbour(store: Store) -> None:
    seed = store.add(FactItem(user_id=U, text="Oscar the guinea pig eats guinea pig food"))
    weak = store.add(FactItem(user_id=U, text="a pig on a farm, among cows and sheep and goats"))
    linked = store.add(FactItem(user_id=U, text="an unrelated sentence entirely"))
    store.add_edges([Edge(user_id=U, src=seed, dst=linked, relation="about")])
    with_graph = Retriever(store).search(U, "guinea pig", k=5)
    assert with_graph[0].id == seed
    assert linked in [h.id for h in with_graph]
    by_id = {h.id: h.fused for h in with_graph}
    assert 0 < by_id[linked] < by_id[seed]
    without = Retriever(store, weights=SearchWeights(graph=0)).search(U, "guinea pig", k=5)
    assert [h.id for h in without] == [seed, weak]


def test_graph_second_hop_reaches_two_edges_out_at_its_share(store: Store) -> None:
    """A hit's neighbour gets ``graph`` x its score; the neighbour's neighbour, only with
    ``graph_second`` > 0, ``graph`` x ``graph_second`` x its score."""
    seed = store.add(FactItem(user_id=U, text="Oscar the guinea pig eats guinea pig food"))
    near = store.add(FactItem(user_id=U, text="an unrelated sentence entirely"))
    far = store.add(FactItem(user_id=U, text="another sentence about nothing"))
    store.add_edges([Edge(user_id=U, src=seed, dst=near, relation="follows"),
                     Edge(user_id=U, src=near, dst=far, relation="follows")])
    knobs = {"graph": 0.2, "session": 0, "context": 0}
    one = {h.id: h.fused for h in Retriever(
        store, weights=SearchWeights(**knobs, graph_second=0)).search(U, "guinea pig", k=5)}
    assert set(one) == {seed, near}
    two = {h.id: h.fused for h in Retriever(
        store, weights=SearchWeights(**knobs, graph_second=0.5)).search(U, "guinea pig", k=5)}
    assert set(two) == {seed, near, far}
    assert two[seed] == one[seed]
    assert two[near] == pytest.approx(0.2 * two[seed])
    assert two[far] == pytest.approx(0.2 * 0.5 * two[seed])


def test_each_hit_says_what_each_channel_added(store: Store, embedder) -> None:
    ids = _turns(store)
    texts = [t.text for t in store.turns(U)]
    store.set_embeddings(U, ids, embedder.encode(texts), embedder.name)
    plain = SearchWeights(session=0, speaker_boost=0, time_boost=0, when_boost=0, asking=0,
                          graph=0, expansion=0)
    hits = Retriever(store, embedder, plain).search(U, "Caroline's LGBTQ support group", k=5)
    top = hits[0]
    assert top.id == ids[0]
    assert top.channels["lexical"] == pytest.approx(plain.lexical)  # the channel's best
    assert {"dense", "speaker_lexical", "speaker_dense"} <= set(top.channels)
    for hit in hits:  # with no prior and no graph, the score is the channels' sum
        assert hit.fused == pytest.approx(sum(hit.channels.values()), abs=1e-5)
    # A node only the graph reached was found by no channel.
    seed = store.add(FactItem(user_id=U, text="Oscar the guinea pig"))
    near = store.add(FactItem(user_id=U, text="an unrelated sentence entirely"))
    store.add_edges([Edge(user_id=U, src=seed, dst=near, relation="follows")])
    by_id = {h.id: h for h in Retriever(store, weights=SearchWeights(graph=0.2, context=0))
             .search(U, "guinea pig", k=10)}
    assert by_id[seed].channels and by_id[near].channels == {} and by_id[near].score > 0


class _Axes:
    """Three texts as fixed unit vectors: one along the query, one across it, one against."""

    name, dim = "axes", 2
    VECTORS: ClassVar[dict[str, tuple[float, float]]] = {
        "north": (1.0, 0.0), "east": (0.0, 1.0), "south": (-1.0, 0.0)}

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.array([self.VECTORS[t] for t in texts], dtype=np.float32)


def test_a_candidate_no_channel_scored_above_zero_is_no_hit(store: Store) -> None:
    ids = {t: store.add(SemanticItem(user_id=U, text=t)) for t in _Axes.VECTORS}
    store.set_embeddings(U, list(ids.values()), _Axes().encode(list(ids)), _Axes.name)
    retriever = Retriever(store, _Axes(), LEXICAL_OFF)
    for query in _Axes.VECTORS:
        hits = retriever.search(U, query, k=3)
        assert [h.id for h in hits] == [ids[query]] and hits[0].score > 0


def test_lone_match_keeps_a_positive_score(store: Store) -> None:
    [only] = store.add_turns([
        Turn(user_id=U, conversation_id="c", session_id="s", turn_id="D1:1", seq=0,
             speaker="Ann", text="I adopted a guinea pig"),
        Turn(user_id=U, conversation_id="c", session_id="s", turn_id="D1:2", seq=1,
             speaker="Bob", text="Nice, congratulations"),
    ])[:1]
    hits = Retriever(store, weights=SearchWeights(graph=0, context=0)).search(U, "guinea", k=5)
    assert [h.id for h in hits] == [only]
    assert hits[0].score > 0


def test_tag_channel_fuzzy_matches_tags(store: Store) -> None:
    tagged = store.add(FactItem(user_id=U, text="an entry without the word", tags=["adoption"]))
    hits = Retriever(store, weights=SearchWeights(lexical=0)).search(U, "adoptions?", k=5)
    assert [h.id for h in hits] == [tagged]


def test_tag_match_lifts_a_tagged_item_above_an_untagged_twin(store: Store) -> None:
    """Only the tag channel can see "colour" for the query word "color" (different stems)."""
    tagged = store.add(FactItem(user_id=U, text="paint note one", tags=["colour"]))
    twin = store.add(FactItem(user_id=U, text="paint note two"))
    store.add(FactItem(user_id=U, text="paint, and a long list of many other unrelated words"))
    hits = Retriever(store, weights=SearchWeights(graph=0)).search(U, "paint color", k=3)
    ranked = [h.id for h in hits]
    assert ranked.index(tagged) < ranked.index(twin)


def test_image_caption_is_searchable_and_shown(store: Store) -> None:
    [tid] = store.add_turns([
        Turn(user_id=U, conversation_id="c", session_id="s", turn_id="D1:1", seq=0,
             speaker="Ann", text="Look at this!",
             metadata={"caption": "a photo of a golden retriever on a beach"}),
    ])
    hits = Retriever(store).search(U, "retriever beach", k=3)
    assert [h.id for h in hits] == [tid]
    assert hits[0].text == (
        "Look at this! [shares a photo: a photo of a golden retriever on a beach]")


def test_k_limits_and_speakers_listing(store: Store) -> None:
    _turns(store)
    store.add(FactItem(user_id=U, text="x", speaker="Zoe", about="Yan"))
    assert store.speakers(U) == ["Caroline", "Melanie", "Yan", "Zoe"]
    assert len(Retriever(store).search(U, "Caroline Melanie", k=2)) == 2
    assert Retriever(store).search(U, "Caroline", k=-1) == []


def test_turn_context_holds_both_neighbours_and_is_refreshed_by_later_turns(store: Store) -> None:
    """A question turn is found by words of the answer that arrives in a later add."""

    def turn(seq: int, speaker: str, text: str) -> Turn:
        return Turn(user_id=U, conversation_id="c", session_id="s1", turn_id=f"D1:{seq}",
                    seq=seq, speaker=speaker, text=text)

    store.add_turns([turn(0, "Ann", "Which book would you recommend to me?")])
    weights = SearchWeights(graph=0, dense=0, speaker_channels=0)
    assert Retriever(store, weights=weights).search(U, "Nicole", k=5) == []
    store.add_turns([turn(1, "Bob", "Becoming Nicole, without a doubt.")])
    found = [h.turn_id for h in Retriever(store, weights=weights).search(U, "Nicole", k=5)]
    assert found == ["D1:1", "D1:0"]  # the answer itself first, then the question beside it
    store.add_turns([turn(2, "Ann", "Thanks, I will read it.")])
    found = [h.turn_id for h in Retriever(store, weights=weights).search(U, "Nicole", k=5)]
    assert found[0] == "D1:1" and set(found) == {"D1:0", "D1:1", "D1:2"}


def test_a_big_index_skips_terms_most_rows_share(store: Store) -> None:
    from memstrata.memory import FactItem

    store.add_many(FactItem(user_id="u", text=f"common filler note {i}") for i in range(40))
    store.add(FactItem(user_id="u", text="common rare zebra sighting"))
    with_pruning = dict(node="item", k=50, common_share=0.5, common_min_docs=10)
    # "common" is in every row: skipped, so only the zebra row is scored at all.
    hits = store.lexical("u", ["common", "zebra"], **with_pruning)
    assert len(hits) == 1 and store.get("u", hits[0][0]).text.startswith("common rare zebra")
    assert len(store.lexical("u", ["common", "zebra"], node="item", k=50)) == 41
    # A query of common terms only keeps its rarest one; a small index is never pruned.
    assert len(store.lexical("u", ["common", "filler"], **with_pruning)) == 40
    assert len(store.lexical("u", ["common", "zebra"], node="item", k=50, common_share=0.5,
                             common_min_docs=1000)) == 41


def _one_turn_sessions(store: Store, texts: list[str],
                       said: datetime = datetime(2022, 3, 17, tzinfo=UTC)) -> list[str]:
    """One turn by James per session, all said at ``said`` (a Thursday by default)."""
    return store.add_turns([
        Turn(user_id=U, conversation_id="c", session_id=f"s{n}", turn_id=f"D{n}:1", seq=n,
             speaker="James", text=text, event_time=said)
        for n, text in enumerate(texts)
    ])


def _bowling_turns(store: Store) -> list[str]:
    """Two turns that match "bowling" alike; only the second says when."""
    return _one_turn_sessions(store, ["I love bowling, the lanes are so much fun",
                                      "I went bowling yesterday and got two strikes"])


# Every prior but the text priors off, so a score moves only by them.
WHEN_ONLY = {"graph": 0, "session": 0, "context": 0, "speaker_boost": 0,
             "time_boost": 0, "asking": 0}


def _ranked(store: Store, query: str, **knobs: float) -> list[tuple[str, float]]:
    weights = SearchWeights(**{**WHEN_ONLY, **knobs})
    return [(h.id, h.fused) for h in Retriever(store, weights=weights).search(
        U, query, k=5, min_score=0)]


def test_when_prior_lifts_a_hit_that_says_when_for_a_when_question(store: Store) -> None:
    plain, dated = _bowling_turns(store)
    off = dict(_ranked(store, "When did James go bowling?", when_boost=0))
    on = dict(_ranked(store, "When did James go bowling?", when_boost=0.5))
    assert on[dated] == pytest.approx(off[dated] * 1.5)
    assert on[plain] == pytest.approx(off[plain])


def test_when_prior_leaves_other_questions_alone(store: Store) -> None:
    _bowling_turns(store)
    query = "What does James love about bowling?"
    assert _ranked(store, query, when_boost=0.5) == _ranked(store, query, when_boost=0)


def test_when_prior_reads_only_the_best_candidates(store: Store) -> None:
    """With ``text_pool=1`` only the best candidate is read: the dated turn, ranked
    second, keeps its score."""
    plain, dated = _bowling_turns(store)
    query = "When did James love the bowling lanes?"
    base = dict(_ranked(store, query, when_boost=0))
    assert base[plain] > base[dated]
    one = dict(_ranked(store, query, when_boost=0.5, text_pool=1))
    assert one == pytest.approx(base)
    every = dict(_ranked(store, query, when_boost=0.5, text_pool=2))
    assert every[dated] == pytest.approx(base[dated] * 1.5)


def test_time_prior_lifts_a_hit_that_tells_of_a_time_in_the_span(store: Store) -> None:
    """Both turns were said on Thursday 17 March, outside the span the question names;
    the one that tells of "last Tuesday" (15 March) gets the time prior, once."""
    plain, told = _one_turn_sessions(store, ["I love bowling with friends at the lanes",
                                             "Last Tuesday I went bowling with friends"])
    query = "What did James do with friends on 15 March, 2022?"
    off = dict(_ranked(store, query, time_boost=0))
    on = dict(_ranked(store, query, time_boost=2.0))
    assert on[told] == pytest.approx(off[told] * 3.0)
    assert on[plain] == pytest.approx(off[plain])


def test_time_prior_lifts_a_hit_said_in_the_span_once(store: Store) -> None:
    """A turn said inside the span that also names a day in it is lifted by the time
    prior once, not once for when it was said and again for what it says."""
    said, = _one_turn_sessions(store, ["Today I went bowling with friends"],
                               said=datetime(2022, 3, 15, 20, tzinfo=UTC))
    query = "What did James do with friends on 15 March, 2022?"
    off = dict(_ranked(store, query, time_boost=0))
    on = dict(_ranked(store, query, time_boost=2.0))
    assert on[said] == pytest.approx(off[said] * 3.0)


def test_asking_prior_weighs_a_hit_by_the_share_of_it_that_asks(store: Store) -> None:
    """A turn that only asks about bowling loses ``asking`` of its score; one that half
    asks, half of that; a statement keeps its score."""
    asks, half, says = _one_turn_sessions(store, [
        "Do you like bowling alleys?", "Bowling alleys are loud. Do you like them?",
        "Bowling alleys are loud and fun"])
    off = dict(_ranked(store, "bowling alleys", dense=0))
    on = dict(_ranked(store, "bowling alleys", dense=0, asking=0.4))
    assert on[asks] == pytest.approx(off[asks] * 0.6)
    assert on[half] == pytest.approx(off[half] * (1 - 0.4 * 4 / 8))
    assert on[says] == pytest.approx(off[says])


def test_an_unknown_knob_is_refused() -> None:
    # A misspelt knob would otherwise leave the search on its defaults, silently.
    with pytest.raises(ValueError, match="speaker_bost"):
        SearchWeights(speaker_bost=2.0)  # type: ignore[call-arg]
