"""Pydantic models for everything that crosses the store's boundary.

One ``items`` table holds every memory kind; each kind has its own model here, and the
fields a kind adds beyond :class:`Item` travel in the row's ``data`` JSON column. Event
time (when a thing happened) and record time (when we learned it) are separate fields.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, get_args, overload

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_serializer,
    model_validator,
)


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (the store's record-time clock)."""
    return datetime.now(UTC)


@overload
def as_utc(value: datetime) -> datetime: ...


@overload
def as_utc(value: None) -> None: ...


def as_utc(value: datetime | None) -> datetime | None:
    """Normalise a datetime to aware UTC (naive values are taken as UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def with_caption(text: str, metadata: dict[str, Any]) -> str:
    """A turn's text with its caption, if it shared something (how turns are shown).

    ``metadata["caption"]`` describes an image or a file the turn shared; format adapters
    map a dataset's own caption field to it.
    """
    caption = metadata.get("caption")
    return f"{text} [shares a photo: {caption}]" if caption else text


UTCDateTime = Annotated[datetime, AfterValidator(as_utc)]
"""A datetime stored as aware UTC; naive input is taken as UTC."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Conversation(_Model):
    """A conversation a tenant took part in (a chat thread, a dataset's dialogue)."""

    id: str
    user_id: str
    agent_id: str | None = None
    title: str = ""
    speakers: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    recorded_at: UTCDateTime | None = None
    """When its header was last written (None: the store stamps the time it writes it)."""


class Session(_Model):
    """One sitting of a conversation; ``started_at`` is its event time."""

    id: str
    user_id: str
    conversation_id: str
    index: int
    started_at: UTCDateTime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)



class Turn(_Model):
    """One utterance: who said what, in which session, and when it happened.

    ``turn_id`` is the source's own id (``s3:7``); ``id`` is the store's. Side data stays
    in ``metadata``: ``caption`` describes an attached image or file.
    """

    id: str = ""
    user_id: str
    agent_id: str | None = None
    conversation_id: str
    session_id: str
    turn_id: str
    seq: int
    speaker: str
    text: str
    event_time: UTCDateTime | None = None
    recorded_at: UTCDateTime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


    def search_text(self) -> str:
        """What is embedded, and what a reader sees: ``speaker: utterance`` and any image
        caption (an encoder reads who said it as part of the sentence)."""
        return f"{self.speaker}: {self.indexed_text()}"

    def indexed_text(self) -> str:
        """What the full-text index holds: the utterance and any image caption. The
        speaker is a field there, not a word: a role label ("user") or a name would
        otherwise match every turn its speaker said."""
        return with_caption(self.text, self.metadata)


class Item(_Model):
    """A memory item of any kind. Subclasses add kind-specific fields (stored in ``data``).

    ``evidence`` holds the ids of the turns it came from (provenance); ``speaker`` is who
    said it and ``about`` whom it concerns. ``valid_to`` ends an item's validity when a
    later one supersedes it: items are superseded, never silently rewritten.
    """

    kind: str
    id: str = ""
    user_id: str
    agent_id: str | None = None
    text: str = Field(min_length=1)
    title: str = ""
    tags: list[str] = Field(default_factory=list)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    source: str = ""
    speaker: str | None = None
    about: str | None = None
    conversation_id: str | None = None
    evidence: list[str] = Field(default_factory=list)
    event_time: UTCDateTime | None = None
    valid_to: UTCDateTime | None = None
    recorded_at: UTCDateTime | None = None
    updated_at: UTCDateTime | None = None

    BASE_FIELDS: ClassVar[frozenset[str]] = frozenset()  # filled in below
    #: Bookkeeping fields (use counters): changing only these makes no new version.
    UNVERSIONED: ClassVar[frozenset[str]] = frozenset()
    #: Fields that scope an item: equal texts in two scopes are two items, not duplicates.
    SCOPE: ClassVar[tuple[str, ...]] = ()


    def data(self) -> dict[str, Any]:
        """The kind-specific fields, as stored in the ``data`` column."""
        return self.model_dump(mode="json", exclude=set(Item.BASE_FIELDS))


Item.BASE_FIELDS = frozenset(Item.model_fields)


