"""Procedural memory: procedures stored, recalled with use counting, parsed from text."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memstrata.memory import Store
from memstrata.memory.cognitive.base import PROCEDURE_DERIVES_FROM
from memstrata.memory.cognitive.procedural import (
    Procedural,
    parse_prerequisites,
    parse_steps,
    procedure_text,
)
from memstrata.memory.models import EpisodicItem, ProceduralItem

PUBLISH = ["Install Quarry", "Run quarry build", "Upload the site folder"]


def test_add_stores_a_readable_searchable_procedure(store: Store) -> None:
    when = datetime(2024, 3, 1, tzinfo=UTC)
    proc = Procedural(store, "u1", clock=lambda: when)
    pid = proc.add(" Publish a site ", [*PUBLISH, "  "], prerequisites=["Python 3", ""],
                   source="tutorial")
    item = store.get("u1", pid)
    assert isinstance(item, ProceduralItem)
    assert item.title == "Publish a site"
    assert item.steps == PUBLISH and item.prerequisites == ["Python 3"]
    assert item.text == ("Publish a site:\n1. Install Quarry\n2. Run quarry build\n"
                         "3. Upload the site folder")
    assert item.text == procedure_text("Publish a site", PUBLISH)
    assert (item.usage_count, item.source, item.recorded_at) == (0, "tutorial", when)


@pytest.mark.parametrize(("name", "steps"), [("", PUBLISH), ("  ", PUBLISH),
                                             ("Publish", []), ("Publish", ["", " "])])
def test_add_rejects_an_empty_name_or_no_step(store: Store, name: str,
                                              steps: list[str]) -> None:
    with pytest.raises(ValueError):
        Procedural(store, "u1").add(name, steps)
    assert store.items("u1") == []


def test_procedure_derives_from_its_episode(store: Store) -> None:
    proc = Procedural(store, "u1")
    episode = store.add(EpisodicItem(user_id="u1", text="Read the Quarry tutorial"))
    pid = proc.add("Publish a site", PUBLISH, episode_id=episode)
    assert [(e.src, e.dst) for e in store.edges("u1", relation=PROCEDURE_DERIVES_FROM)] == [
        (pid, episode)]
    other = store.add(EpisodicItem(user_id="u2", text="Read the Quarry tutorial"))
    for bad in ("i_missing", pid, other):
        with pytest.raises(KeyError):
            proc.add("Deploy a site", ["Build it", "Push it"], episode_id=bad)
    assert len(proc.procedures()) == 1


def test_recall_counts_uses_without_new_versions(store: Store) -> None:
    proc = Procedural(store, "u1")
    pid = proc.add("Publish a site", PUBLISH)
    [first] = proc.recall("how do I publish my site?")
    [second] = proc.recall("publishing sites")
    assert (first.id, first.usage_count, second.usage_count) == (pid, 1, 2)
    assert store.get("u1", pid).usage_count == 2
    assert len(store.history("u1", pid)) == 1


def test_recall_ranks_by_match_then_usage(store: Store) -> None:
    proc = Procedural(store, "u1")
    fresh = proc.add("Deploy the site", ["Build the pages", "Copy them over"])
    used = proc.add("Deploy the app", ["Build the container", "Push it to the cluster"])
    best = proc.add("Deploy the site to the server", ["Build the site", "Push to server"])
    assert [p.id for p in proc.recall("cluster container")] == [used]
    # one token matches each: the used procedure wins the tie, whatever its age
    assert [p.id for p in proc.recall("deploy", k=1)] == [used]
    ids = [p.id for p in proc.recall("deploy", k=3)]
    assert ids[0] == used and set(ids) == {used, fresh, best}
    # the better match wins over the more used one
    assert [p.id for p in proc.recall("deploy site server", k=2)] == [best, fresh]
    assert [(p.id, p.usage_count) for p in proc.procedures()] == [
        (used, 3), (best, 2), (fresh, 2)]
    assert [p.id for p in proc.procedures(limit=1)] == [used]


def test_recall_returns_nothing_without_overlap(store: Store) -> None:
    proc = Procedural(store, "u1")
    pid = proc.add("Publish a site", PUBLISH)
    assert proc.recall("bake bread") == []
    assert proc.recall("the of and") == []
    assert proc.recall("publish", k=0) == []
    assert store.get("u1", pid).usage_count == 0


def test_tenants_never_see_each_others_procedures(store: Store) -> None:
    Procedural(store, "u2").add("Publish a site", PUBLISH)
    mine = Procedural(store, "u1")
    assert mine.recall("publish site") == [] and mine.procedures() == []
    [theirs] = Procedural(store, "u2").procedures()
    assert theirs.usage_count == 0


# -- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "name", "steps"), [
    ("Quarry is fast. To publish a site with Quarry:\n1. Install Quarry.\n"
     "2. Run quarry build\n3. Upload the site folder.\nThat is all.",
     "publish a site with Quarry", PUBLISH),
    ("How to publish a site\n\n1) Install Quarry\n2) Run quarry build\n"
     "3) Upload the site folder", "publish a site", PUBLISH),
    ("Step 1: Install Quarry\nStep 2: Run quarry build\nStep 3: Upload the site folder",
     "", PUBLISH),
    ("To publish a site: 1. Install Quarry. 2. Run quarry build. 3. Upload the site folder. "
     "Then share the link.", "publish a site", PUBLISH),
    ("Here is how to brew tea: step 1: boil water; step 2: steep for 3 minutes",
     "brew tea", ["boil water", "steep for 3 minutes"]),
    ("Intro.\n1. old list\n3. not consecutive\nMaking tea:\n1. Boil water\n2. Pour it",
     "Making tea", ["Boil water", "Pour it"]),
    # A statement before the steps is not their name: the reader names it by its title.
    ("Older guides use init; it was removed in 3.0. Step 1. Install Quarry. "
     "Step 2. Run quarry build. Step 3. Upload the site folder.", "", PUBLISH),
    ("Is it hard? 1. Install Quarry\n2. Run quarry build\n3. Upload the site folder",
     "", PUBLISH),
    ("To publish a site. 1. Install Quarry. 2. Run quarry build. 3. Upload the site folder.",
     "publish a site", PUBLISH),
])
def test_parse_steps_formats(text: str, name: str, steps: list[str]) -> None:
    assert parse_steps(text) == (name, steps)


@pytest.mark.parametrize("text", [
    "",
    "Quarry 2.0 was released in 2024 with 3 new themes.",
    "1. Only one step here",
    "2. Starts at two\n3. then three",
    "We won 1. Then we lost 3. Then 2.",
])
def test_parse_steps_finds_no_procedure(text: str) -> None:
    assert parse_steps(text) is None


def test_parse_prerequisites() -> None:
    text = ("Before you start, install Python 3. You need a GitHub account!\n"
            "Requires git 2.40 or later. Quarry is fast. Prerequisite: a terminal.")
    assert parse_prerequisites(text) == [
        "Before you start, install Python 3", "You need a GitHub account!",
        "Requires git 2.40 or later", "Prerequisite: a terminal"]
    assert parse_prerequisites("Quarry is fast. Install it.") == []
