"""Episodic consolidation through the LM: one call per batch, originals kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memstrata.memory import Store
from memstrata.memory.cognitive import CognitiveMemory, CognitiveSettings
from memstrata.programs.consolidate import summariser


def test_maintain_consolidates_with_the_model(scripted: Callable[..., Any]) -> None:
    shown: list[str] = []

    def reply(system: str, user: str, schema: Any) -> dict[str, str]:
        assert system.startswith("Summarise the numbered episodes")
        shown.append(user)
        return {"summary": "Ana skied, then swam."}

    handle = scripted(reply)
    mind = CognitiveMemory(Store.open(":memory:", embedder=None), "u",
                           settings=CognitiveSettings(consolidation_batch=2))
    mind.episodic.record("Ana went skiing.")
    mind.episodic.record("Ana went swimming.")
    report = mind.maintain(summariser(handle))
    assert report.llm_calls == handle.meter.since(0).calls == 1
    assert "1. Ana went skiing.\n2. Ana went swimming." in shown[0]
    summary = mind.store.get("u", report.consolidated[0])
    assert summary is not None and summary.text == "Ana skied, then swam."
    assert [e.compressed for e in mind.episodic.episodes()] == [True, True]
