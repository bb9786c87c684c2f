"""Regressions found by ``memstrata bench reliability`` (crash and concurrency scenarios).

Each test stages the interleaving that broke: another process's write landing between a
read and the write that used it, a commit landing in the middle of a search, a deleted
first turn of a session, rows moved by B-tree rebalancing before a tenant was forgotten.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from memstrata.memory import FactItem, Store, Turn


def _turns(user: str, texts: list[str], conv: str = "c", start: int = 0) -> list[Turn]:
    return [Turn(user_id=user, conversation_id=conv, session_id="s1", turn_id=f"D{start + n}",
                 seq=start + n, speaker="Ann", text=t) for n, t in enumerate(texts)]


def _two(tmp_path: Path) -> tuple[Store, Store]:
    """Two connections to one file: this process's store and "another process's"."""
    return Store.open(tmp_path / "m.db", embedder=None), Store.open(tmp_path / "m.db",
                                                                      embedder=None)


def _before_the_write_lock(store: Store, method: str, other: Any) -> list[bool]:
    """Make ``store.<method>`` run ``other()`` after it reads, outside a transaction:
    the other process's write lands between this one's read and its write, which only
    a read taken before the write lock lets happen. Returns a flag: whether it ran."""
    real = getattr(store, method)
    ran: list[bool] = []

    def read(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        if store._depth == 0 and not ran:
            ran.append(True)
            other()
        return got

    setattr(store, method, read)
    return ran


def test_deleting_a_sessions_first_turn_takes_its_text_out_of_the_next_turns_context(
        tmp_path: Path) -> None:
    store = Store.open(tmp_path / "m.db", embedder=None)
    first, second, _ = store.add_turns(_turns("u", ["zebra crossing", "a reply", "more"]))
    store.delete_turn("u", first)
    rowid = store.conn.execute("SELECT rowid FROM turns WHERE id = ?", (second,)).fetchone()[0]
    context = store.conn.execute("SELECT context FROM turns_fts WHERE rowid = ?",
                                 (rowid,)).fetchone()[0]
    assert "zebra" not in context
    assert store.lexical("u", ["zebra"], node="turn", k=5, context_weight=1.0) == []


def test_update_turn_keeps_the_version_another_process_wrote(tmp_path: Path) -> None:
    mine, theirs = _two(tmp_path)
    [node] = mine.add_turns(_turns("u", ["first text"]))
    ran = _before_the_write_lock(mine, "turn",
                                 lambda: theirs.update_turn("u", node, "their text"))
    mine.update_turn("u", node, "my text")
    del mine.turn  # disarmed: reads from here on are the test's
    texts = [v.text for v in mine.history("u", node)]
    want = ["first text", "their text", "my text"] if ran else ["first text", "my text"]
    assert texts == want  # no version kept twice, none lost


def test_item_update_keeps_the_fields_another_process_wrote(tmp_path: Path) -> None:
    mine, theirs = _two(tmp_path)
    node = mine.add(FactItem(user_id="u", text="first text", tags=["a"]))
    ran = _before_the_write_lock(mine, "get",
                                 lambda: theirs.update("u", node, tags=["a", "b"]))
    mine.update("u", node, text="my text")
    del mine.get
    got = mine.get("u", node)
    assert got is not None and got.text == "my text"
    assert got.tags == (["a", "b"] if ran else ["a"])  # their change is not undone


def test_deleting_a_turn_another_process_just_deleted_is_not_an_error(tmp_path: Path) -> None:
    mine, theirs = _two(tmp_path)
    [node] = mine.add_turns(_turns("u", ["going away"]))
    _before_the_write_lock(mine, "turn", lambda: theirs.delete_turn("u", node))
    mine.delete_turn("u", node)  # used to raise TypeError on the vanished row
    del mine.turn
    assert mine.turn("u", node) is None


def test_a_search_reads_one_snapshot_while_another_process_appends(tmp_path: Path) -> None:
    mine, theirs = _two(tmp_path)
    mine.add_turns(_turns("u", ["garden honey", "garden bees"]))
    mine.lexical("u", ["honey"], node="turn", k=5)  # row lengths cached, garden's list not
    real = mine._lists
    appended: list[int] = []

    def lists(*args: Any, **kwargs: Any) -> Any:
        if not appended:  # another process commits many turns mid-search
            appended.append(len(theirs.add_turns(_turns("u", [f"garden {n}" for n in
                                                               range(40)], conv="d"))))
        return real(*args, **kwargs)

    mine._lists = lists  # type: ignore[method-assign]
    with mine.reading():
        found = mine.lexical("u", ["garden"], node="turn", k=100)
    assert appended and len(found) == 2  # the snapshot the search began with
    assert len(mine.lexical("u", ["garden"], node="turn", k=100)) == 42


def test_forgetting_a_tenant_leaves_none_of_its_text_in_the_file(tmp_path: Path) -> None:
    # Four tenants written one after another: deleting the first one's rows rebalances
    # the pages they share with the next, and SQLite's secure_delete does not clear the
    # stale copies of moved cells that the rebalancing leaves in the pages' free gaps.
    rng = random.Random(0)
    words = ["garden", "bees", "honey", "trail", "marathon", "bakery", "museum", "violin",
             "harbour", "lantern", "orchard", "pottery"]
    path = tmp_path / "m.db"
    with Store.open(path, embedder=None) as store:
        for user in ("ana", "ben", "cy", "dee"):
            for c in range(4):
                store.add_turns(_turns(user, [
                    f"mark{user}q c{c}m{m} " + " ".join(rng.choice(words) for _ in range(6))
                    for m in range(100)], conv=f"c{c}"))
    with Store.open(path, embedder=None) as store:
        store.forget_user("ana")
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert b"markanaq" not in raw and b"markbenq" in raw


def test_encoding_takes_no_lock_a_killed_process_could_leave_held() -> None:
    import threading

    from tqdm import tqdm

    from memstrata.memory import StaticMiniLMEmbedder

    embedder = StaticMiniLMEmbedder()
    held, release = threading.Event(), threading.Event()

    def holder() -> None:  # stands for a forked process killed inside an encode
        with tqdm.get_lock():
            held.set()
            release.wait(30)

    threading.Thread(target=holder, daemon=True).start()
    held.wait(10)
    done: list[int] = []
    worker = threading.Thread(target=lambda: done.append(len(embedder.encode(["bees"]))),
                              daemon=True)
    worker.start()
    worker.join(10)
    release.set()
    assert done == [1], "encode waited on tqdm's lock"
