"""DSPy programs and the model setup they run on.

``setup_lm`` turns a model choice (``local/qwen2.5-coder-1.5b``, any other model of
``memstrata models list``, or any litellm ``provider/model``) into a metered DSPy LM;
``QA``, ``Extractor``, ``Judge`` and ``AnswerJudge`` are the programs, each predicting
structured output with one retry and a specific error; ``run_executor`` runs RLM, ReAct
or the scratchpad over a tool session, recorded; ``PersonalAnswerer`` routes a question,
verifies who did what, then answers with ``QA``, returning every answer with its
provenance; ``Reconciler`` decides whether one name in two conversations is one person
(MERGE) or two (SEPARATE).

The names below load on first use, so ``memstrata.programs.models`` (the model catalogue)
and the command line start without importing DSPy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ABSTAIN_ANSWER": "qa", "QA": "qa", "AnswerStyle": "qa",
    "AnswerWithProvenance": "answer", "PersonalAnswerer": "answer",
    "ModelSetupError": "errors", "ProgramParseError": "errors",
    "ExecutorRun": "executors", "ExecutorSettings": "executors", "run_executor": "executors",
    "Extractor": "extractor",
    "AnswerJudge": "judge", "Judge": "judge",
    "EMBEDDED": "lm", "ModelHandle": "lm", "setup_lm": "lm", "wrap_lm": "lm",
    "CallMeter": "meter", "CallRecord": "meter", "Usage": "meter",
    "ReconcileDecision": "reconciler", "Reconciler": "reconciler",
    "ReconcilerSettings": "reconciler",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
