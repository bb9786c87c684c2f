"""The dense channel, ``SearchStore.dense_refs``, on both backends (``backend``, see
``conftest.py``): the same vectors rank as an independent NumPy reference does (scores
within 1e-5), with ``allowed``, ``nodes``, ``speaker``, nodes that are gone and tenants
kept apart. On PostgreSQL: the ranking runs in SQL over pgvector's ``embeddings.vec``
(migration 6), a database without that column ranks in NumPy with the same results, a
database whose vectors predate the column has them copied into it exactly, a role that may
not create the extension still opens the store, and row-level security binds the query.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from memstrata.memory import FactItem
from memstrata.memory.models import Conversation, Session, Turn

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
DIM = 24
GHOST = "i_ghost_"  # a vector whose node does not exist (node ids are unique across tenants)


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    out = rng.normal(size=(n, DIM)).astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _fill(store: Any, user: str, seed: int, model: str = "m") -> dict[str, np.ndarray]:
    """A tenant with 20 turns (Ana and Ben in turn), 10 items (half of them Ana's), each
    with a random unit vector of ``model``, and one vector of no node; the vectors by id."""
    rng = np.random.default_rng(seed)
    store.add_conversation(Conversation(id="c1", user_id=user))
    store.add_session(Session(id="s1", user_id=user, conversation_id="c1", index=0))
    turns = store.add_turns([
        Turn(user_id=user, conversation_id="c1", session_id="s1", turn_id=f"s1:{i}", seq=i,
             speaker="Ana" if i % 2 == 0 else "Ben", text=f"turn {i} of {user}",
             event_time=T0 + timedelta(days=i)) for i in range(20)])
    items = store.add_many([FactItem(user_id=user, text=f"fact {i} of {user}",
                                     speaker="Ana" if i % 2 == 0 else None)
                            for i in range(10)])
    ids = [*turns, *items, GHOST + user]
    vectors = _unit(rng, len(ids))
    store.set_embeddings(user, ids, vectors, model)
    return dict(zip(ids, vectors, strict=True))


def _reference(vectors: dict[str, np.ndarray], query: np.ndarray, k: int,
               keep: Callable[[str], bool]) -> list[tuple[str, float]]:
    """The ``k`` kept ids nearest to ``query`` (dot products in float64), best first."""
    scored = sorted(((i, float(v.astype(np.float64) @ query.astype(np.float64)))
                     for i, v in vectors.items() if not i.startswith(GHOST) and keep(i)),
                    key=lambda p: -p[1])
    return scored[:k]


def _parse(text: str) -> np.ndarray:
    """pgvector's text form as float32 (each value read as a float: ``-0`` keeps its sign)."""
    return np.array([float(x) for x in text.strip("[]").split(",")], dtype=np.float32)


def _same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert [i for i, _ in got] == [i for i, _ in want]
    assert np.allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=1e-5)


def _dense(store: Any, user: str, query: np.ndarray, k: int, model: str = "m",
           **options: Any) -> list[tuple[str, float]]:
    return store.with_ids(user, store.dense_refs(user, model, query, k, **options))


def _check_all(store: Any, vectors: dict[str, np.ndarray], user: str = "u1") -> None:
    """Every option of ``dense_refs`` against the reference, for one tenant."""
    rng = np.random.default_rng(7)
    speaker = {i: r["speaker"] for i, r in store.nodes(user, list(vectors)).items()}
    for query in _unit(rng, 3):
        # No two scores so close that float32 sums could swap them.
        scores = sorted(float(v.astype(np.float64) @ query) for v in vectors.values())
        assert min(np.diff(scores)) > 1e-6
        every = _reference(vectors, query, 100, lambda i: True)
        _same(_dense(store, user, query, 5), every[:5])
        _same(_dense(store, user, query, 100), every)  # k past the rows: all of them
        _same(_dense(store, user, query, 4, nodes=("turn",)),
              _reference(vectors, query, 4, lambda i: i.startswith("t_")))
        _same(_dense(store, user, query, 4, nodes=("item",)),
              _reference(vectors, query, 4, lambda i: i.startswith("i_")))
        # allowed: the three worst-ranked turns, so the limit has to widen to reach them.
        worst = [i for i, _ in every if i.startswith("t_")][-3:]
        allowed = set(store.refs(user, worst).values())
        _same(_dense(store, user, query, 2, allowed=allowed),
              _reference(vectors, query, 2, lambda i, w=worst: i in w))
        # speaker: that speaker's turns only (Ana's items are left out).
        _same(_dense(store, user, query, 6, speaker="Ana"),
              _reference(vectors, query, 6,
                         lambda i: i.startswith("t_") and speaker.get(i) == "Ana"))
        _same(_dense(store, user, query, 3, speaker="Ana", allowed=allowed),
              _reference(vectors, query, 3, lambda i, w=worst: i in w and speaker[i] == "Ana"))
        assert _dense(store, user, query, 3, speaker="Ana", nodes=("item",)) == []
        assert _dense(store, user, query, 3, speaker="Nobody") == []
        assert _dense(store, user, query, 0) == []
        assert _dense(store, user, query, 3, nodes=()) == []
        assert _dense(store, user, query, 3, model="none") == []


