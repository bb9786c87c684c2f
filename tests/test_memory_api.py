"""``memstrata.Memory``: the facade's verbs, forgetting, history, dense on every write
path, extraction batching, import/export and sharing between threads and processes."""

from __future__ import annotations

import json
import multiprocessing
import re
import sqlite3
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstrata import Memory, MemstrataError
from memstrata.formats import ImportFormatError
from memstrata.memory.store.forget import tenant_tables
from tests.conftest import field

README = Path(__file__).resolve().parents[1] / "README.md"


def answering(system: str, user: str, schema: Any) -> dict[str, Any]:
    """A scripted model: extracts one fact per chunk, answers with the first memory."""
    if schema and "facts" in json.dumps(schema):
        first = next(line for line in field(user, "turns").splitlines()
                     if line and not line.startswith("--"))
        return {"facts": [{"subject": "user", "predicate": "said",
                           "object": first.split(":", 1)[-1].strip()[:60]}],
                "entities": [], "qa": []}
    memories = field(user, "memories")
    ids = re.findall(r"\[([^\s·\]]+)", memories)
    text = memories.splitlines()[0].split("]", 1)[-1].strip() if memories else ""
    return {"answer": text[:40] or "unknown", "evidence": ids[:1]}


def test_readme_example_runs_verbatim(scripted, monkeypatch, tmp_path) -> None:
    """The README's first Python block, executed as written (the model scripted)."""
    import memstrata.api

    block = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert block, "README has no python example"
    handle = scripted(answering)
    monkeypatch.setattr(memstrata.api, "_handle", lambda lm: handle if lm else None)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(block[1], "README.md", "exec"), namespace)
    memory = namespace["m"]
    assert memory.search("Lisbon", user_id="ana") == []           # ana was forgotten
    assert memory.search("Porto", user_id="ben")                    # ben untouched


def test_add_search_get_update_history_delete() -> None:
    m = Memory.open(":memory:")
    events = m.add([{"role": "user", "content": "I moved to Lisbon in May"},
                    {"role": "assistant", "content": "How do you like it?"}],
                   user_id="u1", infer=False)
    assert [e["event"] for e in events] == ["ADD", "ADD"]
    hits = m.search("where did the user move?", user_id="u1", k=5)
    assert hits[0].text == "I moved to Lisbon in May" and hits[0].score > 0
    first = hits[0].id
    assert m.get(first)["speaker"] == "user" and m.get(first, user_id="u2") is None
    for text in ("I moved to Porto in June", "I moved to Faro in July"):
        m.update(first, text)
    versions = m.history(first)
    assert [v.text for v in versions] == ["I moved to Lisbon in May",
                                          "I moved to Porto in June", "I moved to Faro in July"]
    assert [v.event for v in versions] == ["ADD", "UPDATE", "UPDATE"]
    # The same text again writes no version, and says so (it said UPDATE).
    assert m.update(first, "I moved to Faro in July")["event"] == "NONE"
    assert len(m.history(first)) == 3
    assert versions[0].valid_to == versions[1].recorded_at and versions[-1].valid_to is None
    assert m.search("Faro", user_id="u1", k=1)[0].id == first
    assert all("Lisbon" not in h.text for h in m.search("Lisbon", user_id="u1", k=5))
    assert m.delete(first) and m.get(first) is None and m.history(first) == []
    with pytest.raises(KeyError) as caught:
        m.update(first, "again")
    assert isinstance(caught.value, MemstrataError) and str(caught.value) == f"no memory {first!r}"


def test_item_updates_keep_versions() -> None:
    from memstrata.memory import FactItem

    m = Memory.open(":memory:")
    fid = m.store.add(FactItem(user_id="u", text="Ana works at a bakery"))
    m.update(fid, "Ana works at a museum")
    m.store.update("u", fid, tags=["job"])  # a tag merge is not a new version
    history = m.history(fid)
    assert [v.text for v in history] == ["Ana works at a bakery", "Ana works at a museum"]
    assert history[-1].node["tags"] == ["job"]


def test_bad_messages_store_nothing() -> None:
    m = Memory.open(":memory:")
    with pytest.raises(ValueError, match="message 1"):
        m.add(["fine", {"role": "user"}], user_id="u", infer=False)
    with pytest.raises(ValueError, match="timestamp"):
        m.add({"role": "user", "content": "x", "timestamp": "last tuesday"}, user_id="u")
    with pytest.raises(ValueError, match="user_id"):
        m.add("x", user_id="")
    assert m.store.counts("u")["turns"] == 0


