"""HTTP fuzzing of ``memstrata serve``: the judge counts what it must, and a small run
against a real uvicorn is clean (0 crashes, 0 cross-tenant results, 0 unauthenticated
successes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from memstrata.bench.reliability import http_fuzz
from memstrata.bench.reliability.common import Context, Scenario
from memstrata.bench.reliability.http_fuzz import Trial

FORBIDDEN = ["zebramark0000q", "t_" + "b" * 24]
ERROR = json.dumps({"error": {"code": "not_found", "message": "no such memory"}}).encode()


def _judged(trial: Trial, who: str = "alice", path: str = "/v1/search",
            carries: str = "") -> tuple[Scenario, dict[str, Any]]:
    result = Scenario(name="t")
    counts: dict[str, Any] = {"crashes": 0, "cross_tenant": 0,
                              "unauthenticated_successes": 0, "status": {}}
    request = {"method": "POST", "path": path, "carries": carries}
    http_fuzz._judge(result, counts, request, trial, who, FORBIDDEN)
    return result, counts


def test_the_judge_counts_each_broken_promise() -> None:
    assert _judged(Trial(404, ERROR))[1]["crashes"] == 0
    assert _judged(Trial(500, b"{}"))[1]["crashes"] == 1
    assert _judged(Trial(None, b"", "RemoteProtocolError"))[1]["crashes"] == 1
    assert _judged(Trial(422, b"<html>oops</html>"))[1]["crashes"] == 1  # not the shape
    assert _judged(Trial(405, b"<html/>"), path="/ui/x")[1]["crashes"] == 0
    leak = Trial(200, b'{"results": [{"text": "code zebramark0000q"}]}')
    result, counts = _judged(leak)
    assert counts["cross_tenant"] == 1 and result.breaches == 1
    assert _judged(leak, carries="zebramark0000q")[1]["cross_tenant"] == 0  # its own words
    assert _judged(leak, who="admin")[1]["cross_tenant"] == 0
    ok = Trial(200, b'{"results": []}')
    for who in ("none", "junk", "revoked"):
        result, counts = _judged(ok, who=who)
        assert counts["unauthenticated_successes"] == 1 and result.breaches == 1
        assert _judged(ok, who=who, path="/openapi.json")[1]["unauthenticated_successes"] == 0
        assert _judged(Trial(401, ERROR), who=who)[1]["unauthenticated_successes"] == 0


def test_a_small_run_is_clean(tmp_path: Path) -> None:
    result = http_fuzz.http_fuzz(Context(work=tmp_path, quick=True, seed=3, budget_s=300))
    assert result.attempts >= 300
    assert (result.crashes, result.breaches, result.integrity_failures) == (0, 0, 0), \
        result.details[:3]
    figures = result.figures
    assert figures["unauthenticated_successes"] == 0 and figures["cross_tenant_results"] == 0
    statuses = json.loads(figures["status_counts"])
    # The run reached the handlers, not only the router: successes, refusals, 413s.
    assert {"200", "401", "403", "404", "413", "422"} <= set(statuses)
    assert "http_fuzz" in __import__("memstrata.bench.reliability.suite",
                                     fromlist=["MODULES"]).MODULES
