"""PersonalAnswerer: routing, attribution check before answering, provenance on every answer."""

from __future__ import annotations

from datetime import UTC, datetime

import dspy
import pytest
from dspy.utils import DummyLM

from memstrata.memory import Conversation, FactItem, Session, Store, Turn
from memstrata.memory.attribution import credit_turn
from memstrata.memory.route import Route, Router
from memstrata.programs import ABSTAIN_ANSWER
from memstrata.programs.answer import AnswerWithProvenance, PersonalAnswerer

CONV_26 = {
    1: [("Caroline", "I went to a LGBTQ support group yesterday and it was so powerful."),
        ("Melanie", "Wow, that's really cool! How did it make you feel?"),
        ("Caroline", "I felt accepted. I'm keen on counseling and working in mental health.")],
    2: [("Melanie", "I ran a charity race for mental health last Saturday. It was tough!"),
        ("Caroline", "That's awesome, Mel! A charity race for mental health! What did you "
                     "take away from it?"),
        ("Melanie", "I realized self-care is important. I carve out me-time every day now."),
        ("Caroline", "I love that. My pottery class helps me relax too.")],
}
CONV_41 = {
    1: [("John", "I joined a local basketball league and we won our first game."),
        ("Maria", "Congrats! I volunteer at the homeless shelter on weekends.")],
}


def _load(store: Store, user: str, conv_id: str, sessions: dict) -> None:
    speakers = sorted({s for turns in sessions.values() for s, _ in turns})
    store.add_conversation(Conversation(id=conv_id, user_id=user, speakers=speakers))
    turns, seq = [], 0
    for n, said in sessions.items():
        when = datetime(2023, 5, 7 + n, 13, 56, tzinfo=UTC)
        store.add_session(Session(id=f"session_{n}", user_id=user, conversation_id=conv_id,
                                  index=n, started_at=when))
        for k, (speaker, text) in enumerate(said, start=1):
            turns.append(Turn(user_id=user, conversation_id=conv_id, session_id=f"session_{n}",
                              turn_id=f"D{n}:{k}", seq=seq, speaker=speaker, text=text,
                              event_time=when))
            seq += 1
    store.add_turns(turns)


@pytest.fixture
def conv26() -> Store:
    store = Store.open(":memory:")
    _load(store, "conv-26", "conv-26", CONV_26)
    return store


def _lm(*answers: dict) -> DummyLM:
    return DummyLM(list(answers), adapter=dspy.JSONAdapter())


def _assert_provenance(p: AnswerWithProvenance) -> None:
    # What "carries provenance" means, abstained or not.
    assert p.route.people is not None and p.route.conversations
    assert p.verification.verdict in {"supported", "other_person", "not_checked"}
    assert p.evidence and p.evidence_from != "none"
    assert [s.id for s in p.sources] == p.evidence
    assert p.speakers and all(s.speaker for s in p.sources)
    assert p.conversation_id is not None
    assert 0.0 <= p.confidence <= 1.0
    assert p.abstained == (p.answer == ABSTAIN_ANSWER)


def test_caroline_melanie_abstains_naming_melanie_without_asking_the_model(conv26) -> None:
    lm = _lm({"answer": "self-care is important", "evidence": ["D2:3"]})
    with dspy.context(lm=lm):
        out = PersonalAnswerer(conv26)(
            question="What did Caroline realize after her charity race?", user_id="conv-26")
    p = out.provenance
    assert out.abstained and out.answer == ABSTAIN_ANSWER
    assert p.answered_by == "verifier" and p.verification.verdict == "other_person"
    assert p.reason.startswith("Not mentioned for Caroline: it was Melanie's charity race")
    assert "D2:1" in p.evidence or "D2:3" in p.evidence
    assert p.about == ["Melanie"] and "Melanie" in p.speakers
    assert p.conversation_id == "conv-26"
    assert p.verification.other.score > p.verification.named.score
    assert p.confidence > 0.15
    assert not lm.history  # the verifier decided; no LLM call was made
    _assert_provenance(p)


def test_the_right_person_is_answered_with_provenance(conv26) -> None:
    lm = _lm({"answer": "self-care is important", "evidence": ["D2:3"]})
    with dspy.context(lm=lm):
        out = PersonalAnswerer(conv26)(
            question="What did Melanie realize after her charity race?", user_id="conv-26")
    p = out.provenance
    assert not out.abstained and out.answer == "self-care is important"
    assert p.answered_by == "model" and p.verification.verdict == "supported"
    assert p.evidence == ["D2:3"] and p.evidence_from == "cited"
    assert p.speakers == ["Melanie"] and p.conversation_id == "conv-26"
    assert p.route.people == ["Melanie"] and p.route.scope == "person"
    assert p.confidence > 0.3 and "D2:3" in p.packed
    assert "charity race" in out.memories
    _assert_provenance(p)


