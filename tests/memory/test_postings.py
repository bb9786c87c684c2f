"""bm25 from the posting lists and cached row lengths equals FTS5's own bm25 over the
tenant's rows, and the cache stays exact through appends, updates, deletes, rollbacks and
other connections."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.memory import Conversation, FactItem, Session, Store, Turn
from memstrata.memory import text as textmod
from memstrata.memory.store import Filters, tenant_token
from memstrata.memory.store import postings as postings_module
from memstrata.memory.store.postings import (
    INDEXES,
    Postings,
    RowLengths,
    _row_totals,
    _varints,
    averages,
    read_postings,
)

WORDS = ["zebra", "river", "boat", "garden", "paint", "guitar", "paris", "rome", "puppy",
         "museum", "concert", "hike", "recipe", "novel", "sunset"]
CLOCK = datetime(2023, 5, 8, tzinfo=UTC)


def _fts5(store: Store, user: str, tokens: list[str], node: str, k: int = 50,
          context_weight: float = 0.0) -> list[tuple[str, float]]:
    """FTS5's own ``bm25()`` ranking of the OR of ``tokens``: the reference. Its ``N`` and
    ``avgdl`` span the file, so it is the tenant's bm25 when the tenant is alone in it."""
    columns = "body context" if node == "turn" and context_weight else "body"
    terms = " OR ".join(f'"{textmod.tenant_term(tenant_token(user), t)}"'
                        for t in dict.fromkeys(tokens))
    table, fts = ("turns", "turns_fts") if node == "turn" else ("items", "items_fts")
    rank = (f"bm25(turns_fts, 0.0, 1.0, {float(context_weight)})" if node == "turn"
            else "bm25(items_fts, 0.0, 1.0)")
    rows = store.conn.execute(
        f"SELECT t.id, {rank} AS s FROM {fts} JOIN {table} t ON t.rowid = {fts}.rowid"
        f" WHERE {fts} MATCH ? AND t.user_id = ? ORDER BY s, t.rowid LIMIT ?",
        [f"{{{columns}}} : ({terms})", user, k]).fetchall()
    return [(i, -v) for i, v in rows]


