"""``Memory.context``: every layer of one tenant in one budgeted block, each line with
ids that ``Memory.get`` resolves; no LLM call; nothing of another tenant."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata import Memory
from memstrata.memory.cognitive import CognitiveMemory
from memstrata.memory.models import StrategyItem
from memstrata.packers.memory_context import HEADERS, LAYERS

ANA = "ana"
QUERY = "How do I ride the tram in Lisbon?"


def _never(system: str, user: str, schema: Any) -> Any:
    raise AssertionError("context must not call the model")


@pytest.fixture
def memory(scripted: Any) -> Memory:
    m = Memory.open(":memory:", embedder=None, lm=scripted(_never))
    m.add([{"role": "user", "content": "I moved to Lisbon in May and I take the tram daily"},
           {"role": "assistant", "content": "Which tram line do you ride?"},
           {"role": "user", "content": "The tram 28, it is always full"}], user_id=ANA,
          infer=False)
    m.read("The tram 28 runs through Alfama. Lisbon trams run every ten minutes.\n"
           "How to ride the tram:\n1. Buy a Viva Viagem card\n2. Load it with zapping "
           "credit\n3. Validate it on boarding", user_id=ANA, title="Lisbon tram guide",
           source="Visit Lisboa", when="2024-03-01")
    m.store.add(StrategyItem(user_id=ANA, title="Check the tram timetable",
                             description="When a question is about Lisbon trams",
                             text="Look up the tram line's timetable before answering"))
    mind = CognitiveMemory(m.store, ANA)
    mind.prospective.intend("Tell Ana the tram 28 is on strike", keywords=["tram"])
    mind.perceive("the tram again")
    m.add("Lisbon trams are noisy", user_id="ben", infer=False)
    return m


def test_every_layer_is_packed_with_ids_that_resolve(memory: Memory) -> None:
    mark = memory.lm.meter.mark()
    ctx = memory.context(QUERY, user_id=ANA, budget=600)
    assert memory.lm.meter.since(mark).calls == 0
    assert set(ctx.layers) == {"conversation", "semantic", "procedures", "strategies",
                               "intentions"}
    for layer in ctx.layers:
        assert HEADERS[layer] in ctx.text
    assert "Validate it on boarding" in ctx.text and "DO: Check the tram timetable" in ctx.text
    assert "Reminder: Tell Ana the tram 28 is on strike" in ctx.text
    assert ctx.ids and len(ctx.ids) == len(set(ctx.ids))
    for node_id in ctx.ids:
        assert memory.get(node_id, user_id=ANA) is not None
        assert node_id in ctx.text  # every line carries its provenance
        assert ctx.sources[node_id] in LAYERS
    assert "noisy" not in ctx.text  # ben's turn


def test_what_was_read_shows_each_sentence_once(memory: Memory) -> None:
    ctx = memory.context("Which tram runs through Alfama?", user_id=ANA, budget=600)
    read = ctx.text.split(HEADERS["semantic"])[1].split("\n\n")[0]
    assert read.count("The tram 28 runs through Alfama.") == 1  # no episode repeating it
    assert "Read Lisbon tram guide" not in read


@pytest.mark.parametrize("budget", [0, 30, 60, 120, 250, 600])
def test_the_block_never_exceeds_its_budget(memory: Memory, budget: int) -> None:
    ctx = memory.context(QUERY, user_id=ANA, budget=budget)
    count = memory.lm.count_tokens
    assert ctx.tokens == (count(ctx.text) if ctx.text else 0) <= budget
    assert sum(layer.tokens for layer in ctx.layers.values()) <= budget
    if budget >= 120:
        assert ctx.ids


def test_layers_can_be_chosen_and_are_checked(memory: Memory) -> None:
    ctx = memory.context(QUERY, user_id=ANA, layers=["strategies"])
    assert list(ctx.layers) == ["strategies"] and ctx.text.startswith(HEADERS["strategies"])
    with pytest.raises(ValueError, match="no layer 'persona'"):
        memory.context(QUERY, user_id=ANA, layers=["persona"])
    with pytest.raises(ValueError, match="budget must be a whole number"):
        memory.context(QUERY, user_id=ANA, budget=2.5)  # type: ignore[arg-type]


def test_a_memory_without_a_model_counts_four_characters_a_token() -> None:
    m = Memory.open(":memory:", embedder=None)
    m.add("I keep bees on my roof in Lisbon", user_id=ANA, infer=False)
    ctx = m.context("bees", user_id=ANA, budget=40)
    assert "bees" in ctx.text and ctx.tokens <= 40
    assert m.context("bees", user_id="nobody").text == ""


def test_what_nothing_in_memory_answers_is_not_shown() -> None:
    """What was said and what was read take search's relevance cut: a query nothing here
    answers gets none of their lines (the dense channel's nearest rows filled the block
    before), a query about one thing gets no unrelated turn, and ``min_score=0`` shows
    every line found."""
    from memstrata.packers.memory_context import ContextSettings

    m = Memory.open(":memory:")  # the shipped static embedder: a dense channel
    m.add([{"role": "user", "content": "I moved to Lisbon in May"},
           {"role": "user", "content": "My sister is a nurse in Berlin"}], user_id=ANA,
          infer=False)
    m.read("Green tea is best at 80 degrees. Steep it for two minutes.", user_id=ANA,
           title="Tea notes")
    said_and_read = ["conversation", "semantic", "procedures"]
    ctx = m.context("xyzzy plugh", user_id=ANA, layers=said_and_read)
    assert (ctx.text, ctx.ids) == ("", [])
    ctx = m.context("how hot should the water be for green tea", user_id=ANA)
    assert "80 degrees" in ctx.text and "nurse" not in ctx.text and "Lisbon" not in ctx.text
    every = m.context("xyzzy plugh", user_id=ANA, layers=said_and_read,
                      settings=ContextSettings(min_score=0))
    assert "Lisbon" in every.text and "80 degrees" in every.text


def test_the_documents_read_are_shown_whole_among_their_facts_when_asked(
        memory: Memory) -> None:
    from memstrata.packers.memory_context import ContextSettings

    plain = memory.context(QUERY, user_id=ANA, layers=["semantic"])
    [document] = memory.store.kind_items(ANA, "sensory")
    assert document.id not in plain.ids  # the facts alone by default
    shown = memory.context(QUERY, user_id=ANA, layers=["semantic"],
                           settings=ContextSettings(documents_k=1))
    assert document.id in shown.ids and set(plain.ids) <= set(shown.ids)
    line = next(ln for ln in shown.text.splitlines() if ln.startswith(f"[{document.id} "))
    assert line.startswith(f"[{document.id} · Visit Lisboa · 2024-03-01] The tram 28 runs")
    assert "Validate it on boarding" in line  # the text as it was read, whole
    other = memory.context(QUERY, user_id="ben", settings=ContextSettings(documents_k=1))
    assert document.id not in other.ids
    tight = memory.context(QUERY, user_id=ANA, layers=["semantic"], budget=40,
                           settings=ContextSettings(documents_k=1))
    assert document.id not in tight.ids and tight.ids  # skipped, never cut; facts still fit
