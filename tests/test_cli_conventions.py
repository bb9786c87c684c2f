"""Issue 44's command-line repros, run as written: exit 0 only when nothing was lost, one
exit-code convention (2: usage or refused input, 1: not found), one-line errors that name
the argument, file and record and never echo a password."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from memstrata import Memory


def _cli(*argv: str) -> int:
    """``memstrata ARGV`` as the interpreter would end it: the exit status."""
    from memstrata.cli import main

    try:
        return main(list(argv))
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return exc.code or 0


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("memstrata: "), err
    return err


def test_import_keeps_what_the_conversation_held(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "rep.db")
    assert _cli("add", "--db", db, "--user", "zed",
                "My passport number is in the blue drawer") == 0
    assert _cli("add", "--db", db, "--user", "zed", "The spare key is under the mat") == 0
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"role": "user", "content": "I like tea"}) + "\n")
    assert _cli("import", str(one), "--format", "messages", "--user", "zed", "--db", db,
                "--quiet") == 0
    with Memory.open(db, embedder=None) as m:
        texts = [t.text for t in m.store.turns("zed")]
    assert len(texts) == 3 and "My passport number is in the blue drawer" in texts
    capsys.readouterr()
    assert _cli("import", str(one), "--format", "messages", "--user", "zed", "--db", db,
                "--quiet", "--replace") == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["replaced"] == 3
    with Memory.open(db, embedder=None) as m:
        assert [t.text for t in m.store.turns("zed")] == ["I like tea"]


@pytest.mark.parametrize("url", ["postgresql+psycopg://app:s3cret@db.internal/prod",
                                 "mysql://app:s3cret@db.internal/prod", "sqlite:///app.db"])
def test_a_foreign_url_is_refused_and_no_file_appears(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert _cli("add", "--db", url, "--user", "zed", "hello") == 2
    err = _one_line(capsys)
    assert "s3cret" not in err and "URL is not a store" in err
    assert _cli("stats", "--db", url) == 2
    assert "s3cret" not in _one_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_usage_errors_exit_2_and_what_is_missing_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    assert _cli("add", "--db", db, "--user", "u", "hello") == 0
    capsys.readouterr()
    assert _cli("get", "", "--db", db) == 2
    assert "id" in _one_line(capsys)
    assert _cli("add", "--user", "", "--db", db, "hi") == 2
    assert "--user" in _one_line(capsys)
    assert _cli("get", "t_nonesuch", "--db", db) == 1
    assert "no memory" in _one_line(capsys)
    assert _cli("delete", "t_nonesuch", "--db", db) == 1
    _one_line(capsys)
    missing = str(tmp_path / "absent.db")
    for argv in (["search", "q", "--user", "u", "--db", missing],
                 ["get", "t_x", "--db", missing], ["stats", "--db", missing]):
        assert _cli(*argv) == 1, argv
        err = _one_line(capsys)
        assert "no store" in err and "memstrata load" not in err, err
    assert _cli("search", "q", "--user", "u", "--db", db, "--weights", "[1]") == 2
    _one_line(capsys)


def test_help_states_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("--help") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 done; 1 not found" in out and "2 a usage error" in out


def test_import_errors_name_the_file_and_the_record(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "fine"}\n'
                   '{"role": "user", "content": "x", "metadata": {"k": "\\udc80"}}\n')
    assert _cli("import", str(bad), "--format", "messages", "--user", "u", "--db", db,
                "--quiet") == 2
    err = _one_line(capsys)
    assert str(bad) in err and ("message 2" in err or "line 2" in err), err
    assert Memory.open(db, embedder=None).store.counts("u")["turns"] == 0


def test_export_to_a_folder_fails_cleanly(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    assert _cli("add", "--db", db, "--user", "u", "hello", "--durability", "full") == 0
    capsys.readouterr()
    folder = tmp_path / "out"
    folder.mkdir()
    assert _cli("export", str(folder), "--user", "u", "--db", db) == 2
    assert "folder" in _one_line(capsys)
    assert not list(tmp_path.rglob("*.partial"))


def test_export_onto_a_database_is_refused_and_the_store_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "m.db"
    assert _cli("add", "--db", str(db), "--user", "u", "hello", "--durability", "full") == 0
    other = tmp_path / "other.db"
    Memory.open(other, embedder=None).store.close()
    capsys.readouterr()
    for target, said in [(db, "it is the store itself"),
                         (tmp_path / "m.db-wal", "it is the store itself"),
                         (tmp_path / "." / "m.db", "it is the store itself"),
                         (other, "it is a SQLite database")]:
        before = target.read_bytes() if target.exists() else None
        assert _cli("export", str(target), "--user", "u", "--db", str(db)) == 2, target
        assert said in _one_line(capsys)
        assert (target.read_bytes() if target.exists() else None) == before
    with Memory.open(db, embedder=None) as memory:
        assert [t.text for t in memory.store.turns("u")] == ["hello"]
    assert _cli("export", str(tmp_path / "u.jsonl"), "--user", "u", "--db", str(db)) == 0
    assert _cli("export", str(tmp_path / "u.jsonl"), "--user", "u", "--db", str(db)) == 0


def test_unknown_arguments_show_the_subcommands_usage(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("export", "e.jsonl", "--user", "u", "--out", "x") == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: memstrata export") and "[--durability" in err
    assert err.rstrip().splitlines()[-1] == ("memstrata export: error: unrecognized "
                                             "arguments: --out x")
    assert _cli("bench", "retrieval", "--lmit", "3") == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: memstrata bench retrieval")
    assert err.rstrip().endswith("did you mean '--limit' for '--lmit'?")


def test_a_misspelt_command_or_choice_gets_the_nearest_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("serch", "x") == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'serch'" in err and err.rstrip().endswith("did you mean 'search'?")
    assert len(err.strip().splitlines()) == 2  # the usage line and the one-line error
    assert _cli("jobs", "list", "--status", "donee") == 2
    assert "did you mean 'done'?" in capsys.readouterr().err
    assert _cli("zzzz") == 2  # nothing near: no guess
    assert "did you mean" not in capsys.readouterr().err
    # A misspelt option: the subcommand's own option is suggested, whichever error
    # argparse meets first (the real option missing, or the unknown one left over).
    assert _cli("search", "x", "--usr", "ana") == 2
    assert capsys.readouterr().err.rstrip().endswith("did you mean '--user' for '--usr'?")
    assert _cli("bench", "long", "--mesages", "3") == 2
    assert "did you mean '--messages' for '--mesages'?" in capsys.readouterr().err
    assert _cli("search", "x", "--user", "a", "--zzzzzz") == 2
    assert "did you mean" not in capsys.readouterr().err


def test_counts_below_their_least_are_usage_errors(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    assert _cli("add", "I moved to Lisbon", "--user", "ana", "--db", db) == 0
    capsys.readouterr()
    for argv, said in [(("search", "Lisbon", "-k", "-3"), "argument -k: must be at least 1"),
                       (("search", "Lisbon", "-k", "0"), "must be at least 1, not 0"),
                       (("jobs", "list", "-n", "x"), "not a whole number: 'x'"),
                       (("runs", "prune", "--keep", "-1"), "must be at least 0, not -1")]:
        assert _cli(*argv, "--user", "ana", "--db", db) == 2, argv
        assert said in capsys.readouterr().err
    assert _cli("search", "Lisbon", "-k", "1", "--user", "ana", "--db", db) == 0
    assert "Lisbon" in capsys.readouterr().out


def test_search_says_a_blank_query_and_a_user_with_nothing_stored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "m.db")
    assert _cli("add", "I like tea", "--user", "ana", "--db", db) == 0
    capsys.readouterr()
    assert _cli("search", " ", "--user", "ana", "--db", db) == 2
    assert "argument query: the query is blank" in capsys.readouterr().err
    assert _cli("search", "tea", "--user", "Ana", "--db", db) == 0
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.strip() == f"memstrata: nothing is stored for user 'Ana' in {db}"
    assert _cli("search", "xyzzy plugh", "--user", "ana", "--db", db) == 0
    assert capsys.readouterr() == ("", "")  # a tenant with memories: no hit, no note


def test_version_and_python_dash_m(capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess

    import memstrata

    assert _cli("--version") == 0
    assert capsys.readouterr().out.strip() == f"memstrata {memstrata.__version__}"
    # ``python -m memstrata`` is the same command (a venv whose scripts are not on PATH).
    done = subprocess.run([sys.executable, "-m", "memstrata", "--version"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == f"memstrata {memstrata.__version__}"


def test_dash_is_stdin_and_stdout_and_an_empty_user_is_said(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """'-' is stdin for add and import and stdout for export (it was stored as a message,
    read as a file named '-', written to one); a user with nothing stored is said by
    export and forget, as by search."""
    import io

    db, other = str(tmp_path / "m.db"), str(tmp_path / "o.db")
    messages = [{"role": "user", "content": "I moved to Lisbon in May"},
                {"role": "assistant", "content": "How do you like it?"}]
    stdin = json.dumps(messages) + "\n" + json.dumps({"role": "user", "content": "A lot"})
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert _cli("add", "-", "--user", "ana", "--db", db) == 0  # a line may hold a list
    assert [json.loads(line)["memory"] for line in capsys.readouterr().out.splitlines()] == [
        "I moved to Lisbon in May", "How do you like it?", "A lot"]
    assert _cli("export", "-", "--user", "ana", "--db", db) == 0
    exported = capsys.readouterr().out
    assert json.loads(exported.splitlines()[0])["type"] == "header"  # the JSONL, no summary
    assert not (Path.cwd() / "-").exists()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(exported.encode())))
    assert _cli("import", "-", "--user", "bo", "--db", other) == 0
    assert json.loads(capsys.readouterr().out)["turns"] == 3
    assert Memory.open(other).search("Lisbon", user_id="bo")[0].text == messages[0]["content"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"not json\n")))
    assert _cli("import", "-", "--user", "bo", "--db", other) == 2
    assert capsys.readouterr().err.strip() == (
        "memstrata: stdin: line 1: invalid JSON: Expecting value (column 1)")
    assert _cli("export", str(tmp_path / "e.jsonl"), "--user", "Ana", "--db", db) == 0
    assert capsys.readouterr().err.strip() == f"memstrata: nothing is stored for user 'Ana' in {db}"
    assert _cli("forget", "--user", "Ana", "--db", db, "--yes") == 0
    assert capsys.readouterr().err.strip() == (
        f"memstrata: nothing was stored for user 'Ana' in {db}")
    assert _cli("export", str(tmp_path / "e.jsonl"), "--user", "ana", "--db", db) == 0
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_ends_the_command_quietly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`memstrata search ... | head -1`: the reader goes away; exit 141 without an error
    line (it said "[Errno 32] Broken pipe" and exit 2)."""
    import io

    db = str(tmp_path / "m.db")
    assert _cli("add", "I like tea", "--user", "ana", "--db", db) == 0
    capsys.readouterr()

    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert _cli("search", "tea", "--user", "ana", "--db", db) == 141
    assert capsys.readouterr().err == ""


