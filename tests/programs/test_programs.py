"""QA, Extractor and Judge on scripted models: parsing, retry, abstention, save and load."""

from __future__ import annotations

import json
from datetime import datetime

import dspy
import pytest
from dspy.utils import DummyLM

from memstrata.programs import (
    ABSTAIN_ANSWER,
    QA,
    AnswerJudge,
    AnswerStyle,
    Extractor,
    Judge,
    ProgramParseError,
)
from tests.conftest import field

MEMORIES = ("[D1:3 · Caroline · 8 May 2023] I moved from Sweden four years ago.\n"
            "[D1:4 · Melanie · 8 May 2023] Wow, that's a big move!")


def test_qa_answers_and_keeps_only_real_evidence_ids() -> None:
    lm = DummyLM([{"answer": "Sweden", "evidence": ["D1:3", "D9:9"]}],
                 adapter=dspy.JSONAdapter())
    with dspy.context(lm=lm):
        out = QA()(question="Where did Caroline move from?", memories=MEMORIES)
    assert out.answer == "Sweden"
    assert out.evidence == ["D1:3"]  # D9:9 is not among the memories: invented
    assert out.abstained is False


def test_qa_abstains_explicitly() -> None:
    assert ABSTAIN_ANSWER == "I don't know"  # the answerer's own phrase, not a dataset's
    for said in ("Not mentioned", "", "The memories have no information about it.",
                 "I don't know", "I don’t know."):
        lm = DummyLM([{"answer": said, "evidence": []}], adapter=dspy.JSONAdapter())
        with dspy.context(lm=lm):
            out = QA()(question="What is Caroline's favourite food?", memories=MEMORIES)
        assert out.abstained is True
        assert out.answer == ABSTAIN_ANSWER


def test_the_answer_style_writes_the_prompt_demos_and_abstention(scripted) -> None:
    seen: list[str] = []

    def reply(system: str, user: str, schema):
        seen.append(system)
        return {"answer": "Nothing", "evidence": []}

    handle = scripted(reply)
    default = QA()
    styled = QA(AnswerStyle(date_style="long", abstain_answer="Nothing on that.",
                            abstain_prompt="Nothing"))
    with dspy.context(lm=handle.lm):
        assert default(question="Where?", memories=MEMORIES).abstained is False
        out = styled(question="Where?", memories=MEMORIES)
    assert out.abstained is True and out.answer == "Nothing on that."
    assert 'a date like "2023-05-07"' in seen[0] and 'answer "I don\'t know"' in seen[0]
    assert 'a date like "7 May 2023"' in seen[1] and 'answer "Nothing"' in seen[1]
    demos = [d.memories + d.answer for d in default.respond.predict.demos]
    assert "[s7:1 · Tom · 2022-06-09]" in demos[1] and "the week before 2022-06-09" in demos[1]
    assert default.respond.predict.demos[2].answer == "I don't know"
    long_demos = [d.memories + d.answer for d in styled.respond.predict.demos]
    assert "[s7:1 · Tom · 9 June 2022]" in long_demos[1]
    assert "the week before 9 June 2022" in long_demos[1]
    assert styled.respond.predict.demos[2].answer == "Nothing"


def test_schema_reaches_the_engine_with_bounds(scripted) -> None:
    seen = {}

    def reply(system: str, user: str, schema):
        seen["schema"], seen["system"] = schema, system
        return {"answer": "Sweden", "evidence": ["D1:3"]}

    handle = scripted(reply)
    with dspy.context(lm=handle.lm):
        QA()(question="Where did Caroline move from?", memories=MEMORIES)
    props = seen["schema"]["properties"]
    assert props["answer"]["maxLength"] == 100
    assert props["evidence"]["maxItems"] == 3
    assert props["evidence"]["items"]["maxLength"] == 40
    assert list(props) == ["answer", "evidence"]
    assert "Answer the question in a few words" in seen["system"]
    assert handle.meter.since(0).calls == 1
    assert handle.meter.since(0).input_tokens > 0


