"""LoCoMo: read the JSON format, and load conversations into the store.

The format itself (parsing, the data's quirks, errors naming the file and the record)
is the LoCoMo adapter's, :mod:`memstrata.formats.locomo`; this module re-exports it for
the benchmarks, overlays the public audit, and loads conversations into the store.

Each conversation becomes a tenant (``user_id`` = its ``sample_id``), written through
``Memory.import_conversations`` as the adapter's record (``formats.locomo.to_record``):
its turns keep the speaker, the source turn id (``D3:7``), the session date as event time,
and any image caption (as ``metadata["caption"]``); LoCoMo's session N is ``session_N``.
Loading is one transaction per conversation: a bad record aborts that conversation with
an error naming the file and the record, and nothing of it is written.

LoCoMo's answer-key conventions (long dates, "Not mentioned in the conversation.") are
selected by the benchmarks through :data:`LOCOMO_DATE_STYLE` and ``bench.qa``'s
``LOCOMO_STYLE``; the library's defaults are the general ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstrata.formats.locomo import (
    DATE_STYLE,
    LoCoMoConversation,
    LoCoMoError,
    Question,
    parse_evidence,
    parse_session_date,
    to_record,
    turn_metadata,
)
from memstrata.formats.locomo import parse_locomo as read_locomo
from memstrata.memory import Embedder, MemoryStore
from memstrata.memory.dates import DateStyle
from memstrata.memory.models import with_caption

__all__ = [
    "LOCOMO_DATE_STYLE", "LoCoMoConversation", "LoCoMoError", "LoadStats", "Question",
    "apply_audit", "load_conversation", "load_locomo", "parse_evidence",
    "parse_session_date", "read_locomo", "read_subset", "transcript", "turn_metadata",
]

LOCOMO_DATE_STYLE: DateStyle = DATE_STYLE
"""The date style of LoCoMo's answer key, which every LoCoMo benchmark selects."""


def read_subset(path: str | Path, conversations: set[str] | None = None
                ) -> list[LoCoMoConversation]:
    """``read_locomo``, kept to the named conversations (all when ``None``).

    Raises:
        ValueError: a named conversation is not in the file.
    """
    convs = read_locomo(path)
    if conversations:
        missing = conversations - {c.sample_id for c in convs}
        if missing:
            raise ValueError(f"no conversation {sorted(missing)} in {path}")
        convs = [c for c in convs if c.sample_id in conversations]
    return convs


