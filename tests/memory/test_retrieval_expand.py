"""Query expansion over a tenant's vocabulary, the session prior, and common-term splitting."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from memstrata.memory import FactItem, Retriever, SearchWeights, Store, Turn
from memstrata.memory.expand import TermExpander, vocabulary_words

U = "expand-user"
# Hand-made word senses: words of one sense share a direction, others are orthogonal.
SENSES = {
    "cities": 0, "city": 0, "rome": 0, "paris": 0,
    "pets": 1, "puppy": 1, "kitten": 1,
    "painting": 2, "canvas": 2,
}


class SenseEmbedder:
    """Each known word points along its sense's axis (plus a little of its own); texts
    average their words. Unknown words get their own axis, so they match nothing."""

    name = "senses"
    dim = 64

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in vocabulary_words(text) or [text]:
                vec = np.zeros(self.dim, dtype=np.float32)
                own = 8 + sum(map(ord, word)) % (self.dim - 8)
                vec[own] = 0.3
                if word in SENSES:
                    vec[SENSES[word]] = 1.0
                out[row] += vec / np.linalg.norm(vec)
            norm = np.linalg.norm(out[row])
            out[row] = out[row] / norm if norm else out[row]
        return out


NO_DENSE = SearchWeights(dense=0, speaker_channels=0, graph=0, session=0)


def _turns(store: Store, rows: list[tuple[str, str, str]], user: str = U) -> list[str]:
    return store.add_turns([
        Turn(user_id=user, conversation_id="c", session_id=session, turn_id=f"D{n}:1",
             seq=n, speaker=speaker, text=text, event_time=datetime(2023, 5, 8, tzinfo=UTC))
        for n, (session, speaker, text) in enumerate(rows)
    ])


def test_expander_finds_the_tenants_nearest_words_and_skips_the_query_own(store: Store) -> None:
    _turns(store, [("s1", "Jon", "Took a short trip to Rome last week"),
                   ("s1", "Gina", "I adopted a puppy"),
                   ("s2", "Jon", "My city has a new dance studio")])
    expander = TermExpander(store, SenseEmbedder())
    found = expander.expand(U, ["cities"], min_sim=0.5, per_word=3)
    assert "rome" in found  # stemmed index terms
    assert "citi" not in found  # "city" stems like the query's own "cities"
    assert "puppi" not in found
    assert expander.expand(U, ["pets"], min_sim=0.5, per_word=3) == ["puppi"]
    assert expander.expand(U, ["cities"], min_sim=0.5, per_word=0) == []
    assert expander.expand(U, [], min_sim=0.5, per_word=3) == []
    # Speaker names never enter the vocabulary: they match every turn of that speaker.
    assert "jon" not in expander._vocab[U].words


def test_expander_reads_new_rows_and_never_another_tenants(store: Store) -> None:
    _turns(store, [("s1", "Ann", "I adopted a puppy")])
    _turns(store, [("s1", "Zed", "We flew to Paris")], user="other")
    expander = TermExpander(store, SenseEmbedder())
    assert expander.expand(U, ["cities"], min_sim=0.5, per_word=3) == []
    store.add(FactItem(user_id=U, text="Ann moved to Rome"))
    assert expander.expand(U, ["cities"], min_sim=0.5, per_word=3) == ["rome"]
    assert expander.expand("other", ["cities"], min_sim=0.5, per_word=3) == ["pari"]


def test_expander_skips_a_tenant_over_its_row_budget(store: Store) -> None:
    _turns(store, [("s1", "Ann", "We flew to Paris"), ("s1", "Bo", "Rome is lovely")])
    assert TermExpander(store, SenseEmbedder(), max_rows=1).expand(
        U, ["cities"], min_sim=0.5, per_word=3) == []
    assert TermExpander(store, SenseEmbedder(), max_rows=2).expand(
        U, ["cities"], min_sim=0.5, per_word=3) == ["pari", "rome"]


def test_expansion_channel_finds_an_instance_of_the_category_asked_for(store: Store) -> None:
    ids = _turns(store, [("s1", "Jon", "Took a short trip to Rome last week"),
                         ("s2", "Jon", "I visited my aunt"),
                         ("s3", "Gina", "The weather was nice")])
    question = "Which cities were visited?"
    off = Retriever(store, SenseEmbedder(), NO_DENSE.model_copy(update={"expansion": 0}))
    on = Retriever(store, SenseEmbedder(), NO_DENSE)
    assert ids[0] not in [h.id for h in off.search(U, question, k=5)]
    assert ids[0] in [h.id for h in on.search(U, question, k=5)]
    # Without an embedder there is nothing to expand with.
    assert ids[0] not in [h.id for h in Retriever(store, None, NO_DENSE).search(U, question)]


def test_session_prior_lifts_the_turn_beside_the_best_match(store: Store) -> None:
    ids = _turns(store, [("s1", "Ann", "violin recital tonight at the violin school"),
                         ("s1", "Ann", "the recital starts at eight"),
                         ("s2", "Ann", "the recital hall was cold")])
    # No idf shift: "recital" is in every turn, so the two later turns tie on bm25.
    weights = SearchWeights(graph=0, context=0, session=0, idf_shift=0)
    plain = Retriever(store, weights=weights).search(U, "violin recital", k=3, min_score=0)
    assert {h.id for h in plain[1:]} == {ids[1], ids[2]}
    lifted = Retriever(store, weights=weights.model_copy(update={"session": 0.5})).search(
        U, "violin recital", k=3, min_score=0)
    assert [h.id for h in lifted] == [ids[0], ids[1], ids[2]]
    by_id = {h.id: h.fused for h in lifted}
    assert by_id[ids[1]] > by_id[ids[2]]


def test_common_terms_still_score_the_rows_of_rarer_terms(store: Store) -> None:
    store.add_many(FactItem(user_id="u", text=f"common filler note {i}") for i in range(40))
    store.add(FactItem(user_id="u", text="common rare zebra sighting"))
    store.add(FactItem(user_id="u", text="a zebra sighting"))
    split = store.lexical("u", ["common", "zebra"], node="item", k=50, common_share=0.5,
                          common_min_docs=10)
    full = store.lexical("u", ["common", "zebra"], node="item", k=50)
    assert len(split) == 2 and len(full) == 42
    # The zebra rows score exactly as with every term scored, in the same order.
    assert split == full[:2]
    assert {store.get("u", i).text for i, _ in split} == {"common rare zebra sighting",
                                                           "a zebra sighting"}


def test_texts_since_reads_only_newer_rows_of_the_tenant(store: Store) -> None:
    _turns(store, [("s1", "Ann", "first turn")])
    store.add(FactItem(user_id=U, text="a fact", title="Title", tags=["tagged"]))
    _turns(store, [("s1", "Zed", "not yours")], user="other")
    texts, turn_rowid, item_rowid = store.texts_since(U)
    assert texts[0] == "Ann: first turn" and "Title a fact" in texts[1] and "tagged" in texts[1]
    assert len(texts) == 2
    store.add(FactItem(user_id=U, text="a second fact"))
    again, _, _ = store.texts_since(U, turn_rowid, item_rowid)
    assert [t.split(" [")[0].strip() for t in again] == ["a second fact"]


def test_file_store_page_cache_is_sized_for_search(tmp_path) -> None:
    with Store.open(tmp_path / "a.db") as default, Store.open(tmp_path / "b.db",
                                                                cache_mb=8) as small:
        assert default.conn.execute("PRAGMA cache_size").fetchone()[0] == -64 * 1024
        assert small.conn.execute("PRAGMA cache_size").fetchone()[0] == -8 * 1024


def test_facets_are_the_fields_the_priors_read(store: Store) -> None:
    turn_id = _turns(store, [("s1", "Ann", "hello there")])[0]
    item_id = store.add(FactItem(user_id=U, text="Ann likes tea", speaker="Ann",
                                 conversation_id="c"))
    refs = store.refs(U, [turn_id, item_id, "t_missing"])
    assert set(refs) == {turn_id, item_id} and store.refs("other", [turn_id]) == {}
    assert store.ids(U, list(refs.values())) == {r: i for i, r in refs.items()}
    facets = store.facets(U, [refs[turn_id], refs[item_id], ("turn", 10**6)])
    assert facets[refs[turn_id]] == ("Ann", "2023-05-08T00:00:00+00:00", "c", "s1")
    assert facets[refs[item_id]].speaker == "Ann" and facets[refs[item_id]].session_id is None
    assert ("turn", 10**6) not in facets and store.facets("other", [refs[turn_id]]) == {}
    with store.reading():  # read once, then answered from the search's memo, per tenant
        assert store.facets(U, [refs[turn_id]]) == store.facets(U, [refs[turn_id]])
        assert store.facets("other", [refs[turn_id]]) == {}


def test_turn_facets_are_read_from_the_narrow_index_and_follow_updates(store: Store) -> None:
    # A long message fills a table page of its own: the facets a search reads of each
    # candidate come from the index led by the rowid, which SQLite keeps in step.
    turn_id = _turns(store, [("s1", "Ann", "word " * 2000)])[0]
    ref = store.refs(U, [turn_id])[turn_id]
    plans: list[str] = []
    store.conn.raw.set_trace_callback(plans.append)
    assert store.facets(U, [ref])[ref].speaker == "Ann"
    store.conn.raw.set_trace_callback(None)
    [sql] = [s for s in plans if "speaker, event_time" in s]
    plan = " ".join(str(r) for r in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
    assert "COVERING INDEX turns_facets" in plan
    store.conn.execute("UPDATE turns SET speaker = 'Bo', event_time = '2024-01-01T00:00:00"
                       "+00:00' WHERE id = ?", (turn_id,))
    store.forget_cached(U)
    assert store.facets(U, [ref])[ref][:2] == ("Bo", "2024-01-01T00:00:00+00:00")