class FactItem(Item):
    """A structured fact: subject, predicate, object (and where, if known).

    ``speaker`` said it, ``about`` is whom it concerns; ``event_time`` .. ``time_end`` is
    the span it happened in, resolved from ``time_text`` (the words used) against the
    session date, at ``granularity`` (day, week, month, year). ``evidence`` holds the
    source turn ids (``s3:7``) inside ``conversation_id``.
    """

    kind: Literal["fact"] = "fact"
    subject: str = ""
    predicate: str = ""
    object: str = ""
    location: str | None = None
    time_text: str = ""
    time_end: UTCDateTime | None = None
    granularity: str | None = None
    session_id: str | None = None


class SemanticItem(Item):
    """General knowledge about the user or the world, not tied to one episode.

    ``concept`` is what the fact is about (a name, a topic); ``title`` repeats it so the
    lexical index finds it. ``source`` says where it was learned.
    """

    kind: Literal["semantic"] = "semantic"
    concept: str = ""


class EpisodicItem(Item):
    """Something that happened (an event, a session, an article read, a task done).

    ``source_label`` names where it came from, ``temporal_index`` orders episodes of one
    tenant, ``compressed`` is set once a ``consolidated`` item summarises it (the episode
    is kept, never deleted).
    """

    kind: Literal["episodic"] = "episodic"
    session_id: str | None = None
    source_label: str = ""
    temporal_index: int = 0
    compressed: bool = False


class ProceduralItem(Item):
    """How to do something: ordered ``steps``, the ``prerequisites`` to know first, and
    ``usage_count``, the times it was recalled (procedures used more rank first)."""

    kind: Literal["procedural"] = "procedural"
    steps: list[str] = Field(default_factory=list)
    prerequisites: list[str] = Field(default_factory=list)
    usage_count: int = Field(default=0, ge=0)

    UNVERSIONED: ClassVar[frozenset[str]] = frozenset({"usage_count"})


ProspectiveStatus = Literal["pending", "triggered", "resolved"]


class ProspectiveItem(Item):
    """An intention: do ``action`` when ``trigger_keywords`` appear in new input or when
    ``trigger_at`` passes. ``status`` goes pending -> triggered -> resolved; ``event_time``
    is when it is due, where that is known."""

    kind: Literal["prospective"] = "prospective"
    trigger_keywords: list[str] = Field(default_factory=list)
    trigger_at: UTCDateTime | None = None
    action: str = ""
    priority: int = 0
    status: ProspectiveStatus = "pending"
    triggered_by: str = ""

    @model_validator(mode="before")
    @classmethod
    def _legacy_done(cls, data: Any) -> Any:
        # Rows written before ``status`` carried ``done``: read them as resolved/pending.
        if isinstance(data, dict) and "done" in data:
            data = dict(data)
            done = data.pop("done")
            data.setdefault("status", "resolved" if done else "pending")
        return data


WorkingSlot = Literal["question", "retrieved_fact", "reasoning_step", "context", "plan",
                      "evaluation"]
WORKING_SLOTS: tuple[str, ...] = get_args(WorkingSlot)


class WorkingItem(Item):
    """Short-lived task state: one ``slot`` of the task ``task_id``, with a ``relevance``
    that decides eviction at capacity. Dropped when the task completes or after
    ``expires_at``."""

    kind: Literal["working"] = "working"
    expires_at: UTCDateTime | None = None
    task_id: str = ""
    slot: WorkingSlot | None = None
    relevance: float = Field(default=0.5, ge=0.0, le=1.0)

    SCOPE: ClassVar[tuple[str, ...]] = ("task_id",)


class SensoryItem(Item):
    """A raw observation kept as text (a message, an image caption, a sound): buffered
    until ``expires_at``, in ``observation_order``, unless attended to (``attended``)."""

    kind: Literal["sensory"] = "sensory"
    modality: str = "image"
    uri: str | None = None
    observation_order: int = 0
    expires_at: UTCDateTime | None = None
    attended: bool = False

    SCOPE: ClassVar[tuple[str, ...]] = ("observation_order",)  # raw input: never merged


