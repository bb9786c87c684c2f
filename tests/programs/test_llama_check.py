"""The child-process decode check and ``memstrata doctor``: a crash becomes a message.

The child here is a stand-in for a llama.cpp build that segfaults on a multi-token decode
(as a natively tuned build did on another CPU): it kills itself with SIGSEGV.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstrata.cli import main
from memstrata.doctor import Check, _cpu, run_checks
from memstrata.programs import ModelSetupError, llama_check
from memstrata.programs.llama_engine import LlamaCppEngine

SEGFAULT = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"
FAILS = "raise RuntimeError('llama_decode returned -1')\n"
DECODES = "print('decoded 12 tokens')\n"


@pytest.fixture
def gguf(tmp_path) -> Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    return path


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path) -> None:
    # No remembered checks and no installed catalogue models: only the bundled SmolLM2.
    monkeypatch.setenv("MEMSTRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSTRATA_MODELS_DIR", str(tmp_path / "models"))


def test_a_crashing_child_becomes_a_message_with_the_fix(gguf) -> None:
    with pytest.raises(ModelSetupError) as err:
        llama_check.check_decode(gguf, code=SEGFAULT)
    message = str(err.value)
    assert "SIGSEGV" in message and "m.gguf" in message
    assert "GGML_NATIVE=OFF" in message and llama_check.LLAMA_CPP_PIN in message


def test_a_failing_child_reports_its_last_error_line(gguf) -> None:
    with pytest.raises(ModelSetupError, match="llama_decode returned -1"):
        llama_check.check_decode(gguf, code=FAILS)


def test_a_hanging_child_is_stopped(gguf) -> None:
    with pytest.raises(ModelSetupError, match="ran past 1 s"):
        llama_check.check_decode(gguf, code="import time\ntime.sleep(30)\n", timeout=1)


def test_a_pass_is_remembered_per_build_and_model(monkeypatch, gguf) -> None:
    runs: list[Path] = []
    monkeypatch.setattr(llama_check, "build_fingerprint", lambda: "libllama.so:1:1")
    monkeypatch.setattr(llama_check, "check_decode", lambda m: runs.append(m) or "ok")
    llama_check.ensure_decodes(gguf)
    llama_check.ensure_decodes(gguf)
    assert runs == [gguf]
    monkeypatch.setattr(llama_check, "build_fingerprint", lambda: "libllama.so:2:2")
    llama_check.ensure_decodes(gguf)  # a rebuilt library is checked again
    assert runs == [gguf, gguf]


def test_a_failure_is_not_remembered(monkeypatch, gguf) -> None:
    monkeypatch.setattr(llama_check, "build_fingerprint", lambda: "lib:1:1")
    monkeypatch.setattr(llama_check, "CHILD_CODE", SEGFAULT)
    for _ in range(2):
        with pytest.raises(ModelSetupError, match="SIGSEGV"):
            llama_check.ensure_decodes(gguf)


def test_the_engine_checks_before_its_first_in_process_load(monkeypatch, gguf) -> None:
    monkeypatch.setattr(llama_check, "CHILD_CODE", SEGFAULT)
    engine = LlamaCppEngine(gguf)
    with pytest.raises(ModelSetupError, match="SIGSEGV"):
        _ = engine.llama  # never reaches llama_cpp.Llama, which would take the process down
    assert engine._llama is None


def test_doctor_reports_a_crashing_engine_as_a_problem(monkeypatch, write_json, make_record,
                                                       capsys) -> None:
    monkeypatch.setattr(llama_check, "CHILD_CODE", SEGFAULT)
    data = write_json("locomo.json", [make_record()])
    code = main(["doctor", "--no-sandbox", "--lm", "local/smollm2", "--data", str(data)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    failed = [line for line in out if line.startswith("FAIL")]
    assert len(failed) == 1 and "model smollm2" in failed[0] and "GGML_NATIVE=OFF" in failed[0]
    assert any(line.startswith("ok    data:") and "1 conversations" in line for line in out)


def test_doctor_exits_zero_when_everything_works(monkeypatch, write_json, make_record,
                                                 capsys) -> None:
    monkeypatch.setattr(llama_check, "CHILD_CODE", DECODES)
    data = write_json("locomo.json", [make_record()])
    assert main(["doctor", "--no-sandbox", "--lm", "local/smollm2", "--data", str(data),
                 "--json"]) == 0
    checks = [Check(**c) for c in json.loads(capsys.readouterr().out)]
    assert {c.status for c in checks} <= {"ok", "warn"}
    assert {"python", "llama-cpp-python", "cpu", "model smollm2", "data"} <= {
        c.name for c in checks}


def test_doctor_names_every_missing_piece(tmp_path) -> None:
    checks = {c.name: c for c in run_checks(
        data=tmp_path / "absent.json", lm="local/qwen2.5-coder-1.5b", sandbox=False,
        decode=lambda path: "decoded")}
    assert checks["model qwen2.5-coder-1.5b"].status == "FAIL"
    assert "memstrata models install qwen2.5-coder-1.5b" in checks[
        "model qwen2.5-coder-1.5b"].detail
    assert checks["data"].status == "FAIL" and "--data" in checks["data"].detail


def test_cpu_without_avx2_is_a_problem(tmp_path, monkeypatch) -> None:
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx\n")
    check = _cpu(info)
    assert check.status == "FAIL" and "avx2" in check.detail and "GGML_AVX2=OFF" in check.detail
    info.write_text("flags\t\t: fpu avx avx2 fma f16c avx512f\n")
    assert _cpu(info).status == "ok"
