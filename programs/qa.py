"""``QA``: a question and packed memories -> a short answer, cited ids, or an abstention."""

from __future__ import annotations

import re
from datetime import date
from typing import Annotated

import dspy
from memstrata.memory.timeparse import normalise_time, resolve_times
from memstrata.packers import parse
from pydantic import Field, StringConstraints

from .structured import StructuredPredict

ABSTAIN_ANSWER = "Not mentioned in the conversation."
MAX_ANSWER_CHARS = 100
MAX_CITED = 3
_ID = re.compile(r"\[([^\]\s·]+)\s*·")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?\b")


class AnswerFromMemories(dspy.Signature):
    """Answer the question in a few words using the memories.

    Each memory starts with [id · speaker · date]. Copy the answer from the memory text:
    a name, a date like "7 May 2023", a number or a short phrase. Give the ids of the
    memories used. If the memories do not answer the question, answer "Not mentioned".
    """

    memories: str = dspy.InputField(desc="one per line, most relevant first")
    question: str = dspy.InputField()
    # Bounds go into the JSON schema, so a constrained decoder cannot ramble past them.
    answer: Annotated[str, StringConstraints(max_length=MAX_ANSWER_CHARS)] = dspy.OutputField(
        desc="a few words")
    evidence: Annotated[list[Annotated[str, StringConstraints(max_length=40)]],
                        Field(max_length=MAX_CITED)] = dspy.OutputField(
        desc="memory ids, e.g. D3:7")


#: Phrases that mark a prediction as an abstention ("the information is not there"): LoCoMo's
#: official category-5 phrases plus a few clear equivalents. Matched as lower-case
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


def is_abstention(prediction: str) -> bool:
    """True when the prediction says the information is not available.

    Matches any of :data:`ABSTAIN_PHRASES` as a substring of the lower-cased prediction with
    whitespace collapsed. This is broader than the category-5 rule in LoCoMo's scorer,
    which accepts only LoCoMo's two phrases.

    Args:
        prediction: Model answer.

    Returns:
        Whether the answer is an abstention.

    Example:
        >>> is_abstention("The date is unknown.")
        True
        >>> is_abstention("In May 2023.")
        False
    """
    text = " ".join(prediction.lower().split())
    return any(phrase in text for phrase in ABSTAIN_PHRASES)



def _memory_date_style(m: re.Match[str]) -> str:
    try:
        day = date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return m[0]
    return f"{day.day} {day:%B %Y}"


def tidy_answer(answer: str, known: set[str]) -> tuple[str, list[str]]:
    """An answer without the scaffolding small models copy into it, and ids it named.

    Small models often echo a memory's provenance header ("D23:19 · James · 4 September
    2022") or run on past the answer. The header's id is evidence; when the header is
    all there is, its date is the closest thing to an answer the model gave. In JSON,
    small models also write dates as ISO timestamps ("2023-05-08 23:30:52") where the
    memories say "8 May 2023": dates are put back in the memories' style.
    """
    text = answer.strip().split("\n", 1)[0].strip().rstrip("}").strip()
    text = _ISO_DATE.sub(_memory_date_style, text)
    head = text.lstrip("[").split("·", 1)[0].strip()
    if "·" not in text or head not in known:
        return text, []
    if "]" in text:
        header, rest = text.split("]", 1)
    else:
        header, rest = text, ""
    parts = header.lstrip("[").split("·")
    date = parts[-1].strip() if len(parts) >= 3 else ""
    return rest.strip() or date, [head]


