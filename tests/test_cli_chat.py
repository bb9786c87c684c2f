"""``memstrata chat`` and ``memstrata facts``: scripted in-process, and the real embedded
model through a pseudo-terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memstrata.cli import build_parser, main
from tests.programs.test_voe import Script


def _chat(db: Path, lines: bytes, scripted: Any, monkeypatch: pytest.MonkeyPatch,
          *extra: str) -> str:
    import memstrata.programs as programs
    from memstrata.chat_commands import cmd_chat

    monkeypatch.setattr(programs, "setup_lm", lambda *a, **k: scripted(Script()))
    args = build_parser().parse_args(["chat", "--user", "ana", "--db", str(db), *extra])
    out = io.StringIO()
    assert cmd_chat(args, stdin=io.BytesIO(lines), out=out) == 0
    return out.getvalue()


def test_chat_turns_internals_bad_input_and_memory(tmp_path: Path, scripted: Any,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "chat.db"
    text = _chat(db, b"Hello there\n\n\xff\xfe oops\n" + b"x" * 5000 + b"\nI went sailing\n",
                 scripted, monkeypatch, "--show-internals")
    assert text.count("assistant> Nice!") == 2
    assert "message is empty" in text and "not valid UTF-8" in text and "limit is 4,000" in text
    assert "VoE: VIOLATION" in text and "stored fact: The user said: I went sailing" in text
    assert "LLM calls: 2" in text
    again = _chat(db, b"/quit\n", scripted, monkeypatch)
    assert "4 earlier messages" in again  # the bad lines were never stored
    assert main(["facts", "--user", "ana", "--db", str(db)]) == 0
    facts = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [f["text"] for f in facts] == ["The user said: I went sailing"]
    assert main(["facts", "--user", "ana", "--db", str(db), "--search", "cooking"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == facts[0]["id"]
    assert main(["facts", "--user", "bob", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "no facts learned for user 'bob'" in err  # another user sees none
    with pytest.raises(SystemExit) as refused:  # the one found is deleted, the other named
        main(["facts", "--user", "ana", "--db", str(db), "--delete", facts[0]["id"], "i_nope"])
    assert refused.value.code == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {"deleted": facts[0]["id"]}
    assert "no fact 'i_nope' for user 'ana'" in err
    assert main(["facts", "--user", "ana", "--db", str(db)]) == 0
    assert "no facts learned" in capsys.readouterr().err


@pytest.mark.slow
def test_chat_through_a_pseudo_terminal_on_the_embedded_model(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "memstrata.cli", "chat", "--user", "ana",
                             "--db", str(tmp_path / "c.db"), "--show-internals"],
                            stdin=slave, stdout=slave, stderr=subprocess.DEVNULL,
                            cwd=Path(__file__).parent.parent)
    os.close(slave)
    seen = b""

    def until(marker: bytes, timeout: float = 120) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while marker not in seen:
            assert time.monotonic() < deadline, seen[-500:]
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break

    try:
        until(b"you> ")
        os.write(master, b"Hi, I am Ana and I love hiking in the mountains.\n")
        until(b"LLM calls: 2")
        assert b"assistant> " in seen and b"cached prediction: -" in seen
        os.write(master, b"\xff\xfe\n")
        until(b"not valid UTF-8")
        os.write(master, b"/quit\n")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def test_chat_knobs_are_validated_by_their_flag_names(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--threshold: Input should be less than or equal"):
        main(["chat", "--user", "ana", "--db", str(tmp_path / "c.db"), "--threshold", "500"])
