"""``QA``: a question and packed memories -> a short answer, cited ids, or an abstention.

How ``QA`` writes dates and says that it does not know is its :class:`AnswerStyle`. The
defaults are the general ones: ISO dates (``memory.dates``) and :data:`ABSTAIN_ANSWER`.
A benchmark whose answer key has conventions of its own selects them explicitly (LoCoMo's
bench: its long dates and its abstention phrase); the instructions and worked examples
are then written in that style, word for word as the key expects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, datetime
from typing import Annotated

import dspy
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from memstrata.memory import text as textmod
from memstrata.memory.dates import DEFAULT_DATE_STYLE, DateStyle, render_day
from memstrata.memory.timeparse import TimeSpan, normalise_time, resolve_times
from memstrata.memory.verify import question_terms
from memstrata.packers import MemoryLine, parse, render

from .structured import StructuredPredict

ABSTAIN_ANSWER = "I don't know"
"""The answer on abstention, by default (what the instructions tell the model to say)."""
MAX_ANSWER_CHARS = 100
MAX_CITED = 3
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?\b")

_INSTRUCTIONS = """Answer the question in a few words using the memories.

Each memory starts with [id · speaker · date]. Copy the answer from the memory text:
a name, a date like "{date}", a number or a short phrase. Give the ids of the
memories used. If the memories do not answer the question, answer "{abstain}".
"""
_EXAMPLE_DAY = date(2023, 5, 7)


class AnswerFromMemories(dspy.Signature):
    # The instructions in the default style; ``answer_signature`` writes them in any.
    __doc__ = _INSTRUCTIONS.format(date=render_day(_EXAMPLE_DAY), abstain=ABSTAIN_ANSWER)

    memories: str = dspy.InputField(desc="one per line, most relevant first")
    question: str = dspy.InputField()
    # Bounds go into the JSON schema, so a constrained decoder cannot ramble past them.
    answer: Annotated[str, StringConstraints(max_length=MAX_ANSWER_CHARS)] = dspy.OutputField(
        desc="a few words")
    evidence: Annotated[list[Annotated[str, StringConstraints(max_length=40)]],
                        Field(max_length=MAX_CITED)] = dspy.OutputField(
        desc="memory ids, e.g. s3:7")


#: Phrases that mark a prediction as an abstention ("the information is not there"), in
#: any style; an :class:`AnswerStyle` adds its own abstention phrase. Matched as lower-case
#: substrings after collapsing whitespace.
ABSTAIN_PHRASES: tuple[str, ...] = (
    "no information available",
    "not mentioned",
    "no information",
    "not available",
    "unknown",
    "cannot be determined",
    "not stated",
)


def is_abstention(prediction: str, phrases: Iterable[str] = ABSTAIN_PHRASES) -> bool:
    """True when the prediction says the information is not available.

    Matches any of ``phrases`` (by default :data:`ABSTAIN_PHRASES`; ``QA`` adds its
    style's own) as a substring of the lower-cased prediction with whitespace collapsed.

    Args:
        prediction: Model answer.
        phrases: lower-case phrases that mark an abstention.

    Returns:
        Whether the answer is an abstention.

    Example:
        >>> is_abstention("The date is unknown.")
        True
        >>> is_abstention("In May 2023.")
        False
    """
    text = " ".join(prediction.lower().replace("’", "'").split())
    return any(phrase in text for phrase in phrases)


class AnswerStyle(BaseModel):
    """How ``QA`` writes dates and says it does not know.

    The defaults are the general ones; a benchmark selects its answer key's conventions
    here, and the memories it packs for ``QA`` should use the same ``date_style``.

    Example:
        >>> AnswerStyle().abstain_cue
        "I don't know"
    """

    model_config = ConfigDict(frozen=True)

    date_style: DateStyle = DEFAULT_DATE_STYLE
    """How dates are written in the instructions, the worked examples and the answers."""
    abstain_answer: str = Field(ABSTAIN_ANSWER, min_length=1)
    """The prediction's answer when it abstains."""
    abstain_prompt: str = ""
    """What the instructions and the worked example tell the model to answer when the
    memories do not answer the question; empty: ``abstain_answer`` without its full stop."""
    example_ids: str = Field("s", pattern=r"^[A-Za-z]{1,3}$")
    """The letters the worked examples' memory ids start with (``s3:7``): best the shape
    of the ids the packed memories carry, so the examples look like the real input."""

    @property
    def abstain_cue(self) -> str:
        """The abstention phrase the prompt teaches."""
        return self.abstain_prompt or self.abstain_answer.rstrip(".")

    @property
    def abstain_phrases(self) -> tuple[str, ...]:
        """:data:`ABSTAIN_PHRASES` and this style's own (its cue, its answer)."""
        own = (" ".join(p.lower().replace("’", "'").split()).rstrip(".")
               for p in (self.abstain_cue, self.abstain_answer))
        return tuple(dict.fromkeys([*ABSTAIN_PHRASES, *own]))


def answer_signature(style: AnswerStyle) -> type[dspy.Signature]:
    """``AnswerFromMemories`` with its instructions written in ``style``."""
    return AnswerFromMemories.with_instructions(_INSTRUCTIONS.format(
        date=render_day(_EXAMPLE_DAY, style.date_style), abstain=style.abstain_cue).strip()
    ).with_updated_fields("evidence", desc=f"memory ids, e.g. {style.example_ids}3:7")


def tidy_answer(answer: str, known: set[str], date_style: DateStyle = DEFAULT_DATE_STYLE
                ) -> tuple[str, list[str]]:
    """An answer without the scaffolding small models copy into it, and ids it named.

    Small models often echo a memory's provenance header ("s23:19 · Ben · 2022-09-04")
    or run on past the answer. The header's id is evidence; when the header is all there
    is, its date is the closest thing to an answer the model gave. In JSON, small models
    also write dates as ISO timestamps ("2023-05-08 23:30:52"): dates are put back in the
    memories' style (``date_style``).
    """

    def restyle(m: re.Match[str]) -> str:
        try:
            return render_day(date(int(m[1]), int(m[2]), int(m[3])), date_style)
        except ValueError:
            return m[0]

    text = answer.strip().split("\n", 1)[0].strip().rstrip("}").strip()
    text = _ISO_DATE.sub(restyle, text)
    head = text.lstrip("[").split("·", 1)[0].strip()
    if "·" not in text or head not in known:
        return text, []
    if "]" in text:
        header, rest = text.split("]", 1)
    else:
        header, rest = text, ""
    parts = header.lstrip("[").split("·")
    said = parts[-1].strip() if len(parts) >= 3 else ""
    return rest.strip() or said, [head]


def resolve_relative_times(answer: str, memories: str, evidence: list[str],
                           date_style: DateStyle = DEFAULT_DATE_STYLE) -> str:
    """``answer`` with its relative times ("yesterday", "last year") read against the date
    of the memory they came from: a cited memory that says the phrase, else the first
    memory line that says it, else the first cited memory. A relative time is only true
    on the day it was said; the packer resolves it in the memories ("yesterday
    [2023-05-07]"), and models still copy the bare phrase into their answers. The
    resolution is written in ``date_style``.

    Example:
        >>> resolve_relative_times("yesterday", "[s1:3 · Ana · 2023-05-08] I ran yesterday.",
        ...                        ["s1:3"])
        '2023-05-07'
    """
    lines = {i: (m.when, m.text.casefold()) for i, m in _dated_lines(memories).items()
             if m.when is not None}
    if not lines:
        return answer
    ranked = [*(e for e in evidence if e in lines), *(i for i in lines if i not in evidence)]
    for span in resolve_times(answer, lines[ranked[0]][0], date_style):
        if not span.relative:
            continue
        phrase = span.text.casefold()
        said = next((i for i in ranked if phrase in lines[i][1]), None)
        if said is None and not any(e in lines for e in evidence):
            continue  # nobody said it and nothing was cited: no date to read it on
        when = lines[said or ranked[0]][0]
        if resolved := normalise_time(span.text, when, date_style):
            answer = answer.replace(span.text, resolved.resolved, 1)
    return answer


def _dated_lines(memories: str) -> dict[str, MemoryLine]:
    # The packed lines whose header carries a day, by id: the days answers are read on.
    return {m.id: m for line in memories.splitlines()
            if (m := parse(line)) is not None and m.when is not None}


def _told(line: MemoryLine, style: DateStyle) -> list[TimeSpan]:
    # The times a packed line states (its resolution notes included), one per span.
    assert line.when is not None
    spans = {(s.start, s.end): s for s in resolve_times(line.text, line.when, style)}
    return list(spans.values())


def _states(line: MemoryLine, told: list[TimeSpan], span: TimeSpan) -> bool:
    # A line states a time when one of its own times has that span; a line that tells no
    # time of its own states the day it was said.
    if told:
        return any((t.start, t.end) == (span.start, span.end) for t in told)
    assert line.when is not None
    return span.granularity == "day" and span.start.date() == line.when.date()


def cited_times(answer: str, question: str, memories: str, evidence: list[str],
                date_style: DateStyle = DEFAULT_DATE_STYLE) -> str:
    """``answer`` with a time copied from a memory it does not cite replaced by the one
    time its cited memories state, when a cited memory is closer to the question.

    The evidence names the memories the answer was read from, so its times should be
    theirs. Small models copy the date of a neighbouring line about another topic ("the
    week before 9 June 2023" where the cited line says "yesterday [7 May 2023]"), or the
    day a line was said where the line tells when the thing happened. They also cite the
    wrong line and copy the right time, so the copy is only replaced when the cited
    memories state exactly one time between them and one of them shares more of the
    question's content words than every uncited memory that states the copied time. A
    time no memory states (the model's own arithmetic) and an answer without cited
    memories stay as they are.

    Example:
        >>> cited_times("the week before 2023-06-09", "When did Ana go running?",
        ...             "[s1:3 · Ana · 2023-05-08] I went running yesterday [2023-05-07].\\n"
        ...             "[s2:1 · Ana · 2023-06-09] A talk last week "
        ...             "[the week before 2023-06-09].", ["s1:3"])
        '2023-05-07'
    """
    lines = _dated_lines(memories)
    cited = [lines[e] for e in dict.fromkeys(evidence) if e in lines]
    if not cited:
        return answer
    told = {c.id: _told(c, date_style) for c in cited}
    theirs = {(t.start, t.end): t for c in cited for t in told[c.id]}
    if len(theirs) != 1:
        return answer
    (time,) = theirs.values()
    told |= {i: _told(m, date_style) for i, m in lines.items() if i not in told}
    terms = set(question_terms(question, [m.speaker for m in lines.values() if m.speaker]))

    def closeness(line: MemoryLine) -> int:
        return len(terms.intersection(textmod.tokens(line.text)))

    nearest = max(closeness(c) for c in cited if told[c.id])
    base = cited[0].when
    assert base is not None  # only lines with a day were kept
    for span in resolve_times(answer, base, date_style):
        if any(_states(c, told[c.id], span) for c in cited):
            continue
        copied = [m for i, m in lines.items() if i not in evidence and _states(m, told[i], span)]
        if copied and nearest > max(closeness(m) for m in copied):
            answer = answer.replace(span.text, time.resolved, 1)
    return answer


def cited_ids(memories: str) -> set[str]:
    """The ids that open the provenance heads of packed memory lines.

    Only a line's own head counts (``packers.parse``): an id a stored text quotes in its
    body ("... [s9:1 · Bob · ...] ...", which the packer shows in parentheses anyway) is
    not evidence the model may cite.
    """
    return {m.id for line in memories.splitlines() if (m := parse(line)) is not None}


# Three worked examples of the answer style, made up (not from any benchmark): a span
# copied from a memory, a relative date read through the packer's resolution, and an
# abstention. On 100 LoCoMo dev questions SmolLM2-135M scored F1 0.146 without them,
# 0.198 with the first two and 0.226 with all three, for ~330 more prompt tokens.
# Their memories are packed lines (``packers.render``), so they show the dates exactly
# as the packer writes them in the style chosen. Optimizers (or ``demos = []``) replace
# them like any demos.
def style_demos(style: AnswerStyle) -> list[dspy.Example]:
    """The worked examples, written in ``style``."""

    def lines(*rows: tuple[str, str, datetime, str]) -> str:
        return "\n".join(render(MemoryLine(id=ids(i), speaker=who, when=when, text=text),
                                date_style=style.date_style) for i, who, when, text in rows)

    def ids(i: str) -> str:
        return style.example_ids + i[1:]

    march, june, may = datetime(2021, 3, 3), datetime(2022, 6, 9), datetime(2020, 5, 5)
    return [
        dspy.Example(
            memories=lines(("s2:4", "Ana", march, "We adopted a beagle named Rex yesterday."),
                           ("s2:5", "Tom", march, "I love dogs! I have two cats though.")),
            question="What kind of dog did Ana adopt?", answer="a beagle", evidence=[ids("s2:4")]),
        dspy.Example(
            memories=lines(("s7:1", "Tom", june, "I ran my first marathon last week."),
                           ("s7:2", "Ana", june, "Congrats! How did it feel?")),
            question="When did Tom run his first marathon?",
            answer=f"the week before {render_day(june, style.date_style)}",
            evidence=[ids("s7:1")]),
        dspy.Example(
            memories=lines(("s4:2", "Ana", may, "My sister lives in Lyon."),
                           ("s4:3", "Tom", may, "Lyon is lovely in spring.")),
            question="Where does Tom's brother work?", answer=style.abstain_cue, evidence=[]),
    ]


class QA(dspy.Module):
    """Answers from packed memories; abstains explicitly when they do not support an answer.

    The prediction has ``answer`` (the style's ``abstain_answer`` on abstention),
    ``evidence`` (only ids that really occur in the memories: small models invent some)
    and ``abstained``. The answer's times are checked against the memories without a
    model: a relative time is read on the day its memory was said
    (:func:`resolve_relative_times`), a time copied from an uncited memory becomes the
    cited one's (:func:`cited_times`). One LLM call (two on a parse retry).

    Args:
        style: how dates are written and abstention is said (default: ``AnswerStyle()``,
            ISO dates and :data:`ABSTAIN_ANSWER`).

    Example:
        >>> qa = QA()
        >>> qa(question="Where does Ana live?",
        ...    memories="[s1:2 · Ana · 2023-05-01] I live in Oslo")  # doctest: +SKIP
    """

    def __init__(self, style: AnswerStyle | None = None) -> None:
        super().__init__()
        self.style = style or AnswerStyle()
        self.respond = StructuredPredict(answer_signature(self.style), "QA")
        self.respond.predict.demos = style_demos(self.style)

    def forward(self, question: str, memories: str) -> dspy.Prediction:
        """Answer ``question`` from ``memories`` (a packed context block)."""
        style = self.style
        out = self.respond(question=question, memories=memories or "(no memories)")
        known = cited_ids(memories)
        answer, named = tidy_answer(out.answer or "", known, style.date_style)
        abstained = not answer or is_abstention(answer, style.abstain_phrases)
        cited = [e.strip() for e in out.evidence or []] + named
        evidence = list(dict.fromkeys(e for e in cited if e in known))
        answer = resolve_relative_times(answer, memories or "", evidence, style.date_style)
        answer = cited_times(answer, question, memories or "", evidence, style.date_style)
        return dspy.Prediction(answer=style.abstain_answer if abstained else answer,
                               evidence=evidence, abstained=abstained)
