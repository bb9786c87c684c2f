"""Compiled programs used by name: ``Memory.open(programs=...)``, ``ingest --program`` and
``chat --program`` run with the program file given and name it (path and hash)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import dspy
import pytest

from memstrata import Memory
from memstrata.bench.locomo import load_locomo, read_locomo
from memstrata.memory import Store
from memstrata.programs.compiled import program_hash, save_program
from memstrata.programs.extractor import Extractor
from memstrata.programs.ingest import ingest_conversation
from memstrata.programs.qa import QA
from memstrata.programs.voe import VoEPredictor
from tests.programs.test_ingest import SESSIONS
from tests.programs.test_ingest import reply as extract_reply


def _qa_file(tmp_path: Path) -> Path:
    qa = QA()
    qa.respond.predict.demos = [dspy.Example(
        question="Which city does Zed love?", memories="[s1:1 · Zed · 2023-05-01] I love Bern",
        answer="Bern", evidence=["s1:1"])]
    path = tmp_path / "qa.json"
    save_program(qa, path, meta={"optimizer": "hand"})
    return path


def test_memory_answers_with_the_compiled_qa_and_names_it(tmp_path: Path, scripted: Any
                                                          ) -> None:
    path = _qa_file(tmp_path)
    handle = scripted(lambda s, u, schema: {"answer": "Oslo", "evidence": []})
    with Memory.open(":memory:", lm=handle, embedder=None, programs={"qa": path}) as m:
        m.add("I live in Oslo", user_id="ana", infer=False)
        assert m.answer("Where does ana live?", user_id="ana").answer == "Oslo"
        assert m.programs == {"qa": {"path": str(path), "name": "qa",
                                     "sha256": program_hash(path)}}
    prompt = handle.lm.engine.requests[-1]
    assert any("Which city does Zed love?" in msg.text for msg in prompt.messages)
    with pytest.raises(ValueError, match=r"uses no program voe\.predictor"):
        Memory.open(":memory:", programs={"voe.predictor": path})
    with pytest.raises(ValueError, match="holds the program 'extractor', not 'qa'"):
        Memory.open(":memory:", programs={"qa": _extractor_file(tmp_path)})


def _extractor_file(tmp_path: Path) -> Path:
    path = tmp_path / "extractor.json"
    save_program(Extractor(), path)
    return path


def test_memory_extracts_with_the_compiled_extractor_and_names_it(tmp_path: Path,
                                                                  scripted: Any) -> None:
    extractor = Extractor()
    extractor.extract.predict.demos = [dspy.Example(
        turns="Zed: I love Bern", facts=[], entities=[], qa=[])]
    path = tmp_path / "extractor.json"
    save_program(extractor, path)
    handle = scripted(extract_reply)
    with Memory.open(":memory:", lm=handle, embedder=None, programs={"extractor": path}) as m:
        m.add([{"role": t["speaker"], "content": t["text"]} for t in SESSIONS[1]],
              user_id="ana", infer=False)
        assert m.flush("ana")  # facts were extracted
        [run] = [r for r in m.store.runs.list("ana", limit=20) if r.config.get("program")]
        assert run.config["program"] == {"path": str(path), "name": "extractor",
                                         "sha256": program_hash(path)}
        assert m.programs["extractor"]["sha256"] == program_hash(path)
    prompts = [msg.text for r in handle.lm.engine.requests for msg in r.messages]
    assert any("I love Bern" in text for text in prompts)  # its demo was shown


def test_ingest_extracts_with_the_program_and_records_it(make_record: Any, write_json: Any,
                                                        scripted: Any, tmp_path: Path) -> None:
    path = _extractor_file(tmp_path)
    data = write_json("conv.json", [make_record("conv-9", speakers=("Ana", "Tom"),
                                                sessions=SESSIONS)])
    handle = scripted(extract_reply)
    with Store.open(":memory:") as store:
        load_locomo(store, read_locomo(data))
        cache = tmp_path / "x.jsonl"
        plain = ingest_conversation(store, "conv-9", "conv-9", handle, cache_path=cache)
        compiled = ingest_conversation(store, "conv-9", "conv-9", handle, cache_path=cache,
                                       program=path)
        assert plain.llm_calls == compiled.llm_calls == 2  # its own cache keys
        run = store.runs.get("conv-9", compiled.run_id)
        assert run.config["program"] == {"path": str(path), "name": "extractor",
                                         "sha256": program_hash(path)}
        with pytest.raises(ValueError, match="not 'extractor'"):
            ingest_conversation(store, "conv-9", "conv-9", handle, program=_qa_file(tmp_path))


def test_chat_and_ingest_refuse_a_program_they_do_not_use(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    import memstrata.programs as programs
    from memstrata.cli import main

    monkeypatch.setattr(programs, "setup_lm", lambda *a, **k: pytest.fail("model loaded"))
    qa = _qa_file(tmp_path)
    with pytest.raises(SystemExit, match="holds the program qa; ingest uses extractor"):
        main(["ingest", "--program", str(qa), "--db", str(tmp_path / "m.db")])
    with pytest.raises(SystemExit, match=r"holds the program qa; chat uses voe\.predictor"):
        main(["chat", "--user", "ana", "--program", str(qa), "--db", str(tmp_path / "m.db")])
    edited = json.loads(qa.read_text())
    edited["state"]["respond.predict"]["demos"] = []
    qa.write_text(json.dumps(edited))
    with pytest.raises(SystemExit, match="does not match its sha256"):
        main(["ingest", "--program", str(qa), "--db", str(tmp_path / "m.db")])


def test_chat_runs_with_a_compiled_predictor_and_names_it(tmp_path: Path, scripted: Any,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    import memstrata.programs as programs
    from memstrata.chat_commands import cmd_chat
    from memstrata.cli import build_parser
    from tests.programs.test_voe import Script

    path = tmp_path / "predictor.json"
    save_program(VoEPredictor(), path)
    monkeypatch.setattr(programs, "setup_lm", lambda *a, **k: scripted(Script()))
    args = build_parser().parse_args(["chat", "--user", "ana", "--db", str(tmp_path / "c.db"),
                                      "--program", str(path)])
    out = io.StringIO()
    assert cmd_chat(args, stdin=io.BytesIO(b"Hello there\n"), out=out) == 0
    text = out.getvalue()
    assert f"voe.predictor: {path} (sha256 {program_hash(path)[:12]})" in text
    assert "assistant> Nice!" in text