class StrategyItem(Item):
    """A reusable strategy or guardrail distilled from runs (ReasoningBank style)."""

    kind: Literal["strategy"] = "strategy"
    description: str = ""
    polarity: Literal["success", "failure"] = "success"
    uses: int = 0
    wins: int = 0

    UNVERSIONED: ClassVar[frozenset[str]] = frozenset({"uses", "wins"})


class PersonaItem(Item):
    """One attribute of a person (preference, trait, fact) with its citations."""

    kind: Literal["persona"] = "persona"
    person: str = ""
    attribute: str = ""
    value: str = ""


class EntityItem(Item):
    """A person (or other entity) as one conversation knows it.

    One row per name per conversation: two conversations' "Ben" are two entities until
    the reconciler decides they are the same person. ``roles`` are what the entity is to
    others ("Ana's friend"), ``states`` what held of it at a time ("lives in Oslo").
    """

    kind: Literal["entity"] = "entity"
    name: str = ""
    entity_type: str = "person"
    roles: list[str] = Field(default_factory=list)
    states: list[str] = Field(default_factory=list)
    aliases: list[str] = Field(default_factory=list)


class QAPairItem(Item):
    """A question a passage answers, with the answer (the seed's QA network).

    ``title`` is the question; ``text`` is "question answer" so both are searchable.
    """

    kind: Literal["qa"] = "qa"
    question: str = ""
    answer: str = ""


class ConsolidatedItem(Item):
    """An item merged from others; ``sources`` are the merged items' ids."""

    kind: Literal["consolidated"] = "consolidated"
    sources: list[str] = Field(default_factory=list)


AnyItem = Annotated[
    FactItem
    | SemanticItem
    | EpisodicItem
    | ProceduralItem
    | ProspectiveItem
    | WorkingItem
    | SensoryItem
    | StrategyItem
    | PersonaItem
    | EntityItem
    | QAPairItem
    | ConsolidatedItem,
    Field(discriminator="kind"),
]
ITEM_ADAPTER: TypeAdapter[Item] = TypeAdapter(AnyItem)
ITEM_KINDS: tuple[str, ...] = tuple(
    cls.model_fields["kind"].default
    for cls in (
        FactItem, SemanticItem, EpisodicItem, ProceduralItem, ProspectiveItem,
        WorkingItem, SensoryItem, StrategyItem, PersonaItem, EntityItem, QAPairItem,
        ConsolidatedItem,
    )
)


class Edge(_Model):
    """A directed, weighted relation between two stored nodes (items or turns)."""

    id: int | None = None
    user_id: str
    src: str
    dst: str
    relation: str
    weight: float = 1.0
    metadata: dict[str, Any] = Field(default_factory=dict)
    recorded_at: UTCDateTime | None = None
    """When it was first written (None: the store stamps the time it writes it)."""


class Hit(_Model):
    """One search result: the node, its score, and what each channel contributed.

    ``score`` is in [0, 1] (``memory.retrieval``: the query's relevance to the memory times
    the hit's share of the best ``fused`` score). ``channels`` maps each channel that found
    the node (``lexical``, ``expansion``, ``speaker_lexical``, ``dense``,
    ``speaker_dense``, ``tags``) to what it added to the fused score; the priors then scale
    that sum and the graph adds to it, giving ``fused`` (a node only the graph reached has
    no channel).
    """

    id: str
    node: Literal["turn", "item"]
    kind: str
    text: str
    score: float
    speaker: str | None = None
    conversation_id: str | None = None
    turn_id: str | None = None
    event_time: UTCDateTime | None = None
    channels: dict[str, float] = Field(default_factory=dict)
    fused: float = 0.0
    """What ranked the hit: the channels' fused sum, scaled by the priors, plus what the
    graph added. Comparable only within one search (``score`` is comparable across
    searches)."""
    quote: str | None = None
    """For a text longer than a passage (``passages.PASSAGE_CHARS``): its passage (a code
    block, or a window of paragraphs) holding the most of the query's words."""

    @field_serializer("fused")
    def _fused(self, fused: float) -> float:
        # Six decimals, as ``score`` has: a sum of weights printed 2.2399999999999998.
        return round(fused, 6)
