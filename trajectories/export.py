"""Runs out of the store as JSONL: one line per run, its steps inside."""

from __future__ import annotations

import json
from pathlib import Path

from memstrata.memory import MemoryStore
from memstrata.memory.paths import refuse_database


def export_jsonl(store: MemoryStore, path: str | Path, *, user_id: str | None = None,
                 limit: int = 10_000) -> int:
    """Write the newest ``limit`` runs (of one tenant, or all) to ``path``; returns the count.

    Each line is the run record with a ``steps`` list, as stored (already redacted).

    Raises:
        ValueError: ``path`` is the store itself or another SQLite database (nothing is
            written).
    """
    refuse_database(path, store_path=getattr(store, "path", None))
    runs = store.runs.list(user_id, limit=limit)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as fh:
        for run in runs:
            row = run.model_dump(mode="json")
            row["steps"] = [s.model_dump(mode="json", exclude={"run_id"})
                            for s in store.runs.steps(run.user_id, run.id)]
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(runs)
