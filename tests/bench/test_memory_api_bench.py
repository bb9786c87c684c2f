"""The facade benchmark's latency section, on a small tenant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstrata import Memory
from memstrata.bench.memory_api import add_latency, chat_search, main


def test_add_latency_reports_a_search_after_each_add_beside_its_baseline(tmp_path: Path
                                                                         ) -> None:
    found = add_latency(tmp_path / "m.db", items=200, calls=4)
    assert found["items"] == 200 and found["calls"] == 4
    search = found["search_at_items"]
    for side in ("after_add", "no_write_between"):
        assert 0 < search[side]["p50_ms"] <= search[side]["p95_ms"] <= search[side]["max_ms"]
    assert search["p95_ratio"] == round(search["after_add"]["p95_ms"]
                                        / search["no_write_between"]["p95_ms"], 2)


def _chat_file(tmp_path: Path) -> Path:
    turns = [{"speaker": "Ana" if i % 2 else "Ben", "dia_id": f"D1:{i + 1}",
              "text": f"I went hiking near the lake with my dog, day {i}"} for i in range(12)]
    record = {"sample_id": "c1", "conversation": {
        "speaker_a": "Ana", "speaker_b": "Ben", "session_1": turns,
        "session_1_date_time": "1:56 pm on 8 May, 2023"},
        "qa": [{"question": "Where did Ana go hiking?", "answer": "the lake",
                "evidence": ["D1:2"], "category": 4},
               {"question": "Who has a dog?", "answer": "Ana", "evidence": ["D1:2"],
                "category": 4}]}
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([record]), encoding="utf-8")
    return path


def test_chat_search_times_the_files_questions_on_its_turns_repeated(tmp_path: Path) -> None:
    found = chat_search(tmp_path / "m.db", _chat_file(tmp_path), items=300, calls=5)
    # Two questions: one timed after an add, the other as the baseline (never both).
    assert (found["items"], found["calls"]) == (300, 1)
    for side in ("after_add", "no_write_between"):
        assert 0 < found[side]["p50_ms"] <= found[side]["p95_ms"] <= found[side]["max_ms"]
    memory = Memory.open(tmp_path / "m.db")
    assert memory.store.counts("chat")["turns"] == 300 + 1  # the seed, then one add a call
    memory.close()


def test_baseline_and_timed_searches_share_no_query(tmp_path: Path, monkeypatch) -> None:
    import memstrata.bench.memory_api as bench

    seen: dict[str, list[str]] = {}

    def spy(memory, user, queries, baseline, messages):
        seen.update(queries=queries, baseline=baseline)
        return real(memory, user, queries, baseline, messages)

    real = bench._search_after_add
    monkeypatch.setattr(bench, "_search_after_add", spy)
    chat_search(tmp_path / "m.db", _chat_file(tmp_path), items=200, calls=5)
    assert seen["queries"] and seen["baseline"]
    assert not set(seen["queries"]) & set(seen["baseline"])


def test_chat_search_needs_two_questions(tmp_path: Path) -> None:
    path = _chat_file(tmp_path)
    record = json.loads(path.read_text())
    record[0]["qa"] = record[0]["qa"][:1]
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="two distinct questions"):
        chat_search(tmp_path / "m.db", path, items=200, calls=5)


def test_the_bench_says_which_data_file_is_missing(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--data", str(tmp_path / "none.json"), "--out", str(tmp_path)])
    assert "none.json: no such file" in capsys.readouterr().err
