"""``JsonlCache``: results of expensive calls, keyed, in an append-only JSONL file.

An interrupted run continues where it stopped: each record is flushed as it is put, and a
torn last line (a kill mid-write) is skipped and closed so later appends stay whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel

from memstrata.memory.paths import refuse_database

T = TypeVar("T", bound=BaseModel)


class JsonlCache(Generic[T]):
    """Records of one pydantic model, keyed by their ``key_field``.

    Example:
        >>> cache = JsonlCache(Path("answers.jsonl"), Answer)  # doctest: +SKIP
        >>> cache.get("k") or cache.put(compute())             # doctest: +SKIP
    """

    def __init__(self, path: Path, model: type[T], key_field: str = "key") -> None:
        """Read the records already in ``path`` (a missing file is an empty cache).

        Raises:
            ValueError: ``path`` is a SQLite database (a store given as the cache).
        """
        refuse_database(path)
        self.path = path
        self.model = model
        self.key_field = key_field
        self.records: dict[str, T] = {}
        if path.exists():
            text = path.read_text(encoding="utf-8")
            if text and not text.endswith("\n"):
                with path.open("a", encoding="utf-8") as fh:
                    fh.write("\n")
            for line in text.splitlines():
                try:
                    record = model.model_validate_json(line)
                except ValueError:
                    continue
                self.records[getattr(record, key_field)] = record

    def get(self, key: str) -> T | None:
        """The cached record under ``key``, if any."""
        return self.records.get(key)

    def put(self, record: T) -> T:
        """Store and append ``record`` (flushed at once, so a kill loses at most one)."""
        self.records[getattr(record, self.key_field)] = record
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(record.model_dump_json() + "\n")
            fh.flush()
        return record