def test_every_write_path_is_embedded() -> None:
    """An item added by the agent's mem_add tool is found by the dense channel alone."""
    m = Memory.open(":memory:")
    m.add("Let's talk about gardening", user_id="u", infer=False)
    mem_add = next(t for t in m.tools("u") if t.__name__ == "mem_add")
    out = mem_add(text="Ana keeps three beehives behind her cottage", kind="fact")
    item_id = out["id"]
    ids, matrix = m.store.vectors("u", m.store.embedder.name)
    assert item_id in ids
    query = m.store.embedder.encode(["apiary honey bees"])[0]
    assert ids[int(np.argmax(matrix @ query))] == item_id


def test_an_embedder_is_chosen_by_name(tmp_path) -> None:
    from memstrata.memory.embed import default_embedder

    with pytest.raises(ValueError, match="unknown embedder 'minlm'"):
        Memory.open(tmp_path / "typo.db", embedder="minlm")
    assert not (tmp_path / "typo.db").exists()  # nothing opened
    m = Memory.open(tmp_path / "static.db", embedder="static")
    assert m.store.embedder is default_embedder()
    m.close()


@pytest.mark.slow
def test_the_transformer_embeds_every_write_when_named(tmp_path) -> None:
    pytest.importorskip("sentence_transformers")
    m = Memory.open(tmp_path / "minilm.db", embedder="minilm")
    m.add([{"role": "user", "content": "I keep bees on the roof"}], user_id="u",
          infer=False)
    ids, matrix = m.store.vectors("u", "all-MiniLM-L6-v2")
    assert len(ids) == 1 and matrix.shape == (1, 384)
    # No word in common: the transformer's cosine carries it over the cut.
    assert [h.text for h in m.search("where is the hive?", user_id="u")] == [
        "I keep bees on the roof"]
    assert m.search("xyzzy plugh", user_id="u") == []
    assert m.store.embedder.knows("hive") and not m.store.embedder.knows("xyzzy")
    m.close()


def test_a_store_searched_with_another_embedder_warns_until_reembedded(tmp_path) -> None:
    from memstrata.memory import EmbedderMismatchWarning
    from tests.conftest import FakeEmbedder

    db = tmp_path / "m.db"
    with Memory.open(db) as m:  # the shipped static model embeds
        m.add(["I take oat milk in my coffee", "I moved to Lisbon in May"], user_id="ana",
              infer=False)
        m.add("I like tea", user_id="bob", infer=False)
    with Memory.open(db, embedder=FakeEmbedder()) as m:
        with pytest.warns(EmbedderMismatchWarning, match="2 rows have vectors of "
                          "minilm-static-256 and 0 of fake-hash.*embedder='static'"):
            m.search("coffee", user_id="ana")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per tenant, not per search
            m.search("milk", user_id="ana")
            assert m.reembed(user_id="ana").turns == 2
        assert m.store.vector_models("ana") == {"minilm-static-256": 2, "fake-hash": 2}
        assert m.store.vector_models("bob") == {"minilm-static-256": 1}
    with Memory.open(db, embedder=FakeEmbedder()) as m, warnings.catch_warnings():
        warnings.simplefilter("error")
        assert m.search("oat milk coffee", user_id="ana")[0].channels.get("dense")
    with Memory.open(db, embedder=None) as m, pytest.raises(ValueError, match="embedder=None"):
        m.reembed(user_id="ana")


