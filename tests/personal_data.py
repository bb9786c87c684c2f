"""A small hand-made tenant for the reconciler's tests: one name, three conversations.

* ``conv-a`` (Alex & Bea, May 2023) and ``conv-b`` (Alex & Carl, June 2023) are one
  Alex: wife Priya, dog Biscuit, works at Globex, lives in Lisbon.
* ``conv-c`` (Alex & Dana, May-June 2023) is another Alex: husband Tom, a nurse at the
  city hospital, lives in Denver — at the same time as conv-a's Alex.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memstrata.bench.locomo import load_conversation
from memstrata.formats.locomo import _parse_conversation
from memstrata.memory import Store
from tests.conftest import locomo_record


def _turns(prefix: int, lines: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"speaker": s, "dia_id": f"D{prefix}:{i + 1}", "text": t}
            for i, (s, t) in enumerate(lines)]


RECORDS: dict[str, dict[str, Any]] = {
    "conv-a": locomo_record("conv-a", speakers=("Alex", "Bea"), sessions={
        1: _turns(1, [("Alex", "Hi Bea! My wife Priya and I went hiking near the river."),
                      ("Bea", "Lovely! I started pottery classes downtown."),
                      ("Alex", "Nice. Work is busy, I work at Globex on the billing team."),
                      ("Bea", "Sounds intense, hope you get a break.")]),
        2: _turns(2, [("Alex", "My dog Biscuit chewed my shoes again, haha."),
                      ("Bea", "Dogs will be dogs! My cat ignores me."),
                      ("Alex", "I live in Lisbon, so we walk by the river with Priya daily."),
                      ("Bea", "That sounds peaceful.")]),
    }, dates={1: "10:00 am on 2 May, 2023", 2: "10:00 am on 20 May, 2023"}),
    "conv-b": locomo_record("conv-b", speakers=("Carl", "Alex"), sessions={
        1: _turns(1, [("Carl", "Hey Alex, how have you been?"),
                      ("Alex", "Good! Priya and I took Biscuit to the beach."),
                      ("Carl", "Fun. Any news at work?"),
                      ("Alex", "I work at Globex still, billing got a new lead.")]),
        2: _turns(2, [("Carl", "Where do you live these days?"),
                      ("Alex", "I live in Lisbon near the river, my wife Priya loves it."),
                      ("Carl", "I should visit sometime."),
                      ("Alex", "Please do, my dog Biscuit would love the company.")]),
    }, dates={1: "9:00 am on 5 June, 2023", 2: "9:00 am on 25 June, 2023"}),
    "conv-c": locomo_record("conv-c", speakers=("Dana", "Alex"), sessions={
        1: _turns(1, [("Dana", "Alex, how was your week?"),
                      ("Alex", "Long shifts! I'm a nurse at the city hospital."),
                      ("Dana", "That must be exhausting."),
                      ("Alex", "My husband Tom cooks on my late nights, bless him.")]),
        2: _turns(2, [("Dana", "Any plans for the summer?"),
                      ("Alex", "I live in Denver, so we're driving to the mountains."),
                      ("Dana", "Take lots of photos!"),
                      ("Alex", "Will do, Tom already bought a new camera.")]),
    }, dates={1: "8:00 pm on 10 May, 2023", 2: "8:00 pm on 14 June, 2023"}),
}


def load(store: Store, user_id: str = "u1", convs: tuple[str, ...] = ("conv-a", "conv-b",
                                                                      "conv-c")) -> Store:
    """Load the named conversations under one tenant."""
    for n, conv in enumerate(convs):
        load_conversation(store, _parse_conversation(Path("t.json"), n, RECORDS[conv]),
                          tenant=user_id)
    return store
