"""Opening a store by path or URL: ``open_store``, ``Memory.open``, ``--db`` on the
commands, ``memstrata migrate`` and ``bench retrieval --db URL``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstrata import Memory
from memstrata.cli import main
from memstrata.memory.store.opener import (
    describe,
    is_url,
    open_store,
    schema_versions,
    store_missing,
)
from tests.bench.test_retrieval_bench import _conversation

UNREACHABLE = "postgresql://me:s3cret@127.0.0.1:1/mem"  # nothing listens on port 1


def test_a_url_is_told_from_a_path() -> None:
    pytest.importorskip("psycopg", reason="needs the postgres extra")
    assert is_url("postgresql://u@h/db") and is_url("postgres://h/db")
    assert not is_url("memstrata.db") and not is_url(Path("postgresql:/x"))
    assert describe("postgresql://me:s3cret@db.example:6543/mem") == \
        "postgresql://me@db.example:6543/mem"
    assert describe("postgresql://me:s3cret@/mem?host=/run/pg") == \
        "postgresql://me@/mem?host=/run/pg"  # a Unix socket
    assert describe("some/file.db") == "some/file.db"
    assert not store_missing("postgresql://u@h/db") and not store_missing(":memory:")


def test_migrate_on_a_sqlite_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "m.db"
    assert main(["migrate", "--db", str(db), "--check"]) == 1  # all pending
    assert not db.exists()  # --check writes nothing
    pending = json.loads(capsys.readouterr().out)["pending"]
    assert pending and pending == schema_versions(db)[1]
    assert main(["migrate", "--db", str(db)]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["applied"] == pending and done["recorded"] == pending
    assert main(["migrate", "--db", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)["applied"] == []
    assert main(["migrate", "--db", str(db), "--check"]) == 0


def test_an_unreachable_database_is_one_clear_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("psycopg", reason="needs the postgres extra")
    monkeypatch.chdir(tmp_path)
    for argv in (["migrate", "--db", UNREACHABLE], ["stats", "--db", UNREACHABLE],
                 ["search", "--db", UNREACHABLE, "--user", "u", "cats"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot be reached" in err, argv
        assert "postgresql://me@127.0.0.1:1/mem" in err and "s3cret" not in err
    with pytest.raises(Exception, match="cannot be reached") as caught:
        Memory.open(UNREACHABLE)
    assert "s3cret" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere


@pytest.mark.postgres
def test_migrate_on_a_database(pg_db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--db", pg_db_url, "--check"]) == 1
    pending = json.loads(capsys.readouterr().out)["pending"]
    assert schema_versions(pg_db_url)[0] == []  # --check wrote nothing
    assert main(["migrate", "--db", pg_db_url]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "postgresql" and out["applied"] == pending
    assert main(["migrate", "--db", pg_db_url, "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["pending"] == []


@pytest.mark.postgres
def test_memory_open_by_url_adds_searches_and_forgets(pg_db_url: str) -> None:
    with Memory.open(pg_db_url, embedder=None) as memory:
        memory.add([{"role": "user", "content": "I adopted a guinea pig named Oscar."},
                    {"role": "assistant", "content": "Lovely! How old is Oscar?"}],
                   user_id="ana", infer=False)
        memory.add("My sister plays the violin.", user_id="bo", infer=False)
        hits = memory.search("guinea pig", user_id="ana")
        assert hits and "guinea pig" in hits[0].text
        assert not memory.search("guinea pig", user_id="bo")  # another tenant's rows
        memory.delete_all(user_id="ana")
        assert not memory.search("guinea pig", user_id="ana")
        assert memory.search("violin", user_id="bo")


@pytest.mark.postgres
def test_search_and_stats_commands_take_a_url(pg_db_url: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(pg_db_url, embedder=None) as store:
        from memstrata.memory import FactItem

        store.add(FactItem(user_id="ana", text="Ana moved from Sweden to Lisbon"))
    assert main(["search", "--db", pg_db_url, "--user", "ana", "--no-dense", "Sweden"]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert hits and "Sweden" in hits[0]["text"]
    assert main(["stats", "--db", pg_db_url, "--user", "ana"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == 1


@pytest.mark.postgres
def test_bench_retrieval_scores_postgres_beside_sqlite(pg_db_url: str, make_record: Any,
                                                       write_json: Any) -> None:
    from memstrata.bench.retrieval import run_retrieval_bench

    data = write_json("two.json", [_conversation(make_record, f"conv-{n}", pet)
                                   for n, pet in enumerate(("cat", "parrot"))])
    doc = run_retrieval_bench(data, db_path=pg_db_url, progress=False)
    pg, lite = doc["systems"]["memstrata@postgres"], doc["systems"]["memstrata"]
    assert pg["recall@5"] == lite["recall@5"]
    assert doc["ingest"]["postgres"]["database"] == describe(pg_db_url)
    with pytest.raises(ValueError, match="already holds conversation conv-0"):
        run_retrieval_bench(data, db_path=pg_db_url, progress=False)


@pytest.mark.postgres
@pytest.mark.parametrize(("ddl", "said"), [
    (["CREATE TABLE items (id serial PRIMARY KEY, name text)"],
     "it holds tables named as memstrata's (items)"),
    (["CREATE TABLE schema_migrations (version varchar PRIMARY KEY)",
      "INSERT INTO schema_migrations VALUES ('20240101120000')"],
     "its schema_migrations table is not memstrata's (columns: version)")])
def test_another_programs_tables_under_memstratas_names_are_refused(
        pg_db_url: str, ddl: list[str], said: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An application's ``items`` (or Rails' ``schema_migrations``) in the schema: the open
    and ``migrate --check`` refuse it, naming the schema and the way out, and write nothing
    (it was "relation items already exists", and for Rails' table "upgrade memstrata");
    the way out, a schema of memstrata's own, works. Tables of other names may sit beside
    memstrata's (a shared database)."""
    import psycopg

    from memstrata.memory.store.pg.connection import PgStoreError

    with psycopg.connect(pg_db_url, autocommit=True) as conn:
        for statement in ddl:
            conn.execute(statement)
    before = _tables(pg_db_url)
    with pytest.raises(PgStoreError, match="another program's tables are in schema public"
                       ) as refused:
        Memory.open(pg_db_url, embedder=None)
    assert said in str(refused.value) and "CREATE SCHEMA memstrata" in str(refused.value)
    assert main(["migrate", "--db", pg_db_url, "--check"]) == 2
    assert said in capsys.readouterr().err
    assert _tables(pg_db_url) == before  # nothing made
    with psycopg.connect(pg_db_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA memstrata")
    own = f"{pg_db_url}{'&' if '?' in pg_db_url else '?'}options=-csearch_path%3Dmemstrata"
    with Memory.open(own, embedder=None) as memory:
        memory.add("I keep bees in Porto", user_id="ana", infer=False)
        assert memory.search("bees", user_id="ana")[0].text == "I keep bees in Porto"
    assert _tables(pg_db_url) == before


@pytest.mark.postgres
def test_a_search_path_naming_no_schema_is_refused_with_the_way_out(
        pg_db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A URL whose search_path names a schema not created yet (it was the server's "no
    schema has been selected to create in"): the open and ``migrate --check`` name the
    search_path and say to create it; nothing is made."""
    from memstrata.memory.store.pg.connection import PgStoreError

    before = _tables(pg_db_url)
    url = f"{pg_db_url}{'&' if '?' in pg_db_url else '?'}options=-csearch_path%3Dmemstrat"
    with pytest.raises(PgStoreError, match=r"the search_path \(memstrat\) names none that "
                       "exists.*CREATE SCHEMA"):
        Memory.open(url, embedder=None)
    assert main(["migrate", "--db", url, "--check"]) == 2
    assert "names none that exists" in capsys.readouterr().err
    assert _tables(pg_db_url) == before


@pytest.mark.postgres
def test_other_tables_may_share_the_database(pg_db_url: str) -> None:
    import psycopg

    with psycopg.connect(pg_db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE users (id serial PRIMARY KEY, email text)")
    with Memory.open(pg_db_url, embedder=None) as memory:
        memory.add("I keep bees in Porto", user_id="ana", infer=False)
    assert {"users", "items", "schema_migrations"} <= set(_tables(pg_db_url))


def _tables(url: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_closed_memory_says_it_is_closed(kind: str, tmp_path: Path,
                                           request: pytest.FixtureRequest) -> None:
    """A ``Memory`` used after ``close()`` raises a ``StoreError`` that says so, on either
    backend (it was sqlite3's "Cannot operate on a closed database", outside memstrata's
    errors); closing twice is harmless."""
    from memstrata.memory.locking import StoreError

    target = str(tmp_path / "m.db") if kind == "sqlite" else request.getfixturevalue(
        "pg_db_url")
    memory = Memory.open(target, embedder=None)
    memory.add("I keep bees in Porto", user_id="ana", infer=False)
    memory.close()
    memory.close()
    for verb in (lambda: memory.search("bees", user_id="ana"),
                 lambda: memory.add("more bees", user_id="ana", infer=False),
                 lambda: memory.get_all(user_id="ana"),
                 lambda: memory.delete_all(user_id="ana")):
        with pytest.raises(StoreError, match="the store was closed"):
            verb()
    with Memory.open(target, embedder=None) as again:  # nothing was lost or changed
        assert [r["text"] for r in again.get_all(user_id="ana")] == ["I keep bees in Porto"]
