"""`bench retrieval` on several corpora: the loader reads LoCoMo, LongMemEval and
labelled-messages files into one shape, and one run reports every system on each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstrata.bench.corpus import load_corpus, sniff
from memstrata.bench.retrieval import LEXICAL_ONLY, run_retrieval_bench
from memstrata.bench.retrieval_md import retrieval_markdown
from memstrata.formats import ImportFormatError


def _labelled(pets: tuple[str, ...] = ("cat", "parrot")) -> dict[str, Any]:
    conversations, questions = [], []
    for n, pet in enumerate(pets):
        cid = f"u{n}"
        said = [("user", f"I adopted a {pet} last week."),
                ("assistant", "Lovely! Here are some tips:\n\n- feed it well\n- play daily"),
                ("user", "We went hiking in the Alps."),
                ("assistant", "```python\nprint('hiking')\n```")]
        conversations.append({"id": cid, "sessions": [{
            "id": "s1", "started_at": "2024-01-05T10:00:00Z",
            "messages": [{"role": role, "content": text, "metadata": {"source_id": f"{cid}:{m}"}}
                         for m, (role, text) in enumerate(said, 1)]}]})
        questions += [
            {"id": f"{cid}#1", "conversation_id": cid, "question": "Which animal did I adopt?",
             "evidence": [f"{cid}:1"], "category": "single-fact"},
            {"id": f"{cid}#2", "conversation_id": cid, "question": "Where did we go hiking?",
             "evidence": [f"{cid}:3"], "category": "trip"},
        ]
    return {"name": "tiny-assistant", "conversations": conversations, "questions": questions}


def _longmemeval() -> list[dict[str, Any]]:
    def instance(qid: str, marked: bool) -> dict[str, Any]:
        return {
            "question_id": qid, "question_type": "single-session-user",
            "question": "What degree did I graduate with?", "answer": "Business Administration",
            "question_date": "2023/05/30 (Tue) 23:40",
            "haystack_session_ids": ["a", "b"],
            "haystack_dates": ["2023/05/20 (Sat) 10:02", "2023/05/21 (Sun) 11:00"],
            "haystack_sessions": [
                [{"role": "user", "content": "I like jazz."},
                 {"role": "assistant", "content": "Jazz is great."}],
                [{"role": "user", "content": "I graduated with a degree in Business "
                  "Administration.", **({"has_answer": True} if marked else {})},
                 {"role": "assistant", "content": "Congratulations!"}]],
            "answer_session_ids": ["b"]}

    return [instance("q1", True), instance("q2", False), instance("q3_abs", True)]


@pytest.fixture
def files(write_json, make_record) -> dict[str, Path]:
    qa = [{"question": "What pet did Alice adopt?", "answer": "guinea pig",
           "evidence": ["D1:1"], "category": 1},
          {"question": "Where did Bob go hiking?", "answer": "the Alps",
           "evidence": ["D2:1"], "category": 4}]
    return {
        "locomo": write_json("locomo_tiny.json", [make_record("conv-1", qa=qa),
                                                  make_record("conv-2", qa=qa)]),
        "labelled": write_json("labelled.json", _labelled()),
        "longmemeval": write_json("lme.json", _longmemeval()),
    }


def test_the_loader_reads_each_format_into_one_shape(files: dict[str, Path]) -> None:
    assert {kind: sniff(path) for kind, path in files.items()} == {
        "locomo": "locomo", "labelled": "messages", "longmemeval": "longmemeval"}
    locomo = load_corpus(files["locomo"])
    assert locomo.name == "locomo_tiny" and locomo.tenants == ["conv-1", "conv-2"]
    assert [(q.sample_id, q.evidence, q.category) for q in locomo.questions][:2] == [
        ("conv-1", ["D1:1"], "1"), ("conv-1", ["D2:1"], "4")]

    labelled = load_corpus(files["labelled"])
    assert labelled.name == "tiny-assistant" and labelled.tenants == ["u0", "u1"]
    assert labelled.messages == 8 and labelled.categories == ["single-fact", "trip"]
    first = labelled.records[0].sessions[0].messages[0]
    assert (first.speaker, first.metadata["source_id"]) == ("user", "u0:1")

    lme = load_corpus(files["longmemeval"])
    # q1's evidence is its marked turn; q2 marks none: its answer session's turns; the
    # abstention question has no evidence and is left out.
    assert [(q.qid, q.evidence) for q in lme.questions] == [
        ("q1", ["b:1"]), ("q2", ["b:1", "b:2"])]
    assert lme.questions[0].category == "single-session-user"
    stored = [m.metadata for r in lme.records for s in r.sessions for m in s.messages]
    assert all("has_answer" not in meta for meta in stored)  # the label is not stored

    assert len(load_corpus(files["labelled"], limit=1).questions) == 2  # one per conversation


def test_the_loader_refuses_what_it_cannot_score(write_json) -> None:
    with pytest.raises(ImportFormatError, match="not a LoCoMo file"):
        load_corpus(write_json("x.json", {"messages": []}))
    bad = _labelled()
    bad["questions"][0]["evidence"] = ["u0:99"]
    with pytest.raises(ImportFormatError, match="'u0:99' is no message of u0"):
        load_corpus(write_json("bad.json", bad))
    del bad["conversations"][0]["sessions"][0]["messages"][0]["metadata"]
    with pytest.raises(ImportFormatError, match="source_id"):
        load_corpus(write_json("bad2.json", bad))


def test_one_run_reports_every_system_on_every_corpus(files: dict[str, Path], embedder,
                                                      tmp_path: Path) -> None:
    doc = run_retrieval_bench(list(files.values()), embedder=embedder, progress=False)
    assert list(doc["corpora"]) == ["locomo_tiny", "tiny-assistant", "lme"]
    systems = {"memstrata", "bm25_whitespace", "bm25_tokens", "dense", "lexical"}
    for name, section in doc["corpora"].items():
        assert set(section["systems"]) == systems, name
        for block in section["systems"].values():
            assert set(block["latency_ms"]) == {"p50", "p95"}
            assert 0.0 <= block["recall@5"]["overall"] <= 1.0
        assert section["ingest"]["messages_per_s"] > 0
    assert doc["corpora"]["tiny-assistant"]["questions"] == {"overall": 4, "single-fact": 2,
                                                            "trip": 2}
    assert set(doc["corpora"]["tiny-assistant"]["systems"]["lexical"]["recall@10"]) == {
        "overall", "single-fact", "trip"}
    assert doc["corpora"]["lme"]["questions"]["overall"] == 2
    assert "corrected" in doc["corpora"]["locomo_tiny"]["systems"]["memstrata"]
    for name in systems:  # the top level: the macro mean over the corpora
        per = [s["systems"][name]["recall@10"]["overall"] for s in doc["corpora"].values()]
        assert doc["systems"][name]["recall@10"]["overall"] == pytest.approx(
            sum(per) / 3, abs=1e-4)
    # Tiny conversations: every evidence turn is within the first ten of any system.
    assert doc["corpora"]["tiny-assistant"]["systems"]["memstrata"]["recall@10"][
        "overall"] == 1.0
    table = retrieval_markdown(doc)
    assert "| memstrata |" in table and "x bm25_tokens" in table and "lme @10" in table
    json.dumps(doc)  # serialisable as retrieval.json


def test_cv_runs_per_corpus_and_a_single_corpus_keeps_the_old_document(files) -> None:
    doc = run_retrieval_bench([files["locomo"], files["labelled"]], cv=True, cv_rounds=1,
                              cv_knobs={"session": (0.0, 0.3)}, progress=False)
    for section in doc["corpora"].values():
        cv = section["systems"]["memstrata"]["cv"]
        assert len(cv["folds"]) == 2 and cv["recall@10"]["overall"] == 1.0
    assert doc["systems"]["memstrata"]["cv"]["recall@10"]["overall"] == 1.0
    assert "| memstrata (cv) |" in retrieval_markdown(doc)

    single = run_retrieval_bench(files["locomo"], progress=False)
    assert single["benchmark"] == "locomo-retrieval"
    assert single["systems"]["memstrata"]["recall@5"].keys() == {"overall", "1", "2", "3", "4"}
    assert list(single["corpora"]) == ["locomo_tiny"]


def test_the_lexical_system_is_the_lexical_channel_alone() -> None:
    on = {name for name, value in LEXICAL_ONLY.model_dump().items()
          if isinstance(value, float) and value > 0}
    assert "lexical" in on
    assert not on & {"dense", "speaker_channels", "tags", "context", "expansion", "session",
                     "graph", "speaker_boost", "time_boost", "when_boost", "asking"}


def test_the_cli_takes_several_data_files(files: dict[str, Path], tmp_path: Path,
                                          capsys) -> None:
    from memstrata.cli import main

    out = tmp_path / "out"
    code = main(["bench", "retrieval", "--data", str(files["labelled"]), "--data",
                 str(files["locomo"]), "--out", str(out), "--no-dense"])
    assert code == 0
    doc = json.loads((out / "retrieval.json").read_text(encoding="utf-8"))
    assert list(doc["corpora"]) == ["tiny-assistant", "locomo_tiny"]
    assert "dense" not in doc["systems"] and "lexical" in doc["systems"]
    assert (out / "retrieval.md").read_text(encoding="utf-8").startswith("# Retrieval")
    assert "tiny-assistant @5" in capsys.readouterr().out
