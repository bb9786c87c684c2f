"""``memstrata compile voe`` and ``memstrata bench compile voe`` against a scripted LM on a
tiny LoCoMo-format file: the examples are the predictions ``bench voe`` scores, in the
context its responder is shown; each optimizer compiles ``voe.responder`` into a file
that loads with its demos and instructions; no held-out message reaches a compile; the
bench writes ``similarity`` and ``hit_rate`` per system and a re-run makes no call; a bad
split is refused before any model loads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata.bench.compile.voe import VoETask, voe_contexts, voe_examples
from memstrata.bench.voe import fuzzy, run_voe_bench
from memstrata.cli import main
from memstrata.memory import Store
from memstrata.programs.compiled import load_program, program_hash, save_program
from memstrata.programs.compiler import BUDGETS, CompileJob, Models, Split, compile_program, spread
from memstrata.programs.voe import HIT, NO_FACTS, VoEResponder, VoESettings
from tests.bench.compile_helpers import optimizer_reply, scripted_cli_models, tiny_locomo
from tests.conftest import field, locomo_record

PEOPLE = {"conv-1": ("Ana", "Ben", "Rex"), "conv-2": ("Cleo", "Dan", "Milo"),
          "conv-3": ("Eve", "Finn", "Luna"), "conv-4": ("Gus", "Hal", "Bolt")}
SPLIT = ["--train", "conv-1,conv-2", "--val", "conv-3"]


def _said(a: str, pet: str) -> list[str]:
    """What user ``a`` says (every line names them or their dog: nothing is shared
    between conversations)."""
    return [f"I walked my dog {pet} today.", f"I walked my dog {pet} today!",
            f"{pet} chased a red ball in the park.", f"{a} here: {pet} needs a vet visit."]


def _record(sample_id: str) -> dict[str, Any]:
    a, b, pet = PEOPLE[sample_id]
    said = _said(a, pet)
    image = {"text": f"Look at {pet}!", "img_url": ["https://example.invalid/d.jpg"],
             "blip_caption": f"a photo of {pet} asleep on a sofa"}
    users: dict[int, list[dict[str, Any]]] = {
        1: [{"text": said[0]}, {"text": said[1]}, {"text": said[2]}, {"text": said[3]}],
        # 16 messages: more than the responder's 12-message window.
        2: [{"text": t} for t in (said[0], said[0], said[2], said[3], said[3], said[1])]
           + [image, {"text": said[2]}],
    }
    sessions = {}
    for n, turns in users.items():
        rows: list[dict[str, Any]] = []
        for i, turn in enumerate(turns):
            rows += [{"speaker": a, "dia_id": f"D{n}:{2 * i + 1}", **turn},
                     {"speaker": b, "dia_id": f"D{n}:{2 * i + 2}",
                      "text": f"Nice, {a}! Tell me more ({n}.{i})."}]
        sessions[n] = rows
    return locomo_record(sample_id, speakers=(a, b), sessions=sessions)


def reply(system: str, user: str, schema: dict[str, Any] | None) -> Any:
    """The responder predicts the user's last message again; the loop's predictor
    (``bench voe``) names a fact; an optimizer's own prompts (DSPy's chat format) get a
    short instruction in every output field."""
    props = (schema or {}).get("properties", {})
    if "next_prediction" in props:
        said = re.findall(r"^user: (.*)$", field(user, "history"), re.M)
        return {"reply": "ok", "next_prediction": said[-1] if said else "hello"}
    if "fact" in props:
        return {"fact": "The user has a dog", "tags": ["dog"], "prediction": "dog",
                "needed_info": ["dog"]}
    if "prediction" in props:
        return {"prediction": "dog", "needed_info": ["dog"]}
    return optimizer_reply(system, schema, text="Predict that the user repeats themselves.",
                           instruction="Predict that the user repeats their last message.")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tiny_locomo(tmp_path, [_record(s) for s in PEOPLE])


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch, scripted: Any) -> list[Any]:
    """Every model the CLI sets up is the scripted one; the handles made are listed."""
    return scripted_cli_models(monkeypatch, scripted, reply)


def test_the_examples_are_the_predictions_bench_voe_scores(
        data: Path, tmp_path: Path, scripted: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every responder call of the bench, with what it was shown.
    shown: list[tuple[str, str]] = []
    original = VoEResponder.forward

    def spy(self: VoEResponder, history: str, facts: str) -> dspy.Prediction:
        shown.append((history, facts))
        return original(self, history=history, facts=facts)

    def numbered(system: str, user: str, schema: dict[str, Any] | None) -> Any:
        if "next_prediction" in (schema or {}).get("properties", {}):
            return {"reply": "ok", "next_prediction": f"P{len(shown) - 1}"}
        return reply(system, user, schema)

    monkeypatch.setattr(VoEResponder, "forward", spy)
    run_voe_bench(data, scripted(numbered), tmp_path / "bench", embedder=None, limit=None,
                  conversations={"conv-1", "conv-4"}, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "bench" / "voe_turns.jsonl").open()]
    # The baseline arm: each scored turn, the history its prediction was made on.
    bench = {f"{r['conversation']}#{r['turn']}": (shown[int(r["predicted"][1:])], r["actual"])
             for r in rows if r["arm"] == "baseline" and r["predicted"]}

    task = VoETask(Models(student=scripted(reply)))
    split = task.read(data, Split.parse("conv-1", "conv-4"))
    examples = voe_examples(voe_contexts(split.of(["conv-1", "conv-4"]), VoESettings(), None))
    assert {e.id: ((e.history, e.facts), e.actual) for e in examples} == bench
    assert len(examples) == 2 * (3 + 7)  # a session's first user turn is predicted by no one
    assert all(e.facts == NO_FACTS for e in examples)
    # The window and the captions are the loop's.
    assert max(len(e.history.splitlines()) for e in examples) == 12
    assert any("[shares a photo: a photo of Rex asleep on a sofa]" in e.history
               for e in examples)
    assert all(e.next_prediction == e.actual and set(e.inputs().keys()) == {"history", "facts"}
               for e in examples)


def test_positions_are_spread_over_conversations_deterministically() -> None:
    groups = [list(range(10)), ["a", "b"], []]
    assert spread(groups, 5) == [1, 5, 8, "a", "b"]  # 3 + 2, evenly spaced
    assert spread(groups, 5) == spread(groups, 5)
    assert spread(groups, 1) == [5]
    assert spread(groups, 100) == [*range(10), "a", "b"] == spread(groups, None)
    assert spread(groups, 3) == [2, 7, "b"]


@pytest.mark.parametrize("optimizer", ["bootstrap", "mipro", "gepa", "simba"])
def test_each_optimizer_compiles_the_responder_and_the_file_round_trips(
        optimizer: str, data: Path, tmp_path: Path, scripted: Any) -> None:
    if optimizer == "mipro":
        pytest.importorskip("optuna")
    handle = scripted(reply)
    budget = BUDGETS[optimizer].model_copy(
        update={"main": {"bootstrap": 4, "mipro": 2, "gepa": 12, "simba": 1}[optimizer]})
    task = VoETask(Models(student=handle))
    job = CompileJob(task=task, optimizer=optimizer,
                     data=task.read(data, Split.parse("conv-1,conv-2", "conv-3", "conv-4")),
                     out=tmp_path / f"{optimizer}.json", budget=budget, limit=8)
    with Store.open(tmp_path / "c.db") as store:
        result = compile_program(job, store, progress=False)
    assert result.program.name == "voe.responder" and result.llm_calls > 0
    doc = json.loads(job.out.read_text())
    assert doc["program"] == "voe.responder" and doc["meta"]["history_turns"] == 12
    assert len(doc["meta"]["train_ids"]) == len(doc["meta"]["val_ids"]) == 8
    assert {i.split("#")[0] for i in doc["meta"]["train_ids"]} == {"conv-1", "conv-2"}
    # Loaded, it holds the file's demos and instructions, and saves to the same hash.
    loaded = load_program("voe.responder", job.out)
    assert isinstance(loaded, VoEResponder)
    predict = loaded.respond.predict
    state = doc["state"]["respond.predict"]
    assert predict.signature.instructions == state["signature"]["instructions"]
    assert [json.loads(json.dumps(dict(d), default=str)) for d in predict.demos] == \
        state["demos"]
    assert save_program(loaded, tmp_path / "again.json") == program_hash(job.out)
    if optimizer == "bootstrap":  # a demo the teacher got right, from a train example
        with Store.open(":memory:") as store:
            actual = {e.history: e.actual for e in task.sets(store, job.data, job.limit).train}
        bootstrapped = [d for d in predict.demos if "reply" in d]
        assert bootstrapped and all(fuzzy(d["next_prediction"], actual[d["history"]]) >= HIT
                                    for d in bootstrapped)
    with dspy.context(lm=handle.lm):
        out = loaded(history="user: I fed the cat.", facts=NO_FACTS)
    assert out.next_prediction == "I fed the cat."


def test_no_heldout_message_is_ever_in_train_or_val(data: Path, scripted: Any) -> None:
    task = VoETask(Models(student=scripted(reply)))
    split = task.read(data, Split.parse("conv-1,conv-2", "conv-3", "conv-4"))
    with Store.open(":memory:") as store:
        sets = task.sets(store, split, None)
    heldout = {t["text"] for _, _, turns in split.units["conv-4"].sessions for t in turns}
    seen = [e for e in (*sets.train, *sets.val)]
    assert len(sets.train) == 20 and len(sets.val) == 10
    assert {e.conversation for e in seen} == {"conv-1", "conv-2", "conv-3"}
    assert not {i for i in sets.ids if i.startswith("conv-4#")}
    assert not any(text in e.history or text in e.actual for e in seen for text in heldout)
    with Store.open(":memory:") as store:
        assert len(task.sets(store, split, 3).train) == 3  # the limit is per set


def test_bench_compile_voe_scores_hit_rate_and_a_rerun_makes_no_call(
        data: Path, tmp_path: Path, model: list[Any]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "bench"
    args = ["bench", "compile", "voe", "--lm", "local/x", "--data", str(data), *SPLIT,
            "--heldout", "conv-4", "--out", str(out), "--no-dense", "--optimizers",
            "bootstrap", "--budget", "bootstrap=4", "--limit", "4"]
    assert main(args) == 0
    doc = json.loads((out / "compile.json").read_text())
    assert doc["program"] == "voe.responder" and doc["headline"] == "similarity"
    assert doc["columns"] == ["hit_rate"] and doc["history_turns"] == 12
    assert list(doc["systems"]) == ["uncompiled", "bootstrap"]
    # The scripted responder repeats the user's last message: its hits are known.
    contexts = voe_contexts(VoETask.read(data, Split.parse("conv-1", "conv-2", "conv-4"))
                            .of(["conv-4"]), VoESettings(), None)
    hits = sum(fuzzy(c.history.splitlines()[-1].removeprefix("user: "), c.actual) >= HIT
               for c in contexts)
    for row in doc["systems"].values():
        assert row["hit_rate"] == round(hits / len(contexts), 4) and 0 < hits < len(contexts)
        assert row["predictions"] == row["items"] == len(contexts) == 10
        assert row["similarity"] == round(sum(
            fuzzy(c.history.splitlines()[-1].removeprefix("user: "), c.actual)
            for c in contexts) / len(contexts), 4) and row["failures"] == 0
        assert row["heldout_llm_calls"] == 10
    meta = json.loads((out / "programs" / "bootstrap.json").read_text())["meta"]
    assert not [i for i in meta["train_ids"] + meta["val_ids"] if i.startswith("conv-4")]
    # Run again: the program is reused and every prediction comes from the cache.
    calls = sum(len(h.lm.engine.requests) for h in model)
    assert main(args) == 0
    assert sum(len(h.lm.engine.requests) for h in model) == calls
    assert json.loads((out / "compile.json").read_text())["systems"]["bootstrap"]["reused"]
    # A held-out limit spreads fewer positions, from the same cache.
    assert main([*args, "--heldout-limit", "3"]) == 0
    assert sum(len(h.lm.engine.requests) for h in model) == calls
    assert json.loads((out / "compile.json").read_text())["systems"]["uncompiled"][
        "predictions"] == 3
    # chat --program takes the compiled file as the loop's responder.
    from memstrata.chat_commands import _programs

    assert list(_programs([str(out / "programs" / "bootstrap.json")])) == ["voe.responder"]