def resolve_relative_times(answer: str, memories: str, evidence: list[str]) -> str:
    """``answer`` with its relative times ("yesterday", "last year") read against the date
    of the memory they came from: a cited memory that says the phrase, else the first
    memory line that says it, else the first cited memory. A relative time is only true
    on the day it was said; the packer resolves it in the memories ("yesterday [7 May
    2023]"), and models still copy the bare phrase into their answers.

    Example:
        >>> resolve_relative_times("yesterday", "[D1:3 · Ana · 8 May 2023] I ran yesterday.",
        ...                        ["D1:3"])
        '7 May 2023'
    """
    lines = {m.id: (m.when, m.text.casefold()) for line in memories.splitlines()
             if (m := parse(line)) is not None and m.when is not None}
    if not lines:
        return answer
    ranked = [*(e for e in evidence if e in lines), *(i for i in lines if i not in evidence)]
    for span in resolve_times(answer, lines[ranked[0]][0]):
        if not span.relative:
            continue
        phrase = span.text.casefold()
        said = next((i for i in ranked if phrase in lines[i][1]), None)
        if said is None and not any(e in lines for e in evidence):
            continue  # nobody said it and nothing was cited: no date to read it on
        when = lines[said or ranked[0]][0]
        if resolved := normalise_time(span.text, when):
            answer = answer.replace(span.text, resolved.resolved, 1)
    return answer


def cited_ids(memories: str) -> set[str]:
    """The ids that open the provenance brackets of packed memory lines."""
    return set(_ID.findall(memories))


# Three worked examples of the answer style, made up (not from any benchmark): a span
# copied from a memory, a relative date read through the packer's resolution, and an
# abstention. On 100 LoCoMo dev questions SmolLM2-135M scored F1 0.146 without them,
# 0.198 with the first two and 0.226 with all three, for ~330 more prompt tokens.
# Optimizers (or ``demos = []``) replace them like any demos.
STYLE_DEMOS = [
    dspy.Example(
        memories="[D2:4 · Ana · 3 March 2021] We adopted a beagle named Rex yesterday "
                 "[2 March 2021].\n[D2:5 · Tom · 3 March 2021] I love dogs! I have two cats "
                 "though.",
        question="What kind of dog did Ana adopt?", answer="a beagle", evidence=["D2:4"]),
    dspy.Example(
        memories="[D7:1 · Tom · 9 June 2022] I ran my first marathon last week [the week "
                 "before 9 June 2022].\n[D7:2 · Ana · 9 June 2022] Congrats! How did it feel?",
        question="When did Tom run his first marathon?",
        answer="the week before 9 June 2022", evidence=["D7:1"]),
    dspy.Example(
        memories="[D4:2 · Ana · 5 May 2020] My sister lives in Lyon.\n[D4:3 · Tom · 5 May "
                 "2020] Lyon is lovely in spring.",
        question="Where does Tom's brother work?", answer="Not mentioned", evidence=[]),
]


class QA(dspy.Module):
    """Answers from packed memories; abstains explicitly when they do not support an answer.

    The prediction has ``answer`` (``ABSTAIN_ANSWER`` on abstention), ``evidence`` (only
    ids that really occur in the memories: small models invent some) and ``abstained``.

    Example:
        >>> qa = QA()
        >>> qa(question="Where does Ana live?",
        ...    memories="[D1:2 · Ana · 1 May 2023] I live in Oslo")  # doctest: +SKIP
    """

    def __init__(self) -> None:
        super().__init__()
        self.respond = StructuredPredict(AnswerFromMemories, "QA")
        self.respond.predict.demos = list(STYLE_DEMOS)

    def forward(self, question: str, memories: str) -> dspy.Prediction:
        """Answer ``question`` from ``memories`` (a packed context block)."""
        out = self.respond(question=question, memories=memories or "(no memories)")
        known = cited_ids(memories)
        answer, named = tidy_answer(out.answer or "", known)
        abstained = not answer or is_abstention(answer)
        cited = [e.strip() for e in out.evidence or []] + named
        evidence = list(dict.fromkeys(e for e in cited if e in known))
        answer = resolve_relative_times(answer, memories or "", evidence)
        return dspy.Prediction(answer=ABSTAIN_ANSWER if abstained else answer,
                               evidence=evidence, abstained=abstained)
