"""The deleted-bytes scenario (issue 44): removed text searched in the SQLite file's bytes
and through every read of a PostgreSQL store; the detector counts a scrub taken away."""

from __future__ import annotations

import random
from contextlib import nullcontext
from pathlib import Path

import pytest

from memstrata import Memory
from memstrata.bench.reliability import deleted
from memstrata.bench.reliability.common import Context, Scenario
from memstrata.bench.reliability.pgserve import unavailable


def _sqlite(tmp_path: Path, kinds: tuple[str, ...] = deleted.KINDS) -> tuple[Scenario, dict]:
    result, counts = Scenario(name="deleted_bytes"), {}
    ctx = Context(work=tmp_path, quick=True, budget_s=120)
    deleted.on_sqlite(ctx, result, random.Random(3), 2, counts, kinds)
    return result, counts


def test_markers_resist_stemming_and_are_new() -> None:
    seen: set[str] = set()
    words = [deleted.marker(random.Random(0), seen) for _ in range(50)]
    assert len(set(words)) == 50 and all(len(w) == 20 for w in words)
    assert not set("aeiously") & set("".join(words))


def test_every_verb_leaves_no_byte_on_sqlite(tmp_path: Path) -> None:
    result, counts = _sqlite(tmp_path)
    assert counts == dict.fromkeys(deleted.KINDS, 2)
    assert result.failures == 0, result.details
    assert result.attempts == 2 * len(deleted.KINDS)


def test_the_detector_counts_a_delete_without_its_scrub(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Memory.delete and a replacing import without the scrub: the text stays on free pages,
    # in the FTS5 segments and in the neighbours' context (issue 44, defect 3).
    monkeypatch.setattr(Memory, "_scrub", lambda self, user_id, deleting: nullcontext())
    result, _ = _sqlite(tmp_path, ("delete_turn", "delete_item", "update"))
    assert result.deleted_bytes_found >= 6
    assert {d["kind"] for d in result.details} == {"delete_turn", "delete_item", "update"}


def test_a_blind_detector_is_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A scan that reads nothing would pass every deletion: kept markers must be seen.
    monkeypatch.setattr(deleted, "file_bytes", lambda path: b"")
    result, _ = _sqlite(tmp_path, ("delete_turn",))
    assert result.crashes == 4 and result.deleted_bytes_found == 0


@pytest.mark.postgres
def test_postgres_rows_are_gone_and_unreadable(tmp_path: Path) -> None:
    if reason := unavailable():
        pytest.skip(reason)
    result, counts = Scenario(name="deleted_bytes"), {}
    deleted.on_postgres(Context(work=tmp_path, quick=True, budget_s=120), result,
                        random.Random(0), 1, counts)
    assert counts == dict.fromkeys(deleted.KINDS, 1)
    assert result.crashes == 0, result.details


@pytest.mark.postgres
def test_postgres_keeps_no_removed_term(tmp_path: Path) -> None:
    if reason := unavailable():
        pytest.skip(reason)
    result = Scenario(name="deleted_bytes")
    deleted.on_postgres(Context(work=tmp_path, quick=True, budget_s=120), result,
                        random.Random(0), 1, {})
    assert result.deleted_bytes_found == 0, result.details
