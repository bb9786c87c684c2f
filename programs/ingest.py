"""Extraction at ingest: chunk, extract (one LLM call a chunk), ground, reconcile, store.

``ingest_conversation`` turns a stored conversation's raw turns (always kept) into
speaker-attributed, time-grounded facts, QA pairs and entities, reconciled session by
session into conversation memory, with the fact graph and the persona layer:

1. ``memory.chunking`` plans the chunks; the plan is checked against the call cap
   (one call per ``calls_per_turns`` turns) *before* any call is made;
2. ``Extractor`` proposes, once per chunk (a parse failure gets one constrained retry,
   then the chunk is reported as failed — loudly, never as an empty success);
3. ``memory.facts.ground`` checks evidence, speaker, about-whom and time;
4. ``memory.hierarchy`` dedups (exact, then fuzzy), supersedes contradictions, links;
5. ``memory.persona`` writes each participant's persona rows.

Every call is metered and recorded as a step of an ``ingest`` run in the store; the
proposals are cached per chunk, model and prompt, so a re-run repeats no call.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import dspy
from pydantic import BaseModel, Field

from memstrata.errors import MemstrataError
from memstrata.memory import Embedder, Filters, MemoryStore
from memstrata.memory.chunking import Chunk, ChunkSettings, chunk_turns
from memstrata.memory.corpus import Corpus
from memstrata.memory.dates import DEFAULT_DATE_STYLE, DateStyle
from memstrata.memory.entities import ensure_entities
from memstrata.memory.facts import Extraction, chunk_text, ground
from memstrata.memory.hierarchy import FactEvent, HierarchyStats, reconcile_conversation
from memstrata.memory.models import EntityItem, FactItem, QAPairItem, Turn
from memstrata.memory.persona import build_persona
from memstrata.trajectories import Recorder

from .cache import JsonlCache
from .errors import ProgramParseError
from .extractor import ExtractMemories, Extractor, format_demo
from .lm import ModelHandle
from .structured import CompactJSONAdapter

SOURCE = "extractor"


class IngestError(MemstrataError, RuntimeError):
    """The ingest cannot run as configured (the plan would break the call cap)."""


def weak_model_warning(chunks: int, empty: int) -> str | None:
    """A loud line when the model proposed nothing for most chunks (too weak to extract)."""
    if chunks and empty / chunks >= 0.5:
        return (f"the model proposed nothing for {empty} of {chunks} chunks: it is likely too "
                "weak to extract (SmolLM2-135M is); few or no facts were stored, raw turns "
                "are kept and searchable")
    return None


class IngestSettings(BaseModel):
    """Knobs of extraction at ingest."""

    chunking: ChunkSettings = Field(default_factory=ChunkSettings)
    calls_per_turns: int = Field(10, ge=1, description="at most one LLM call per N turns")
    max_tokens: int = Field(1024, ge=64, description="the extractor's output budget")
    fuzzy: float = Field(90.0, ge=0, le=100, description="token_set_ratio of one fact")
    persona: bool = True
    date_style: DateStyle = Field(DEFAULT_DATE_STYLE, description="how the extractor's date "
                                  "lines and the facts' resolved times are written")


class ChunkResult(BaseModel):
    """One chunk's extraction (the cached record) and what it cost."""

    key: str
    turn_ids: list[str]
    extraction: Extraction | None = None
    error: str | None = None
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0


class IngestReport(BaseModel):
    """What one conversation's ingest did and cost."""

    conversation_id: str
    model: str
    turns: int = 0
    chunks: int = 0
    cached_chunks: int = 0
    failed_chunks: list[str] = Field(default_factory=list, description="first turn: error")
    empty_chunks: int = Field(0, description="chunks the model proposed nothing for")
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    proposed: dict[str, int] = Field(default_factory=dict)
    kept: dict[str, int] = Field(default_factory=dict)
    rejected: dict[str, int] = Field(default_factory=dict)
    cleared: dict[str, int] = Field(default_factory=dict)
    unresolved_times: int = 0
    hierarchy: HierarchyStats = Field(default_factory=HierarchyStats)
    persona: int = 0
    seconds: float = 0.0
    run_id: str | None = None


