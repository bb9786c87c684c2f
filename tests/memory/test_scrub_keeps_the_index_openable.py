"""Single deletes scrub the file without growing FTS5's index structure: FTS5's
``optimize`` added a level per call on SQLite 3.40, and past 2,000 levels the table
could no longer be opened (found by the reliability bench's ``deleted_bytes``)."""

from __future__ import annotations

import sqlite3

from memstrata import Memory


def _levels(path) -> int:
    """The level count of ``turns_fts``'s structure record (its second varint)."""
    block = sqlite3.connect(path).execute(
        "SELECT block FROM turns_fts_data WHERE id = 10").fetchone()[0]
    value, pos = 0, 4  # the cookie (4 bytes), then varints: levels first
    while True:
        byte = block[pos]
        pos += 1
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value


def test_many_single_deletes_leave_one_level_and_a_searchable_store(tmp_path) -> None:
    path = tmp_path / "d.db"
    with Memory.open(path, embedder=None) as m:
        for n in range(300):
            events = m.add([f"keep {n} zzkeepword", f"gone {n} qqgonemark{n}x"],
                           user_id="u", conversation_id=f"c{n}", infer=False)
            m.delete(events[1]["id"])
        assert m.search("keep 299 zzkeepword", user_id="u", k=1)[0].text == "keep 299 zzkeepword"
    assert _levels(path) <= 2  # "optimize" left 188 here
    data = path.read_bytes()
    assert not any(f"qqgonemark{n}x".encode() in data for n in range(300))