def test_every_command_says_not_found_with_exit_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No store at --db and no such run exit 1 for every command, as --help says (runs,
    rlm, facts, maintain and persona exited 2); runs export '-' writes to stdout."""
    missing = str(tmp_path / "none.db")
    for argv in (("runs", "list"), ("facts", "--user", "u"), ("maintain", "--user", "u"),
                 ("persona", "--user", "u", "--conversation", "c", "Ana"),
                 ("rlm", "why?", "--user", "u")):
        assert _cli(*argv, "--db", missing) == 1, argv
        err = capsys.readouterr().err
        assert err.startswith(f"memstrata: no store at {missing}"), argv
        assert "'memstrata read'" in err, argv  # every command that creates one is named
    assert not Path(missing).exists()
    db = str(tmp_path / "m.db")
    assert _cli("add", "I like tea", "--user", "ana", "--db", db) == 0
    assert _cli("runs", "show", "run_x", "--user", "ana", "--db", db) == 1
    assert capsys.readouterr().err.strip() == "memstrata: no run 'run_x' for user 'ana'"
    monkeypatch.chdir(tmp_path)
    assert _cli("runs", "export", "--out", "-", "--db", db) == 0
    assert capsys.readouterr().out == "" and not (tmp_path / "-").exists()  # no runs yet


def test_the_parser_is_built_without_the_model_stack() -> None:
    """Every command builds the whole parser first: importing DSPy (or torch, litellm)
    there cost each command, ``--version`` included, ~1.5 s on a 2-core machine."""
    import subprocess

    code = ("import sys; from memstrata.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('dspy', 'litellm', 'torch', 'llama_cpp') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_refused_import_creates_no_store(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The file is read and checked before the store is opened: a malformed file (or one
    of another format than --format names) leaves no new, empty store behind."""
    bad = tmp_path / "chat.json"
    bad.write_text('[{"role": "user", "content": "hi"}, {"content": "no speaker"}]')
    db = tmp_path / "new.db"
    for fmt in ("messages", "chatgpt", "locomo"):
        assert _cli("import", str(bad), "--format", fmt, "--user", "u", "--db", str(db)) == 2
        assert str(bad) in capsys.readouterr().err
        assert not db.exists(), fmt
    export = tmp_path / "export.jsonl"  # a memstrata export whose second line is refused
    export.write_text('{"type": "header", "format": "memstrata-export", "version": 2, '
                      '"user_id": "u"}\n{"type": "turn", "id": 7}\n')
    for fmt in ("export", None):
        assert _cli("import", str(export), *(("--format", fmt) if fmt else ()),
                    "--user", "u", "--db", str(db)) == 2
        assert f"{export}: line 2" in capsys.readouterr().err
        assert not db.exists(), fmt