def apply_audit(conversations: list[LoCoMoConversation], path: str | Path) -> int:
    """Attach the public audit's corrected evidence and answers; returns entries applied.

    The audit file is a list of ``{sample_id, qa_index, correct_evidence, correct_answer}``.
    Entries for conversations not loaded are ignored.
    """
    path = Path(path)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LoCoMoError(str(path), "audit file", f"cannot read audit JSON: {exc}") from exc
    by_key = {(c.sample_id, q.index): (c, q) for c in conversations for q in c.questions}
    applied = 0
    for n, entry in enumerate(entries):
        try:
            key = (str(entry["sample_id"]), int(entry["qa_index"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise LoCoMoError(str(path), f"audit entry #{n}", "lacks sample_id/qa_index"
                              ) from exc
        if key not in by_key:
            continue
        conv, question = by_key[key]
        if "correct_evidence" in entry:
            known = conv.turn_ids
            question.corrected_evidence = [
                i for i in parse_evidence(entry["correct_evidence"] or []) if i in known
            ]
        if entry.get("correct_answer") is not None:
            question.corrected_answer = str(entry["correct_answer"])
        applied += 1
    return applied


@dataclass
class LoadStats:
    """What a load wrote, and how long the writing and the embedding took (the embedding
    the store does as it writes is timed apart from the rest of the write)."""

    conversations: int = 0
    turns: int = 0
    embedded: int = 0
    embed_seconds: float = 0.0
    write_seconds: float = 0.0


class _TimedEmbedder:
    """An embedder that adds the seconds its ``encode`` takes to ``stats.embed_seconds``
    (everything else is the wrapped embedder's)."""

    def __init__(self, embedder: Embedder, stats: LoadStats) -> None:
        self._embedder = embedder
        self._stats = stats

    def encode(self, texts: list[str]) -> Any:
        started = time.perf_counter()
        try:
            return self._embedder.encode(texts)
        finally:
            self._stats.embed_seconds += time.perf_counter() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)


def load_conversation(
    store: MemoryStore, conv: LoCoMoConversation, *, embedder: Embedder | None = None,
    stats: LoadStats | None = None, tenant: str | None = None,
) -> list[str]:
    """Write one conversation as its own tenant, replacing any earlier load of it; returns
    its turns' ids in order.

    The turns go through ``Memory.import_conversations`` (the one write path: sessions,
    turns, ``follows`` edges, embedded by the store as they are written), then the whole
    conversation is kept as one blob (what an RLM searches through a ``BlobRef``).
    ``tenant`` puts it under a shared tenant instead (one user's several conversations,
    as cross-conversation reconciliation needs). ``embedder``, when it is not the
    store's own model, also stores every turn's vector of that model.
    """
    from memstrata.api import Memory

    stats = stats if stats is not None else LoadStats()
    user = tenant or conv.sample_id
    record = to_record(conv)
    own = store.embedder
    timed = (_TimedEmbedder(own, stats) if own is not None and embedder is not None
             and own.name == embedder.name else None)
    started = time.perf_counter()
    spent = stats.embed_seconds
    if timed is not None:
        store.embedder = timed  # type: ignore[assignment]
    try:
        with store.transaction():  # everything of the conversation commits together
            Memory(store).import_conversations(
                [record], user_id=user,
                replace=store.conversation(user, conv.sample_id) is not None)
            turns = store.turns(user, conversation_id=conv.sample_id)
            ids = [t.id for t in turns]
            store.blobs.put(user, conv.sample_id, transcript(conv),
                            {"kind": "conversation", "turns": len(turns)})
            if embedder is not None and timed is None:
                began = time.perf_counter()
                vectors = embedder.encode(store.contextual_texts(turns))
                stats.embed_seconds += time.perf_counter() - began
                store.set_embeddings(user, ids, vectors, embedder.name)
    finally:
        if timed is not None:
            store.embedder = own
    stats.write_seconds += time.perf_counter() - started - (stats.embed_seconds - spent)
    stats.embedded += len(ids) if embedder is not None else 0
    stats.conversations += 1
    stats.turns += len(turns)
    return ids


def transcript(conv: LoCoMoConversation) -> str:
    """A conversation as plain text: a header per session (with its date), then one line
    per turn, ``[D3:7] Ana: text [shares a photo: caption]``."""
    blocks: list[str] = []
    for index, date, raw_turns in conv.sessions:
        if not raw_turns:
            continue
        when = f" · {date:%-d %B %Y, %H:%M}" if date else ""
        blocks.append("\n".join([f"=== session {index}{when} ===", *(
            f"[{raw['dia_id']}] {raw['speaker']}: {with_caption(raw['text'], turn_metadata(raw))}"
            for raw in raw_turns)]))
    return "\n\n".join(blocks) + "\n"


def load_locomo(
    store: MemoryStore, conversations: list[LoCoMoConversation], *,
    embedder: Embedder | None = None,
    progress: Callable[[int], None] | None = None, tenant: str | None = None,
) -> LoadStats:
    """Load several conversations, one transaction each; ``progress(turns)`` after each.

    Each is its own tenant unless ``tenant`` names one for all of them."""
    stats = LoadStats()
    for conv in conversations:
        load_conversation(store, conv, embedder=embedder, stats=stats, tenant=tenant)
        if progress is not None:
            progress(conv.turn_count)
    return stats
