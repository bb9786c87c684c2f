"""The long-messages benchmark: repeatable generation and the document a tiny run writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstrata.bench.long_messages import (
    SHAPES,
    format_long_table,
    make_history,
    make_queries,
    run_long_bench,
    write_long_outputs,
)
from memstrata.cli import main


def test_generation_is_repeatable_and_shaped_like_an_assistants_history() -> None:
    history = make_history(120, seed=4)
    assert history == make_history(120, seed=4)
    assert history != make_history(120, seed=5)
    assert [m["role"] for m in history[:4]] == ["user", "assistant", "user", "assistant"]
    answers = [len(m["content"]) for m in history if m["role"] == "assistant"]
    asks = [len(m["content"]) for m in history if m["role"] == "user"]
    assert min(answers) >= 1000 and max(answers) <= 6000 + 1000
    assert sum(asks) / len(asks) < sum(answers) / len(answers) / 5
    assert any("```python" in m["content"] for m in history)
    assert any("|---|" in m["content"] for m in history)
    queries = make_queries(20, history, seed=4)
    assert queries == make_queries(20, history, seed=4)
    assert [s for s, _ in queries[:4]] == list(SHAPES)
    for shape, query in queries:
        if shape == "identifier":  # names an identifier some message holds
            name = query.removeprefix("where did we use ").rstrip("?")
            assert any(name in m["content"] for m in history)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return run_long_bench(200, queries=8, batch=20, singles=5, seed=1, progress=False)


def test_a_tiny_run_writes_the_document(doc: dict[str, Any], tmp_path: Path) -> None:
    assert doc["meta"]["messages"] == 200 and doc["meta"]["queries"] == 8
    assert doc["corpus"]["messages"] == 200 and doc["db_mb"] > 0
    assert doc["ingest"]["batched"]["messages_per_s"] > 0
    assert doc["ingest"]["single"]["messages"] == 5
    for system in ("memstrata", "rank_bm25"):
        row = doc["search"][system]
        assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"] <= row["max_ms"]
        assert set(row["by_shape"]) == set(SHAPES)
    assert doc["search"]["memstrata"]["mean_hits"] > 0
    assert doc["search"]["memstrata"]["first_ms"] > 0  # the warm-up, timed apart
    assert doc["search"]["p95_ratio_memstrata_over_bm25"] > 0
    assert set(doc["targets"]) >= {"search_p95_met", "ingest_batched_met"}
    [path] = write_long_outputs(doc, tmp_path)
    assert json.loads(path.read_text()) == json.loads(json.dumps(doc))
    assert "rank-bm25" in format_long_table(doc)
    assert "first search of the process" in format_long_table(doc)


def test_the_command_writes_long_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    assert main(["bench", "long", "--messages", "40", "--queries", "4", "--singles", "2",
                 "--no-bm25", "--out", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "long.json").read_text())
    assert written["meta"]["messages"] == 40 and "rank_bm25" not in written["search"]
    assert "long.json" in capsys.readouterr().out


def test_a_kept_store_must_be_new(tmp_path: Path) -> None:
    (tmp_path / "x.db").write_text("")
    with pytest.raises(ValueError, match="exists"):
        run_long_bench(10, db=tmp_path / "x.db", progress=False)