@pytest.mark.parametrize("in_process", [0, 10**6])  # PostgreSQL: in SQL, or in NumPy
def test_dense_refs_rank_as_numpy_does(backend: Any, in_process: int,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if hasattr(backend, "IN_PROCESS_VECTORS"):
        monkeypatch.setattr(backend, "IN_PROCESS_VECTORS", in_process)
    mine = _fill(backend, "u1", seed=1)
    other = _fill(backend, "u2", seed=2)
    _check_all(backend, mine)
    _check_all(backend, other, "u2")  # each tenant sees its own vectors only
    query = _unit(np.random.default_rng(8), 1)[0]
    assert not {i for i, _ in _dense(backend, "u1", query, 100)} & set(other)
    assert {i for i, _ in _dense(backend, "u2", query, 100)} == set(other) - {GHOST + "u2"}


def test_dense_refs_follow_deletes_and_other_models(backend: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if hasattr(backend, "IN_PROCESS_VECTORS"):
        monkeypatch.setattr(backend, "IN_PROCESS_VECTORS", 0)  # the SQL path
    vectors = _fill(backend, "u1", seed=4)
    query = _unit(np.random.default_rng(9), 1)[0]
    best = _reference(vectors, query, 1, lambda i: True)[0][0]
    backend.delete_turn("u1", best) if best.startswith("t_") else backend.delete("u1", best)
    del vectors[best]
    _same(_dense(backend, "u1", query, 5), _reference(vectors, query, 5, lambda i: True))
    # A second model's vectors (another dimension) are ranked apart from the first's.
    rng = np.random.default_rng(5)
    small = rng.normal(size=(4, 8)).astype(np.float32)
    small /= np.linalg.norm(small, axis=1, keepdims=True)
    small_query = small[0] + small[1]
    backend.set_embeddings("u1", list(vectors)[:4], small, "small")
    _same(_dense(backend, "u1", small_query, 10, model="small"),
          _reference(dict(zip(list(vectors)[:4], small, strict=True)), small_query, 10,
                     lambda i: True))
    _same(_dense(backend, "u1", query, 5), _reference(vectors, query, 5, lambda i: True))


# -- PostgreSQL: pgvector, the fallback, the backfill, RLS --------------------------------


def _owner_sql(url: str, statement: str, args: tuple[Any, ...] = ()) -> list[Any]:
    """Run one statement as the URL's role (the tables' owner); its rows, if any."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, args)  # type: ignore[call-overload]
        return cur.fetchall() if cur.description else []


@pytest.fixture
def pg_open(pg_url: str) -> Iterator[Callable[[], Any]]:
    """Opens stores on one fresh database (closed at the end)."""
    from memstrata.memory.store.pg import PgStore

    opened: list[Any] = []

    def open_store() -> Any:
        opened.append(PgStore.open(pg_url, embedder=None))
        opened[-1].IN_PROCESS_VECTORS = 0  # every tenant ranked in SQL, however small
        return opened[-1]

    yield open_store
    for store in opened:
        store.close()


def _spy_vectors(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the tenants :meth:`vectors` is read for."""
    calls: list[str] = []
    real = store.vectors

    def spy(user_id: str, model: str) -> Any:
        calls.append(user_id)
        return real(user_id, model)

    monkeypatch.setattr(store, "vectors", spy)
    return calls


@pytest.mark.postgres
def test_pg_ranks_in_sql_with_pgvector(pg_open: Callable[[], Any], pg_url: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = pg_open()
    vectors = _fill(store, "u1", seed=1)
    assert store._vec_column()
    # Every vector written both ways, the same values.
    rows = _owner_sql(pg_url, "SELECT node_id, vector, vec::text FROM embeddings")
    assert len(rows) == len(vectors)
    for node_id, raw, vec in rows:
        assert np.array_equal(np.frombuffer(raw, dtype=np.float32), vectors[node_id])
        assert np.array_equal(_parse(vec), vectors[node_id])
    # The ranking is SQL's: the tenant's matrix is never read, and the statement orders by
    # pgvector's distance over the tenant's index.
    calls = _spy_vectors(store, monkeypatch)
    statements: list[str] = []
    real_rows = store._rows

    def rows_spy(user_id: Any, query: Any, args: Any = ()) -> Any:
        statements.append(str(query))
        return real_rows(user_id, query, args)

    monkeypatch.setattr(store, "_rows", rows_spy)
    _check_all(store, vectors)
    assert calls == [] and any("<#>" in s for s in statements)
    import psycopg

    query = _unit(np.random.default_rng(3), 1)[0]
    statement, args = store._dense_sql("u1", "m", "[" + ",".join(map(str, query)) + "]",
                                       ("turn", "item"), None)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")  # a tiny table: show the plan of a big one
        plan = "\n".join(r[0] for r in psycopg.ClientCursor(conn).execute(
            "EXPLAIN " + statement + " LIMIT 5", args))
    assert "embeddings_tenant" in plan and "Limit" in plan


@pytest.mark.postgres
def test_pg_keeps_a_small_tenants_matrix_in_the_process(pg_open: Callable[[], Any],
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    store = pg_open()
    vectors = _fill(store, "u1", seed=3)
    monkeypatch.setattr(store, "IN_PROCESS_VECTORS", len(vectors))
    calls = _spy_vectors(store, monkeypatch)
    _check_all(store, vectors)
    assert calls and set(calls) == {"u1"}  # the cached matrix, not SQL
    monkeypatch.setattr(store, "IN_PROCESS_VECTORS", len(vectors) - 1)
    calls.clear()
    _check_all(store, vectors)
    assert calls == []  # one vector more than the bound: pgvector


@pytest.mark.postgres
def test_pg_without_the_vec_column_ranks_in_numpy(pg_open: Callable[[], Any], pg_url: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pg_open().close()  # migrated, with pgvector
    _owner_sql(pg_url, "ALTER TABLE embeddings DROP COLUMN vec")
    store = pg_open()
    vectors = _fill(store, "u1", seed=1)  # written without vec
    assert not store._vec_column()
    calls = _spy_vectors(store, monkeypatch)
    _check_all(store, vectors)
    assert calls and set(calls) == {"u1"}


@pytest.mark.postgres
def test_pg_vectors_written_before_the_column_are_copied_into_it(
        pg_open: Callable[[], Any], pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pg_open().close()
    _owner_sql(pg_url, "ALTER TABLE embeddings DROP COLUMN vec")
    before = pg_open()
    vectors = _fill(before, "u1", seed=1)
    # Values the SQL decoding must get exactly: signed zeros, subnormals, extremes.
    odd = np.zeros((1, DIM), dtype=np.float32)
    odd[0, :6] = [-0.0, 1e-45, -1e-40, 3.4e38, -1.17549435e-38, 0.1]
    nan = np.full((1, DIM), np.nan, dtype=np.float32)
    before.set_embeddings("u1", ["i_odd", "i_nan"], np.vstack([odd, nan]), "m")
    before.close()
    _owner_sql(pg_url, "DELETE FROM schema_migrations WHERE version = 6")
    store = pg_open()  # migration 6 again: adds the column and fills it
    assert store._vec_column()
    rows = dict(_owner_sql(pg_url, "SELECT node_id, vec::text FROM embeddings"))
    assert rows.pop("i_nan") is None  # pgvector holds no NaN: left out of the ranking
    got = _parse(rows.pop("i_odd"))
    assert got.tobytes() == odd[0].tobytes()
    for node_id, vec in rows.items():
        assert _parse(vec).tobytes() == vectors[
            node_id].tobytes()
    calls = _spy_vectors(store, monkeypatch)
    _owner_sql(pg_url, "DELETE FROM embeddings WHERE node_id = ANY(%s)", (["i_odd", "i_nan"],))
    _check_all(store, vectors)
    assert calls == []


@pytest.mark.postgres
def test_pg_opens_where_the_role_may_not_create_pgvector(pg_admin: str) -> None:
    import psycopg
    from psycopg.conninfo import make_conninfo

    from memstrata.memory.store.pg import PgStore

    name = "memstrata_dense_noext"
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        for role, login in ((name, "LOGIN"), ("memstrata_app", "NOLOGIN")):
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)
                            ).fetchone() is None:
                conn.execute(f"CREATE ROLE {role} {login}")
        conn.execute(f"GRANT memstrata_app TO {name}")
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name} OWNER {name}")
    url = make_conninfo(pg_admin, dbname=name, user=name)
    store = PgStore.open(url, embedder=None)  # CREATE EXTENSION refused: caught
    try:
        assert _owner_sql(url, "SELECT count(*) FROM pg_extension WHERE extname = 'vector'"
                          ) == [(0,)]
        from memstrata.memory.store.pg.schema import LATEST_VERSION

        assert _owner_sql(url, "SELECT max(version) FROM schema_migrations") == [
            (LATEST_VERSION,)]  # every migration applied, 6 without its column
        assert not store._vec_column()
        _check_all(store, _fill(store, "u1", seed=1))
    finally:
        store.close()


@pytest.mark.postgres
def test_pg_dense_query_is_bound_by_rls(pg_open: Callable[[], Any]) -> None:
    store = pg_open()
    _fill(store, "u1", seed=1)
    _fill(store, "u2", seed=2)
    query = _unit(np.random.default_rng(3), 1)[0]
    text = "[" + ",".join(map(str, query)) + "]"
    statement, args = store._dense_sql("u1", "m", text, ("turn", "item"), None)
    assert len(store._rows("u1", statement, args)) == 31  # u1's own tenant setting
    # u1's statement under u2's tenant setting: row-level security hides u1's rows.
    assert store._rows("u2", statement, args) == []
    statement, args = store._dense_sql("u1", "m", text, ("turn",), "Ana")
    assert len(store._rows("u1", statement, args)) == 10
    assert store._rows("u2", statement, args) == []