def test_a_store_opens_with_the_model_that_embedded_it(tmp_path, monkeypatch, capsys) -> None:
    from memstrata.memory import embed
    from tests.memory.store_conformance.test_reembed import NamedMiniLM

    monkeypatch.setitem(embed.EMBEDDERS, "minilm", NamedMiniLM)
    db = tmp_path / "m.db"
    with Memory.open(db, embedder="minilm") as m:
        m.add(["I take oat milk in my coffee", "I moved to Lisbon in May"], user_id="ana",
              infer=False)
    with Memory.open(db) as m, warnings.catch_warnings():
        warnings.simplefilter("error")  # no mismatch: it searches with the store's model
        assert isinstance(m.store.embedder.loaded(), NamedMiniLM)
        m.add("I keep bees", user_id="ana", infer=False)
        assert m.store.vector_models("ana") == {"all-MiniLM-L6-v2": 3}
        assert m.search("oat milk coffee", user_id="ana")[0].channels.get("dense")
    with Memory.open(db, embedder="static") as m:  # named: what it says
        assert m.store.embedder is embed.default_embedder()
    capsys.readouterr()
    assert _cli("add", "They make honey", "--user", "ana", "--db", str(db)) == 0
    assert _cli("search", "honey", "--db", str(db), "--user", "ana") == 0
    out, err = capsys.readouterr()
    assert err == "" and "They make honey" in out
    with Memory.open(db, embedder=None) as m:
        assert m.store.vector_models("ana") == {"all-MiniLM-L6-v2": 4}
    with Memory.open(tmp_path / "new.db") as m:  # a new store: the shipped model
        assert m.store.embedder is embed.default_embedder()


def test_cli_reembed_embeds_what_has_no_vector_of_the_model(tmp_path, capsys) -> None:
    db = str(tmp_path / "m.db")
    with Memory.open(db, embedder=None) as m:  # written without vectors
        m.add(["I keep bees on the roof", "They make honey"], user_id="ana", infer=False)
    capsys.readouterr()
    assert _cli("reembed", "--db", db, "--user", "ana", "--embedder", "static",
                "--quiet") == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["model"], report["turns"], report["items"], report["already"]) == (
        "minilm-static-256", 2, 0, 0)
    assert _cli("reembed", "--db", db, "--user", "ana", "--quiet") == 0  # the default
    assert json.loads(capsys.readouterr().out)["already"] == 2
    assert _cli("reembed", "--db", db, "--user", "ana", "--embedder", "statc") != 0
    assert "unknown embedder 'statc'" in capsys.readouterr().err
    with Memory.open(db) as m:
        assert m.store.vector_models("ana") == {"minilm-static-256": 2}
    from tests.conftest import FakeEmbedder

    with Memory.open(db, embedder=FakeEmbedder()) as m:
        m.add("I keep two hives", user_id="cy", infer=False)
    capsys.readouterr()
    assert _cli("search", "hives", "--db", db, "--user", "cy") == 0
    err = capsys.readouterr().err  # the warning: one line, and the fix
    assert err.startswith("memstrata: warning: tenant 'cy': 1 row has vectors of fake-hash")
    assert len(err.strip().splitlines()) == 1 and "memstrata reembed --user cy" in err


def test_cli_writes_with_the_embedder_it_is_given(tmp_path, capsys) -> None:
    from memstrata.memory.embed import STATIC_MODEL_DIR

    db, folder = str(tmp_path / "m.db"), str(STATIC_MODEL_DIR)  # a model2vec folder by path
    assert _cli("add", "I keep bees", "--user", "u", "--db", db, "--embedder", folder) == 0
    messages = tmp_path / "m.jsonl"
    messages.write_text('{"role": "user", "content": "They make honey"}\n')
    assert _cli("import", str(messages), "--format", "messages", "--user", "u", "--db", db,
                "--embedder", folder, "--quiet") == 0
    assert _cli("add", "more", "--user", "u", "--db", db, "--embedder", "nope") != 0
    assert "unknown embedder 'nope'" in capsys.readouterr().err
    with Memory.open(db, embedder=None) as m:
        assert m.store.vector_models("u") == {Path(folder).resolve().name: 2}


def test_add_batches_extraction_into_full_chunks(scripted) -> None:
    handle = scripted(answering)
    m = Memory(Memory.open(":memory:").store, lm=handle, extraction="sync")  # facts in add
    events: list[dict[str, Any]] = []
    for n in range(40):
        events += m.add({"role": "user" if n % 2 else "assistant",
                         "content": f"Message {n} about hiking trail number {n}"}, user_id="u")
    calls = handle.meter.since().calls
    assert 1 <= calls <= 40 / 10                       # at most one call per ten turns
    facts = [e for e in events if e.get("kind") == "fact"]
    assert facts and all(e["event"] in {"ADD", "NONE", "UPDATE"} for e in facts)
    m.flush("u")                                        # the tail: one more call at most
    assert handle.meter.since().calls <= calls + 1
    assert m.flush("u") == []                           # nothing pending now


def test_no_lm_means_no_extraction_and_no_error() -> None:
    m = Memory.open(":memory:")
    assert [e["kind"] for e in m.add("hello", user_id="u")] == ["turn"]
    assert m.flush("u") == []
    with pytest.raises(MemstrataError, match="needs an LM"):
        m.answer("what?", user_id="u")