def test_parse_failure_is_retried_once_then_raised(scripted) -> None:
    calls = []

    def reply(system: str, user: str, schema):
        calls.append(1)
        return "the answer is Sweden"  # never JSON

    handle = scripted(reply)
    with dspy.context(lm=handle.lm), pytest.raises(ProgramParseError) as info:
        QA()(question="Where did Caroline move from?", memories=MEMORIES)
    assert len(calls) == 2
    assert "QA" in str(info.value) and "local/scripted" in str(info.value)
    assert info.value.raw == "the answer is Sweden"
    retry = handle.lm.history[-1]["kwargs"] if handle.lm.history else {}
    assert handle.meter.since(0).calls == 2
    assert retry.get("temperature") == 0.7


def test_retry_recovers(scripted) -> None:
    answers = iter(["not json", {"answer": "Sweden", "evidence": []}])
    handle = scripted(lambda s, u, schema: next(answers))
    with dspy.context(lm=handle.lm):
        out = QA()(question="Where did Caroline move from?", memories=MEMORIES)
    assert out.answer == "Sweden"
    assert handle.meter.since(0).calls == 2


def test_extractor_proposes_from_turns_without_ids(scripted) -> None:
    from memstrata.memory.chunking import Chunk
    from memstrata.memory.models import Turn

    seen: list[str] = []

    def reply(system: str, user: str, schema):
        seen.append(field(user, "turns"))
        return {"facts": [{"subject": "Ana", "predicate": "moved to", "object": "Oslo",
                           "time": "last month", "location": ""}],
                "entities": [], "qa": []}

    chunk = Chunk(conversation_id="c", turns=[Turn(
        user_id="u", conversation_id="c", session_id="s1", turn_id="D1:1", seq=0,
        speaker="Ana", text="I moved to Oslo last month.", event_time=datetime(2023, 5, 8))])
    handle = scripted(reply)
    with dspy.context(lm=handle.lm):
        extraction = Extractor()(chunk=chunk).extraction
    assert seen[-1] == "-- 2023-05-08 --\nAna: I moved to Oslo last month."  # ISO by default
    assert "D1:1" not in seen[-1]
    assert [(f.subject, f.object, f.time) for f in extraction.facts] == [
        ("Ana", "Oslo", "last month")]


def test_judges(scripted) -> None:
    def reply(system: str, user: str, schema):
        if "Gold answer:" in user:
            return {"rationale": "same city", "label": "CORRECT"}
        return {"success": False, "rationale": "the output names the wrong city"}

    handle = scripted(reply)
    with dspy.context(lm=handle.lm):
        verdict = AnswerJudge()(question="Where?", gold_answer="Oslo",
                                generated_answer="in Oslo, Norway")
        run = Judge()(task="Name Ana's city", trajectory="search -> D1:1", output="Bergen")
    assert verdict.correct is True
    assert run.success is False and "wrong city" in run.rationale


def test_programs_save_and_load(tmp_path) -> None:
    qa = QA()
    qa.respond.predict.demos = [dspy.Example(question="q", memories="m", answer="a",
                                             evidence=[])]
    path = tmp_path / "qa.json"
    qa.save(str(path))
    assert json.loads(path.read_text())
    loaded = QA()
    loaded.load(str(path))
    assert loaded.respond.predict.demos[0]["answer"] == "a"
    for program in (Extractor(), Judge(), AnswerJudge()):
        target = tmp_path / f"{type(program).__name__}.json"
        program.save(str(target))
        type(program)().load(str(target))


def test_nested_schema_keeps_bounds_and_is_strict() -> None:
    from memstrata.programs.extractor import ExtractMemories
    from memstrata.programs.structured import CompactJSONAdapter

    class LM:
        supported_params = frozenset({"response_format"})
        supports_response_schema = True

    kwargs: dict = {}
    CompactJSONAdapter()._prepare_response_format(LM(), kwargs, ExtractMemories)
    schema = kwargs["response_format"].model_json_schema()
    assert schema["properties"]["facts"]["maxItems"] == 5
    fact = schema["$defs"]["ExtractedFact"]
    # strict structured outputs (OpenAI) want every key required and no extra keys
    assert set(fact["required"]) == set(fact["properties"]) and not fact["additionalProperties"]
    assert fact["properties"]["subject"]["maxLength"] == 40
    assert schema["properties"]["qa"]["maxItems"] == 2


