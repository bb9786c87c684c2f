"""Grounding an extractor's proposals: evidence, who said it vs whom it is about, time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memstrata.memory.chunking import Chunk
from memstrata.memory.facts import (
    ExtractedEntity,
    ExtractedFact,
    ExtractedQA,
    Extraction,
    ground,
    resolve_person,
)
from memstrata.memory.models import Turn

MAY8 = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
PEOPLE = ["Caroline", "Melanie"]


def chunk(*lines: tuple[str, str]) -> Chunk:
    return Chunk(conversation_id="conv-x", turns=[
        Turn(user_id="u", conversation_id="conv-x", session_id="session_2",
             turn_id=f"D2:{i}", seq=i, speaker=who, text=text, event_time=MAY8)
        for i, (who, text) in enumerate(lines, start=1)])


DIALOGUE = chunk(
    ("Melanie", "I ran a charity race for mental health last Saturday."),
    ("Caroline", "That's great! Your kids must be proud of you."),
    ("Melanie", "They are. I realized self-care is really important."),
    ("Caroline", "I went to an LGBTQ support group yesterday, it was powerful."),
)


def fact(subject: str, predicate: str, obj: str, **kw) -> ExtractedFact:
    return ExtractedFact(subject=subject, predicate=predicate, object=obj, **kw)


def test_speaker_is_who_said_it_and_about_is_whom_it_concerns() -> None:
    out = ground(Extraction(facts=[
        fact("I", "ran", "a charity race for mental health"),
        # the model says Caroline said it: the turn says Melanie did
        fact("Melanie", "realized", "self-care is important"),
        # said by Caroline, about Melanie's kids
        fact("you", "kids must be", "proud"),
    ]), DIALOGUE, PEOPLE, "u", "test")
    race, realised, proud = out.facts
    assert (race.speaker, race.about, race.subject) == ("Melanie", "Melanie", "Melanie")
    assert race.text.startswith("Melanie ran a charity race")
    assert (realised.speaker, realised.about) == ("Melanie", "Melanie")
    assert (proud.speaker, proud.about) == ("Caroline", "Melanie")
    assert [f.evidence for f in out.facts] == [["D2:1"], ["D2:3"], ["D2:2"]]


def test_times_resolve_against_the_session_date() -> None:
    out = ground(Extraction(facts=[
        fact("Caroline", "went to", "an LGBTQ support group", time="yesterday"),
        fact("Melanie", "ran", "a charity race"),  # no time given: read off the turn
    ]), DIALOGUE, PEOPLE, "u", "test")
    group, race = out.facts
    assert (group.event_time.date(), group.granularity) == (datetime(2023, 5, 7).date(), "day")
    assert "(2023-05-07)" in group.text  # ISO by default
    long = ground(Extraction(facts=[fact("Caroline", "went to", "an LGBTQ support group",
                                         time="yesterday")]), DIALOGUE, PEOPLE, "u", "test",
                  date_style="long")
    assert "(7 May 2023)" in long.facts[0].text
    assert race.event_time.date() == datetime(2023, 5, 6).date()  # last Saturday
    assert race.time_text == "last Saturday"
    vague = ground(Extraction(facts=[
        fact("Caroline", "will visit", "her grandma in Sweden", time="one of these days")]),
        chunk(("Caroline", "I will visit my grandma in Sweden one of these days.")),
        PEOPLE, "u", "test")
    [visit] = vague.facts
    assert visit.granularity is None and visit.time_text == "one of these days"
    assert visit.event_time == MAY8 and vague.unresolved_times == 1


@pytest.mark.parametrize("bad,reason", [
    (fact("D2:1", "D2:2", "D2:3"), "id as value"),
    (fact("Melanie", "", "x"), "empty"),
    (fact("Melanie", "owns", "a purple spaceship factory"), "unsupported"),
    (fact("Caroline", "loves", "loves"), "repeated value"),
    (fact("Caroline", "is", "great"), "unsupported"),  # one content word supports nothing
])
def test_junk_is_rejected_and_counted(bad: ExtractedFact, reason: str) -> None:
    out = ground(Extraction(facts=[bad]), DIALOGUE, PEOPLE, "u", "test")
    assert out.facts == [] and out.rejected == {reason: 1}


def test_evidence_is_the_turn_that_states_it() -> None:
    out = ground(Extraction(facts=[fact("Caroline", "went to", "an LGBTQ support group")]),
                 DIALOGUE, PEOPLE, "u", "test")
    assert out.facts[0].evidence == ["D2:4"]


def test_the_extractor_sees_no_turn_ids() -> None:
    from memstrata.memory.facts import chunk_text

    assert chunk_text(DIALOGUE).splitlines()[:2] == [
        "-- 2023-05-08 --", "Melanie: I ran a charity race for mental health last Saturday."]
    assert chunk_text(DIALOGUE, "long").splitlines()[0] == "-- 8 May 2023 --"


def test_qa_pairs_and_entities_are_grounded() -> None:
    out = ground(Extraction(
        qa=[ExtractedQA(question="What did Melanie realize?", answer="self-care is important"),
            ExtractedQA(question="What car does Tom drive?", answer="a red tesla")],
        entities=[ExtractedEntity(name="Melanie", role="runner"),
                  ExtractedEntity(name="Zorblax", state="unknown")],
    ), DIALOGUE, PEOPLE, "u", "test")
    assert [(q.about, q.evidence) for q in out.qa] == [("Melanie", ["D2:3"])]
    assert [(e.name, e.roles) for e in out.entities] == [("Melanie", ["runner"])]
    assert out.rejected == {"qa unsupported": 1, "entity not in turns": 1}


@pytest.mark.parametrize("name,speaker,expected", [
    ("I", "Ana", "Ana"), ("my", "Ana", "Ana"), ("", "Ana", "Ana"), ("you", "Ana", "Tom"),
    ("Tom", "Ana", "Tom"), ("Thom", "Ana", "Tom"), ("tom's sister", "Ana", "Tom"),
    ("Her brother", "Ana", "Her brother"),
])
def test_resolve_person(name: str, speaker: str, expected: str) -> None:
    assert resolve_person(name, speaker, ["Ana", "Tom"]) == expected


def test_a_time_or_place_the_turn_does_not_say_is_cleared_not_trusted() -> None:
    # Small models copy a worked example's "yesterday" or "Lyon" into every fact.
    out = ground(Extraction(facts=[
        fact("Melanie", "ran", "a charity race for mental health", time="yesterday",
             location="Lyon"),
        fact("Caroline", "went to", "an LGBTQ support group", time="yesterday"),
    ]), DIALOGUE, PEOPLE, "u", "test")
    race, group = out.facts
    assert race.location is None and "Lyon" not in race.text
    assert race.time_text == "last Saturday"  # the turn's own time phrase instead
    assert race.event_time.date() == datetime(2023, 5, 6).date()
    assert group.time_text == "yesterday" and "(2023-05-07)" in group.text
    assert out.cleared == {"time not in turn": 1, "location not in turn": 1}
    assert not out.rejected  # both facts are kept
