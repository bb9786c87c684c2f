"""Fast checks of the scale benchmark: document shape, positive figures, written outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstrata.bench.scale import (
    MAIN_USER,
    format_scale_table,
    make_corpus,
    make_queries,
    run_scale_bench,
    write_scale_outputs,
)

SIZES = [500, 2000]


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    db_dir = tmp_path_factory.mktemp("scale-db")
    return run_scale_bench(SIZES, queries=8, bm25_sample=1000, seed=3, db_dir=db_dir,
                           progress=False)


def test_document_shape(doc: dict[str, Any]) -> None:
    assert set(doc) == {"meta", *map(str, SIZES)}
    meta = doc["meta"]
    assert {"cpu_count", "platform", "python"} <= meta["machine"].keys()
    assert any("embedding" in note for note in meta["notes"])
    for n in SIZES:
        row = doc[str(n)]
        assert {"memstrata", "rank_bm25", "speedup_p50"} <= row.keys()
        for system in ("memstrata", "rank_bm25"):
            for key in ("p50_ms", "p95_ms", "ingest_per_s"):
                assert row[system][key] > 0, (n, system, key)
            assert row[system]["p95_ms"] >= row[system]["p50_ms"]
        assert row["speedup_p50"] > 0
        mem = row["memstrata"]
        assert mem["stored_items"] == n
        assert mem["db_mb"] > 0 and mem["ingest_peak_rss_mb"] > 0
        assert mem["queries"] == 8 and mem["foreign_tenant_hits"] == 0
        assert mem["mean_hits"] > 0


def test_bm25_sampling_is_reported(doc: dict[str, Any]) -> None:
    small, large = doc["500"]["rank_bm25"], doc["2000"]["rank_bm25"]
    assert small["sampled"] is False and small["sample_size"] == 500
    assert large["sampled"] is True and large["sample_size"] == 1000
    assert "understate" in large["note"]
    assert doc["2000"]["speedup_p50_full_corpus_estimate"] > doc["2000"]["speedup_p50"]


def test_outputs_written(doc: dict[str, Any], tmp_path: Path) -> None:
    paths = write_scale_outputs(doc, tmp_path / "out")
    assert [p.name for p in paths] == ["scale.json", "scale.png"]
    assert json.loads(paths[0].read_text()) == json.loads(json.dumps(doc))
    assert paths[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = format_scale_table(doc)
    assert "2,000" in table and "speedup" in table and "*" in table


def test_corpus_is_deterministic_and_shaped() -> None:
    a, b = make_corpus(300, seed=7), make_corpus(300, seed=7)
    assert a.ids == b.ids and [a.text(i) for i in range(20)] == [b.text(i) for i in range(20)]
    other = make_corpus(300, seed=8)
    assert [other.text(i) for i in range(20)] != [a.text(i) for i in range(20)]
    for i in range(len(a)):
        assert 8 <= len(a.text(i).split()) <= 25
        assert 1 <= len(a.item_tags(i)) <= 3
    assert sum(1 for i in range(len(a)) if a.item(i).user_id == MAIN_USER) == 300
    qs = make_queries(a, 30, seed=7)
    assert qs == make_queries(b, 30, seed=7) and len(qs) == 30
    assert all(3 <= len(q.split()) <= 9 for q in qs)


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        run_scale_bench([], progress=False)
    with pytest.raises(ValueError):
        run_scale_bench([0], progress=False)
