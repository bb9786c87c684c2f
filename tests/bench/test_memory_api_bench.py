"""The facade benchmark's latency section, on a small tenant."""

from __future__ import annotations

from pathlib import Path

from memstrata.bench.memory_api import add_latency


def test_add_latency_reports_a_search_after_each_add_beside_its_baseline(tmp_path: Path
                                                                         ) -> None:
    found = add_latency(tmp_path / "m.db", items=200, calls=4)
    assert found["items"] == 200 and found["calls"] == 4
    search = found["search_at_items"]
    for side in ("after_add", "no_write_between"):
        assert 0 < search[side]["p50_ms"] <= search[side]["p95_ms"] <= search[side]["max_ms"]
    assert search["p95_ratio"] == round(search["after_add"]["p95_ms"]
                                        / search["no_write_between"]["p95_ms"], 2)