def test_answer_returns_provenance(scripted) -> None:
    m = Memory(Memory.open(":memory:").store, lm=scripted(answering))
    m.add("I adopted a beagle named Rex", user_id="u", infer=False)
    out = m.answer("What is my dog's name?", user_id="u")
    assert out.question == "What is my dog's name?" and out.retrieved


def _unique_words(n: int) -> list[str]:
    return [f"zq{n}w{i}" for i in range(3)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3)),
                min_size=1, max_size=12), st.sampled_from(["a", "b", "c"]))
def test_delete_all_forgets_exactly_one_tenant(writes, victim) -> None:
    from memstrata.memory import FactItem

    m = Memory.open(":memory:")
    for n, (user, action) in enumerate(writes):
        words = " ".join(_unique_words(n))
        if action == 0:
            m.add(f"{user} says {words}", user_id=user, infer=False)
        elif action == 1:
            m.store.add(FactItem(user_id=user, text=f"fact {words}", tags=["t"]))
        elif action == 2:
            m.store.blobs.put(user, f"k{n}", f"blob {words}")
        else:
            ev = m.add(f"draft {words}", user_id=user, infer=False)
            m.update(ev[0]["id"], f"final {words}")
    others = sorted({u for u, _ in writes} - {victim})
    query = "says fact final draft"
    before = {u: [(h.id, h.text) for h in m.search(query, user_id=u, k=50)] for u in others}
    m.delete_all(victim)
    for table in tenant_tables(m.store):
        count = m.store.conn.execute(f"SELECT count(*) FROM {table} WHERE user_id = ?",
                                     (victim,)).fetchone()[0]
        assert count == 0, table
    for n, (user, _) in enumerate(writes):
        if user == victim:
            for word in _unique_words(n):
                for vocab in ("turns_vocab", "items_vocab"):  # the index itself, optimised
                    assert m.store.conn.execute(
                        f"SELECT count(*) FROM {vocab} WHERE term LIKE ?",
                        (f"%{word}",)).fetchone()[0] == 0
                assert m.search(word, user_id=victim) == []
    after = {u: [(h.id, h.text) for h in m.search(query, user_id=u, k=50)] for u in others}
    # The same memories, every row intact. Not bit for bit: bm25's row count and mean row
    # length are the whole index's (as in FTS5's own bm25), so scores move in the last
    # digits and near-ties can swap when another tenant's rows go.
    assert {u: sorted(hits) for u, hits in after.items()} == {
        u: sorted(hits) for u, hits in before.items()}


def test_forget_leaves_no_text_in_the_file(tmp_path) -> None:
    path = tmp_path / "m.db"
    m = Memory.open(path)
    m.add("my passport number is XQ7781234", user_id="victim", infer=False)
    m.add("the weather is mild", user_id="other", infer=False)
    m.delete_all("victim")
    m.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert b"XQ7781234" not in raw and b"xq7781234" not in raw
    assert b"weather" in raw


def test_export_import_round_trip(tmp_path) -> None:
    m = Memory.open(tmp_path / "a.db")
    m.add([{"speaker": "Ana", "content": "I keep bees in the garden"},
           {"speaker": "Ben", "content": "How much honey do they make?"}], user_id="u",
          infer=False, timestamp="2024-03-01T10:00:00Z")
    hid = m.search("bees", user_id="u")[0].id
    m.update(hid, "I keep twelve bees in the garden")
    before = [(h.id, round(h.score, 9)) for h in m.search("honey bees garden", user_id="u")]
    m.export("u", tmp_path / "u.jsonl")
    m.delete_all("u")
    assert m.import_(tmp_path / "u.jsonl")["turns"] == 2
    after = [(h.id, round(h.score, 9)) for h in m.search("honey bees garden", user_id="u")]
    assert after == before and len(m.history(hid)) == 2
    with pytest.raises(ImportFormatError, match="already exists"):
        m.import_(tmp_path / "u.jsonl")


