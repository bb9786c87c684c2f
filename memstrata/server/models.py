"""The REST API's request and response bodies: pydantic models, which validate what comes
in and describe both directions in the OpenAPI document (``openapi.py``).

Requests forbid fields they do not declare (a typo is an error, not a silent default),
except ``user_id``, which every tenant request may carry: with a tenant key it must name
the key's own tenant (anything else is ``forbidden``); with an admin key it names the
tenant acted on. Values ``Memory`` checks itself (text sizes, ids, filters, kinds) are
checked there, once, and refused as ``validation_error`` with ``Memory``'s message.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memstrata.memory.models import Hit
from memstrata.memory.store.versions import Version

ID_CHARS = 256


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: str | None = Field(None, max_length=ID_CHARS, description=(
        "With a tenant key: omit it, or name the key's own tenant. With an admin key: the "
        "tenant acted on (required)."))


class AddRequest(_Request):
    """``POST /v1/memories``: store messages as turns (``Memory.add``)."""

    messages: Any = Field(description=(
        "A string (said by 'user'), a message {role|speaker, content, timestamp?, "
        "metadata?} (OpenAI and Anthropic messages as they are), or a list of them."))
    infer: bool = Field(True, description="Extract facts (with the server's --lm).")
    agent_id: str | None = Field(None, max_length=ID_CHARS)
    conversation_id: str | None = Field(None, max_length=ID_CHARS)
    session_id: str | None = Field(None, max_length=ID_CHARS)
    timestamp: str | float | None = Field(None, description="ISO 8601 or Unix seconds.")
    metadata: dict[str, Any] | None = None
    skip_roles: list[str] | None = None


class SearchRequest(_Request):
    """``POST /v1/search``: hybrid search (``Memory.search``)."""

    query: str = Field(description="The question or keywords.")
    k: int | None = Field(None, description="How many hits (default 10, at most 1,000).")
    limit: int | None = Field(None, description="mem0's name for k.")
    filters: dict[str, Any] | None = Field(None, description=(
        "kinds, speaker, conversation_id, start, end."))
    min_score: float | None = Field(None, ge=0.0, le=1.0)
    format: Literal["memstrata", "mem0"] = Field("memstrata", description=(
        "'mem0': each hit as mem0's {id, memory, score, user_id, created_at, updated_at, "
        "metadata}."))


class UpdateRequest(_Request):
    """``PUT /v1/memories/{id}``: new text, as a new version (``Memory.update``)."""

    text: str


class AnswerRequest(_Request):
    """``POST /v1/answer``: answer from memory with evidence (``Memory.answer``)."""

    question: str
    conversation_id: str | None = Field(None, max_length=ID_CHARS)
    route: Literal["auto", "rules", "answerer", "reasoner"] = Field("auto", description=(
        "'auto': the intent check (one LLM call) routes a recall to the answerer and a "
        "computation, a temporal comparison, a contradiction or a synthesis to the "
        "reasoner; 'rules': routed on the question's words (no call); 'answerer' or "
        "'reasoner': that path."))


class FlushRequest(_Request):
    """``POST /v1/flush``: extract the facts of unextracted turns now (``Memory.flush``)."""

    conversation_id: str | None = Field(None, max_length=ID_CHARS)


class ListQuery(_Request):
    """``GET /v1/memories`` query parameters (``Memory.get_all``)."""

    kind: str | None = None
    limit: int = 100
    offset: int = 0


class TenantQuery(_Request):
    """Query parameters of the single-memory routes and of export."""


class KeyQuery(BaseModel):
    """``GET /v1/admin/keys`` query parameters."""

    model_config = ConfigDict(extra="forbid")

    tenant: str | None = Field(None, max_length=ID_CHARS)
    revoked: bool = True


class CreateKeyRequest(BaseModel):
    """``POST /v1/admin/keys``: a new key for one tenant, or an admin key."""

    model_config = ConfigDict(extra="forbid")

    tenant: str | None = Field(None, max_length=ID_CHARS)
    admin: bool = False
    name: str = Field("", max_length=200)


# -- responses ------------------------------------------------------------------------------


class Results(BaseModel):
    """A list of results (events, rows, versions)."""

    results: list[dict[str, Any]]


class HitsResponse(BaseModel):
    """Search hits, best first (``format: "mem0"``: mem0's shape, see ``compat``)."""

    results: list[Hit] | list[dict[str, Any]]


class VersionsResponse(BaseModel):
    """Every version of a memory, oldest first."""

    results: list[Version]


class Deleted(BaseModel):
    """What a deletion removed."""

    deleted: bool | dict[str, int]


class UpdateEvent(BaseModel):
    """``Memory.update``'s event (``NONE``: the text was the memory's already)."""

    id: str
    memory: str
    event: Literal["UPDATE", "NONE"]
    previous: str | None


class AnswerResponse(BaseModel):
    """An answer (or abstention) with the evidence ids it rests on."""

    question: str
    answer: str
    abstained: bool
    answered_by: str
    reason: str = ""
    evidence: list[str] = []
    evidence_from: str = "none"
    sources: list[dict[str, Any]] = []
    speakers: list[str] = []
    about: list[str] = []
    conversation_id: str | None = None
    confidence: float = 0.0
    path: Literal["answerer", "reasoner"] = "answerer"
    intent: str = Field("", description="The checked intent that chose the path.")
    llm_calls: int = Field(0, description="The LLM calls this answer took.")
    run_id: str | None = Field(None, description="Its run record (program memory.answer).")


class Identity(BaseModel):
    """Who the key is."""

    key_id: str
    tenant: str | None
    admin: bool


class KeyRecord(BaseModel):
    """A key's record: everything but the key."""

    id: str
    tenant: str | None
    admin: bool
    name: str
    created_at: str
    last_used: str | None
    revoked_at: str | None


class NewKey(BaseModel):
    """A new key: ``key`` is shown this once (only its hash is stored)."""

    key: str
    record: KeyRecord


class KeysResponse(BaseModel):
    """Keys, oldest first."""

    results: list[KeyRecord]


class TenantsResponse(BaseModel):
    """Tenants with an active key."""

    results: list[str]


class TenantDeleted(BaseModel):
    """A forgotten tenant: rows deleted per table, keys revoked."""

    deleted: dict[str, int]
    revoked_keys: int


class Revoked(BaseModel):
    """Whether the key was active (and is revoked now)."""

    revoked: bool


class ErrorBody(BaseModel):
    """``error`` of every error response (see ``errors.py`` for the codes)."""

    code: str
    message: str
    details: list[Any] | None = None


class ErrorResponse(BaseModel):
    """Every error response."""

    error: ErrorBody
