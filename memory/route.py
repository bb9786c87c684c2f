"""Question routing: which person a question is about, in which conversations, or global.

A tenant's memory can hold several conversations (one user talking with several
people, or a dataset's conversations loaded under one tenant). A question that names a
known person ("What did Ana realize...", "Ana's kids") is routed to the
conversations that person speaks in or that hold items about them; one that names no
one is global (every conversation of the tenant); a caller that already knows the
conversation pins it. People are known by speaker names, item ``speaker``/``about``
and entity names and aliases; possessives count ("Ana's").
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from .attribution import ConversationIndex, index_conversation
from .models import Item
from .query import named_speakers, time_range
from .store.protocol import MemoryStore

#: Item kinds whose text says something about a person (credited to ``about``/``speaker``).
ATTRIBUTED_KINDS = ("fact", "persona", "qa", "semantic", "episodic")


class Route(BaseModel):
    """Where a question goes: the people it names, their conversations, the time span."""

    scope: Literal["person", "conversation", "global"]
    people: list[str] = []
    conversations: list[str] = []
    span: tuple[datetime, datetime] | None = None

    def keeps(self, conversation_id: str | None) -> bool:
        """Whether a memory of ``conversation_id`` is on this route: any, for a global
        question; else one of its conversations', or one that belongs to none."""
        return (self.scope == "global" or conversation_id is None
                or conversation_id in self.conversations)


class Router:
    """Routes questions over one store and keeps each conversation's attribution index.

    Indexes are rebuilt when the tenant's data changes (``Store.state_pointer``).

    Example:
        >>> router = Router(store)                                   # doctest: +SKIP
        >>> router.route("u1", "What did Ana realize after her race?").people
        ['Ana']
    """

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._indexes: dict[tuple[str, str], tuple[str, ConversationIndex]] = {}

    def people(self, user_id: str) -> list[str]:
        """Every person the tenant's memory knows by name (speakers, subjects, entities)."""
        known = set(self.store.speakers(user_id))
        known.update(self.store.entity_names(user_id, "person"))
        return sorted(known)

    def conversations_of(self, user_id: str, people: list[str]) -> list[str]:
        """The tenant's conversations where any of ``people`` speaks or is the subject."""
        return self.store.conversations_with(user_id, people)

    def route(self, user_id: str, question: str, *, conversation_id: str | None = None,
              now: datetime | None = None) -> Route:
        """Route ``question``: named people, their conversations (or all), its time span."""
        people = named_speakers(question, self.people(user_id))
        span = time_range(question, now)
        if conversation_id is not None:
            return Route(scope="conversation", people=people, conversations=[conversation_id],
                         span=span)
        convs = self.conversations_of(user_id, people)
        if people and convs:
            return Route(scope="person", people=people, conversations=convs, span=span)
        return Route(scope="global", people=people,
                     conversations=self.conversations_of(user_id, []), span=span)

    def index(self, user_id: str, conversation_id: str) -> ConversationIndex:
        """The attribution index of one conversation (cached until the tenant changes)."""
        state = self.store.state_pointer(user_id)["digest"]
        key = (user_id, conversation_id)
        cached = self._indexes.get(key)
        if cached is not None and cached[0] == state:
            return cached[1]
        turns = self.store.turns(user_id, conversation_id=conversation_id)
        items = self._items(user_id, conversation_id)
        built = index_conversation(conversation_id, turns, items)
        self._indexes[key] = (state, built)
        while len(self._indexes) > self.MAX_INDEXES:  # oldest first: dicts keep order
            self._indexes.pop(next(iter(self._indexes)))
        return built

    MAX_INDEXES = 64
    """Most conversation indexes kept in memory (each holds a conversation's turns)."""

    def forget(self, user_id: str) -> None:
        """Drop the cached indexes of one tenant (after it is deleted)."""
        for key in [k for k in self._indexes if k[0] == user_id]:
            del self._indexes[key]

    def _items(self, user_id: str, conversation_id: str) -> list[Item]:
        ids = self.store.current_ids(user_id, conversation_id, ATTRIBUTED_KINDS)
        return self.store.get_many(user_id, ids) if ids else []
