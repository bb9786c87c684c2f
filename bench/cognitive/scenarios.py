"""The L1-L6 cognitive scenario file: its models, loader and validator.

A scenario file holds one scenario per level: dated articles to learn from and questions
scored by a deterministic ``Rule`` (``scoring.score``). ``load_scenarios`` parses and
checks a file and raises ``ScenarioFileError`` with one message naming the file and the
place; ``FORMAT_DOC`` documents the format for docs/guides/cognitive.md.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from memstrata.errors import MemstrataError

from .scoring import Rule, matches, score

Intent = Literal[
    "simple_recall",
    "mathematical_computation",
    "temporal_comparison",
    "multi_source_synthesis",
    "contradiction_resolution",
    "incremental_update",
]
Text = Annotated[str, StringConstraints(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Question(_Strict):
    """One question, its gold ``answer`` (for people and the judge), its scoring rule, the
    values the retrieved facts must contain (``needs``) and the intent it exercises."""

    id: Text
    question: Text
    answer: Text
    score: Rule
    needs: list[Text] = []
    intent: Intent | None = None


class Article(_Strict):
    """One dated source text the agent learns from."""

    id: Text
    title: Text
    date: dt.date
    source: Text
    text: Text

    @field_validator("date", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> Any:
        # Only "YYYY-MM-DD": pydantic's lax mode would also take timestamps.
        if isinstance(value, str):
            return dt.date.fromisoformat(value)
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return value
        raise ValueError('a date must be an ISO string such as "2026-02-10"')

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text must not be blank")
        return value


class Scenario(_Strict):
    """One level: the articles and the questions asked after reading them."""

    level: str = Field(pattern=r"^L[1-9][0-9]*$")
    title: Text
    articles: list[Article] = Field(min_length=1)
    questions: list[Question] = Field(min_length=1)


class ScenarioFile(_Strict):
    """A whole scenario file."""

    name: Text
    description: str = ""
    scenarios: list[Scenario] = Field(min_length=1)


class ScenarioFileError(MemstrataError, ValueError):
    """A scenario file that cannot be used; the message names the file and the place."""


def validate_scenarios(data: ScenarioFile) -> list[str]:
    """The semantic problems of a parsed file, each ``"<location>: <problem>"``.

    Question ids must be unique across the file, article ids within a scenario, every
    ``needs`` item must appear in some article of its scenario (numbers numerically,
    names as text, matched as ``scoring.matches`` does), and every gold ``answer`` must
    score 1.0 on its own rule (else the rule, not a reader, is wrong).
    """
    problems: list[str] = []
    seen_questions: dict[str, str] = {}
    for s, scenario in enumerate(data.scenarios):
        seen_articles: dict[str, str] = {}
        for a, article in enumerate(scenario.articles):
            where = f"scenarios[{s}].articles[{a}].id"
            if article.id in seen_articles:
                problems.append(f"{where}: duplicate article id {article.id!r} "
                                f"(first at {seen_articles[article.id]})")
            seen_articles.setdefault(article.id, where)
        texts = [f"{article.title}\n{article.text}" for article in scenario.articles]
        for q, question in enumerate(scenario.questions):
            where = f"scenarios[{s}].questions[{q}]"
            if question.id in seen_questions:
                problems.append(f"{where}.id: duplicate question id {question.id!r} "
                                f"(first at {seen_questions[question.id]})")
            seen_questions.setdefault(question.id, f"{where}.id")
            if score(question.answer, question.score) < 1.0:
                problems.append(f"{where}.score: the gold answer {question.answer!r} does not "
                                f"satisfy its own rule")
            for n, need in enumerate(question.needs):
                if not any(matches(need, text) for text in texts):
                    problems.append(f"{where}.needs[{n}]: {need!r} appears in no article of "
                                    f"scenario {scenario.level}")
    return problems


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def load_scenarios(path: str | Path) -> ScenarioFile:
    """Read, parse and check a scenario file.

    Raises:
        ScenarioFileError: a missing file, invalid JSON (line and column), the first
            schema error (with its path) or the first semantic problem.
    """
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ScenarioFileError(f"{path.name}: no such file ({path})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioFileError(f"{path.name}: cannot read the file ({exc})") from exc
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ScenarioFileError(f"{path.name}: invalid JSON at line {exc.lineno}, column "
                                f"{exc.colno}: {exc.msg}") from exc
    try:
        data = ScenarioFile.model_validate(obj)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        message = first["msg"].removeprefix("Value error, ")
        more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
        raise ScenarioFileError(f"{path.name}: {_location(first['loc'])}: {message}{more}") \
            from None
    problems = validate_scenarios(data)
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise ScenarioFileError(f"{path.name}: {problems[0]}{more}")
    return data


def default_scenarios_path() -> Path:
    """The shipped L1-L6 scenario file."""
    return Path(__file__).parent / "data" / "scenarios.json"


FORMAT_DOC = """\
### Scenario file format

A JSON object: `name`, optional `description`, and `scenarios` (at least one). Each
scenario has a `level` (`L1`, `L2`, ...), a `title`, `articles` and `questions`.

- **article**: `id` (unique in its scenario), `title`, `date` (ISO, `"2026-02-10"`),
  `source`, `text` (non-empty).
- **question**: `id` (unique in the file), `question`, `answer` (the gold answer, for
  people and the judge), `score` (the rule), `needs` (values the retrieved facts must
  contain: each must appear in an article of the scenario; the gold answer must score 1)
  and optional `intent`
  (`simple_recall`, `mathematical_computation`, `temporal_comparison`,
  `multi_source_synthesis`, `contradiction_resolution`, `incremental_update`).
- **score**: `all` (every item must appear), `any` (at least one must), `none` (none may:
  a wrong value a correct answer never states), `tolerance` (relative, for numbers).
  Give at least one of `all`/`any`. Numbers match numerically (`"4.1 million"` matches
  `"4,100,000"`), items with `-` or `/` match verbatim as commands, anything else as
  whole words. Score = (matched `all` + 1 if an `any` matched) / (`len(all)` + 1 if `any`),
  and 0 when a `none` item matches.

```json
{"name": "demo", "scenarios": [{
  "level": "L1", "title": "Single-source recall",
  "articles": [{"id": "a1", "title": "Day 5 standings", "date": "2026-02-07",
    "source": "Nordic Games Wire",
    "text": "Brennmark lead after day 5 with 6 gold medals. Aldervik are second."}],
  "questions": [
    {"id": "q1", "question": "How many golds did Brennmark have after day 5?",
     "answer": "6", "score": {"all": ["6"]}, "needs": ["6"], "intent": "simple_recall"},
    {"id": "q2", "question": "Which team was second after day 5?", "answer": "Aldervik",
     "score": {"all": ["Aldervik"], "none": ["Brennmark"]}, "needs": ["Aldervik"]}]}]}
```
"""
