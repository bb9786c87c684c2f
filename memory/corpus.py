"""A tenant's turns grouped by person, tokenised once: names and distinctive terms.

* **names**: capitalised words inside a sentence (not its first word) that the tenant's
  text never writes in lower case more often than capitalised, minus the tenant's
  speakers, months and days. That test, not a name list, is what keeps "Nature" out.
  A name is a person's *own* in a conversation when they said it first there (Ben's
  dog Rex is Ben's, though Tom asks after him).
* **distinctive terms**: the log-odds ratio with an informative Dirichlet prior (Monroe,
  Colaresi & Quinn 2008) of the person's stemmed tokens against everyone else's in the
  tenant (``alpha0`` = 1000 pseudo-counts spread by overall frequency), as z-scores;
  terms said at least twice, three letters or more, not a speaker's name. On a small
  tenant the background is small too, so common verbs can still rank: terms are weak
  evidence, and the overlap score weighs them least.
"""

from __future__ import annotations

import calendar
import math
import re
from collections import Counter, defaultdict
from datetime import datetime

from . import text as textmod
from .models import Turn

_CAPS = re.compile(r"[A-Z][a-z'’-]+(?:\s[A-Z][a-z'’-]+)*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_CALENDAR = frozenset(w.lower() for w in [*calendar.month_name, *calendar.day_name,
                                          *calendar.month_abbr, *calendar.day_abbr] if w)


class Corpus:
    """A tenant's turns grouped by (conversation, speaker), tokenised once."""

    def __init__(self, turns: list[Turn]) -> None:
        self.by_person: dict[tuple[str, str], list[Turn]] = defaultdict(list)
        self.tokens: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        self.lower: Counter[str] = Counter()
        self.capital: Counter[str] = Counter()
        self.dates: dict[str, list[datetime]] = defaultdict(list)
        self.sessions: dict[str, set[str]] = defaultdict(set)
        for t in turns:
            key = (t.conversation_id, t.speaker)
            self.by_person[key].append(t)
            self.tokens[key].update(textmod.tokens(t.text))
            self.sessions[t.conversation_id].add(t.session_id)
            if t.event_time is not None:
                self.dates[t.conversation_id].append(t.event_time)
            for word in re.findall(r"[A-Za-z'’-]+", t.text):
                folded = word.casefold().replace("’", "'")
                (self.capital if word[0].isupper() else self.lower)[folded] += 1
        self.speakers = {s for _, s in self.by_person}
        # Who brought each name into each conversation: a name is the person's own when
        # they said it first ("Rex" is Ben's dog when Ben introduced him).
        self.introduced: dict[tuple[str, str], str] = {}
        for t in turns:
            for name in self.names_in(t.text):
                self.introduced.setdefault((t.conversation_id, name), t.speaker)
        self._speaker_tokens = {tok for s in self.speakers for tok in textmod.tokens(s)}

    def conversations(self) -> list[str]:
        """The conversation ids, sorted."""
        return sorted({c for c, _ in self.by_person})

    def people(self, conversation_id: str) -> list[str]:
        """The speakers of one conversation, in order of first turn."""
        found = [(ts[0].seq, s) for (c, s), ts in self.by_person.items() if c == conversation_id]
        return [s for _, s in sorted(found)]

    def distinctive(self, key: tuple[str, str], exclude: set[tuple[str, str]], k: int,
                    alpha0: float = 1000.0) -> list[tuple[str, float]]:
        """Top ``k`` terms of ``key`` by log-odds z-score against everyone else's turns."""
        target = self.tokens.get(key, Counter())
        rest: Counter[str] = Counter()
        for other, counts in self.tokens.items():
            if other != key and other not in exclude:
                rest.update(counts)
        n_t, n_r = sum(target.values()), sum(rest.values())
        n_all = n_t + n_r
        scored = []
        for term, y_t in target.items():
            if y_t < 2 or len(term) < 3 or term.isdigit() or term in self._speaker_tokens:
                continue
            a = alpha0 * (y_t + rest[term]) / n_all
            y_r = rest[term]
            delta = (math.log((y_t + a) / (n_t + alpha0 - y_t - a))
                     - math.log((y_r + a) / (n_r + alpha0 - y_r - a)))
            scored.append((term, round(delta / math.sqrt(1 / (y_t + a) + 1 / (y_r + a)), 2)))
        return sorted(scored, key=lambda s: (-s[1], s[0]))[:k]

    def names_in(self, text: str) -> list[str]:
        """Proper names inside the sentences of ``text`` (see the module docstring)."""
        out = []
        for sentence in _SENTENCE.split(text.strip()):
            for m in _CAPS.finditer(sentence):
                if m.start() == 0 or sentence[:m.start()].strip(" \"'“‘(") == "":
                    continue
                words = [w.casefold().replace("’", "'") for w in m.group(0).split()]
                if any(w in textmod.STOP_WORDS or w in _CALENDAR
                       or self.lower[w] > self.capital[w] for w in words):
                    continue
                name = re.sub(r"(?:['’]s|-)$", "", m.group(0))
                if len(name) >= 3 and name not in self.speakers:
                    out.append(name)
        return out