def test_an_export_read_first_imports_into_its_tenant(tmp_path) -> None:
    """``read_export`` checks a file without a store (the CLI reads before it opens one);
    ``import_`` then writes what was read, into the tenant it was read for only."""
    from memstrata.formats.dump import read_export

    m = Memory.open(tmp_path / "a.db", embedder=None)
    m.add("I keep bees in the garden", user_id="u", infer=False)
    m.export("u", tmp_path / "u.jsonl")
    read = read_export(tmp_path / "u.jsonl", "v")
    fresh = Memory.open(tmp_path / "b.db", embedder=None)
    with pytest.raises(ValueError, match="read into 'v'"):
        fresh.import_(read, user_id="w")
    assert fresh.import_(read, user_id="v")["turns"] == 1
    assert [h.text for h in fresh.search("bees", user_id="v")] == ["I keep bees in the garden"]
    header = '{"type": "header", "format": "memstrata-export", "version": 2, "user_id": 3}'
    (tmp_path / "odd.jsonl").write_text(header + "\n")
    with pytest.raises(ImportFormatError, match="line 1: the header's user_id"):
        read_export(tmp_path / "odd.jsonl")


def test_messages_without_text_are_skipped(tmp_path) -> None:
    # An OpenAI transcript as an agent keeps it: the assistant's tool call has no text.
    chat = [{"role": "user", "content": "Book me a flight to Rome"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "book", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "booked AZ123"},
            {"role": "assistant", "tool_calls": []},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            {"role": "user", "content": "  \n "},
            {"role": "user", "content": "", "metadata": {"caption": "a ticket to Rome"}}]
    m = Memory.open(":memory:")
    events = m.add(chat, user_id="u", infer=False)
    stored = [e for e in events if e["event"] == "ADD"]
    texts = [t["text"] for t in m.get_all(user_id="u", kind="turn")]
    assert [e["memory"] for e in stored] == ["Book me a flight to Rome", ""]
    assert [e.get("reason") for e in events] == [None, "tool", "tool", "blank", "no_text",
                                                 "blank", None]   # one event per message
    assert sorted(texts) == sorted(e["memory"] for e in stored)
    assert [e["event"] for e in m.add(chat[1], user_id="u")] == ["NONE"]
    assert m.search("ticket", user_id="u")[0].id == events[-1]["id"]  # its caption
    with pytest.raises(ValueError, match='"content"'):  # a typo is not a tool call
        m.add({"role": "user", "text": "hello"}, user_id="u")
    # Files: a session or conversation left with no text writes nothing and is not counted.
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps({**r, "conversation_id": c, "session_id": s})
                              for r, c, s in [(chat[0], "c1", "s1"), (chat[1], "c1", "s2"),
                                              (chat[1], "c2", "s1")]))
    from memstrata.formats import read_messages

    counts = m.import_conversations(read_messages(path), user_id="v")
    assert counts == {"conversations": 1, "sessions": 1, "turns": 1, "skipped": 2}
    assert m.store.conversation_ids("v") == ["c1"]


def test_import_messages_file_all_or_nothing(tmp_path) -> None:
    from memstrata.formats import read_messages

    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(r) for r in [
        {"role": "user", "content": "I run marathons", "conversation_id": "c1"},
        {"role": "assistant", "content": "Impressive", "conversation_id": "c1"}]))
    m = Memory.open(":memory:")
    counts = m.import_conversations(read_messages(good), user_id="u")
    assert counts == {"conversations": 1, "sessions": 1, "turns": 2}
    assert m.search("marathons", user_id="u")[0].conversation_id == "c1"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "ok"}\n{"role": "user"}\n')
    with pytest.raises(ImportFormatError, match="line 2"):
        read_messages(bad)


def test_threads_share_one_memory(tmp_path) -> None:
    m = Memory.open(tmp_path / "t.db")
    errors: list[BaseException] = []
    added: list[str] = []

    def work(n: int) -> None:
        try:
            for i in range(40):
                if i % 4 == 3:
                    m.search(f"thread {n}", user_id=f"u{n % 2}", k=3)
                elif i % 4 == 2 and added:
                    m.update(added[-1], f"edited by {n} at {i}")
                else:
                    ev = m.add(f"thread {n} message {i}", user_id=f"u{n % 2}", infer=False)
                    added.append(ev[0]["id"])
        except BaseException as exc:  # pragma: no cover - the assertion shows it
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(m.store.counts(f"u{n}")["turns"] for n in range(2)) == len(added) >= 8 * 20
    assert m.store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _adder(path: str, n: int) -> None:
    m = Memory.open(path)
    for i in range(25):
        m.add(f"process {n} message {i}", user_id="shared", conversation_id=f"c{n % 2}",
              infer=False)
    m.close()


