"""The real Deno/Pyodide sandbox, started with no network: an RLM step calls mem_search.

Needs ``memstrata sandbox install`` once (the README's install command runs it). The test
points Deno at an empty cache and at proxies that go nowhere, so any download would fail:
the sandbox must start from local files alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memstrata.memory import Store
from memstrata.programs import ExecutorSettings, run_executor
from memstrata.programs.sandbox import sandbox_factory, sandbox_paths
from memstrata.tools import ToolSession
from tests.conftest import field, locomo_record

pytestmark = pytest.mark.slow

DEAD = "http://127.0.0.1:9"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if not sandbox_paths().installed():
        pytest.fail("the sandbox's Pyodide is not installed: run `memstrata sandbox install`")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
                 "NPM_CONFIG_REGISTRY"):
        monkeypatch.setenv(name, DEAD)
    monkeypatch.setenv("DENO_DIR", str(tmp_path / "empty-deno-cache"))


def test_sandbox_starts_offline_and_keeps_state(offline: None) -> None:
    calls: list[dict[str, Any]] = []
    interp = sandbox_factory()()
    interp.tools["echo"] = lambda text: calls.append({"text": text}) or {"echoed": text}
    try:
        assert interp.execute("x = 6 * 7\nprint(x)").strip() == "42"
        assert interp.execute("print(echo('hi')['echoed'], x)").strip() == "hi 42"
        # The network is not there for sandboxed code either.
        out = interp.execute(
            "try:\n    import urllib.request\n    urllib.request.urlopen('http://example.com')\n"
            "    print('reached')\nexcept Exception as e:\n    print('blocked')")
        assert out.strip() == "blocked"
    finally:
        interp.shutdown()
    assert calls == [{"text": "hi"}]


def test_rlm_step_calls_mem_search_in_the_real_sandbox(offline: None, store: Store,
                                                       scripted: Any) -> None:
    from memstrata.bench.locomo import load_conversation
    from memstrata.formats.locomo import _parse_conversation

    load_conversation(store, _parse_conversation(Path("t.json"), 0, locomo_record("conv-a")))
    session = ToolSession(store, "conv-a")
    ref = session.put_blob("conversation", "[D1:1] Alice: I adopted a guinea pig named Oscar.")

    def reply(system: str, user: str, schema: dict[str, Any] | None) -> dict[str, Any]:
        if "code" in (schema or {}).get("properties", {}):
            if field(user, "iteration").startswith("1/"):
                return {"reasoning": "search", "code":
                        "hits = mem_search('guinea pig')\n"
                        "print(hits['results'][0]['description'])\nprint(repr(conversation))"}
            return {"reasoning": "answer", "code": "SUBMIT(answer=hits['results'][0]['id'])"}
        return {"reasoning": "", "answer": "fallback"}

    run = run_executor("Who is Oscar?", session, scripted(reply), ExecutorSettings(max_iters=3),
                       context={"conversation": ref})
    assert run.error is None and run.converged, run.error
    first = run.steps[0]
    assert "guinea pig named Oscar" in first["output"]
    assert "BlobRef(key='conversation', n=" in first["output"]
    assert [t["name"] for t in first["tools"]] == ["mem_search"]
    assert run.answer.startswith("t_")
    assert store.runs.get("conv-a", run.run_id).status == "ok"
