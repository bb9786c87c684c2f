"""The fuzzer's detector for ``--db`` values memstrata must refuse (issue 44): a URL it does
not serve, echoed with its password or turned into a local file, and a missing folder."""

from __future__ import annotations

import os
from pathlib import Path

from memstrata.bench.reliability.fuzz import (
    FOREIGN_DBS,
    Outcome,
    judge_cli,
    judge_new_store,
    judge_place,
    run_cli,
)


def test_judge_place_counts_an_echoed_password_and_a_url_made_a_path(tmp_path: Path) -> None:
    assert judge_place("memstrata: a mysql:// URL is not a store", tmp_path) is None
    assert judge_place("no store at mysql://app:s3cretpw@h/db", tmp_path)[1] == "password echoed"
    (tmp_path / "postgresql+psycopg:").mkdir()
    assert judge_place("", tmp_path)[0] == "crashes"


def test_every_foreign_db_is_refused_on_one_line(tmp_path: Path) -> None:
    home = Path.cwd()
    os.chdir(tmp_path)
    try:
        for db in [*FOREIGN_DBS, str(tmp_path / "no" / "such" / "x.db")]:
            for argv in (["add", "hello", "--user", "u", "--db", db], ["stats", "--db", db]):
                outcome, out, err = run_cli(argv)
                assert outcome.error is not None or outcome.value != 0, argv
                assert judge_cli(outcome, out, err, secrets=[], argv=argv,
                                 tenant_bound=False) is None, (argv, err)
                assert judge_place(out + err, tmp_path) is None, (argv, err)
    finally:
        os.chdir(home)


def test_judge_new_store_counts_a_store_a_refused_command_left(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    new = tmp_path / "out" / "new.db"
    new.write_bytes(b"SQLite format 3\x00")
    assert judge_new_store(Outcome(value=2), tmp_path)[1] == "a refused command left a new store"
    assert judge_new_store(Outcome(error=SystemExit("memstrata: no")), tmp_path) is not None
    assert judge_new_store(Outcome(value=0), tmp_path) is None  # a done command keeps it
    new.unlink()
    assert judge_new_store(Outcome(value=2), tmp_path) is None