def test_processes_share_one_file(tmp_path) -> None:
    path = str(tmp_path / "p.db")
    Memory.open(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_adder, args=(path, n)) for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 100
    seqs = conn.execute("SELECT conversation_id, count(*), count(DISTINCT seq) FROM turns"
                        " GROUP BY conversation_id").fetchall()
    assert all(total == distinct for _, total, distinct in seqs)  # no seq handed out twice
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.slow
def test_readme_example_with_the_embedded_model(monkeypatch, tmp_path, capsys) -> None:
    """The README example verbatim, on the real default model (the README's first command
    installs it; without it this fails naming the install command)."""
    block = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(block[1], "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "Lisbon" in printed and "Porto" in printed


def _cli(*argv: str) -> int:
    from memstrata.cli import main

    try:
        return main(list(argv))
    except SystemExit as exc:  # as the interpreter would: a message goes to stderr, exit 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return exc.code or 0


def test_cli_import_forget_and_bad_input(tmp_path, capsys) -> None:
    db = str(tmp_path / "m.db")
    lme = tmp_path / "lme.json"
    lme.write_text(json.dumps([{
        "question_id": "q1", "question_type": "single-session-user",
        "question": "Where do I swim?", "answer": "the lido",
        "question_date": "2023/05/30 (Tue) 23:40", "haystack_session_ids": ["s_a"],
        "haystack_dates": ["2023/05/20 (Sat) 10:00"], "answer_session_ids": ["s_a"],
        "haystack_sessions": [[{"role": "user", "content": "I swim at the lido on Sundays",
                                "has_answer": True},
                               {"role": "assistant", "content": "Lovely!"}]]}]))
    assert _cli("import", str(lme), "--user", "u", "--db", db, "--quiet") == 0  # told apart
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (report["format"], report["turns"]) == ("longmemeval", 2)
    m = Memory.open(db)
    hit = m.search("where does the user swim", user_id="u")[0]
    assert hit.conversation_id == "q1" and hit.event_time.year == 2023
    m.close()
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "user", "content": "fine"}, {"content": "no speaker"}]')
    capsys.readouterr()
    assert _cli("import", str(bad), "--format", "messages", "--user", "v", "--db", db) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and "message 2" in err
    assert Memory.open(db).store.counts("v")["turns"] == 0       # nothing half-written
    assert _cli("forget", "--user", "u", "--db", db, "--yes") == 0
    assert Memory.open(db).store.counts("u")["turns"] == 0


def test_cli_add_says_what_it_skipped(tmp_path, capsys, monkeypatch) -> None:
    import io

    db = str(tmp_path / "m.db")
    lines = [{"role": "user", "content": "Book me a flight to Rome"},
             {"role": "assistant", "content": None, "tool_calls": []}]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(map(json.dumps, lines))))
    assert _cli("add", "--user", "u", "--db", db) == 0
    out, err = capsys.readouterr()
    assert [(e["event"], e["memory"]) for e in map(json.loads, out.splitlines())] == [
        ("ADD", lines[0]["content"]), ("NONE", "")]
    assert err.strip() == "memstrata: 1 message without text skipped"
    assert _cli("add", "--user", "u", "--db", db, "   ") == 0
    assert capsys.readouterr().err.strip() == "memstrata: 1 message without text skipped"
    assert Memory.open(db).store.counts("u")["turns"] == 1


def test_cli_weights_errors_are_one_line_and_name_the_knob(tmp_path, capsys) -> None:
    """Found by the reliability fuzzer: a knob of the wrong type printed pydantic's
    multi-line report; a misspelt knob was ignored and the search ran on the defaults."""
    db = str(tmp_path / "m.db")
    assert _cli("add", "--user", "u", "--db", db, "I swim at the lido") == 0
    capsys.readouterr()
    for weights, says in (('{"dense": "x"}', "--weights: dense: Input should be a valid number"),
                          ('{"dens": 0.3}', "--weights: dens: Extra inputs are not permitted"),
                          ('{"dense": -1}', "--weights: dense: Input should be greater"),
                          ("[1]", "must be a JSON object"), ("{bad", "must be a JSON object")):
        assert _cli("search", "lido", "--user", "u", "--db", db, "--weights", weights) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err, (weights, err)
    assert _cli("search", "lido", "--user", "u", "--db", db, "--weights",
                '{"dense": 0.3}') == 0
    assert "lido" in capsys.readouterr().out