def fingerprint(handle: ModelHandle, settings: IngestSettings) -> str:
    """A key for what shapes a proposal: the model, its output budget, the prompt, the
    worked example and the output schema. Grounding is not in it: it re-runs on cached
    proposals, so changing it never costs a call."""
    prompt = CompactJSONAdapter().format_system_message(ExtractMemories)
    blob = json.dumps([handle.name, settings.max_tokens, prompt,
                       repr(format_demo(settings.date_style)),
                       Extraction.model_json_schema()], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def plan(store: MemoryStore, user_id: str, conversation_id: str, settings: IngestSettings,
         turns: list[Turn] | None = None) -> list[Chunk]:
    """The chunks a conversation (or ``turns`` of it) will be extracted in; raises if
    they break the call cap."""
    if turns is None:
        turns = store.turns(user_id, conversation_id=conversation_id)
    chunks = chunk_turns(turns, settings.chunking)
    cap = max(1, math.ceil(len(turns) / settings.calls_per_turns))
    if len(chunks) > cap:
        raise IngestError(
            f"{conversation_id}: {len(chunks)} chunks for {len(turns)} turns would exceed the "
            f"cap of one call per {settings.calls_per_turns} turns ({cap}); raise "
            f"chunking.min_turns")
    return chunks


def _extract(extractor: Extractor, handle: ModelHandle, chunk: Chunk, key: str) -> ChunkResult:
    mark = handle.meter.mark()
    started = time.perf_counter()
    extraction, error = None, None
    try:
        with dspy.context(lm=handle.lm):
            extraction = extractor(chunk=chunk).extraction
    except ProgramParseError as exc:
        error = str(exc)[:300]
    usage = handle.meter.since(mark)
    return ChunkResult(key=key, turn_ids=chunk.turn_ids, extraction=extraction, error=error,
                       calls=usage.calls, input_tokens=usage.input_tokens,
                       output_tokens=usage.output_tokens,
                       seconds=round(time.perf_counter() - started, 3))


def _replace_derived(store: MemoryStore, user_id: str, conversation_id: str) -> None:
    """Drop an earlier ingest's items of this conversation (re-ingest replaces them)."""
    ids = store.allowed_ids(user_id, Filters(kinds=["fact", "qa", "entity"],
                                             conversation_id=conversation_id))
    for item in store.get_many(user_id, sorted(ids)):
        if item.source.startswith(SOURCE):
            store.delete(user_id, item.id)


def _current_facts(store: MemoryStore, user_id: str, conversation_id: str) -> list[FactItem]:
    """The conversation's extracted facts that are still valid (what new ones meet)."""
    ids = store.allowed_ids(user_id, Filters(kinds=["fact"], conversation_id=conversation_id))
    return [f for f in store.get_many(user_id, sorted(ids))
            if isinstance(f, FactItem) and f.valid_to is None and f.source.startswith(SOURCE)]


def _store_entities(store: MemoryStore, user_id: str, conversation_id: str,
                    found: list[EntityItem]) -> int:
    """Participants' entities (``ensure_entities``, read from the turns) gain the roles and
    states the extractor found; anyone else named gets an entity of their own. Returns
    how many entities the extractor touched."""
    # The corpus of this conversation alone: ensure_entities reads every turn of the
    # tenant otherwise, and it runs in the ingest's write transaction.
    corpus = Corpus(store.turns(user_id, conversation_id=conversation_id))
    people = {e.name: e for e in ensure_entities(store, user_id, conversation_id, corpus)}
    pooled: dict[str, EntityItem] = {}
    for entity in found:
        kept = pooled.setdefault(entity.name, people.get(entity.name) or entity)
        if kept is entity:
            continue
        kept.roles = list(dict.fromkeys([*kept.roles, *entity.roles]))[:10]
        kept.states = list(dict.fromkeys([*kept.states, *entity.states]))[:10]
        kept.evidence = list(dict.fromkeys([*kept.evidence, *entity.evidence]))[:40]
    with store.transaction():
        for entity in pooled.values():
            if entity.id:
                store.update(user_id, entity.id, roles=entity.roles, states=entity.states,
                             evidence=entity.evidence)
            else:
                store.add(entity)
    return len(pooled)


def ingest_conversation(
    store: MemoryStore, user_id: str, conversation_id: str, handle: ModelHandle, *,
    settings: IngestSettings | None = None, cache_path: str | Path | None = None,
    embedder: Embedder | None = None, progress: Callable[[int], None] | None = None,
    program: str | Path | None = None, max_chunks: int | None = None,
) -> IngestReport:
    """Extract, ground, reconcile and store one conversation's facts.

    Args:
        store: holds the conversation's turns; facts, QA pairs, entities, persona rows,
            edges and the ``ingest`` run are written there.
        user_id: the tenant.
        conversation_id: the conversation to ingest (already loaded).
        handle: the extractor's model.
        settings: chunking, call cap and reconciliation knobs.
        cache_path: a JSONL file of chunk extractions (re-runs make no repeated calls).
        embedder: embeds the stored facts for the dense channel, if given.
        progress: called with the number of turns of each chunk done.
        program: a compiled ``extractor`` program file (``programs.compiled``) to extract
            with instead of a fresh ``Extractor`` (its own output budget and date style
            then rule); the ``ingest`` run and the cache key name its path and hash.
        max_chunks: extract only the first N chunks of the plan (a bounded evaluation:
            ``bench compile extractor --heldout-limit``); the chunks are those of the whole
            conversation's plan, cut after planning, so each is what a full ingest
            extracts (and shares its cache entry). The call cap is checked on the whole plan.

    Raises:
        IngestError: the chunk plan would break the call cap.
        ValueError: ``program`` is not an extractor program file (or fails its hash).
    """
    return _ingest(store, user_id, conversation_id, handle, settings=settings,
                   cache_path=cache_path, embedder=embedder, progress=progress,
                   program=program, max_chunks=max_chunks)


def ingest_turns(
    store: MemoryStore, user_id: str, conversation_id: str, turns: list[Turn], handle: ModelHandle,
    *, settings: IngestSettings | None = None, events: list[FactEvent] | None = None,
    program: str | Path | None = None,
    on_written: Callable[[IngestReport], None] | None = None,
) -> IngestReport:
    """Extract facts from some new turns of a conversation, reconciled with what it
    already holds: a known fact gains the new evidence, a changed single-valued one is
    superseded. Earlier extractions are kept (``ingest_conversation`` replaces them).

    ``events`` receives one :class:`FactEvent` per proposed fact. Facts are embedded by
    the store's embedder as they are written. ``program``: a compiled ``extractor``
    program file to extract with (as ``ingest_conversation``'s). ``on_written`` is
    called with the report inside the transaction that writes the facts, after them: a
    caller's own record of the ingest commits with them, and an exception it raises
    rolls every one of them back (and propagates). Raises :class:`IngestError` when the
    chunks would break the call cap.
    """
    return _ingest(store, user_id, conversation_id, handle, settings=settings,
                   turns=turns, events=events, program=program, on_written=on_written)


def _ingest(
    store: MemoryStore, user_id: str, conversation_id: str, handle: ModelHandle, *,
    settings: IngestSettings | None = None, cache_path: str | Path | None = None,
    embedder: Embedder | None = None, progress: Callable[[int], None] | None = None,
    turns: list[Turn] | None = None, events: list[FactEvent] | None = None,
    program: str | Path | None = None, max_chunks: int | None = None,
    on_written: Callable[[IngestReport], None] | None = None,
) -> IngestReport:
    settings = settings or IngestSettings()
    started = time.perf_counter()
    incremental = turns is not None
    chunks = plan(store, user_id, conversation_id, settings, turns)
    participants = list(dict.fromkeys(t.speaker for c in chunks for t in c.turns))
    if max_chunks is not None:  # cut after planning: the chunks (and people) are the plan's
        chunks = chunks[:max_chunks]
    turns = [t for c in chunks for t in c.turns]
    report = IngestReport(conversation_id=conversation_id, model=handle.name,
                          turns=len(turns), chunks=len(chunks))
    cache = JsonlCache(Path(cache_path), ChunkResult) if cache_path else None
    extractor = Extractor(max_tokens=settings.max_tokens, date_style=settings.date_style)
    salt = fingerprint(handle, settings)
    ref = None
    if program is not None:  # a compiled extractor: its own prompt, its own cache keys
        from .compiled import load_program, program_ref

        ref = program_ref(program, "extractor")
        extractor = load_program("extractor", program)
        salt += f"+program{ref.sha256[:12]}"
    facts: list[FactItem] = []
    qa: list[QAPairItem] = []
    entities: list[EntityItem] = []
    proposed: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    cleared: Counter[str] = Counter()
    with Recorder(store, user_id, "ingest", task=conversation_id,
                  config={"model": handle.name, **settings.model_dump(mode="json"),
                          "program": ref.model_dump() if ref is not None else None,
                          **({"max_chunks": max_chunks} if max_chunks is not None else {})},
                  layers=["turns"]) as run:
        for chunk in chunks:
            key = hashlib.sha256(f"{salt}|{chunk_text(chunk, settings.date_style)}".encode()
                                 ).hexdigest()[:20]
            result = cache.get(key) if cache else None
            if result is not None and result.error is None:
                report.cached_chunks += 1
            else:
                result = _extract(extractor, handle, chunk, key)
                if cache:
                    cache.put(result)
                # what this run spent (a cached chunk cost nothing now)
                report.llm_calls += result.calls
                report.input_tokens += result.input_tokens
                report.output_tokens += result.output_tokens
            run.step("extract", chunk.turn_ids[0], input=chunk.turn_ids,
                     output=result.extraction.model_dump() if result.extraction else result.error,
                     data={"calls": result.calls, "seconds": result.seconds,
                           "error": result.error})
            if result.extraction is None:
                report.failed_chunks.append(f"{chunk.turn_ids[0]}: {result.error}")
            else:
                e = result.extraction
                proposed.update(facts=len(e.facts), qa=len(e.qa), entities=len(e.entities))
                report.empty_chunks += not (e.facts or e.qa or e.entities)
                grounded = ground(e, chunk, participants, user_id, f"{SOURCE}:{handle.name}",
                                  settings.date_style)
                facts += grounded.facts
                qa += grounded.qa
                entities += grounded.entities
                rejected.update(grounded.rejected)
                cleared.update(grounded.cleared)
                report.unresolved_times += grounded.unresolved_times
            if progress is not None:
                progress(len(chunk.turns))
        # Every write of the ingest in one transaction, after the model calls: what it
        # read of the conversation's facts is what it reconciles against, and a process
        # killed part way through leaves none of it (a re-run then writes it all once).
        with store.transaction():
            existing: list[FactItem] = []
            if incremental:
                existing = _current_facts(store, user_id, conversation_id)
            else:
                _replace_derived(store, user_id, conversation_id)
            turn_ids = {t.turn_id: t.id for t in turns}
            report.hierarchy = reconcile_conversation(store, user_id, facts, qa, turn_ids,
                                                      fuzzy=settings.fuzzy, existing=existing,
                                                      events=events)
            touched = _store_entities(store, user_id, conversation_id, entities)
            if settings.persona:
                # An incremental ingest rebuilds the persona from every current fact, so
                # earlier participants and facts keep their rows.
                people = list(dict.fromkeys([*(f.about for f in existing if f.about),
                                             *participants]))
                report.persona = build_persona(store, user_id, conversation_id, people,
                                               [f for f in [*existing, *facts] if f.id])
            if embedder is not None:
                stored = [*facts, *qa]
                if stored:
                    store.set_embeddings(user_id, [i.id for i in stored],
                                         embedder.encode([i.text for i in stored]),
                                         embedder.name)
            report.proposed = dict(proposed)
            report.kept = {"facts": report.hierarchy.stored, "qa": len(qa),
                           "entities": touched}
            if on_written is not None:
                on_written(report)
        report.rejected = dict(rejected)
        report.cleared = dict(cleared)
        report.seconds = round(time.perf_counter() - started, 3)
        summary = report.model_dump(exclude={"run_id"})
        if report.failed_chunks:
            run.fail(f"{len(report.failed_chunks)} chunks failed to parse", output=summary)
        else:
            run.finish(output=summary)
        report.run_id = run.run_id
    return report