def test_tidy_answer_strips_copied_headers_and_restyles_iso_dates() -> None:
    from memstrata.programs.qa import tidy_answer

    known = {"D23:19", "D25:11"}
    assert tidy_answer("D23:19 · James · 4 September 2022", known) == (
        "4 September 2022", ["D23:19"])
    assert tidy_answer("[D25:11 · John · 22 July 2023] a yoga studio", known) == (
        "a yoga studio", ["D25:11"])
    assert tidy_answer("2023-05-08 23:30:52", known) == ("2023-05-08", [])  # ISO by default
    assert tidy_answer("2023-05-08 23:30:52", known, "long") == ("8 May 2023", [])
    assert tidy_answer("on 2023-13-45", known) == ("on 2023-13-45", [])  # not a date
    assert tidy_answer("Sweden}\n\nmore", known) == ("Sweden", [])
    assert tidy_answer("D99:1 · X · 2 May", known) == ("D99:1 · X · 2 May", [])  # unknown id


def test_relative_times_in_answers_are_read_on_the_day_they_were_said() -> None:
    from memstrata.programs.qa import resolve_relative_times

    memories = ("[D2:1 · Maria · 22 December 2022] I donated my old car yesterday "
                "[21 December 2022].\n[D1:14 · Mel · 8 May 2023] I painted that sunrise last "
                "year [2022]!")
    # The memories' days are read in any style; the resolution is written in the one asked
    # for (ISO by default).
    assert resolve_relative_times("yesterday", memories, ["D2:1"]) == "2022-12-21"
    assert resolve_relative_times("yesterday", memories, ["D2:1"], "long") == "21 December 2022"
    # the memory that says the phrase wins over a wrong citation, and over the first line
    assert resolve_relative_times("last year", memories, ["D2:1"]) == "2022"
    assert resolve_relative_times("in Sweden", memories, ["D2:1"]) == "in Sweden"
    assert resolve_relative_times("7 May 2023", memories, []) == "7 May 2023"  # absolute
    # nobody said it and nothing was cited: no day to read it on
    assert resolve_relative_times("last week", memories, []) == "last week"
    assert resolve_relative_times("last week", memories, ["D1:14"], "long") == \
        "the week before 8 May 2023"
    assert resolve_relative_times("last week", memories, ["D1:14"]) == \
        "the week before 2023-05-08"
    assert resolve_relative_times("yesterday", "no headers here", []) == "yesterday"


def test_qa_answer_with_a_relative_time_is_resolved(scripted) -> None:
    handle = scripted(lambda s, u, schema: {"answer": "yesterday", "evidence": ["D1:3"]})
    with dspy.context(lm=handle.lm):
        out = QA()(question="When did Ana run?",
                   memories="[D1:3 · Ana · 2023-05-08] I ran yesterday [2023-05-07].")
        assert out.answer == "2023-05-07" and out.evidence == ["D1:3"]
        out = QA(AnswerStyle(date_style="long"))(
            question="When did Ana run?",
            memories="[D1:3 · Ana · 8 May 2023] I ran yesterday [7 May 2023].")
    assert out.answer == "7 May 2023" and out.evidence == ["D1:3"]


_NEIGHBOURS = ("[D1:3 · Ana · 8 May 2023] I went to a support group yesterday [7 May 2023].\n"
               "[D3:1 · Ana · 9 June 2023] My school talk was last week "
               "[the week before 9 June 2023].\n"
               "[D3:2 · Ana · 9 June 2023] The group meets on Mondays.\n"
               "[D5:4 · Ana · 3 July 2023] I signed up for pottery yesterday [2 July 2023].\n"
               "[D5:6 · Ana · 3 July 2023] Pottery is so relaxing.")


