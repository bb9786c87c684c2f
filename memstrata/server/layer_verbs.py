"""The routes of the verbs that reach every layer of a tenant's memory: ``context``,
``read``, ``learn`` and ``expect`` (``Memory``'s methods of the same names), with their
request and response models.

They run as every other route does (``routes._dispatch``): the key decides the tenant,
a ``user_id`` naming another tenant is ``forbidden``, the body is validated by its model.
``expect``, and ``learn`` with ``method: "llm"``, need the server's ``--lm``
(``no_model`` without one). A recorded run named in ``learn`` must be one of the
tenant's own (another tenant's run id is ``not_found``, as an unknown one).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memstrata.memory.cognitive import ReadReport
from memstrata.packers.lines import parse
from memstrata.packers.memory_context import HEADERS, MemoryContext
from memstrata.programs.expectation import Expectation
from memstrata.programs.learning import Lesson

from .errors import ApiError
from .models import ID_CHARS, _Request
from .routes import Call, Endpoint

MAX_CONTEXT_BUDGET = 20_000
"""The largest ``budget`` of ``POST /v1/context``, in tokens (a block of about 80 KB)."""
MAX_USED = 200
"""The most strategy ids one ``learn`` may name as used."""
MAX_TAGS = 10
"""The most tags one ``learn`` may add to what it writes."""

LayerName = Literal["conversation", "semantic", "procedures", "strategies", "voe",
                    "intentions"]


class ContextRequest(_Request):
    """``POST /v1/context``: the tenant's memory for a query as one budgeted block
    (``Memory.context``; no LLM call)."""

    query: str = Field(description="What the block is for: the user's message or question.")
    budget: int = Field(600, ge=1, le=MAX_CONTEXT_BUDGET, description=(
        "The most tokens the block takes, headers included (the server's --lm tokenizer; "
        "about four characters a token without one)."))
    layers: list[LayerName] | None = Field(None, max_length=6, description=(
        "The layers to show, in their fixed order (default: all)."))
    conversation_id: str | None = Field(None, max_length=ID_CHARS, description=(
        "Route the conversation layer to this conversation."))


class ContextLine(BaseModel):
    """One line of the block: its provenance head read back, and its text."""

    id: str | None = Field(description="The store id (GET /v1/memories/{id} reads it).")
    speaker: str | None = Field(None, description="Who said it, or the source it was read "
                                "from.")
    day: str | None = Field(None, description="The day of its event time (ISO date).")
    text: str


class ContextLayer(BaseModel):
    """What one layer put in the block."""

    ids: list[str]
    tokens: int
    budget: int
    candidates: int
    dropped: int
    lines: list[ContextLine]


class ContextResponse(BaseModel):
    """The block (``text``), every store id in it (``ids``), and each layer's part."""

    query: str
    text: str
    ids: list[str]
    tokens: int
    budget: int
    layers: dict[str, ContextLayer]
    sources: dict[str, str] = Field(description="id -> the layer that shows it")


class ReadRequest(_Request):
    """``POST /v1/read``: read a document into the tenant's memory (``Memory.read``; no
    LLM call)."""

    text: str = Field(description="The document (an article, a tutorial, a report).")
    title: str | None = Field(None, max_length=4096)
    source: str | None = Field(None, max_length=4096, description="Who published it.")
    when: str | float | None = Field(None, description=(
        "The document's date: ISO 8601 (a date or a time) or Unix seconds."))


class RunIn(BaseModel):
    """A judged agent run as JSON: its task, its trajectory and its answer."""

    model_config = ConfigDict(extra="forbid")

    task: str | None = Field(None, description="What the run attempted.")
    trajectory: str | list[Any] | dict[str, Any] = Field(description=(
        "The steps: text, a list of steps, or a dspy.ReAct trajectory "
        "(thought_N, tool_name_N, tool_args_N, observation_N)."))
    answer: str | None = None


class LearnRequest(_Request):
    """``POST /v1/learn``: distil a judged run into strategies the next context shows
    (``Memory.learn``)."""

    run: RunIn | str = Field(description=(
        "The run: {task, trajectory, answer}, the trajectory as text, or the id of a run "
        "recorded in this tenant's store (run_...)."))
    success: bool = Field(description="Your judgement of the run (never the gold answer).")
    task: str | None = Field(None, description="The task, when the run does not carry it.")
    used: list[str] = Field(default_factory=list, max_length=MAX_USED, description=(
        "Strategy ids the run was shown (a context's ids): each counts a use, and a win "
        "on success. Ids that are not the tenant's strategies are ignored."))
    rationale: str = Field("", max_length=4000, description="Why the run was judged so.")
    method: Literal["llm", "trace"] | None = Field(None, description=(
        "'llm' (one LLM call; the default with the server's --lm) or 'trace' (none)."))
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)


