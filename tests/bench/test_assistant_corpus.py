"""The shipped assistant corpus: written deterministically from scripted facts, every
question's evidence exists and states its answer, and no other message states it."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from memstrata.bench.corpora import ASSISTANT
from memstrata.bench.corpora.assistant import build, main
from memstrata.bench.corpus import load_corpus


@pytest.fixture(scope="module")
def doc() -> dict:
    return build(users=6)


def _messages(doc: dict) -> dict[str, dict[str, dict]]:
    return {c["id"]: {m["metadata"]["source_id"]: m for s in c["sessions"]
                      for m in s["messages"]} for c in doc["conversations"]}


def test_the_same_seed_writes_the_same_file_and_another_seed_does_not(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    main(["--out", str(a), "--users", "3"])
    main(["--out", str(b), "--users", "3"])
    main(["--out", str(c), "--users", "3", "--seed", "7"])
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_the_shipped_file_is_what_the_generator_writes() -> None:
    assert json.loads(ASSISTANT.read_text(encoding="utf-8")) == build()


def test_every_answer_is_stated_in_its_evidence_and_nowhere_else(doc: dict) -> None:
    messages = _messages(doc)
    for q in doc["questions"]:
        conv = messages[q["conversation_id"]]
        evidence = [conv[e]["content"].lower() for e in q["evidence"]]
        for value in q["answer"]:
            assert any(value.lower() in text for text in evidence), (q["id"], value)
            assert value.lower() not in q["question"].lower(), q["id"]
        pattern = re.compile(r"(?<!\w)" + "|".join(map(re.escape, q["answer"])) + r"(?!\w)",
                             re.I)
        others = [mid for mid, m in conv.items() if mid not in q["evidence"]
                  and pattern.search(m["content"])]
        assert not others, (q["id"], others)


def test_roles_evidence_and_categories_have_the_promised_shape(doc: dict) -> None:
    messages = _messages(doc)
    categories = Counter(q["category"] for q in doc["questions"])
    assert set(categories) == {"single-fact", "changed-fact/current", "changed-fact/previous",
                               "preference/instruction", "assistant-said", "multi-message"}
    for q in doc["questions"]:
        roles = {messages[q["conversation_id"]][e]["role"] for e in q["evidence"]}
        assert roles == ({"assistant"} if q["category"] == "assistant-said" else {"user"})
        assert len(q["evidence"]) == (2 if q["category"] == "multi-message" else 1)
    for conv in doc["conversations"]:
        assert 5 <= len(conv["sessions"]) <= 8
        count = sum(len(s["messages"]) for s in conv["sessions"])
        assert 100 <= count <= 250
        replies = [m["content"] for s in conv["sessions"] for m in s["messages"]
                   if m["role"] == "assistant"]
        assert sum(len(r) for r in replies) / len(replies) > 600


def test_a_changed_fact_is_stated_again_later(doc: dict) -> None:
    order = {c["id"]: [m["metadata"]["source_id"] for s in c["sessions"] for m in s["messages"]]
             for c in doc["conversations"]}
    said: dict[tuple[str, str], dict[str, str]] = {}
    for q in doc["questions"]:
        if q["category"].startswith("changed-fact"):
            key = (q["conversation_id"], q["fact"])
            said.setdefault(key, {})[q["category"].split("/")[1]] = q["evidence"][0]
    pairs = [(conv, found) for (conv, _), found in said.items() if len(found) == 2]
    assert pairs
    for conv, found in pairs:
        before, now = found["previous"], found["current"]
        assert order[conv].index(before) < order[conv].index(now)
        assert before.split(":")[1] != now.split(":")[1]  # in different sessions


def test_the_shipped_file_loads_as_a_corpus() -> None:
    corpus = load_corpus(ASSISTANT)
    assert corpus.kind == "messages" and corpus.name == "assistant"
    assert len(corpus.tenants) == 20 and len(corpus.questions) > 250
    assert corpus.messages == sum(len(s.messages) for r in corpus.records for s in r.sessions)
