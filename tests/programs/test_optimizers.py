"""Each DSPy optimizer compiles ``QA`` against a scripted LM, with the QA metric, and the
compiled program round-trips through ``save_program`` / ``load_program``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata.programs.compiled import load_program, save_program
from memstrata.programs.metrics import as_score, qa_metric
from memstrata.programs.qa import QA

CITIES = ["Oslo", "Paris", "Rome", "Lima", "Kyiv", "Bern", "Riga", "Baku"]


def _reply(system: str, user: str, schema: dict[str, Any] | None) -> Any:
    if schema is None:  # an optimizer's own prompt (DSPy's format): a new instruction
        # The last output field named in DSPy's format (its end marker is no field).
        field = [f for f in re.findall(r"\[\[ ## (\w+) ## \]\]", system) if f != "completed"][-1]
        return f"[[ ## {field} ## ]]\nCopy the answer from the memories.\n[[ ## completed ## ]]"
    m = re.search(r"\[(s\d+:\d+) · \w+ · [^\]]+\] I live in (\w+)", user)
    return {"answer": m[2] if m else "I don't know", "evidence": [m[1]] if m else []}


def _data() -> tuple[list[dspy.Example], list[dspy.Example]]:
    data = [dspy.Example(question=f"Where does P{i} live?", answer=city, evidence=[f"s{i}:1"],
                         memories=f"[s{i}:1 · P{i} · 2023-05-01] I live in {city}"
                         ).with_inputs("question", "memories") for i, city in enumerate(CITIES)]
    return data[:5], data[5:]


def _compile(name: str, lm: dspy.LM) -> dspy.Module:
    train, val = _data()
    if name == "bootstrap":
        return dspy.BootstrapFewShot(metric=as_score(qa_metric), metric_threshold=0.5,
                                     max_bootstrapped_demos=2, max_labeled_demos=2,
                                     max_rounds=1).compile(QA(), trainset=train)
    if name == "mipro":
        pytest.importorskip("optuna")
        return dspy.MIPROv2(metric=qa_metric, auto=None, num_candidates=2,
                            max_bootstrapped_demos=1, max_labeled_demos=1, num_threads=1,
                            verbose=False).compile(QA(), trainset=train, valset=val,
                                                   num_trials=2, minibatch=False)
    if name == "gepa":
        return dspy.GEPA(metric=qa_metric, max_metric_calls=20, reflection_lm=lm,
                         num_threads=1, reflection_minibatch_size=2
                         ).compile(QA(), trainset=train, valset=val)
    return dspy.SIMBA(metric=qa_metric, bsize=4, num_candidates=2, max_steps=1, max_demos=2,
                      num_threads=1).compile(QA(), trainset=train + val, seed=0)


def _plain(demo: Any) -> Any:
    return json.loads(json.dumps(demo.toDict() if hasattr(demo, "toDict") else dict(demo),
                                 default=str))


@pytest.mark.parametrize("optimizer", ["bootstrap", "mipro", "gepa", "simba"])
def test_each_optimizer_compiles_qa_and_the_result_round_trips(
        optimizer: str, scripted: Any, tmp_path: Path) -> None:
    handle = scripted(_reply)
    with dspy.context(lm=handle.lm):
        compiled = _compile(optimizer, handle.lm)
        predictor = dict(compiled.named_predictors())["respond.predict"]
        path = tmp_path / f"{optimizer}.json"
        save_program(compiled, path, meta={"optimizer": optimizer})
        loaded = load_program("qa", path)
        again = dict(loaded.named_predictors())["respond.predict"]
        assert again.signature.instructions == predictor.signature.instructions
        assert [_plain(d) for d in again.demos] == [_plain(d) for d in predictor.demos]
        assert again.demos
        assert loaded(question="Where does P9 live?",
                      memories="[s9:1 · P9 · 2023-05-01] I live in Nice").answer == "Nice"