def test_hostile_arguments_get_documented_errors(tmp_path) -> None:
    """Found by the reliability fuzzer: each of these raised TypeError, OverflowError,
    AttributeError, IndexError or a sqlite3 error from deep inside."""
    m = Memory.open(tmp_path / "m.db")
    m.add("hello river", user_id="u", infer=False)
    assert m.add([], user_id="u") == []
    assert m.get_all("u", offset=10**30) == []
    for bad in ({"bogus": 1}, {"start": [1]}, {"speaker": {"x": 1}}, {"end": 1e300},
                {"kinds": object()}):
        with pytest.raises(ValueError):
            m.search("river", user_id="u", filters=bad)
    assert m.search("river", user_id="u", filters={"kinds": "turn", "start": "2000-01-01"})
    with pytest.raises(ValueError, match="Unicode"):
        m.search("\udcff river", user_id="u")
    with pytest.raises(ValueError, match="Unicode"):
        m.add("bad \ud800 text", user_id="u", infer=False)
    with pytest.raises(ValueError, match="JSON"):
        m.add("fine", user_id="u", metadata={"b": b"bytes"}, infer=False)
    with pytest.raises(ValueError, match="out of range"):
        m.add("fine", user_id="u", timestamp=1e300, infer=False)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ImportFormatError, match="nested too deeply"):
        m.import_(deep, user_id="v")
    blob = tmp_path / "blob.jsonl"
    blob.write_text('{"type": "header", "format": "memstrata-export", "version": 1, '
                    '"user_id": "x"}\n{"type": "blob"}\n')
    with pytest.raises(ImportFormatError, match="a blob needs"):
        m.import_(blob, user_id="v")
    m.close()


def test_cli_reports_store_faults_and_bad_input_on_one_line(tmp_path, capsys) -> None:
    """cli.main caught only three error types: a sqlite3 error (a full, read-only or
    corrupt store) or a ValueError from the library printed a traceback instead."""
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 200)
    db = str(tmp_path / "m.db")
    for argv in (["stats", "--db", str(junk)], ["get", "\udcff", "--db", db],
                 ["add", "hi", "--user", "u", "--db", db, "--timestamp", "not a time"],
                 ["export", str(tmp_path / "a\x00b"), "--user", "u", "--db", db]):
        Memory.open(db).close()
        capsys.readouterr()
        assert _cli(*argv) != 0, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith("memstrata: "), err


def test_cli_usage_error_is_one_line_whatever_the_arguments_hold(capsys) -> None:
    # argparse quotes the arguments it refuses: a record or line separator in one split
    # its message over lines (the reliability bench's hostile_cli, seed 2).
    for junk in ("a\x1eb", "a\nb", "a\u2028b", "a\x85b"):
        assert _cli("stats", junk) == 2, repr(junk)
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 2 and lines[0].startswith("usage: memstrata stats"), lines
        assert lines[1].startswith("memstrata stats: error: unrecognized arguments: a b"), lines


def test_every_verb_states_its_llm_calls() -> None:
    """Each verb's docstring says how many LLM calls it makes (none, or how many), so a
    caller can tell a model-free path from one that waits on a model."""
    import inspect

    verbs = {name: fn for name, fn in vars(Memory).items()
             if not name.startswith("_") and inspect.isfunction(fn)}
    assert {"add", "search", "answer", "context", "read", "learn", "expect"} <= set(verbs)
    said = re.compile(r"No LLM call|no LLM call|LLM calls?[ (:]")
    silent = [name for name, fn in verbs.items()
              if name != "close" and not said.search(inspect.getdoc(fn) or "")]
    assert not silent, f"verbs whose docstring does not state their LLM calls: {silent}"


def test_a_hit_prints_its_fused_score_to_six_decimals() -> None:
    """``fused`` is a sum of channel weights: dumped (the CLI, the REST API) it read
    2.2399999999999998; the object keeps the exact value the ranking used."""
    from memstrata.memory.models import Hit

    hit = Hit(id="t_x", node="turn", kind="turn", text="a", score=0.5,
              fused=2.2399999999999998)
    assert hit.model_dump()["fused"] == 2.24 and '"fused":2.24,' in hit.model_dump_json()
    assert hit.fused == 2.2399999999999998