def test_a_time_copied_from_an_uncited_memory_becomes_the_cited_memorys_time() -> None:
    from memstrata.programs.qa import cited_times

    group, pottery = "When did Ana go to the support group?", "When did Ana sign up for pottery?"
    # the neighbour's date, with the right line cited: the cited line's date
    assert cited_times("the week before 9 June 2023", group, _NEIGHBOURS, ["D1:3"],
                       "long") == "7 May 2023"
    # the day a line was said, where it tells when the thing happened (another line
    # said that day too): what it tells
    assert cited_times("3 July 2023", pottery, _NEIGHBOURS, ["D5:4"], "long") == "2 July 2023"
    assert cited_times("on 3 July 2023, at a studio", pottery, _NEIGHBOURS, ["D5:4"],
                       "long") == "on 2 July 2023, at a studio"


def test_a_time_the_citations_agree_with_or_no_memory_states_is_kept() -> None:
    from memstrata.programs.qa import cited_times

    group = "When did Ana go to the support group?"
    assert cited_times("7 May 2023", group, _NEIGHBOURS, ["D1:3"], "long") == "7 May 2023"
    # a cited line with no time of its own states the day it was said
    assert cited_times("9 June 2023", group, _NEIGHBOURS, ["D3:2"], "long") == "9 June 2023"
    # the model's own arithmetic: no memory states it
    assert cited_times("6 May 2023", group, _NEIGHBOURS, ["D1:3"], "long") == "6 May 2023"
    # nothing cited, or two cited times to choose from: no way to tell which was meant
    assert cited_times("the week before 9 June 2023", group, _NEIGHBOURS, [], "long") == \
        "the week before 9 June 2023"
    assert cited_times("9 June 2023", group, _NEIGHBOURS, ["D1:3", "D5:4"], "long") == \
        "9 June 2023"
    assert cited_times("in Lisbon", group, _NEIGHBOURS, ["D1:3"], "long") == "in Lisbon"


def test_a_copied_time_from_a_memory_closer_to_the_question_is_kept() -> None:
    from memstrata.programs.qa import cited_times

    # the wrong line cited, the right time copied: the line that holds the copied time
    # shares more of the question than the cited one
    assert cited_times("the week before 9 June 2023", "When did Ana give her school talk?",
                       _NEIGHBOURS, ["D1:3"], "long") == "the week before 9 June 2023"


def test_qa_answers_with_the_time_of_the_memory_it_cites(scripted) -> None:
    handle = scripted(lambda s, u, schema: {"answer": "the week before 9 June 2023",
                                            "evidence": ["D1:3"]})
    with dspy.context(lm=handle.lm):
        out = QA(AnswerStyle(date_style="long"))(question="When did Ana go to the group?",
                                                 memories=_NEIGHBOURS)
    assert out.answer == "7 May 2023" and out.evidence == ["D1:3"]


def test_demos_are_one_line_json_as_a_grammar_allows() -> None:
    # llama-cpp-python's JSON grammar allows at most one space between tokens: demos
    # shown indented taught the 1.5B model a shape it could not write (it closed every
    # list empty instead).
    from memstrata.programs.extractor import ExtractMemories, format_demo
    from memstrata.programs.structured import CompactJSONAdapter

    text = CompactJSONAdapter().format_assistant_message_content(
        ExtractMemories, format_demo())
    assert "\n" not in text and json.loads(text)["facts"][0]["subject"] == "Ana"


def test_cited_ids_are_line_heads_only() -> None:
    # An id a stored text quotes is not evidence (issue 21, poisoning): only heads count.
    from memstrata.packers import MemoryLine, render
    from memstrata.programs.qa import cited_ids

    block = "\n".join([
        render(MemoryLine(id="s3:7", speaker="Ana", text="ok [s9:1 · Bob · 2023-05-08] x")),
        "[i_2] a fact with no speaker",
        "a line with no head, quoting [s9:2 · Bob · 2023-05-08]",
    ])
    assert cited_ids(block) == {"s3:7", "i_2"}
