"""``memstrata demo`` (the main job) end to end on a scripted model."""

from __future__ import annotations

import json

import pytest

from memstrata.bench.intervals import mean_interval, paired_difference, paired_ratio
from memstrata.bench.main_job import main_markdown, run_main_job
from tests.bench.test_qa_bench import QA_ITEMS, reader
from tests.conftest import locomo_record


def test_intervals_cover_the_mean_and_pair_the_questions():
    scores = [0.0, 1.0] * 50
    low, high = mean_interval(scores)
    assert low < 0.5 < high and high - low < 0.3
    assert mean_interval([1.0]) is None and mean_interval([0.5, 0.5]) == [0.5, 0.5]
    # Paired: b is a minus a constant, so the difference is known exactly.
    a = [i / 100 for i in range(100)]
    diff, span = paired_difference(a, [x - 0.1 for x in a])
    assert diff == pytest.approx(0.1) and span == pytest.approx([0.1, 0.1])
    ratio, span = paired_ratio([1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0])
    assert ratio == 1.5 and span[0] <= 1.5 <= span[1]
    assert paired_ratio([1.0], [0.0]) == (None, None)
    with pytest.raises(ValueError, match="one per question"):
        paired_difference([1.0], [1.0, 0.0])


def test_main_job_reports_three_parts_with_intervals(write_json, tmp_path, scripted):
    data = write_json("locomo.json", [locomo_record("conv-1", qa=QA_ITEMS),
                                      locomo_record("conv-2", qa=QA_ITEMS[:2])])
    handle = scripted(reader)
    doc = run_main_job(data, handle, tmp_path / "out", questions=6, examples=2, corpora=(),
                       progress=False)
    (corpus,) = doc["retrieval"].values()
    assert corpus["questions"] > 0 and "interval" in corpus["memstrata"]
    assert set(corpus["ratio"]) == {"ratio", "interval"}
    qa = doc["qa"]
    assert set(qa["systems"]) == {"memstrata", "naive_rag", "no_memory"}
    assert qa["questions"] >= 4  # the scored (category 1-4) ones of the 6 asked
    assert qa["systems"]["no_memory"]["f1"] == 0.0
    assert qa["memstrata_minus_naive_rag"]["f1"] >= 0.0
    assert len(doc["examples"]) == 2
    for ex in doc["examples"]:
        assert ex["answer"] and ex["llm_calls"] >= 1 and ex["key"]
    assert any(ex["evidence"] for ex in doc["examples"]), doc["examples"]
    md = (tmp_path / "out" / "main.md").read_text()
    assert md == main_markdown(doc) and "95% intervals" in md and "**Q:**" in md
    assert json.loads((tmp_path / "out" / "main.json").read_text())["qa"] == qa
    assert (tmp_path / "out" / "retrieval" / "retrieval.md").exists()
    assert (tmp_path / "out" / "qa" / "locomo.json").exists()


def test_main_job_refuses_nothing_to_do(tmp_path, scripted):
    with pytest.raises(ValueError, match="at least one question"):
        run_main_job(tmp_path / "x.json", scripted(reader), tmp_path, questions=0)
