"""Who each piece of a conversation is about: words credited to people, without an LLM.

A turn is not simply about its speaker. In a two-person chat the listener keeps echoing
the speaker's news back ("Wow Ben, a charity race! What did you take away from
it?"), so a turn by Ana can hold every word of Ben's race. Each sentence of a
turn is therefore credited by its grammar:

* first person ("I ran", "my kids"): the speaker (and the addressee too when the
  sentence also says "you": "I love your painting" is about both);
* second person only ("your kids are lovely"): the addressee (the previous turn's
  speaker, or the other participant);
* neither, but naming another participant ("Congrats on the store, Tom!"): that person;
* none of these ("A charity race for mental health! So inspiring."): words the previous
  turn (by someone else) already said are an echo and go to whoever said them first;
  the rest stay with the speaker.

Items (facts, QA pairs, persona entries) carry their own ``about`` (or ``speaker``) and
are credited as a whole. Measured on the LoCoMo dev split (``memstrata bench verify``,
best thresholds with at most 5% false abstention on categories 1-4), crediting by
grammar rather than by speaker raised the adversarial questions caught from 0.35 to 0.60.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from . import text as textmod
from .models import Item, Turn, with_caption

FIRST_PERSON = frozenset((
    "i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves", "i'm", "i've",
    "i'd", "i'll", "we're", "we've", "we'll", "we'd"))
SECOND_PERSON = frozenset((
    "you", "your", "yours", "yourself", "yourselves", "you're", "you've", "you'd", "you'll",
    "ya", "ur"))
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass
class Unit:
    """One turn or item of a conversation, its words credited to people.

    ``people`` maps a person to the (stemmed, stop-word-free) tokens credited to them;
    ``ids`` are the turn ids (``s3:7``) or item ids it stands for.
    """

    ids: list[str]
    speaker: str | None
    session: str | None
    when: str | None
    people: dict[str, set[str]] = field(default_factory=dict)


@dataclass
class ConversationIndex:
    """A conversation's units, who speaks in it, and its token document frequencies."""

    conversation_id: str
    participants: list[str]
    units: list[Unit]
    df: Counter[str]

    def idf(self, token: str) -> float:
        """Inverse document frequency of ``token`` over the conversation's units
        (a word found nowhere weighs most; a word in every unit close to nothing)."""
        import math

        n = len(self.units)
        return math.log((n + 1) / (self.df.get(token, 0) + 0.5))


def _name_tokens(people: list[str]) -> dict[str, set[str]]:
    # "Ana Silva" is named by "ana" or "silva"; tokens are stemmed like the text.
    return {p: set(textmod.tokens(p)) for p in people}


def credit_turn(text: str, speaker: str, addressee: str | None, previous: set[str],
                previous_speaker: str | None, names: dict[str, set[str]]
                ) -> dict[str, set[str]]:
    """The tokens of one turn, credited to people by the rules in the module docstring.

    Args:
        text: the turn's text (with any image caption).
        speaker: who said it.
        addressee: whom it was said to (None when unknown).
        previous: the tokens of the previous turn in the session, if by someone else.
        previous_speaker: who said that previous turn.
        names: each participant's name tokens (names are dropped from the credited words:
            they name people, not what happened).
    """
    all_names = set().union(*names.values()) if names else set()
    out: dict[str, set[str]] = {}
    for sentence in _SENTENCE.split(text):
        words = set(textmod.words(sentence))
        tokens = set(textmod.tokens(sentence))
        if not tokens:
            continue
        mentioned = {p for p, n in names.items() if p != speaker and n & tokens}
        tokens -= all_names
        first, second = bool(words & FIRST_PERSON), bool(words & SECOND_PERSON)
        owners: set[str] = set()
        if first:
            owners.add(speaker)
        if second and addressee:
            owners.add(addressee)
        if not owners and mentioned:
            owners = mentioned
        if not owners:
            echo = tokens & previous if previous_speaker else set()
            if echo and previous_speaker:
                out.setdefault(previous_speaker, set()).update(echo)
            tokens -= echo
            owners = {speaker}
        for person in owners:
            out.setdefault(person, set()).update(tokens)
    return out


def index_conversation(conversation_id: str, turns: Sequence[Turn], items: Sequence[Item] = ()
                       ) -> ConversationIndex:
    """Credit every turn (in conversation order) and item of one conversation."""
    # Participants are the people who speak (items only when there are no turns): a third
    # party's facts are kept under their name, but grammar says nothing about them.
    participants = sorted({t.speaker for t in turns}
                          or {who for i in items if (who := i.about or i.speaker)})
    names = _name_tokens(participants)
    units: list[Unit] = []
    prev: Turn | None = None
    prev_tokens: set[str] = set()
    for turn in turns:
        text = with_caption(turn.text, turn.metadata)
        replying_to = (prev.speaker if prev is not None and prev.session_id == turn.session_id
                       and prev.speaker != turn.speaker else None)
        others = [p for p in participants if p != turn.speaker]
        addressee = replying_to or (others[0] if len(others) == 1 else None)
        people = credit_turn(text, turn.speaker, addressee,
                             prev_tokens if replying_to else set(), replying_to, names)
        units.append(Unit(ids=[turn.turn_id or turn.id], speaker=turn.speaker,
                          session=turn.session_id,
                          when=turn.event_time.isoformat() if turn.event_time else None,
                          people=people))
        prev, prev_tokens = turn, set(textmod.tokens(text))
    for item in items:
        owner = item.about or item.speaker
        tokens = set(textmod.tokens(item.text)) - set().union(*names.values())
        if owner and tokens:
            units.append(Unit(ids=list(item.evidence) or [item.id], speaker=item.speaker,
                              session=None,
                              when=item.event_time.isoformat() if item.event_time else None,
                              people={owner: tokens}))
    df: Counter[str] = Counter()
    for unit in units:
        df.update(set().union(*unit.people.values()) if unit.people else set())
    return ConversationIndex(conversation_id, participants, units, df)
