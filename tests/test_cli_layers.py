"""``memstrata answer``, ``context`` and ``read``: the verbs over every layer of a tenant's
memory on the command line, as ``Memory`` and the REST server give them."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from memstrata import Memory, layer_commands
from memstrata.cli import main
from tests.door_script import DoorScript

TEA = ("How to brew green tea\n\n1. Boil the water.\n2. Let it cool to 80 degrees.\n"
       "3. Steep the leaves for two minutes.\n\nThe tea shop on Rua Augusta opened in 2019.\n")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "m.db"
    with Memory.open(path, embedder=None) as m:
        m.add([{"role": "user", "content": "I moved to Lisbon in May 2023"},
               {"role": "assistant", "content": "How do you like it?"}], user_id="ana",
              infer=False)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_read_then_context_shows_what_was_said_and_read(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "tea.txt"
    doc.write_text(TEA, encoding="utf-8")
    code, out, _ = _run(capsys, "read", str(doc), "--user", "ana", "--db", str(store),
                        "--source", "Tea Weekly", "--when", "2024-03-02")
    assert code == 0
    report = json.loads(out)
    assert report["episode_id"] and len(report["facts"]) >= 2 and report["procedure_id"]
    with Memory.open(store, embedder=None) as m:
        episode = m.get(report["episode_id"], user_id="ana")
        assert "tea.txt" in episode["text"]  # the file's name is the title
        assert "Tea Weekly" in episode["text"]

    code, out, err = _run(capsys, "context", "how do I brew tea", "--user", "ana",
                          "--db", str(store))
    assert code == 0 and err == ""
    assert "## Procedures" in out and "Steep the leaves" in out
    assert "Tea Weekly · 2024-03-02" in out  # each line with its provenance

    code, out, _ = _run(capsys, "context", "where did I move", "--user", "ana",
                        "--db", str(store), "--layer", "conversation", "--json",
                        "--budget", "200")
    result = json.loads(out)
    assert code == 0 and "Lisbon" in result["text"] and "Tea" not in result["text"]
    assert list(result["layers"]) == ["conversation"] and result["tokens"] <= 200
    with Memory.open(store, embedder=None) as m:
        assert all(m.get(i, user_id="ana") is not None for i in result["ids"])


def test_context_of_a_user_with_nothing_stored_says_so(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "context", "anything", "--user", "bob", "--db", str(store))
    assert code == 0 and out == ""
    assert "nothing is stored for user 'bob'" in err
    code, _, err = _run(capsys, "context", "anything", "--user", "ana", "--db", str(store),
                        "--budget", "0")
    assert code == 2 and "--budget" in err


def test_read_refuses_what_it_cannot_read_and_leaves_no_store(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "new.db"
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    binary = tmp_path / "a.bin"
    binary.write_bytes(b"\x00\xff\xfe text")
    big = tmp_path / "big.txt"
    big.write_text("a" * (300 * 1024), encoding="utf-8")
    archive = tmp_path / "doc.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("conversations.json", "[]")  # an export's name: still not a document
    cases = [(tmp_path / "missing.txt", "cannot read"), (empty, "nothing to read"),
             (binary, "not UTF-8"), (big, "split it"), (archive, "not UTF-8"),
             ("https://example.com/post.txt", "not https:// URLs"),
             (tmp_path, "it is a folder: give one file in it")]
    for path, said in cases:
        code, out, err = _run(capsys, "read", str(path), "--user", "ana", "--db", str(db))
        assert (code, out) == (2, ""), path
        assert said in err, (path, err)
        assert not db.exists(), path
    code, _, err = _run(capsys, "read", str(empty), "--user", "ana", "--db", str(db),
                        "--when", "not a date at all")
    assert code == 2 and "not a date" in err


def test_a_long_read_shows_a_progress_bar_unless_quiet(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from memstrata.memory.cognitive import semantic

    learn = semantic.Semantic.learn

    def slow(self: Any, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.6)  # past the bar's two-second delay within a few facts
        return learn(self, *args, **kwargs)

    monkeypatch.setattr(semantic.Semantic, "learn", slow)
    doc = tmp_path / "facts.txt"
    doc.write_text(" ".join(f"Fact number {i} is here." for i in range(5)), encoding="utf-8")
    code, out, err = _run(capsys, "read", str(doc), "--user", "ana", "--db", str(store))
    assert code == 0 and len(json.loads(out)["facts"]) == 5
    assert "read" in err and "5/5" in err and "fact" in err
    code, out, err = _run(capsys, "read", str(doc), "--user", "bo", "--db", str(store),
                          "--quiet")
    assert code == 0 and len(json.loads(out)["facts"]) == 5 and err == ""


def test_read_takes_stdin(store: Path, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(TEA.encode())))
    code, out, _ = _run(capsys, "read", "-", "--user", "ana", "--db", str(store),
                        "--title", "Tea notes")
    assert code == 0
    with Memory.open(store, embedder=None) as m:
        episode = m.get(json.loads(out)["episode_id"], user_id="ana")
    assert "Tea notes" in episode["text"]


def test_answer_prints_the_answer_with_evidence_and_the_calls(
        store: Path, scripted: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    script = DoorScript("simple_recall", answer="Lisbon")
    monkeypatch.setattr(layer_commands, "model_from_args", lambda args: scripted(script))
    code, out, _ = _run(capsys, "answer", "Where did I move in May?", "--user", "ana",
                        "--db", str(store))
    assert code == 0
    result = json.loads(out)
    assert result["answer"] == "Lisbon" and result["path"] == "answerer"
    assert result["llm_calls"] == 2 and script.asked == ["classify", "qa"]
    with Memory.open(store, embedder=None) as m:
        assert m.get(result["evidence"][0], user_id="ana")["text"].startswith(
            "I moved")
        assert m.store.runs.get("ana", result["run_id"]).program == "memory.answer"

    script = DoorScript("simple_recall", answer="Lisbon")
    code, out, _ = _run(capsys, "answer", "Where did I move?", "--user", "ana",
                        "--db", str(store), "--route", "rules")
    assert code == 0 and "classify" not in script.asked


def test_answer_with_nothing_to_answer_from_loads_no_model(
        store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def no_model(args: Any) -> Any:
        raise AssertionError("the model was set up")

    monkeypatch.setattr(layer_commands, "model_from_args", no_model)
    code, out, err = _run(capsys, "answer", "Where do I live?", "--user", "bob",
                          "--db", str(store))
    assert (code, out) == (1, "") and "nothing is stored for user 'bob'" in err
    code, _, err = _run(capsys, "answer", "Where?", "--user", "ana",
                        "--db", str(tmp_path / "none.db"))
    assert code == 1 and not (tmp_path / "none.db").exists()
    code, _, err = _run(capsys, "answer", "   ", "--user", "ana", "--db", str(store))
    assert code == 2 and "blank" in err
    code, _, err = _run(capsys, "answer", "why " * 5000, "--user", "ana", "--db", str(store))
    assert code == 2 and "question is 20,000 bytes" in err
    code, _, err = _run(capsys, "answer", "Where?", "--user", "ana", "--db", str(store),
                        "--conversation", " ")
    assert code == 2 and "--conversation" in err
