"""The backend-parity scenario (issue 44): one hostile input, the same outcome class on
SQLite and PostgreSQL; the detector counts a door check taken away."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.bench.reliability import parity
from memstrata.bench.reliability.common import Context
from memstrata.bench.reliability.fuzz import Outcome
from memstrata.bench.reliability.pgserve import unavailable


def test_outcome_classes() -> None:
    assert parity.outcome_class("add", Outcome(value=[{"event": "ADD"}, {"event": "NONE"}])
                                ) == "stored ADD,NONE"
    assert parity.outcome_class("get", Outcome(value=None)) == "none"
    assert parity.outcome_class("search", Outcome(value=[1, 2])) == "2 rows"
    assert parity.outcome_class("add", Outcome(error=ValueError("x"))) == \
        "refused builtins.ValueError"
    assert parity.outcome_class("add", Outcome(error=KeyError("x"))) != \
        parity.outcome_class("add", Outcome(error=ValueError("x")))
    assert parity.outcome_class("search", Outcome(timed_out=True)) == "hang"


def test_translate_maps_ids_only_at_the_top() -> None:
    ids = {"t_a": "t_b"}
    assert parity._translate("t_a", ids) == "t_b"
    assert parity._translate(["t_a", "x"], ids) == ["t_b", "x"]
    deep = [["t_a"]]
    assert parity._translate(deep, ids) is deep


def _needs_postgres() -> None:
    if reason := unavailable():
        pytest.skip(reason)


@pytest.mark.postgres
def test_the_backends_agree_on_the_reported_inputs(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_postgres()
    monkeypatch.setattr(parity, "_drive", lambda ctx, result, examples, body: None)
    result = parity.backend_parity(Context(work=tmp_path, quick=True, budget_s=120))
    assert result.attempts == len(parity.REPORTED)
    assert result.parity_mismatches == 0, result.details


@pytest.mark.postgres
def test_the_detector_counts_a_door_check_taken_away(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the one validation at the door, SQLite stores a NUL and a lone surrogate in
    # metadata that PostgreSQL refuses (issue 44, defects 4 and 5).
    import memstrata.api as api

    _needs_postgres()
    monkeypatch.setattr(parity, "_drive", lambda ctx, result, examples, body: None)
    monkeypatch.setattr(api, "_check_json", lambda name, value: None)
    real = api._check_text
    monkeypatch.setattr(api, "_check_text", lambda name, value, limit=api.MAX_MESSAGE_BYTES:
                        None if "\x00" in value else real(name, value, limit=limit))
    result = parity.backend_parity(Context(work=tmp_path, quick=True, budget_s=120))
    assert result.parity_mismatches >= 2
    assert any(d.get("postgres", "").startswith("refused psycopg") for d in result.details)