@pytest.mark.parametrize("user", ["", "   ", "x" * 257, "a\x00b"])
def test_a_bad_user_is_refused_before_a_store_is_made(
        tmp_path: Path, user: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--user`` is checked by Memory's rule for a user_id before a command runs: ``add``
    with a blank one created the store, then refused the id; ``search`` said nothing was
    stored for it and exited 0."""
    db = tmp_path / "new.db"
    for command in (["add", "hi"], ["search", "hi"], ["import", str(tmp_path / "f.json")],
                    ["export", str(tmp_path / "out.jsonl")]):
        assert _cli(*command, "--user", user, "--db", str(db)) == 2
        assert "--user must be a non-empty string" in _one_line(capsys) or "\x00" in user
        assert not db.exists(), command


def test_a_refused_add_leaves_no_new_store_and_keeps_an_old_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A store the command created is removed when the command is refused with nothing
    stored (a bad timestamp, session or content part was refused after the open); a store
    that was there stays, with its rows."""
    db = tmp_path / "new.db"
    for bad in (["--timestamp", "notatime"], ["--session", "  "]):
        assert _cli("add", "hi", "--user", "u", "--db", str(db), *bad) == 2
        _one_line(capsys)
        assert list(tmp_path.iterdir()) == [], bad
    assert _cli("add", "hi", "--user", "u", "--db", str(db)) == 0
    assert _cli("add", "hi", "--user", "u", "--db", str(db), "--timestamp", "x") == 2
    assert db.exists()
    with Memory.open(db, embedder=None) as m:
        assert [t.text for t in m.store.turns("u")] == ["hi"]


def test_since_and_until_take_a_time_phrase(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``--since yesterday`` is the start of yesterday and ``--until 'last week'`` the end
    of last week, said now (an ISO date still works); a phrase naming no time is a usage
    error that says what is taken."""
    from datetime import UTC, datetime, timedelta

    db = str(tmp_path / "m.db")
    now = datetime.now(UTC)
    for text, when in (("I planted the tomatoes", now - timedelta(days=30)),
                       ("I watered the tomatoes", now)):
        assert _cli("add", text, "--user", "u", "--db", db, "--timestamp",
                    when.isoformat()) == 0
    capsys.readouterr()

    def found(*flags: str) -> list[str]:
        assert _cli("search", "tomatoes", "--user", "u", "--db", db, *flags) == 0
        return [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()]

    assert found("--since", "yesterday") == ["I watered the tomatoes"]
    assert found("--until", "last week") == ["I planted the tomatoes"]
    assert found("--since", (now - timedelta(days=60)).date().isoformat(), "--until",
                 "yesterday") == ["I planted the tomatoes"]
    assert _cli("search", "tomatoes", "--user", "u", "--db", db, "--since",
                "the blue moon") == 2
    assert "not a date: 'the blue moon'" in capsys.readouterr().err


def test_an_import_says_which_messages_a_second_import_would_store_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Messages without a timestamp or id, imported after turns the conversation already
    had, cannot be told from new ones the next time: the import counts them
    (``unrecognisable``) and says so, and a second import does store them again; into a
    conversation of their own they are recognised, and nothing is said."""
    db = str(tmp_path / "m.db")
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"role": "user", "content": "I keep bees"}\n'
                    '{"role": "assistant", "content": "How many hives?"}\n'
                    '{"role": "user", "content": "Three", "timestamp": "2024-05-01T10:00:00Z"}\n')

    def imported() -> tuple[dict[str, int], str]:
        assert _cli("import", str(chat), "--user", "u", "--db", db, "--quiet") == 0
        out, err = capsys.readouterr()
        return json.loads(out), err

    first, err = imported()  # into "default", which is new: the start rule covers it
    assert first["turns"] == 3 and "unrecognisable" not in first and "again" not in err
    again, _ = imported()
    assert again["turns"] == 0 and again["duplicates"] == 3
    assert _cli("add", "hello", "--user", "v", "--db", db) == 0
    capsys.readouterr()
    chat.write_text(chat.read_text().replace('"content"', '"conversation_id": "default", '
                                             '"content"'))
    assert _cli("import", str(chat), "--user", "v", "--db", db, "--quiet") == 0
    out, err = capsys.readouterr()
    # Two untimed messages after "hello"; the timed one is recognised by its time.
    assert json.loads(out)["unrecognisable"] == 2 and "would store them again" in err
    assert _cli("import", str(chat), "--user", "v", "--db", db, "--quiet") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["turns"], out["duplicates"]) == (2, 1)  # as it said