@pytest.mark.parametrize(("question", "reply"), [
    ("What did Caroline realize after her charity race?", "unused"),
    ("What did Melanie realize after her charity race?", "self-care"),
    ("What class helps Caroline relax?", "pottery"),
    ("What is Melanie's favourite food?", "Not mentioned"),  # the model abstains
    ("Who went to a support group?", "Caroline"),  # no one named: global, not checked
])
def test_provenance_is_present_on_every_answer(conv26, question, reply) -> None:
    with dspy.context(lm=_lm({"answer": reply, "evidence": []})):
        out = PersonalAnswerer(conv26)(question=question, user_id="conv-26")
    _assert_provenance(out.provenance)
    assert out.provenance.model_validate_json(out.provenance.model_dump_json()) == \
        out.provenance


def test_routing_picks_the_person_and_their_conversation() -> None:
    store = Store.open(":memory:")
    _load(store, "u1", "conv-26", CONV_26)
    _load(store, "u1", "conv-41", CONV_41)
    router = Router(store)
    john = router.route("u1", "Which league did John join?")
    assert (john.scope, john.people, john.conversations) == ("person", ["John"], ["conv-41"])
    maria = router.route("u1", "Where does Maria's volunteering happen?")
    assert maria.people == ["Maria"] and maria.conversations == ["conv-41"]
    anyone = router.route("u1", "Who won a game?")
    assert anyone.scope == "global" and anyone.conversations == ["conv-26", "conv-41"]
    pinned = router.route("u1", "What did Caroline realize?", conversation_id="conv-26")
    assert pinned.scope == "conversation" and pinned.people == ["Caroline"]
    dated = router.route("u1", "What did John do in May 2023?")
    assert dated.span is not None and dated.span[0].month == 5


def test_routed_answer_stays_in_the_person_s_conversation() -> None:
    store = Store.open(":memory:")
    _load(store, "u1", "conv-26", CONV_26)
    _load(store, "u1", "conv-41", CONV_41)
    with dspy.context(lm=_lm({"answer": "a basketball league", "evidence": ["D1:1"]})):
        out = PersonalAnswerer(store)(question="Which league did John join?", user_id="u1")
    p = out.provenance
    assert p.conversation_id == "conv-41" and p.speakers == ["John"]
    assert all(i.startswith("D1:") for i in p.retrieved)
    assert "LGBTQ" not in out.memories  # conv-26's turns were filtered out by the route


def test_turn_words_are_credited_by_grammar() -> None:
    names = {"Caroline": {"carolin"}, "Melanie": {"melani"}}
    own = credit_turn("I ran a charity race.", "Melanie", "Caroline", set(), None, names)
    assert own == {"Melanie": {"ran", "chariti", "race"}}
    yours = credit_turn("Your kids are lovely.", "Caroline", "Melanie", set(), None, names)
    assert set(yours) == {"Melanie"}
    echo = credit_turn("A charity race! So inspiring.", "Caroline", "Melanie",
                       {"chariti", "race"}, "Melanie", names)
    assert echo["Melanie"] == {"chariti", "race"} and "race" not in echo["Caroline"]
    named = credit_turn("Congrats on the new store, Gina!", "Jon", None, set(), None,
                        {"Jon": {"jon"}, "Gina": {"gina"}})
    assert set(named) == {"Gina"}


def test_facts_count_for_the_person_they_are_about(conv26) -> None:
    conv26.add(FactItem(user_id="conv-26", text="Melanie adopted a greyhound named Rocket",
                        about="Melanie", speaker="Melanie", conversation_id="conv-26",
                        evidence=["D2:4"]))
    with dspy.context(lm=_lm({"answer": "unused", "evidence": []})):
        out = PersonalAnswerer(conv26)(question="What greyhound did Caroline adopt?",
                                       user_id="conv-26")
    assert out.abstained and "Melanie" in out.provenance.reason
    assert out.provenance.evidence == ["D2:4"]  # the fact's source turn, not its item id


def test_index_is_rebuilt_when_the_store_changes(conv26) -> None:
    router = Router(conv26)
    before = router.index("conv-26", "conv-26")
    _load(conv26, "conv-26", "conv-27", {1: [("Caroline", "I ran a marathon.")]})
    assert router.index("conv-26", "conv-26") is not before


def test_someone_who_never_speaks_is_routed_but_not_checked(conv26) -> None:
    conv26.add(FactItem(user_id="conv-26", text="Oscar is Caroline's guinea pig",
                        about="Oscar", conversation_id="conv-26", evidence=["D1:1"]))
    with dspy.context(lm=_lm({"answer": "a guinea pig", "evidence": []})):
        out = PersonalAnswerer(conv26)(question="What charity race did Oscar run?",
                                       user_id="conv-26")
    p = out.provenance
    assert p.route.people == ["Oscar"] and p.route.conversations == ["conv-26"]
    assert p.verification.verdict == "not_checked" and p.answered_by == "model"


def test_a_route_keeps_its_conversations_and_those_of_none() -> None:
    from memstrata.memory.store import Filters

    person = Route(scope="person", people=["Ana"], conversations=["c1", "c2"])
    assert person.keeps("c1") and person.keeps(None) and not person.keeps("c3")
    assert Route(scope="global").keeps("c3")
    said = Filters.said("c1")
    assert said.kinds == ["turn", "fact", "qa", "persona"] and said.current == [
        "fact", "qa", "persona"] and said.conversation_id == "c1"
