"""The import scenario (issue 44): no import lowers a conversation's rows unless told to
replace it, and an export round trip restores the tenant; the detector counts an import
that replaces (the pre-fix default)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata import Memory
from memstrata.bench.reliability import imports, suite
from memstrata.bench.reliability.common import Context


def test_losses_spare_only_the_replaced() -> None:
    before = {("a", "default"): 3, ("a", "trip"): 2, ("b", "default"): 1}
    after = {("a", "default"): 1, ("a", "trip"): 2}
    assert imports.losses(before, after, set()) == ["a/default: 3 -> 1", "b/default: 1 -> 0"]
    assert imports.losses(before, after, {("a", "default")}) == ["b/default: 1 -> 0"]


def test_no_import_loses_rows(tmp_path: Path) -> None:
    result = imports.import_no_loss(Context(work=tmp_path, quick=True, budget_s=120))
    assert result.attempts >= 15 and result.failures == 0, result.details
    steps = {d["step"] for d in result.details}
    assert {"import_messages", "import_messages_cli", "import_again", "round_trip"} <= steps


def test_the_detector_counts_an_import_that_replaces(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real = Memory.import_conversations
    monkeypatch.setattr(Memory, "import_conversations", lambda self, records, **kw: real(
        self, records, **{**kw, "replace": True}))
    result = imports.import_no_loss(Context(work=tmp_path, quick=True, budget_s=120))
    assert result.imports_losing_rows >= 1
    assert all(d["failure"] == "an import lowered a row count"
               for d in result.details if "failure" in d)


def test_the_detector_counts_an_import_that_stores_a_file_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import memstrata.api

    # The import as it was: every message of the file appended, repeats included.
    monkeypatch.setattr(memstrata.api, "_without_repeats", lambda store, user, conv, batches:
                        (batches, 0, 0))
    result = imports.import_no_loss(Context(work=tmp_path, quick=True, budget_s=120))
    assert result.imports_duplicating >= 1 and result.imports_losing_rows == 0


def test_the_new_scenarios_are_registered() -> None:
    names = {name for _, name, _ in suite.scenarios()}
    assert {"deleted_bytes", "backend_parity", "import_no_loss"} <= names
    assert suite.MODULES[-1] == "secrets"
    assert set(suite.MODULES) <= set(suite.BUDGET_S)
