"""The scenario file format (loader, validator, errors) and the shipped L1-L6 scenarios."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from memstrata.bench.cognitive.scenarios import (
    FORMAT_DOC,
    ScenarioFile,
    ScenarioFileError,
    default_scenarios_path,
    load_scenarios,
    validate_scenarios,
)
from memstrata.bench.cognitive.scoring import score

MINIMAL: dict[str, Any] = {
    "name": "mini",
    "scenarios": [{
        "level": "L1",
        "title": "recall",
        "articles": [{"id": "a1", "title": "Final", "date": "2026-02-23", "source": "Kestrel",
                      "text": "The final drew 4,100,000 viewers. Jonas Erlund scored."}],
        "questions": [{"id": "q1", "question": "How many watched?", "answer": "4.1 million",
                       "score": {"all": ["4.1 million"]}, "needs": ["4.1 million"],
                       "intent": "simple_recall"}],
    }],
}


def write(tmp_path: Path, doc: Any, name: str = "mine.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=2))
    return path


def mutated(**changes: Any) -> dict[str, Any]:
    """MINIMAL with dotted-path changes, e.g. ``{"scenarios.0.level": "L0"}``."""
    doc = copy.deepcopy(MINIMAL)
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    return doc


def load_error(tmp_path: Path, doc: Any) -> str:
    with pytest.raises(ScenarioFileError) as info:
        load_scenarios(write(tmp_path, doc))
    return str(info.value)


# --------------------------------------------------------------------------- the loader


def test_minimal_file_loads(tmp_path: Path) -> None:
    data = load_scenarios(write(tmp_path, MINIMAL))
    assert data.scenarios[0].articles[0].date.isoformat() == "2026-02-23"


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioFileError, match=r"^nothere\.json: no such file"):
        load_scenarios(tmp_path / "nothere.json")


def test_invalid_json_gives_line_and_column(tmp_path: Path) -> None:
    message = load_error(tmp_path, '{\n  "name": "x",\n  "scenarios": [,]\n}')
    assert message.startswith("mine.json: invalid JSON at line 3, column 17:")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"scenarios.0.questions.0.score": {"none": ["9"]}},
         "mine.json: scenarios[0].questions[0].score: give at least one of all/any"),
        ({"scenarios.0.level": "L0"}, "mine.json: scenarios[0].level: String should match"),
        ({"scenarios.0.articles.0.date": "10/02/2026"},
         "mine.json: scenarios[0].articles[0].date: Invalid isoformat"),
        ({"scenarios.0.articles.0.date": 1770000000},
         "mine.json: scenarios[0].articles[0].date: a date must be an ISO string"),
        ({"scenarios.0.articles.0.text": "  "},
         "mine.json: scenarios[0].articles[0].text: text must not be blank"),
        ({"scenarios.0.questions.0.intent": "guessing"},
         "mine.json: scenarios[0].questions[0].intent: Input should be"),
        ({"scenarios.0.articles.0.author": "me"},
         "mine.json: scenarios[0].articles[0].author: Extra inputs are not permitted"),
        ({"scenarios.0.questions": []}, "mine.json: scenarios[0].questions: List should have"),
        ({"scenarios": "none"}, "mine.json: scenarios: Input should be a valid list"),
    ],
)
def test_schema_errors_name_the_place(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    assert load_error(tmp_path, mutated(**changes)).startswith(expected)


def test_top_level_must_be_an_object(tmp_path: Path) -> None:
    assert load_error(tmp_path, "[1, 2]").startswith("mine.json: (top level): Input should be")


def test_only_the_first_schema_error_is_spelled_out(tmp_path: Path) -> None:
    doc = mutated(**{"scenarios.0.level": "L0", "scenarios.0.title": ""})
    message = load_error(tmp_path, doc)
    assert message.count("scenarios[0]") == 1
    assert message.endswith("(and 1 more errors)")


# --------------------------------------------------------------------------- semantic checks


def test_duplicate_question_ids_across_scenarios(tmp_path: Path) -> None:
    doc = copy.deepcopy(MINIMAL)
    doc["scenarios"].append(copy.deepcopy(doc["scenarios"][0]) | {"level": "L2"})
    assert load_error(tmp_path, doc) == (
        "mine.json: scenarios[1].questions[0].id: duplicate question id 'q1' "
        "(first at scenarios[0].questions[0].id)")


def test_duplicate_article_ids_within_a_scenario(tmp_path: Path) -> None:
    doc = copy.deepcopy(MINIMAL)
    doc["scenarios"][0]["articles"].append(copy.deepcopy(doc["scenarios"][0]["articles"][0]))
    assert "scenarios[0].articles[1].id: duplicate article id 'a1'" in load_error(tmp_path, doc)


def test_needs_must_appear_in_an_article(tmp_path: Path) -> None:
    message = load_error(tmp_path, mutated(**{"scenarios.0.questions.0.needs": ["3.6 million"]}))
    assert message == ("mine.json: scenarios[0].questions[0].needs[0]: '3.6 million' appears "
                       "in no article of scenario L1")
    # Numbers match numerically, names as whole words.
    ok = mutated(**{"scenarios.0.questions.0.needs": ["4.1 million", "Jonas Erlund"]})
    assert load_scenarios(write(tmp_path, ok)).scenarios[0].questions[0].needs
    partial = mutated(**{"scenarios.0.questions.0.needs": ["Erl"]})
    assert "'Erl' appears in no article" in load_error(tmp_path, partial)


def test_gold_answer_must_satisfy_its_rule(tmp_path: Path) -> None:
    doc = mutated(**{"scenarios.0.questions.0.answer": "about four"})
    assert "scenarios[0].questions[0].score: the gold answer 'about four'" in load_error(
        tmp_path, doc)


def test_validate_reports_every_problem() -> None:
    doc = copy.deepcopy(MINIMAL)
    doc["scenarios"][0]["questions"][0]["needs"] = ["Oduya", "Halloran"]
    problems = validate_scenarios(ScenarioFile.model_validate(doc))
    assert [p.split(":")[0] for p in problems] == [
        "scenarios[0].questions[0].needs[0]", "scenarios[0].questions[0].needs[1]"]


def test_format_doc_example_is_a_valid_file(tmp_path: Path) -> None:
    block = re.search(r"```json\n(.*?)```", FORMAT_DOC, re.S)
    assert block is not None
    data = load_scenarios(write(tmp_path, block.group(1)))
    assert [len(s.questions) for s in data.scenarios] == [2]
    assert len(data.scenarios[0].articles) == 1


# --------------------------------------------------------------------------- shipped file


@pytest.fixture(scope="module")
def shipped() -> ScenarioFile:
    return load_scenarios(default_scenarios_path())


def test_shipped_file_has_six_levels_of_six_questions(shipped: ScenarioFile) -> None:
    assert [s.level for s in shipped.scenarios] == ["L1", "L2", "L3", "L4", "L5", "L6"]
    assert all(len(s.questions) == 6 for s in shipped.scenarios)
    assert [len(s.articles) for s in shipped.scenarios] == [1, 3, 3, 1, 3, 2]


def test_shipped_articles_and_questions_are_complete(shipped: ScenarioFile) -> None:
    for scenario in shipped.scenarios:
        for article in scenario.articles:
            assert 80 <= len(article.text.split()) <= 200, article.id
        for question in scenario.questions:
            assert question.needs and question.intent, question.id
            assert score(question.answer, question.score) == 1.0, question.id
            for blank in ("", "I don't know.", "The articles do not say."):
                assert score(blank, question.score) == 0.0, question.id


def test_shipped_dates_order_the_updates(shipped: ScenarioFile) -> None:
    by_level = {s.level: s for s in shipped.scenarios}
    l3_dates = [a.date.isoformat() for a in by_level["L3"].articles]
    assert l3_dates == ["2026-02-09", "2026-02-11", "2026-02-12"]
    early, late = by_level["L6"].articles
    assert early.date < late.date
    assert len({a.source for a in by_level["L5"].articles}) == 3


def test_l3_gold_answers_follow_from_the_standings(shipped: ScenarioFile) -> None:
    l3 = next(s for s in shipped.scenarios if s.level == "L3")
    pattern = re.compile(r"(Brennmark|Aldervik|Castellane|Eskerholt)[^.]*?"
                         r"(\d+) gold, (\d+) silver and (\d+) bronze")
    days: list[dict[str, tuple[int, int]]] = []
    for article in l3.articles:
        table: dict[str, tuple[int, int]] = {}
        for team, g, s, b in pattern.findall(article.text):
            table.setdefault(team, (int(g), int(g) + int(s) + int(b)))
        assert len(table) == 4, article.id
        days.append(table)
    d7, d9, d10 = days
    rules = {q.id: q.score.all for q in l3.questions}
    assert rules["l3-q1"] == [str(d10["Aldervik"][0] - d7["Aldervik"][0])]
    assert rules["l3-q2"] == [max(d10, key=lambda t: d10[t][0] - d9[t][0])]
    overtook = [t for t in d9 if d9[t][0] > d9["Brennmark"][0] and d7[t][0] < d7["Brennmark"][0]]
    assert rules["l3-q3"] == overtook
    assert rules["l3-q4"] == [str(d10["Eskerholt"][1] - d7["Eskerholt"][1])]
    assert rules["l3-q5"] == [str(d9["Castellane"][1] - d7["Castellane"][1])]
    best = max(d10, key=lambda t: d10[t][1] - d7[t][1])
    assert rules["l3-q6"] == [best, str(d10[best][1] - d7[best][1])]


def test_conflict_and_update_rules(shipped: ScenarioFile) -> None:
    questions = {q.id: q for s in shipped.scenarios for q in s.questions}
    assert questions["l5-q1"].score.all == ["4.1 million", "3.6 million"]
    assert score("4.1 million viewers", questions["l5-q1"].score) == 0.5
    # The current value, and an answer that mentions the old one still counts.
    assert "9" not in questions["l6-q1"].score.none
    assert score("10, up from 9", questions["l6-q1"].score) == 1.0
    assert score("9", questions["l6-q1"].score) == 0.0
    assert score("tidectl init harbor-map", questions["l4-q1"].score) == 0.0
