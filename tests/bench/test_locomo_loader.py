"""LoCoMo reader and loader: every data quirk, malformed files, and the audit overlay."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from memstrata.bench.locomo import (
    LoCoMoError,
    apply_audit,
    load_locomo,
    parse_evidence,
    parse_session_date,
    read_locomo,
)
from memstrata.memory import Retriever, Store

QA = [
    {"question": "What pet did Alice adopt?", "answer": "a guinea pig", "evidence": ["D1:1"],
     "category": 4},
    {"question": "What did Bob start and where did he hike?", "answer": "violin; the Alps",
     "evidence": ["D1:2; D2:1"], "category": 1},
    {"question": "Where did Alice travel?", "answer": "Sweden", "evidence": ["D:2:2"],
     "category": 4},
    {"question": "Which ids are missing?", "answer": 7, "evidence": ["D1:1", "D9:99", "D1:3"],
     "category": 2},
    {"question": "Would Alice like Sweden?", "answer": "Likely yes", "evidence": [],
     "category": 3},
    {"question": "What pet did Bob adopt?", "adversarial_answer": "a guinea pig",
     "evidence": ["D1:1"], "category": 5},
    {"question": "A question with evidence as a bare string", "answer": "x",
     "evidence": "D2:1", "category": "4"},
]


@pytest.fixture
def quirky(make_record, write_json):
    return write_json("quirky.json", [make_record("conv-a", qa=QA)])


def test_parse_evidence_normalises_all_quirks() -> None:
    assert parse_evidence(["D8:6; D9:17"]) == ["D8:6", "D9:17"]
    assert parse_evidence(["D:11:26"]) == ["D11:26"]
    assert parse_evidence(["D 3 : 07", "D3:7", "d3:7"]) == ["D3:7"]
    assert parse_evidence(["D1:3,D1:4", "D1:3"]) == ["D1:3", "D1:4"]
    assert parse_evidence([]) == []
    assert parse_evidence(["", "none", None, 12]) == []


def test_parse_session_date_formats() -> None:
    expected = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parse_session_date("1:56 pm on 8 May, 2023") == expected
    assert parse_session_date("1:56  pm on 8 May,   2023") == expected
    assert parse_session_date("1:56 pm on 8 Sep, 2023").month == 9
    assert parse_session_date("10:04 am on May 8, 2023") == datetime(2023, 5, 8, 10, 4, tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_session_date("sometime in spring")


def test_read_locomo_handles_every_evidence_quirk(quirky) -> None:
    [conv] = read_locomo(quirky)
    assert conv.sample_id == "conv-a"
    assert conv.speakers == ["Alice", "Bob"]
    assert conv.turn_count == 5
    assert conv.turn_ids == {"D1:1", "D1:2", "D1:3", "D2:1", "D2:2"}
    q = conv.questions
    assert [x.index for x in q] == list(range(len(QA)))
    assert q[0].evidence == ["D1:1"] and q[0].unknown_evidence == []
    assert q[1].evidence == ["D1:2", "D2:1"]
    assert q[1].evidence_raw == ["D1:2; D2:1"]
    assert q[2].evidence == ["D2:2"]
    assert q[2].evidence_raw == ["D:2:2"]
    assert q[3].evidence == ["D1:1", "D1:3"]
    assert q[3].unknown_evidence == ["D9:99"]
    assert q[3].answer == "7"
    assert q[4].evidence == [] and q[4].unknown_evidence == [] and q[4].category == 3
    assert q[5].category == 5
    assert q[5].answer is None
    assert q[5].adversarial_answer == "a guinea pig"
    assert q[6].evidence == ["D2:1"] and q[6].category == 4
    assert q[0].qid == "conv-a#0"


def test_sessions_sort_numerically_and_dates_parse(make_record, write_json) -> None:
    sessions = {
        10: [{"speaker": "Alice", "dia_id": "D10:1", "text": "tenth"}],
        2: [{"speaker": "Bob", "dia_id": "D2:1", "text": "second"}],
        1: [{"speaker": "Alice", "dia_id": "D1:1", "text": "first"}],
    }
    dates = {10: "9:00 am on 1 June, 2023", 2: "9:00 am on 2 May, 2023"}  # session 1 has none
    path = write_json("order.json", make_record("conv-o", sessions=sessions, dates=dates))
    [conv] = read_locomo(path)  # a single object, not a list, is accepted too
    assert [idx for idx, _, _ in conv.sessions] == [1, 2, 10]
    assert conv.sessions[0][1] is None
    assert conv.sessions[2][1] == datetime(2023, 6, 1, 9, 0, tzinfo=UTC)
    with Store.open(":memory:") as store:
        load_locomo(store, [conv])
        turns = store.turns("conv-o")
        assert [t.text for t in turns] == ["first", "second", "tenth"]
        assert [t.seq for t in turns] == [0, 1, 2]
        # An undated session's turns happen when they are written, as with any import.
        assert turns[0].event_time == turns[0].recorded_at
        assert turns[1].event_time == datetime(2023, 5, 2, 9, 0, tzinfo=UTC)


def test_load_keeps_image_metadata_and_indexes_the_caption(quirky) -> None:
    convs = read_locomo(quirky)
    with Store.open(":memory:") as store:
        stats = load_locomo(store, convs)
        assert stats.conversations == 1 and stats.turns == 5 and stats.embedded == 0
        turns = {t.turn_id: t for t in store.turns("conv-a")}
        image = turns["D1:3"]
        # LoCoMo's blip_caption is stored under the core's general key
        assert image.metadata["caption"] == "a photo of sunflowers next to a wooden fence"
        assert "blip_caption" not in image.metadata
        assert image.metadata["img_url"] == ["https://example.invalid/a.jpg"]
        assert image.metadata["query"] == "garden sunflowers"
        assert turns["D1:1"].metadata == {}
        assert image.event_time == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
        assert turns["D2:1"].event_time == datetime(2023, 5, 9, 13, 56, tzinfo=UTC)
        assert image.session_id == "session_1"
        hits = Retriever(store).search("conv-a", "wooden fence sunflowers", k=3)
        assert hits[0].turn_id == "D1:3"
        assert "[shares a photo: a photo of sunflowers next to a wooden fence]" in hits[0].text


def test_load_writes_header_sessions_and_follow_edges_within_sessions(quirky) -> None:
    with Store.open(":memory:", embedder=None) as store:
        ids = load_locomo(store, read_locomo(quirky))
        assert ids.turns == 5
        counts = store.counts("conv-a")
        assert counts == {"conversations": 1, "sessions": 2, "turns": 5, "items": 0,
                          "edges": 3, "embeddings": 0}
        turns = {t.turn_id: t.id for t in store.turns("conv-a")}
        last_of_first = store.neighbors("conv-a", [turns["D1:3"]])
        assert set(last_of_first) == {turns["D1:2"]}  # no edge across sessions
        speakers = json.loads(store.conn.execute(
            "SELECT speakers FROM conversations WHERE id = 'conv-a'").fetchone()[0])
        assert speakers == ["Alice", "Bob"]


def test_load_with_embedder_stores_one_vector_per_turn(quirky, embedder) -> None:
    with Store.open(":memory:") as store:
        stats = load_locomo(store, read_locomo(quirky), embedder=embedder)
        assert stats.embedded == 5
        ids, matrix = store.vectors("conv-a", embedder.name)
        assert sorted(ids) == sorted(t.id for t in store.turns("conv-a"))
        assert matrix.shape == (5, embedder.dim)
        hits = Retriever(store, embedder).search("conv-a", "guinea pig Oscar", k=1)
        assert hits[0].turn_id == "D1:1"


@pytest.mark.parametrize(
    ("content", "record_hint"),
    [
        ("{not json", "cannot read"),
        ("", "cannot read"),
        ('"just a string"', "expected a list"),
        ('[{"sample_id": "conv-x", "qa": []}]', "conversation #0"),
        ('[{"sample_id": "conv-x", "conversation": []}]', "conversation #0"),
        ('[{"sample_id": "conv-ok", "conversation": {}}, 7]', "conversation #1"),
    ],
)
def test_malformed_files_raise_locomo_error_naming_file_and_record(
    write_json, content: str, record_hint: str
) -> None:
    path = write_json("bad.json", content)
    with pytest.raises(LoCoMoError) as info:
        read_locomo(path)
    assert str(path) in str(info.value)
    assert record_hint in str(info.value)


def test_missing_file_raises_locomo_error(tmp_path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(LoCoMoError, match=r"nope\.json"):
        read_locomo(path)


def test_non_utf8_file_raises_locomo_error(tmp_path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'[{"text": "caf\xe9"}]')
    with pytest.raises(LoCoMoError, match=r"latin1\.json"):
        read_locomo(path)


def _bad_turn_record(make_record, turn):
    sessions = {
        1: [{"speaker": "Alice", "dia_id": "D1:1", "text": "fine"}],
        2: [{"speaker": "Bob", "dia_id": "D2:1", "text": "fine"}, turn],
    }
    return make_record("conv-bad", sessions=sessions)


@pytest.mark.parametrize(
    "turn",
    [
        {"speaker": "Bob", "dia_id": "D2:2"},
        {"speaker": "Bob", "dia_id": "D2:2", "text": None},
        {"speaker": "Bob", "dia_id": "D2:2", "text": 42},
        {"dia_id": "D2:2", "text": "no speaker"},
        {"speaker": "Bob", "text": "no id"},
        "not a dict",
    ],
)
def test_bad_turn_names_file_conversation_session_and_turn(make_record, write_json, turn) -> None:
    path = write_json("turns.json", [make_record("conv-ok"), _bad_turn_record(make_record, turn)])
    with pytest.raises(LoCoMoError) as info:
        read_locomo(path)
    message = str(info.value)
    assert str(path) in message
    assert "conv-bad" in message
    assert "session_2" in message
    assert "turn #1" in message


def test_bad_session_date_names_file_and_session(make_record, write_json) -> None:
    record = make_record("conv-date", dates={1: "1:56 pm on 8 May, 2023", 2: "yesterday-ish"})
    path = write_json("dates.json", [record])
    with pytest.raises(LoCoMoError) as info:
        read_locomo(path)
    message = str(info.value)
    assert str(path) in message
    assert "conv-date" in message
    assert "session_2_date_time" in message
    assert "yesterday-ish" in message


def test_session_that_is_not_a_list_is_rejected(make_record, write_json) -> None:
    record = make_record("conv-s")
    record["conversation"]["session_2"] = {"oops": True}
    path = write_json("sessions.json", [record])
    with pytest.raises(LoCoMoError, match="session_2"):
        read_locomo(path)


@pytest.mark.parametrize(
    ("qa", "hint"),
    [
        ({"answer": "x", "evidence": [], "category": 4}, "qa #0"),
        ({"question": "q?", "answer": "x", "evidence": []}, "bad category"),
        ({"question": "q?", "answer": "x", "category": "four"}, "bad category"),
        ("not a dict", "qa #0"),
    ],
)
def test_bad_question_names_file_and_question(make_record, write_json, qa, hint) -> None:
    path = write_json("qa.json", [make_record("conv-q", qa=[qa])])
    with pytest.raises(LoCoMoError) as info:
        read_locomo(path)
    assert str(path) in str(info.value)
    assert "conv-q" in str(info.value)
    assert hint in str(info.value)


def test_qa_that_is_not_a_list_is_rejected(make_record, write_json) -> None:
    record = make_record("conv-q")
    record["qa"] = {"question": "q"}
    with pytest.raises(LoCoMoError, match="'qa' must be a list"):
        read_locomo(write_json("qa2.json", [record]))


def test_apply_audit_overlays_corrections(quirky, write_json) -> None:
    convs = read_locomo(quirky)
    audit = write_json("audit.json", [
        {"sample_id": "conv-a", "qa_index": 0, "correct_evidence": ["D1:2", "D7:7"],
         "correct_answer": "Oscar the guinea pig", "error_type": "WRONG_CITATION"},
        {"sample_id": "conv-a", "qa_index": 2, "correct_evidence": ["D:2:2; D2:1"]},
        {"sample_id": "conv-a", "qa_index": 4, "correct_evidence": None,
         "correct_answer": None},
        {"sample_id": "conv-zzz", "qa_index": 0, "correct_answer": "ignored"},
        {"sample_id": "conv-a", "qa_index": 99, "correct_answer": "ignored"},
    ])
    assert apply_audit(convs, audit) == 3
    q = convs[0].questions
    assert q[0].corrected_evidence == ["D1:2"]  # D7:7 does not exist
    assert q[0].corrected_answer == "Oscar the guinea pig"
    assert q[0].evidence == ["D1:1"]  # the original key is kept
    assert q[0].answer == "a guinea pig"
    assert q[2].corrected_evidence == ["D2:2", "D2:1"]
    assert q[2].corrected_answer is None
    assert q[4].corrected_evidence == []
    assert q[1].corrected_evidence is None and q[1].corrected_answer is None


@pytest.mark.parametrize(
    "entries",
    ['[{"qa_index": 0}]', '[{"sample_id": "conv-a", "qa_index": "zero"}]', "{broken", "[1]"],
)
def test_apply_audit_rejects_malformed_entries(quirky, write_json, entries: str) -> None:
    path = write_json("bad_audit.json", entries)
    with pytest.raises(LoCoMoError, match=r"bad_audit\.json"):
        apply_audit(read_locomo(quirky), path)


def test_each_conversation_is_also_one_transcript_blob(write_json, store) -> None:
    from memstrata.bench.locomo import load_locomo, read_locomo
    from tests.conftest import locomo_record

    convs = read_locomo(write_json("t.json", [locomo_record("conv-7")]))
    load_locomo(store, convs)
    text = store.blobs.text("conv-7", "conv-7")
    assert text.startswith("=== session 1 · 8 May 2023, 13:56 ===\n[D1:1] Alice: I adopted")
    assert "[D1:3] Alice: Here is my new garden. [shares a photo:" in text
    assert "\n\n=== session 2 · 9 May 2023, 13:56 ===\n[D2:1] Bob:" in text
    assert store.blobs.info("conv-7", "conv-7").metadata == {"kind": "conversation", "turns": 5}
    load_locomo(store, convs)  # reloading replaces it
    assert store.blobs.keys("conv-7") == ["conv-7"]