def _both(store: Store, user: str, tokens: list[str], node: str, k: int = 50,
          context_weight: float = 0.0) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(postings ranking, FTS5 ranking) of the same OR query."""
    fast = store.lexical(user, tokens, node=node, k=k, context_weight=context_weight)
    return fast, _fts5(store, user, tokens, node, k, context_weight)


def _texts(store: Store, user: str, ranking: list[tuple[str, float]]) -> list[str]:
    rows = store.nodes(user, [i for i, _ in ranking])
    return [rows[i]["text"] for i, _ in ranking]


def _assert_same(fast: list[tuple[str, float]], slow: list[tuple[str, float]]) -> None:
    assert [i for i, _ in fast] == [i for i, _ in slow]
    assert all(abs(a - b) < 1e-9 for (_, a), (_, b) in zip(fast, slow, strict=True))


def _turns(store: Store, user: str, texts: list[str]) -> None:
    store.add_turns([
        Turn(user_id=user, conversation_id="c", session_id="s", turn_id=f"D1:{n}", seq=n,
             speaker="Ann", text=text, event_time=CLOCK)
        for n, text in enumerate(texts)
    ])


texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)


@settings(max_examples=40, deadline=None)
@given(
    mine=st.lists(texts, min_size=1, max_size=25),
    theirs=st.lists(texts, max_size=10),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    context_weight=st.sampled_from([0.0, 0.5, 1.3]),
)
def test_postings_bm25_is_fts5_bm25_over_the_tenants_own_rows(
        mine: list[str], theirs: list[str], query: list[str], context_weight: float) -> None:
    # The tenant's ranking in a file shared with another tenant is FTS5's bm25 in a file
    # holding the tenant's rows alone: same rows in the same order, same scores.
    shared, alone = Store.open(":memory:"), Store.open(":memory:")
    shared.add_many(FactItem(user_id="v", text=t) for t in theirs)
    _turns(shared, "v", theirs)
    for store in (shared, alone):
        store.add_many(FactItem(user_id="u", text=t) for t in mine)
        _turns(store, "u", mine)
    shared.add_many(FactItem(user_id="v", text=t) for t in theirs)  # rows after u's too
    tokens = textmod.tokens(" ".join(query))
    for node, weight in (("item", 0.0), ("turn", context_weight)):
        fast = shared.lexical("u", tokens, node=node, k=50, context_weight=weight)
        slow = _fts5(alone, "u", tokens, node, 50, weight)
        assert _texts(shared, "u", fast) == _texts(alone, "u", slow)
        assert [v for _, v in fast] == pytest.approx([v for _, v in slow], abs=1e-9)
        assert len(shared.nodes("u", [i for i, _ in fast])) == len(fast)  # u's rows only
    _assert_same(*_both(alone, "u", tokens, "item"))


def test_another_tenants_rows_leave_a_tenants_scores_unchanged() -> None:
    store = Store.open(":memory:")
    store.add_many(FactItem(user_id="u", text=f"river {w}") for w in WORDS)
    before = store.lexical("u", ["river", "boat"], node="item", k=20)
    store.add_many(FactItem(user_id="v", text="river " + " ".join(WORDS) * 3)
                   for _ in range(40))
    assert store.lexical("u", ["river", "boat"], node="item", k=20) == before
    assert store._lengths["item"].tenant("u") == (len(WORDS), 2 * len(WORDS))
    store.forget_user("v")
    assert store.lexical("u", ["river", "boat"], node="item", k=20) == before
    assert store._lengths["item"].tenant("v") == (0, 0)


def test_idf_shift_adds_to_every_terms_idf() -> None:
    store = Store.open(":memory:")
    store.add_many(FactItem(user_id="u", text=t) for t in
                   ["river boat", "river", "river garden", "boat paint", "garden"])
    rows = 5
    plain = dict(store.lexical("u", ["boat"], node="item", k=10))
    shifted = dict(store.lexical("u", ["boat"], node="item", k=10, idf_shift=1.5))
    idf = math.log((rows - 2 + 0.5) / (2 + 0.5))
    assert plain.keys() == shifted.keys() and len(plain) == 2
    for i, score in plain.items():
        assert shifted[i] == pytest.approx(score * (idf + 1.5) / idf, rel=1e-12)
    # A term in most rows has FTS5's floor idf (1e-6): the shift alone scores it.
    common = dict(store.lexical("u", ["river"], node="item", k=10, idf_shift=1.0))
    assert len(common) == 3 and min(common.values()) > 0.5


def test_filtered_search_is_the_ranking_restricted_to_the_passing_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(":memory:")
    store.add_turns([
        Turn(user_id="u", conversation_id="c", session_id="s", turn_id=f"D1:{n}", seq=n,
             speaker="Ann" if n % 3 else "Bo", text=f"garden {'paint ' * (n % 4)}{w}",
             event_time=CLOCK) for n, w in enumerate(WORDS)])
    monkeypatch.setattr(type(store), "FILTER_CHUNK", 2)  # several chunks, read best first
    tokens = ["garden", "paint"]
    full = store.lexical("u", tokens, node="turn", k=50)
    bo = store.lexical("u", tokens, node="turn", k=3, filters=Filters(speaker="Bo"))
    expected = [(i, v) for i, v in full if store.nodes("u", [i])[i]["speaker"] == "Bo"][:3]
    assert bo == expected and len(bo) == 3
    assert store.lexical("u", tokens, node="turn", k=5,
                         filters=Filters(speaker="Nobody")) == []


def test_cache_follows_updates_deletes_and_reused_rowids() -> None:
    store = Store.open(":memory:")
    ids = [store.add(FactItem(user_id="u", text=f"zebra note {w}")) for w in WORDS]
    _assert_same(*_both(store, "u", ["zebra"], "item"))  # the cache is now warm
    store.update("u", ids[3], text="zebra " + "long words here " * 20)  # longer: lower score
    fast, slow = _both(store, "u", ["zebra"], "item")
    _assert_same(fast, slow)
    assert fast[-1][0] == ids[3]
    store.delete("u", ids[0])
    store.delete("u", ids[-1])  # the highest rowid: the next insert may reuse it
    _assert_same(*_both(store, "u", ["zebra"], "item"))
    store.add(FactItem(user_id="u", text="zebra zebra"))
    fast, slow = _both(store, "u", ["zebra"], "item")
    _assert_same(fast, slow)
    assert len(fast) == len(WORDS) - 1
    assert store._lengths["item"].rows == averages(store.conn, "items_fts")[0]


def test_cache_after_a_rollback_and_inside_a_transaction() -> None:
    store = Store.open(":memory:")
    store.add_many(FactItem(user_id="u", text=f"river {w}") for w in WORDS)
    _assert_same(*_both(store, "u", ["river"], "item"))
    with pytest.raises(RuntimeError), store.transaction():
        store.add(FactItem(user_id="u", text="river boat river"))
        # Inside the transaction the tenant's rows are read anew: the uncommitted row is
        # seen, and nothing of it stays cached past the rollback.
        fast, slow = _both(store, "u", ["river"], "item")
        _assert_same(fast, slow)
        assert len(fast) == len(WORDS) + 1
        raise RuntimeError("roll back")
    fast, slow = _both(store, "u", ["river"], "item")
    _assert_same(fast, slow)
    assert len(fast) == len(WORDS)
    store.add(FactItem(user_id="u", text="a river in paris"))
    _assert_same(*_both(store, "u", ["river", "pari"], "item"))


def test_a_transaction_reads_the_kept_index_until_it_writes_to_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(":memory:")
    store.add_many(FactItem(user_id="u", text=f"harbour {w}") for w in WORDS)
    _assert_same(*_both(store, "u", ["harbour"], "item"))  # the cache is now warm
    reads: list[str] = []
    of_tenant = postings_module.RowLengths.of_tenant.__func__  # type: ignore[attr-defined]

    def counted(cls: type, conn: object, fts: str, *args: object) -> object:
        reads.append(fts)
        return of_tenant(cls, conn, fts, *args)

    monkeypatch.setattr(postings_module.RowLengths, "of_tenant", classmethod(counted))
    with pytest.raises(RuntimeError), store.transaction():
        # Nothing of the transaction is in the item index yet: the kept lengths serve.
        _assert_same(*_both(store, "u", ["harbour"], "item"))
        store.add_turns([Turn(user_id="u", conversation_id="c", session_id="s",
                              turn_id="D1:1", seq=1, speaker="Bo", text="harbour walk",
                              event_time=CLOCK)])
        _assert_same(*_both(store, "u", ["harbour"], "item"))  # a turn is not an item
        assert reads == []
        store.add(FactItem(user_id="u", text="harbour harbour"))
        fast, slow = _both(store, "u", ["harbour"], "item")
        _assert_same(fast, slow)
        assert len(fast) == len(WORDS) + 1 and reads == ["items_fts"]
        raise RuntimeError("roll back")
    fast, slow = _both(store, "u", ["harbour"], "item")
    _assert_same(fast, slow)
    assert len(fast) == len(WORDS)


def test_cache_sees_another_connections_writes(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    one, two = Store.open(path), Store.open(path)
    one.add_many(FactItem(user_id="u", text=f"museum {w}") for w in WORDS)
    _assert_same(*_both(one, "u", ["museum"], "item"))
    victim = one.items("u", limit=1)[0].id
    two.update("u", victim, text="museum " + "and more words " * 10)
    two.add(FactItem(user_id="u", text="museum trip"))
    fast, slow = _both(one, "u", ["museum"], "item")
    _assert_same(fast, slow)
    assert len(fast) == len(WORDS) + 1 and fast[-1][0] == victim
    one.close()
    two.close()


def test_turn_context_rewrites_keep_turn_lengths_exact() -> None:
    store = Store.open(":memory:")
    _turns(store, "u", ["a garden party", "we painted the garden"])
    _assert_same(*_both(store, "u", ["garden"], "turn", context_weight=0.5))
    # A later turn in the session rewrites the previous turn's context column.
    store.add_turns([Turn(user_id="u", conversation_id="c", session_id="s", turn_id="D1:9",
                          seq=9, speaker="Bo", text="garden garden gnomes", event_time=CLOCK)])
    _assert_same(*_both(store, "u", ["garden", "gnome"], "turn", context_weight=0.5))
    store.delete_conversation("u", "c")
    assert _both(store, "u", ["garden"], "turn", context_weight=0.5) == ([], [])


def test_tokens_are_folded_as_fts5_folds_them() -> None:
    store = Store.open(":memory:")
    store.add(FactItem(user_id="u", text="Café Zoë in Paris"))
    hits = store.lexical("u", textmod.tokens("café zoë"), node="item", k=5)
    assert len(hits) == 1  # unicode61 folds the diacritics on both sides
    assert [i for i, _ in store.lexical("u", ["CAFÉ"], node="item", k=5)] == [hits[0][0]]


def test_row_lengths_decode_long_rows_and_varints() -> None:
    assert _varints(bytes([0x00, 0x81, 0x00, 0x05])) == [0, 128, 5]
    ids, totals = _row_totals([(1, bytes([0, 3])), (2, bytes([0, 0x81, 0x01])),
                               (3, bytes([0, 7]))], columns=2)
    assert ids.tolist() == [1, 2, 3] and totals.tolist() == [3, 129, 7]
    store = Store.open(":memory:")
    store.add(FactItem(user_id="u", text=" ".join(["word"] * 300)))
    cache = RowLengths("items_fts", 2, "items")
    cache.sync(store.conn, set(), foreign=False)
    assert cache.rows == 1 and cache.tokens == 300 and cache.tenant("u") == (1, 300)


def test_instance_vocabulary_tables_exist_after_migration() -> None:
    conn = Store.open(":memory:").conn
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"turns_instances", "items_instances"} <= names


def test_offsetting_rewrites_are_caught_without_the_totals_check() -> None:
    # One row grows by two tokens and another shrinks by two: the index's row count and
    # token total are unchanged, so only the rewritten rowids tell the cache.
    store = Store.open(":memory:")
    a = store.add(FactItem(user_id="u", text="hike one two three"))
    b = store.add(FactItem(user_id="u", text="hike four five six seven eight"))
    store.add_many(FactItem(user_id="u", text=f"hike {w}") for w in WORDS)
    _assert_same(*_both(store, "u", ["hike"], "item"))
    before = store._lengths["item"].tokens
    with store.transaction():
        store.update("u", a, text="hike one two three four five")
        store.update("u", b, text="hike four five six")
    fast, slow = _both(store, "u", ["hike"], "item")
    assert store._lengths["item"].tokens == before
    _assert_same(fast, slow)


@settings(max_examples=30, deadline=None)
@given(
    mine=st.lists(texts, min_size=2, max_size=30),
    query=st.lists(st.sampled_from(WORDS), min_size=2, max_size=5),
    context_weight=st.sampled_from([0.0, 0.5]),
)
def test_common_terms_scored_from_kept_lists_are_stable(mine: list[str], query: list[str],
                                                        context_weight: float) -> None:
    # Common terms (here: in more than 10% of the rows) only add to rows holding a rarer
    # term: the first time from lists read then, again from the kept lists.
    store = Store.open(":memory:")
    store.add_many(FactItem(user_id="u", text=t) for t in mine)
    _turns(store, "u", mine)
    tokens = textmod.tokens(" ".join(query))
    options = {"common_share": 0.1, "common_min_docs": 1, "context_weight": context_weight}
    for node in ("item", "turn"):
        first = store.lexical("u", tokens, node=node, k=10, **options)  # type: ignore[arg-type]
        again = store.lexical("u", tokens, node=node, k=10, **options)  # type: ignore[arg-type]
        assert [i for i, _ in first] == [i for i, _ in again]
        assert [s for _, s in first] == pytest.approx([s for _, s in again], abs=1e-9)


def test_kept_lists_are_bounded_and_dropped_when_another_process_commits() -> None:
    store = Store.open(":memory:")
    store.add_many(FactItem(user_id="u", text=t) for t in
                   ["zebra river", "zebra boat", "zebra", "river"])
    tenant = tenant_token("u")
    kept = Postings(budget=3)
    lengths = store._lengths_of("u", "item")
    args = (store.conn, (0, 0), INDEXES["item"], lengths)
    zebra, river = (textmod.tenant_term(tenant, w) for w in ("zebra", "river"))
    [(rows, counts)] = kept.get(*args, [zebra], {"body": 1.0})
    assert len(rows) == 3 and counts.tolist() == [1.0, 1.0, 1.0]
    kept.get(*args, [river], {"body": 1.0})  # 3 + 2 postings: zebra's list goes
    assert [key[1] for key in kept._lists] == [river]
    # Another process committed (the version's second part): nothing is kept.
    kept.get(store.conn, (0, 1), INDEXES["item"], lengths, [zebra], {"body": 1.0})
    assert [key[1] for key in kept._lists] == [zebra]


def _story(store: Store, user: str = "u") -> list[Turn]:
    store.add_conversation(Conversation(id="c", user_id=user, speakers=["Ana", "Ben"]))
    store.add_session(Session(id="s", user_id=user, conversation_id="c", index=0))
    words = ["zebra river café", "zebra boat zebra", "river delta Café", "boat river zebra"]
    return [Turn(user_id=user, conversation_id="c", session_id="s", turn_id=f"t{i}", seq=i,
                 speaker="Ana" if i % 2 else "Ben", text=words[i % 4]) for i in range(8)]


QUERIES = ["zebra", "river boat", "delta zebra", "cafe", "crossing ghost"]


def _followed(store: Store, reads: list[str] | None = None) -> None:
    """Search every query on both indexes, then check that each kept list equals a fresh
    read to the last bit; ``reads`` collects the posting lists read from the index."""
    if reads is not None:
        store.conn.raw.set_trace_callback(
            lambda sql: reads.append(sql) if "_instances WHERE term" in sql else None)
    for query in QUERIES:
        for node in ("turn", "item"):
            store.lexical_refs("u", textmod.tokens(query), node=node, k=20, context_weight=0.5)
    store.conn.raw.set_trace_callback(None)
    kept = store._postings
    assert kept._lists
    # A search of a tenant with no row in an index follows nothing there; its lists are
    # followed by the next search that reads them.
    current = {i for i, (version, _) in kept._at.items() if version == store.data_version()}
    assert current
    for (instances, term, pairs), (rows, counts) in list(kept._lists.items()):
        if instances not in current:
            continue
        want_rows, want_counts = read_postings(store.conn, instances, term, dict(pairs))
        assert rows.tolist() == want_rows.tolist(), term
        assert counts.tobytes() == want_counts.tobytes(), term


def test_followed_lists_equal_fresh_reads_after_every_kind_of_write() -> None:
    """Turns added (their neighbours' context rewritten), rewritten and deleted, items
    added, updated and deleted, a deleted last row's rowid taken again, a rolled-back
    write, a conversation and a whole tenant deleted: each kept list, followed, equals a
    fresh read bit for bit, and appends read no list again."""
    store = Store.open(":memory:", embedder=None)
    turn = _story(store)
    store.add_turns(turn[:6])
    items = store.add_many(FactItem(user_id="u", text=w) for w in
                           ["zebra river", "boat", "delta zebra zebra", "river café"])
    _followed(store)
    first = store.turns("u", conversation_id="c")[0]
    added: list[str] = []

    def rolled_back() -> None:
        with pytest.raises(RuntimeError), store.transaction():
            store.add(FactItem(user_id="u", text="zebra ghost"))
            store.delete("u", items[2])
            raise RuntimeError

    steps = [
        lambda: store.add_turns(turn[6:]),  # the last stored turn's context is rewritten
        lambda: store.update_turn("u", first.id, "a crossing by the river"),  # loses zebra
        lambda: store.delete_turn("u", store.turns("u", conversation_id="c")[2].id),
        lambda: store.add(FactItem(user_id="u", text="zebra zebra zebra")),
        lambda: store.update("u", items[1], text="river only"),
        lambda: store.delete("u", items[0]),
        lambda: added.append(store.add(FactItem(user_id="u", text="ghost zebra"))),
        lambda: store.delete("u", added[-1]),  # the last row: its rowid may come back
        lambda: store.add(FactItem(user_id="u", text="crossing delta")),
        rolled_back,
        lambda: store.add_turns(_story(store, "v")),  # another tenant's
        lambda: store.delete_conversation("v", "c"),
        lambda: store.add_turns(_story(store, "v")),
        lambda: store.forget_user("v"),
        lambda: store.delete_conversation("u", "c"),  # no turn of the tenant is left
        lambda: store.add_turns(_story(store)[:3]),  # rowids of deleted turns again
    ]
    for n, step in enumerate(steps):
        step()
        reads: list[str] = []
        _followed(store, reads)
        assert reads == [], n  # followed: no list read again


def test_a_write_touches_only_the_lists_of_the_terms_it_changes() -> None:
    store = Store.open(":memory:", embedder=None)
    store.add_many(FactItem(user_id=u, text="zebra river boat") for u in ("u", "w"))
    _followed(store)
    before = dict(store._postings._lists)
    store.add(FactItem(user_id="w", text="zebra river"))  # another tenant's terms
    store.add(FactItem(user_id="u", text="garden"))  # no query term
    _followed(store)
    assert all(store._postings._lists[key] is lists for key, lists in before.items())


def test_a_row_split_unlike_fts5_makes_the_lists_read_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(":memory:", embedder=None)
    store.add(FactItem(user_id="u", text="zebra river"))
    tokens = textmod.tokens("zebra")
    store.lexical_refs("u", tokens, node="item", k=5)
    assert store._postings._lists
    split = postings_module._terms
    monkeypatch.setattr(postings_module, "_terms", lambda texts: [
        Counter(dict(list(c.items())[1:])) for c in split(texts)])  # its first term lost
    store.add(FactItem(user_id="u", text="zebra boat"))
    store.lexical_refs("u", tokens, node="item", k=5)
    (instances, term, pairs), (rows, _) = next(iter(store._postings._lists.items()))
    assert rows.tolist() == read_postings(store.conn, instances, term, dict(pairs))[0].tolist()
    assert len(rows) == 2


def test_more_changed_rows_than_the_bound_make_the_lists_read_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postings_module, "FOLLOW_MAX_ROWS", 3)
    store = Store.open(":memory:", embedder=None)
    ids = store.add_many(FactItem(user_id="u", text=f"zebra {n}") for n in range(6))
    _followed(store)
    reads: list[str] = []
    store.add_many(FactItem(user_id="u", text=f"zebra {n}") for n in (6, 7))  # within it
    _followed(store, reads)
    assert reads == []
    for n, item in enumerate(ids[:4]):  # four rows rewritten: past it
        store.update("u", item, text=f"river {n}")
    _followed(store, reads)
    assert reads
    reads.clear()
    store.add_many(FactItem(user_id="u", text=f"zebra {n}") for n in range(8, 12))  # past it
    _followed(store, reads)
    assert reads


def test_a_change_not_noted_makes_the_lists_read_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A write path that forgot to note its rows: the index's row count is not what the
    # noted changes make it, so nothing kept is trusted.
    store = Store.open(":memory:", embedder=None)
    store.add_many(FactItem(user_id="u", text=t) for t in ["zebra river", "river boat"])
    _followed(store)
    monkeypatch.setattr(store, "inserting", lambda node, rowids: None)
    store.add(FactItem(user_id="u", text="zebra delta"))
    _followed(store)


@settings(max_examples=25, deadline=None)
@given(turns=st.lists(texts, min_size=1, max_size=12),
       weight=st.sampled_from([0.1, 0.3, 0.7, 1.3]))
def test_read_postings_sums_each_rows_instances_body_first(turns: list[str],
                                                           weight: float) -> None:
    """A list read holds each row's instances summed one at a time, its body instances
    (weight 1) before its context ones (``weight``): compared with a sum over the
    instance table's rows, one per instance, to the last bit."""
    store = Store.open(":memory:", embedder=None)
    _turns(store, "u", turns)
    index = INDEXES["turn"]
    weights = {"body": 1.0, "context": weight}
    for word in WORDS:
        term = textmod.tenant_term(tenant_token("u"), textmod.fts_term(word))
        by_row: dict[int, dict[str, int]] = {}
        for doc, col in store.conn.execute(
                f"SELECT doc, col FROM {index.instances} WHERE term = ?", (term,)):
            by_row.setdefault(doc, Counter())[col] += 1
        expected: dict[int, float] = {}
        for doc, cols in by_row.items():
            total = 0.0
            for col in ("body", "context"):
                for _ in range(cols[col]):
                    total += weights[col]
            expected[doc] = total
        for searched in (weights, {"body": 1.0}):
            rows, counts = read_postings(store.conn, index.instances, term, searched)
            want = expected if len(searched) > 1 else {
                d: float(c["body"]) for d, c in by_row.items() if c["body"]}
            assert rows.tolist() == sorted(want)
            assert counts.tolist() == [want[d] for d in sorted(want)]


def test_read_postings_reads_rowids_too_large_to_pack() -> None:
    """Rowids past 2**61 (doc x columns would leave int64) read back exact all the same."""
    import sqlite3

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(tenant, body, context)")
    conn.execute("CREATE VIRTUAL TABLE f_instances USING fts5vocab(f, instance)")
    big = 2**62 + 5
    conn.executemany("INSERT INTO f (rowid, tenant, body, context) VALUES (?, '', ?, ?)",
                     [(3, "boat boat", "boat"), (big, "boat", "river boat boat")])
    rows, counts = read_postings(conn, "f_instances", "boat", {"body": 1.0, "context": 0.3})
    assert rows.tolist() == [3, big]
    assert counts.tolist() == [1.0 + 1.0 + 0.3, 1.0 + 0.3 + 0.3]
    rows, counts = read_postings(conn, "f_instances", "boat", {"body": 1.0})
    assert (rows.tolist(), counts.tolist()) == ([3, big], [2.0, 1.0])
