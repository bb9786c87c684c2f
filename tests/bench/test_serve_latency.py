"""``memstrata bench serve`` at a small scale: the three arms run and the document holds
what the README quotes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from memstrata.cli import main


def test_small_serve_bench(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["bench", "serve", "--turns", "1000", "--queries", "20", "--clients", "4",
                 "--db", str(tmp_path / "s.db"), "--out", str(out)]) == 0
    doc = json.loads((out / "serve.json").read_text())
    assert doc["stored_turns"] == 1000
    for arm in ("in_process", "in_process_threads", "rest", "rest_sequential"):
        assert doc[arm]["calls"] == 20 and doc[arm]["p95_ms"] > 0
    assert doc["rest_minus_in_process_p95_ms"] == round(
        doc["rest"]["p95_ms"] - doc["in_process_threads"]["p95_ms"], 3)
    assert "REST p95 - in-process p95" in capsys.readouterr().out
    assert (out / "serve.md").exists()
