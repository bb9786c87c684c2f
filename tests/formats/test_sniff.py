"""``memstrata import`` without ``--format``: each format told apart by the file's content,
and what cannot be read said as one ``ImportFormatError``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memstrata import Memory
from memstrata.formats import ImportFormatError
from memstrata.formats.sniff import sniff_format
from tests.test_memory_api import _cli

LOCOMO = [{"sample_id": "c1", "conversation": {
    "speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": "I moved to Lisbon"}]},
    "qa": []}]
LME = [{"question_id": "q1", "question_type": "single-session-user", "question": "Where?",
        "answer": "Lisbon", "question_date": "2023/05/30 (Tue) 23:40",
        "haystack_session_ids": ["s1"], "haystack_dates": ["2023/05/20 (Sat) 10:00"],
        "answer_session_ids": ["s1"],
        "haystack_sessions": [[{"role": "user", "content": "I moved to Lisbon"}]]}]


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_each_format_is_told_apart_by_its_content(tmp_path: Path) -> None:
    message = {"role": "user", "content": "I moved to Lisbon"}
    assert sniff_format(_write(tmp_path / "a.json", json.dumps(LOCOMO))) == "locomo"
    assert sniff_format(_write(tmp_path / "b.json", json.dumps(LME))) == "longmemeval"
    assert sniff_format(_write(tmp_path / "c.json", json.dumps([message]))) == "messages"
    assert sniff_format(_write(tmp_path / "d.jsonl", "\n" + json.dumps(message))) == "messages"
    assert sniff_format(_write(tmp_path / "e.json", json.dumps(message))) == "messages"
    assert sniff_format(_write(tmp_path / "f.json", "")) == "messages"  # its reader decides
    with Memory.open(":memory:", embedder=None) as m:
        m.add("I moved to Lisbon", user_id="ana", infer=False)
        m.export("ana", tmp_path / "g.jsonl")
    assert sniff_format(tmp_path / "g.jsonl") == "export"


def test_what_cannot_be_read_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError, match=r"line 2: invalid JSON"):
        sniff_format(_write(tmp_path / "cut.json", '[{"role": "user", "content": "hi"},\n'))
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00[")
    with pytest.raises(ImportFormatError, match="not UTF-8"):
        sniff_format(tmp_path / "bin.json")
    with pytest.raises(ImportFormatError, match=r"cannot read .*not https:// URLs: download"):
        sniff_format("https://example.com/chat.json")
    with pytest.raises(ImportFormatError, match="cannot read") as caught:
        sniff_format(tmp_path)  # a folder
    assert "URL" not in str(caught.value)


def test_cli_import_reads_each_format_without_being_told(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    files = {"locomo": _write(tmp_path / "a.json", json.dumps(LOCOMO)),
             "messages": _write(tmp_path / "b.jsonl", "\n".join(map(json.dumps, [
                 {"role": "system", "content": "You are a helpful assistant"},
                 {"role": "user", "content": "I take oat milk in my coffee"}])))}
    for user, (fmt, path) in enumerate(files.items()):
        capsys.readouterr()
        assert _cli("import", str(path), "--user", f"u{user}", "--db", db, "--quiet") == 0
        out, err = capsys.readouterr()
        report = json.loads(out.splitlines()[-1])
        assert (report["format"], report["turns"]) == (fmt, 1)
    # The system prompt is not stored, and the command says so.
    assert report["skipped"] == 1 and err.strip() == (
        "memstrata: 1 message not stored (system prompts, tool plumbing and messages "
        "without text are skipped)")
    assert _cli("export", "--user", "u1", "--db", db, str(tmp_path / "u1.jsonl")) == 0
    capsys.readouterr()
    assert _cli("import", str(tmp_path / "u1.jsonl"), "--user", "u1", "--db",
                str(tmp_path / "other.db")) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "export"
    capsys.readouterr()
    assert _cli("import", str(_write(tmp_path / "empty.jsonl", "\n")), "--user", "u",
                "--db", db) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["turns"] == 0 and err.strip().endswith("no messages in the file")
    assert _cli("import", "https://example.com/chat.json", "--user", "u", "--db", db) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "download it and give its path" in err
