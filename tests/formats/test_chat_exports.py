"""ChatGPT's and Claude's data exports (``conversations.json``): read as the app shows each
conversation, told apart by their content, every message's fate accounted for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstrata import Memory
from memstrata.formats import ImportFormatError, read_chat_export
from memstrata.formats.sniff import sniff_format


def _node(node_id: str, parent: str | None, children: list[str], role: str | None = None,
          content: dict[str, Any] | None = None, when: float | None = None,
          **extra: Any) -> dict[str, Any]:
    message = None if role is None else {
        "id": node_id, "author": {"role": role, "name": extra.pop("name", None),
                                  "metadata": {}},
        "create_time": when, "content": content, "status": "finished_successfully",
        "metadata": extra.pop("metadata", {}), "recipient": extra.pop("recipient", "all")}
    return {"id": node_id, "message": message, "parent": parent, "children": children}


def _text(*parts: Any) -> dict[str, Any]:
    return {"content_type": "text", "parts": list(parts)}


CHATGPT = [{
    "title": "Trip planning", "create_time": 1714550400.5, "update_time": 1714560000.0,
    "conversation_id": "c-trip", "id": "c-trip", "current_node": "n9",
    "mapping": {
        "root": _node("root", None, ["n1"]),
        "n1": _node("n1", "root", ["n2"], "system", _text(""),
                    metadata={"is_visually_hidden_from_conversation": True}),
        "n2": _node("n2", "n1", ["n3"], "user", {
            "content_type": "user_editable_context", "user_profile": "I am vegetarian",
            "user_instructions": "Answer briefly"}),
        "n3": _node("n3", "n2", ["n4", "n4b"], "user",
                    _text("My budget for Japan is 3000 euros"), 1714550401.0),
        "n4b": _node("n4b", "n3", [], "assistant", _text("An abandoned answer"), 1714550402.0),
        "n4": _node("n4", "n3", ["n5"], "assistant", {"content_type": "thoughts",
                                                       "thoughts": [{"content": "hmm"}]},
                    1714550403.0),
        "n5": _node("n5", "n4", ["n6"], "assistant",
                    {"content_type": "code", "language": "python", "text": "3000 / 14"},
                    1714550404.0, recipient="python"),
        "n6": _node("n6", "n5", ["n7"], "tool",
                    {"content_type": "execution_output", "text": "214.28"}, 1714550405.0,
                    name="python"),
        "n7": _node("n7", "n6", ["n8"], "assistant",
                    _text("That is about 214 euros a day for two weeks."), 1714550406.0),
        "n8": _node("n8", "n7", ["n9"], "user", {
            "content_type": "multimodal_text", "parts": [
                {"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"},
                "Here is my itinerary photo"]}, 1714550407.0),
        "n9": _node("n9", "n8", [], "user", {
            "content_type": "multimodal_text", "parts": [
                {"content_type": "audio_transcription", "text": "I fly out of Lisbon"},
                {"content_type": "audio_asset_pointer", "asset_pointer": "sediment://y"}]},
            1714550408.0),
    }}]

CLAUDE = [{
    "uuid": "k-garden", "name": "Garden", "created_at": "2024-06-01T08:00:00.000000Z",
    "updated_at": "2024-06-01T08:05:00.000000Z", "account": {"uuid": "acct"},
    "chat_messages": [
        {"uuid": "m1", "sender": "human", "text": "My tomatoes get blight every August",
         "content": [{"type": "text", "text": "My tomatoes get blight every August",
                      "start_timestamp": None, "citations": []}],
         "created_at": "2024-06-01T08:00:01.000000Z", "attachments": [], "files": []},
        {"uuid": "m2", "sender": "assistant", "text": "",
         "content": [{"type": "thinking", "thinking": "copper?"},
                     {"type": "text", "text": "Try copper fungicide early."}],
         "created_at": "2024-06-01T08:00:05.000000Z", "attachments": [], "files": []},
        {"uuid": "m3", "sender": "human", "text": "Here is the plot plan",
         "created_at": "2024-06-01T08:01:00.000000Z",
         "attachments": [{"file_name": "plan.txt", "extracted_content": "bed A"}],
         "files": [{"file_name": "photo.jpg"}]},
    ]}]


def _write(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_chatgpt_export_reads_the_branch_the_app_shows(tmp_path: Path) -> None:
    path = _write(tmp_path, "conversations.json", CHATGPT)
    assert sniff_format(path) == "chatgpt"
    (record,) = read_chat_export(path)
    assert (record.id, record.title) == ("c-trip", "Trip planning")
    (session,) = record.sessions
    assert session.started_at is not None and session.started_at.year == 2024
    got = [(m.role, m.content, m.metadata.get("parts_skipped")) for m in session.messages]
    assert [m.metadata["source_id"] for m in session.messages] == [  # the app's ids
        "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"]
    assert got == [
        ("system", "", None),                                   # hidden context
        ("system", "I am vegetarian\nAnswer briefly", None),   # custom instructions
        ("user", "My budget for Japan is 3000 euros", None),
        ("assistant", "", ["thoughts"]),                       # reasoning: named, no text
        ("tool", "3000 / 14", None),                           # addressed to a tool
        ("tool", "214.28", None),
        ("assistant", "That is about 214 euros a day for two weeks.", None),
        ("user", "Here is my itinerary photo", ["image_asset_pointer"]),
        ("user", "I fly out of Lisbon", ["audio_asset_pointer"]),
    ]
    assert "An abandoned answer" not in [m.content for m in session.messages]
    assert session.messages[2].timestamp is not None
    assert session.messages[5].speaker == "python"


def test_claude_export(tmp_path: Path) -> None:
    path = _write(tmp_path, "conversations.json", CLAUDE)
    assert sniff_format(path) == "claude"
    (record,) = read_chat_export(path)
    assert (record.id, record.title, record.speakers) == ("k-garden", "Garden",
                                                          ["user", "assistant"])
    got = [(m.role, m.content, m.metadata.get("parts_skipped"))
           for m in record.sessions[0].messages]
    assert [m.metadata["source_id"] for m in record.sessions[0].messages] == ["m1", "m2", "m3"]
    assert got == [("user", "My tomatoes get blight every August", None),
                   ("assistant", "Try copper fungicide early.", ["thinking"]),
                   ("user", "Here is the plot plan", ["file", "file"])]


def test_import_command_takes_either_export_and_says_what_it_skipped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_cli_conventions import _cli

    db = str(tmp_path / "m.db")
    chatgpt = _write(tmp_path, "chatgpt.json", CHATGPT)
    claude = _write(tmp_path, "claude.json", CLAUDE)
    assert _cli("import", str(chatgpt), "--user", "ana", "--db", db, "--quiet") == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report["format"], report["conversations"], report["turns"]) == ("chatgpt", 1, 4)
    # Two system messages, two tool messages and the reasoning without text.
    assert report["skipped"] == 5 and "5 messages not stored" in err
    assert _cli("import", str(claude), "--user", "ana", "--db", db, "--quiet") == 0
    assert json.loads(capsys.readouterr().out)["format"] == "claude"
    # The next month's export holds the same conversations: nothing is stored twice.
    assert _cli("import", str(chatgpt), "--user", "ana", "--db", db, "--quiet") == 0
    out, err = capsys.readouterr()
    assert (json.loads(out)["turns"], json.loads(out)["duplicates"]) == (0, 4)
    assert "4 messages already stored (not stored again)" in err
    with Memory.open(db) as memory:
        assert memory.search("what did I say my budget was?", user_id="ana")[0].text == (
            "My budget for Japan is 3000 euros")
        hit = memory.search("tomato blight", user_id="ana")[0]
        assert (hit.conversation_id, hit.turn_id) == ("k-garden", "m1")  # the app's ids


@pytest.mark.parametrize(("doc", "where", "said"), [
    ([{"mapping": {"a": {"id": "a", "parent": "b", "children": [],
                         "message": {"author": {"role": "user"},
                                     "content": _text("hi")}},
                   "b": {"id": "b", "parent": "a", "children": ["a"], "message": None}},
       "current_node": "a", "id": "c"}], "conversation 1", "cycle"),
    ([{"mapping": {"a": _node("a", None, [], "user", _text("hi"), when=float("1e20"))},
       "current_node": "a", "id": "c"}], "conversation 1 message 1", "out of range"),
    ([{"mapping": {"a": _node("a", None, [], "user", _text("hi"))}, "current_node": "a"}],
     "conversation 1", "has no id"),
    ([{"chat_messages": [{"sender": "human", "text": "hi"}, {"text": "no sender"}],
       "uuid": "k"}], "conversation 1 message 2", 'no "sender"'),
    ([{"chat_messages": [], "uuid": "k"}, "junk"], "conversation 2", "not a string"),
])
def test_a_malformed_export_names_the_conversation_and_message(
        tmp_path: Path, doc: Any, where: str, said: str) -> None:
    path = _write(tmp_path, "bad.json", doc)
    with pytest.raises(ImportFormatError) as caught:
        read_chat_export(path)
    assert where in str(caught.value) and said in str(caught.value), str(caught.value)


def test_the_wrong_app_is_refused_naming_what_was_found(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.json", CLAUDE)
    with pytest.raises(ImportFormatError, match=r"\(ChatGPT\); found an array of objects "
                       r"with keys uuid, name"):
        read_chat_export(path, "chatgpt")


def test_a_zip_as_downloaded_is_read_through_its_conversations_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The apps hand out a zip ("Export data"): its conversations.json, at the top (ChatGPT,
    Claude) or in one folder, is read as the file itself; stdin too. An archive without it,
    with two, or damaged is refused by name, and no store is made."""
    import zipfile

    from tests.test_cli_conventions import _cli

    def archive(name: str, members: dict[str, str]) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
            for member, text in members.items():
                out.writestr(member, text)
        return path

    chatgpt = archive("chatgpt.zip", {"chat.html": "<html></html>", "user.json": "{}",
                                      "conversations.json": json.dumps(CHATGPT)})
    claude = archive("claude.zip", {"export/users.json": "[]", "conversations.json/": "",
                                    "export/conversations.json": json.dumps(CLAUDE)})
    assert sniff_format(chatgpt) == "chatgpt" and sniff_format(claude) == "claude"
    assert [r.id for r in read_chat_export(chatgpt)] == ["c-trip"]
    db = str(tmp_path / "m.db")
    assert _cli("import", str(claude), "--user", "ana", "--db", db, "--quiet") == 0
    assert json.loads(capsys.readouterr().out)["format"] == "claude"
    for bad, said in [
            (archive("none.zip", {"chat.html": "x"}), "holds no conversations.json"),
            (archive("two.zip", {"a/conversations.json": "[]", "b/conversations.json": "[]"}),
             "holds 2 files named conversations.json"),
            (archive("deep.zip", {"a/b/conversations.json": "[]"}), "holds no"),
            ]:
        with pytest.raises(ImportFormatError, match=said):
            sniff_format(bad)
    damaged = tmp_path / "damaged.zip"
    damaged.write_bytes(chatgpt.read_bytes()[:200])
    new = tmp_path / "new.db"
    assert _cli("import", str(damaged), "--user", "ana", "--db", str(new)) == 2
    assert "damaged or unreadable zip archive" in capsys.readouterr().err
    assert not new.exists()
