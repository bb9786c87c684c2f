"""The scale benchmark's concurrent PostgreSQL clients (``bench scale --db URL``): the
writers' shares, concurrent ingest against a real server, the refusal to touch an earlier
run's schemas without ``--fresh``, and a tiny full run (SQLite baseline and PostgreSQL)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstrata.bench import scale_clients as clients
from memstrata.bench.scale import (
    BATCH,
    MAIN_USER,
    OTHER_USERS,
    format_scale_table,
    make_corpus,
    make_edges,
    run_scale_bench,
)
from memstrata.memory import FactItem


@pytest.mark.parametrize(("total", "parts"), [(0, 3), (1, 8), (7, 8), (1100, 2), (1100, 8),
                                               (1_010_000, 8), (5, 1)])
def test_split_covers_every_item_exactly_once(total: int, parts: int) -> None:
    shares = clients.split(total, parts)
    assert len(shares) == parts
    covered = [i for lo, hi in shares for i in range(lo, hi)] if total < 10_000 else None
    if covered is not None:
        assert covered == list(range(total))
    assert shares[0][0] == 0 and shares[-1][1] == total
    assert all(a[1] == b[0] for a, b in itertools.pairwise(shares))
    sizes = [hi - lo for lo, hi in shares]
    assert max(sizes) - min(sizes) <= 1


def test_split_rejects_no_parts() -> None:
    with pytest.raises(ValueError):
        clients.split(10, 0)


def test_share_holds_the_same_items() -> None:
    corpus = make_corpus(300, seed=5)
    whole = [corpus.item(i) for i in range(len(corpus))]
    parts = [corpus.share(lo, hi) for lo, hi in clients.split(len(corpus), 3)]
    rebuilt = [p.item(i) for p in parts for i in range(len(p))]
    assert [i.model_dump() for i in rebuilt] == [i.model_dump() for i in whole]


def test_schema_url_keeps_the_urls_options() -> None:
    from psycopg.conninfo import conninfo_to_dict

    url = clients.schema_url("postgresql://u:pw@/db?host=/tmp/sock&options=-c%20work_mem%3D8MB",
                             "memstrata_scale_10")
    info = conninfo_to_dict(url)
    assert info["host"] == "/tmp/sock" and info["dbname"] == "db" and info["password"] == "pw"
    assert info["options"] == "-c work_mem=8MB -c search_path=memstrata_scale_10"


def test_writers_and_readers_need_a_url(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="URL"):
        run_scale_bench([300], writers=2, progress=False)
    with pytest.raises(ValueError, match="URL"):
        run_scale_bench([300], db=tmp_path / "s.db", readers=2, progress=False)


def test_an_existing_sqlite_file_needs_fresh(tmp_path: Path) -> None:
    path = tmp_path / "mine.db"
    path.write_bytes(b"not the benchmark's")
    with pytest.raises(ValueError, match="--fresh"):
        run_scale_bench([300], db=path, progress=False)
    assert path.read_bytes() == b"not the benchmark's"


# -- against a real server ------------------------------------------------------------------


def _leftover(url: str, schema: str) -> None:
    """A schema as an earlier run leaves it: a store holding one item."""
    from memstrata.memory.store.opener import open_store

    with open_store(clients.create_schema(url, schema), embedder=None) as store:
        store.add(FactItem(user_id=MAIN_USER, text="an earlier run's item"))


@pytest.mark.postgres
@pytest.mark.parametrize("own_tenants", [False, True])
def test_concurrent_writers_store_every_item_once(pg_db_url: str, own_tenants: bool) -> None:
    from memstrata.memory.store.opener import open_store

    corpus = make_corpus(300, seed=2)
    edges = make_edges(corpus, np.random.default_rng(0))
    url = clients.create_schema(pg_db_url, "memstrata_scale_test")
    with open_store(url, embedder=None) as store:
        out = clients.ingest_concurrently(url, corpus, edges, 3, batch=BATCH // 20,
                                          own_tenants=own_tenants)
        assert out["writers"] == 3 and out["items"] == len(corpus) == 1100
        assert out["ingest_per_s"] > 0 and out["lock_wait_s_total"] is not None
        assert sum(w["items"] for w in out["per_writer"]) == len(corpus)
        assert store.counts()["items"] == len(corpus)
        users = (MAIN_USER, *OTHER_USERS)
        if own_tenants:
            stored = {}
            for w, (lo, hi) in enumerate(clients.split(len(corpus), 3)):
                for t, user in enumerate(users):
                    tenant = user + clients.OWN_TENANT_SUFFIX.format(writer=w)
                    expected = int((corpus.tenant[lo:hi] == t).sum())
                    assert store.counts(tenant)["items"] == expected, tenant
                    stored.update({i.id: tenant for i in store.items(tenant, limit=2000)})
            assert store.counts()["edges"] == 0 and "edges" not in out
        else:
            stored = {}
            for t, user in enumerate(users):
                assert store.counts(user)["items"] == int((corpus.tenant == t).sum())
                stored.update({i.id: user for i in store.items(user, limit=2000)})
            assert store.counts()["edges"] == len(edges) == out["edges"]
        assert sorted(stored) == sorted(corpus.ids)  # every item once, under its own id
    clients.drop_schema(pg_db_url, "memstrata_scale_test")
    assert clients.bench_schemas(pg_db_url) == []


@pytest.mark.postgres
def test_an_earlier_runs_schema_needs_fresh(pg_db_url: str) -> None:
    _leftover(pg_db_url, "memstrata_scale_300")
    with pytest.raises(ValueError, match="--fresh"):
        run_scale_bench([300], queries=3, db=pg_db_url, writers=2, readers=2, progress=False)
    assert clients.bench_schemas(pg_db_url) == ["memstrata_scale_300"]  # left untouched
    assert clients.prepare_database(pg_db_url, fresh=True) == ["memstrata_scale_300"]
    assert clients.bench_schemas(pg_db_url) == []


@pytest.mark.postgres
def test_tiny_run_against_postgres(pg_db_url: str) -> None:
    _leftover(pg_db_url, "memstrata_scale_1")
    doc = run_scale_bench([300], queries=4, bm25_sample=1000, seed=1, db=pg_db_url,
                          writers=2, readers=2, fresh=True, progress=False)
    meta = doc["meta"]
    assert meta["machine"]["cpu_count"] >= 1
    pg_meta: dict[str, Any] = meta["postgres"]
    assert pg_meta["writers"] == 2 and pg_meta["readers"] == 2
    assert pg_meta["dropped_at_start"] == ["memstrata_scale_1"]
    assert pg_meta["server_on_this_machine"] is True
    assert pg_meta["url"].startswith("postgresql://")
    assert any("share these cores" in note for note in meta["notes"])

    row = doc["300"]
    assert row["memstrata"]["stored_items"] == 300  # the SQLite baseline, as without --db
    pg = row["postgres"]
    ingest = pg["ingest"]
    assert ingest["stored_items"] == 300
    assert ingest["stored_items_all_tenants"] == ingest["items"] == 1100
    assert ingest["stored_edges"] == ingest["edges"] == row["memstrata"]["edges"]
    assert len(ingest["per_writer"]) == 2 and ingest["db_mb"] > 0
    assert ingest["vacuum_analyze_s"] >= 0
    assert pg["ingest_own_tenants"]["stored_items_all_tenants"] == 1100
    assert row["pg_ingest_ratio"] == pytest.approx(
        ingest["ingest_per_s"] / row["memstrata"]["ingest_per_s"], abs=0.006)
    assert row["pg_own_tenants_ingest_ratio"] > 0
    one, many = pg["search_1_reader"], pg["search_readers"]
    assert one["readers"] == 1 and one["queries"] == 4
    assert many["readers"] == 2 and many["queries"] == 8
    for search in (one, many):
        assert 0 < search["p50_ms"] <= search["p95_ms"] <= search["max_ms"]
        assert search["foreign_tenant_hits"] == 0 and search["mean_hits"] > 0
    assert row["pg_search_p95_ms"] == many["p95_ms"]
    assert row["pg_search_p95_within_target"] == (many["p95_ms"] <= 50)
    table = format_scale_table(doc)
    assert "| 300 |" in table and "ratio (>= 3x)" in table
    assert clients.bench_schemas(pg_db_url) == []  # every schema it made was dropped
