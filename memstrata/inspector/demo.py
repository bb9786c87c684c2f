"""A small, realistic demo memory for the inspector's tests, screenshots and a first look:
two tenants' chats (user/assistant, several sessions), facts grounded in their turns
(one superseded by a later one, one edited into a second version), two recorded runs
with their LLM usage, and what ``read``, ``learn`` and ``expect`` write (a document read,
a strategy and a guardrail, a pending expectation and the fact a surprise taught).
Written through the store's own functions and the verbs that call no model.

Example:
    >>> from memstrata.inspector.demo import build_demo
    >>> memory = build_demo(":memory:", embedder=None)
    >>> sorted(memory.store.conversation_ids("ana"))
    ['cooking', 'travel']
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memstrata.api import Memory
from memstrata.memory.hierarchy import reconcile_conversation
from memstrata.memory.models import FactItem, WorkingItem
from memstrata.memory.voe_facts import PREDICTION_SOURCE, VoEFacts
from memstrata.trajectories import Recorder

SOURCE = "extract:demo"

# (conversation, session start, [(role, text)]): each session is one ``add``.
CHATS: dict[str, list[tuple[str, datetime, list[tuple[str, str]]]]] = {
    "ana": [
        ("travel", datetime(2026, 3, 2, 9, 30, tzinfo=UTC), [
            ("user", "I just moved to Lisbon for a new job at a design studio."),
            ("assistant", "Congratulations! Lisbon is lovely in spring. How is the studio?"),
            ("user", "Great so far. My sister Marta is visiting next month, she is a nurse."),
            ("assistant", "Nice. Would you like ideas for things to do with her in Lisbon?"),
            ("user", "Yes please, she loves old trams and custard tarts."),
            ("assistant", "Take tram 28 through Alfama, then pastéis de nata in Belém."),
        ]),
        ("travel", datetime(2026, 5, 10, 18, 0, tzinfo=UTC), [
            ("user", "Update: I moved to Porto last week, the studio opened an office there."),
            ("assistant", "A big change! Porto has great light for design work."),
            ("user", "I am allergic to shellfish, so keep that in mind for restaurant tips."),
            ("assistant", "Noted. For Porto, try a francesinha without the seafood sauce."),
        ]),
        ("cooking", datetime(2026, 4, 14, 20, 15, tzinfo=UTC), [
            ("user", "How long should I rest bread dough made with 70% hydration?"),
            ("assistant", "Bulk ferment about 4 hours at 24 °C, then shape and proof "
                          "1-2 hours, or overnight in the fridge."),
            ("user", "I bake sourdough every Sunday with my starter called Bubbles."),
            ("assistant", "Feed Bubbles the evening before so it peaks on Sunday morning."),
        ]),
    ],
    "ben": [
        ("default", datetime(2026, 4, 1, 12, 0, tzinfo=UTC), [
            ("user", "My brother lives in Porto and works as a chef."),
            ("assistant", "Does he cook traditional Portuguese food?"),
            ("user", "Yes, mostly bacalhau. I prefer vegetarian food myself."),
        ]),
    ],
}

# (tenant, conversation, text, subject, predicate, object, the evidence turn's seq)
FACTS: list[tuple[str, str, str, str, str, str, int]] = [
    ("ana", "travel", "The user lives in Lisbon", "user", "lives in", "Lisbon", 0),
    ("ana", "travel", "The user works at a design studio", "user", "works at",
     "a design studio", 0),
    ("ana", "travel", "The user's sister Marta is a nurse", "Marta", "is a", "nurse", 2),
    ("ana", "travel", "Marta loves old trams and custard tarts", "Marta", "loves",
     "old trams and custard tarts", 4),
    ("ana", "travel", "The user lives in Porto", "user", "lives in", "Porto", 6),
    ("ana", "travel", "The user is allergic to shellfish", "user", "is allergic to",
     "shellfish", 8),
    ("ana", "cooking", "The user bakes sourdough every Sunday", "user", "bakes",
     "sourdough every Sunday", 2),
    ("ana", "cooking", "The user's sourdough starter is called Bubbles", "user",
     "has a starter called", "Bubbles", 2),
    ("ben", "default", "The user's brother lives in Porto", "brother", "lives in", "Porto",
     0),
    ("ben", "default", "The user prefers vegetarian food", "user", "prefers",
     "vegetarian food", 2),
]


def build_demo(path: str | Path = ":memory:", *, embedder: Any = "default") -> Memory:
    """Open ``path`` (a new file, or ``":memory:"``) and fill it with the demo tenants
    ``ana`` and ``ben``; returns the open memory (the caller closes it).

    Raises:
        ValueError: ``path`` already holds a store with conversations (nothing is
            written then).
    """
    memory = Memory.open(path, embedder=embedder)
    try:
        if memory.store.counts()["turns"]:
            raise ValueError(f"{path} already holds memories; the demo needs a new store")
        for user, sessions in CHATS.items():
            for conv, start, lines in sessions:
                index = len(memory.store.session_ids(user, conv)) + 1
                memory.add([{"role": role, "content": text,
                             "timestamp": start + timedelta(minutes=2 * i)}
                            for i, (role, text) in enumerate(lines)],
                           user_id=user, conversation_id=conv, session_id=f"s{index}",
                           infer=False)
        _facts(memory)
        _runs(memory)
        _jobs(memory)
        _knowledge(memory)
    except BaseException:
        memory.close()
        raise
    return memory


def _facts(memory: Memory) -> None:
    """Each conversation's facts reconciled as extraction stores them: grounded in
    their turns (``derived_from`` edges), the later home superseding the earlier."""
    store = memory.store
    for user in CHATS:
        for conv in store.conversation_ids(user):
            turns = store.turns(user, conversation_id=conv)
            by_seq = {t.seq: t for t in turns}
            facts = []
            for fact_user, fact_conv, text, subj, pred, obj, seq in FACTS:
                if (fact_user, fact_conv) != (user, conv):
                    continue
                turn = by_seq[seq]
                facts.append(FactItem(
                    user_id=user, text=text, subject=subj, predicate=pred, object=obj,
                    speaker=turn.speaker, about=subj, conversation_id=conv,
                    session_id=turn.session_id, evidence=[turn.turn_id],
                    event_time=turn.event_time, source=SOURCE, confidence=0.9))
            reconcile_conversation(store, user, facts, [], {t.turn_id: t.id for t in turns})
    nurse = next(i for i in store.items("ana", kind="fact") if "nurse" in i.text)
    memory.update(nurse.id, "The user's sister Marta is a nurse in Coimbra", user_id="ana")


def _runs(memory: Memory) -> None:
    """An extraction run and an answer, recorded as the programs record them."""
    store = memory.store
    with Recorder(store, "ana", "ingest", task="travel",
                  config={"model": "local/qwen2.5-coder-1.5b", "chunk_turns": 10},
                  layers=["turns"]) as run:
        run.step("extract", "t0", input=["t0", "t1", "t2", "t3", "t4", "t5"],
                 output={"facts": 4}, data={"calls": 1, "seconds": 6.21}, ms=6210.0)
        run.step("extract", "t6", input=["t6", "t7", "t8", "t9"],
                 output={"facts": 2}, data={"calls": 1, "seconds": 4.87}, ms=4870.0)
        run.finish(output={"llm_calls": 2, "kept": {"facts": 6}},
                   usage={"calls": 2, "input_tokens": 1874, "output_tokens": 236,
                          "seconds": 11.08, "errors": 0})
    with Recorder(store, "ana", "qa", task="Where does the user live now?",
                  config={"model": "local/qwen2.5-coder-1.5b"}, layers=["turns", "facts"]
                  ) as run:
        run.step("retrieve", "search", input="Where does the user live now?",
                 output=["The user lives in Porto"], ms=4.2)
        run.step("llm", "QA", input="question + 3 memories", output="Porto", ms=2950.0,
                 data={"input_tokens": 612, "output_tokens": 18})
        run.finish(output={"answer": "Porto"},
                   usage={"calls": 1, "input_tokens": 612, "output_tokens": 18,
                          "seconds": 2.95, "errors": 0})


def _jobs(memory: Memory) -> None:
    """Three extraction jobs as the worker leaves them: one done with its fact events,
    one parked ``failed`` with its error, one pending."""
    jobs = memory.store.jobs
    done = jobs.enqueue("ana", "cooking", "extract")
    claimed = jobs.claim("demo", lease_s=60, user_id="ana", conversation_id="cooking")
    assert claimed is not None and claimed.id == done
    events = [{"id": i.id, "memory": i.text, "event": "ADD", "kind": "fact"}
              for i in memory.store.items("ana", kind="fact")
              if i.conversation_id == "cooking"]
    jobs.complete("ana", done, "demo", events)
    failed = jobs.enqueue("ana", "travel", "extract", max_attempts=1)
    claimed = jobs.claim("demo", lease_s=60, user_id="ana", conversation_id="travel")
    assert claimed is not None and claimed.id == failed
    jobs.fail("ana", failed, "demo", "ProgramParseError: the model's answer is not the "
              "JSON the Extractor asks for (after 3 tries)", retry_s=30)
    jobs.enqueue("ben", "default", "extract")


GUIDE = ("A sourdough starter doubles in 4 to 8 hours at 24 °C. Bulk fermentation ends when "
         "the dough has risen by half.\nHow to bake a loaf:\n"
         "1. Feed the starter the evening before\n2. Mix flour, water and 20% starter\n"
         "3. Bulk ferment for about 4 hours\n4. Shape and proof overnight in the fridge")


def _knowledge(memory: Memory) -> None:
    """Ana's document read, a strategy and a guardrail learned from traces, and the
    violation-of-expectation loop's state after a surprise (written as ``expect``
    writes it, without the model call)."""
    memory.read(GUIDE, user_id="ana", title="Sourdough basics", source="The Bread Lab",
                when="2026-04-01")
    memory.learn({"task": "When should Ana feed her starter?",
                  "trajectory": [{"tool": "mem_search", "args": {"query": "starter Bubbles"}}],
                  "answer": "The evening before baking"}, user_id="ana", success=True,
                 method="trace")
    memory.learn({"task": "Suggest a Porto restaurant for Ana",
                  "trajectory": [{"tool": "mem_search", "args": {"query": "restaurant"}}],
                  "answer": "A seafood platter at the harbour"}, user_id="ana",
                 success=False, method="trace",
                 rationale="it ignored the shellfish allergy")
    store = memory.store
    turns = store.turns("ana", conversation_id="cooking")
    surprise = next(t for t in turns if "Bubbles" in t.text)
    VoEFacts(store).add("ana", "Ana names her sourdough starter and bakes on Sundays",
                        ["baking", "routine"], surprise.id)
    store.add(WorkingItem(user_id="ana", text="Can you suggest a rye bread recipe?",
                          source=PREDICTION_SOURCE, title="next user message",
                          conversation_id="cooking", task_id="voe:cooking",
                          evidence=[turns[-1].id], tags=["rye", "recipe"]))