class ExpectRequest(_Request):
    """``POST /v1/expect``: after the assistant spoke (its message added), check the
    user's last message against the pending expectation, distil a surprise and predict
    the next move (``Memory.expect``; one LLM call)."""

    conversation_id: str | None = Field(None, max_length=ID_CHARS, description=(
        "The conversation (default 'default', as POST /v1/memories)."))


# -- the handlers ---------------------------------------------------------------------------


def context_json(ctx: MemoryContext) -> dict[str, Any]:
    """A :class:`MemoryContext` as the response's JSON: each layer with its lines."""
    lines = layer_lines(ctx.text)
    return {"query": ctx.query, "text": ctx.text, "ids": ctx.ids, "tokens": ctx.tokens,
            "budget": ctx.budget, "sources": ctx.sources,
            "layers": {name: {**use.model_dump(mode="json"), "lines": lines.get(name, [])}
                       for name, use in ctx.layers.items()}}


def layer_lines(text: str) -> dict[str, list[dict[str, Any]]]:
    """The block's lines under each layer's header, each line's head read back (``id``
    None for a line that has none)."""
    by_header = {header: name for name, header in HEADERS.items()}
    out: dict[str, list[dict[str, Any]]] = {}
    current: str | None = None
    for raw in text.split("\n"):
        if raw in by_header:
            current = by_header[raw]
            out[current] = []
            continue
        if current is None or not raw.strip():
            continue
        line = parse(raw)
        out[current].append(
            {"id": None, "speaker": None, "day": None, "text": raw} if line is None else
            {"id": line.id, "speaker": line.speaker,
             "day": line.when.date().isoformat() if line.when else None,
             "text": line.text})
    return out


async def _context(call: Call) -> Any:
    b = call.body
    ctx = await call.memory.context(b.query, user_id=call.tenant, budget=b.budget,
                                    layers=b.layers, conversation_id=b.conversation_id)
    return context_json(ctx)


async def _read(call: Call) -> Any:
    b = call.body
    report = await call.memory.read(b.text, user_id=call.tenant, title=b.title,
                                     source=b.source, when=b.when)
    return report.model_dump(mode="json")


async def _learn(call: Call) -> Any:
    b = call.body
    tenant = call.tenant
    memory = call.memory.memory
    if b.method == "llm" and memory.lm is None:
        raise ApiError("no_model", "this server was started without --lm: learn with "
                       "method 'llm' needs one (or use method 'trace')")
    run: Any = b.run.model_dump(exclude_none=True) if isinstance(b.run, RunIn) else b.run
    if isinstance(run, str) and run.startswith("run_") and " " not in run.strip():
        # Learn would read an unknown id as trajectory text: name it as absent instead.
        if await asyncio.to_thread(memory.store.runs.get, tenant, run.strip()) is None:
            raise ApiError("not_found", "no such run")
        run = run.strip()
    lesson = await call.memory.learn(run, user_id=tenant, success=b.success, task=b.task,
                                     used=b.used, rationale=b.rationale, method=b.method,
                                     tags=b.tags)
    return lesson.model_dump(mode="json")


async def _expect(call: Call) -> Any:
    tenant = call.tenant  # a key naming another tenant is refused before anything else
    if call.memory.memory.lm is None:
        raise ApiError("no_model", "this server was started without --lm: expect needs one")
    result = await call.memory.expect(tenant, conversation_id=call.body.conversation_id)
    return result.model_dump(mode="json")


ENDPOINTS: list[Endpoint] = [
    Endpoint("POST", "/v1/context", _context, "Every layer as one budgeted block, each line "
             "with its provenance (Memory.context)", body=ContextRequest,
             response=ContextResponse),
    Endpoint("POST", "/v1/read", _read, "Read a document into episodes, semantic facts and "
             "procedures (Memory.read)", body=ReadRequest, response=ReadReport),
    Endpoint("POST", "/v1/learn", _learn, "Distil a judged run into strategies "
             "(Memory.learn)", body=LearnRequest, response=Lesson,
             errors=("no_model", "model_error")),
    Endpoint("POST", "/v1/expect", _expect, "Check, distil and predict the user's next move "
             "(Memory.expect)", body=ExpectRequest, response=Expectation,
             errors=("no_model", "model_error")),
]
"""The layer verbs' operations (the app adds them to ``routes.ENDPOINTS``)."""
