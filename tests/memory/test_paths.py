"""What memstrata refuses to write over: a database a user names by mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.memory import Store
from memstrata.memory.paths import refuse_database


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "app.db"
    Store.open(path, embedder=None).close()
    return path


def test_the_store_and_the_files_beside_it_are_refused(store_file: Path) -> None:
    for target in (store_file, f"{store_file}-wal", f"{store_file}-shm",
                   f"{store_file}-journal", store_file.parent / "." / store_file.name):
        with pytest.raises(ValueError, match="it is the store itself"):
            refuse_database(target, store_path=str(store_file))


def test_any_sqlite_file_and_its_side_files_are_refused_without_a_store(
        store_file: Path) -> None:
    with pytest.raises(ValueError, match="it is a SQLite database"):
        refuse_database(store_file)
    with pytest.raises(ValueError, match=f"beside the database {store_file}"):
        refuse_database(f"{store_file}-wal")  # refused whether or not it exists yet


def test_other_paths_pass_and_nothing_is_created(tmp_path: Path, store_file: Path) -> None:
    text = tmp_path / "notes.jsonl"
    text.write_text('{"a": 1}\n')
    short = tmp_path / "short.bin"
    short.write_bytes(b"SQLite")  # shorter than the header
    for target in (text, short, tmp_path / "new.jsonl", tmp_path / "no" / "dir" / "x",
                   tmp_path, tmp_path / "-wal", tmp_path / "notes.jsonl-wal"):
        refuse_database(target, store_path=str(store_file))
        refuse_database(target, store_path=":memory:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db", "notes.jsonl", "short.bin"]


def test_every_writer_of_a_named_file_refuses_a_database(tmp_path: Path,
                                                         store_file: Path) -> None:
    from pydantic import BaseModel

    from memstrata.formats.messages import write_messages
    from memstrata.programs.cache import JsonlCache
    from memstrata.trajectories import export_jsonl

    class Row(BaseModel):
        key: str

    before = store_file.read_bytes()
    with pytest.raises(ValueError, match="SQLite database"):
        JsonlCache(store_file, Row)  # `memstrata ingest --cache app.db`
    with pytest.raises(ValueError, match="SQLite database"):
        write_messages([], store_file)
    with Store.open(tmp_path / "other.db", embedder=None) as other:
        with pytest.raises(ValueError, match="SQLite database"):
            export_jsonl(other, store_file)  # `memstrata runs export --out app.db`
        with pytest.raises(ValueError, match="it is the store itself"):
            export_jsonl(other, tmp_path / "other.db")
    assert store_file.read_bytes() == before
