"""LoCoMo: read the JSON format, and load conversations into the store.

The format itself (parsing, the data's quirks, errors naming the file and the record)
is the LoCoMo adapter's, :mod:`memstrata.formats.locomo`; this module re-exports it for
the benchmarks, overlays the public audit, and loads conversations into the store.

Each conversation becomes a tenant (``user_id`` = its ``sample_id``); its turns keep the
speaker, the source turn id (``D3:7``), the session date as event time, and any image
caption (as ``metadata["caption"]``). Loading is one transaction per conversation: a bad
record aborts that conversation with an error naming the file and the record, and
nothing of it is written.

LoCoMo's answer-key conventions (long dates, "Not mentioned in the conversation.") are
selected by the benchmarks through :data:`LOCOMO_DATE_STYLE` and ``bench.qa``'s
``LOCOMO_STYLE``; the library's defaults are the general ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memstrata.formats.locomo import (
    DATE_STYLE,
    LoCoMoConversation,
    LoCoMoError,
    Question,
    parse_evidence,
    parse_session_date,
    turn_metadata,
)
from memstrata.formats.locomo import parse_locomo as read_locomo
from memstrata.memory import Conversation, Edge, Embedder, Session, Store, Turn
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
    """What a load wrote, and how long the writing and the embedding took."""

    conversations: int = 0
    turns: int = 0
    embedded: int = 0
    embed_seconds: float = 0.0
    write_seconds: float = 0.0


def load_conversation(
    store: Store, conv: LoCoMoConversation, *, embedder: Embedder | None = None,
    stats: LoadStats | None = None, tenant: str | None = None,
) -> list[str]:
    """Write one conversation as its own tenant, replacing any earlier load of it.

    ``tenant`` puts it under a shared tenant instead (one user's several conversations,
    as cross-conversation reconciliation needs). Embeddings (if an embedder is given)
    are computed before the transaction opens, so the write itself is short; everything
    of the conversation commits together.
    """
    import time

    stats = stats if stats is not None else LoadStats()
    user = tenant or conv.sample_id
    turns: list[Turn] = []
    seq = 0
    for index, date, raw_turns in conv.sessions:
        for raw in raw_turns:
            metadata = turn_metadata(raw)  # blip_caption -> caption
            turns.append(
                Turn(
                    user_id=user, conversation_id=conv.sample_id, session_id=f"session_{index}",
                    turn_id=raw["dia_id"], seq=seq, speaker=raw["speaker"], text=raw["text"],
                    event_time=date, metadata=metadata,
                )
            )
            seq += 1
    vectors = None
    if embedder is not None and turns:
        started = time.perf_counter()
        vectors = embedder.encode(store.contextual_texts(turns))
        stats.embed_seconds += time.perf_counter() - started
    started = time.perf_counter()
    with store.transaction():
        store.delete_conversation(user, conv.sample_id)
        store.add_conversation(
            Conversation(id=conv.sample_id, user_id=user, title=" & ".join(conv.speakers),
                         speakers=conv.speakers)
        )
        for index, date, _ in conv.sessions:
            store.add_session(Session(id=f"session_{index}", user_id=user,
                                      conversation_id=conv.sample_id, index=index,
                                      started_at=date))
        # The store embeds what it writes; vectors from the same model are handed over.
        same = (vectors is not None and store.embedder is not None
                and store.embedder.name == embedder.name)  # type: ignore[union-attr]
        ids = store.add_turns(turns, vectors=vectors if same else None)
        # The whole conversation also as one blob: what an RLM searches through a BlobRef.
        store.blobs.put(user, conv.sample_id, transcript(turns),
                        {"kind": "conversation", "turns": len(turns)})
        store.add_edges(
            Edge(user_id=user, src=a, dst=b, relation="follows")
            for a, b, ta, tb in zip(ids, ids[1:], turns, turns[1:], strict=False)
            if ta.session_id == tb.session_id
        )
        if vectors is not None:
            if not same:
                store.set_embeddings(user, ids, vectors, embedder.name)  # type: ignore[union-attr]
            stats.embedded += len(ids)
    stats.write_seconds += time.perf_counter() - started
    stats.conversations += 1
    stats.turns += len(turns)
    return ids


def transcript(turns: list[Turn]) -> str:
    """A conversation as plain text: a header per session (with its date), then one line
    per turn, ``[D3:7] Ana: text [shares a photo: caption]``."""
    lines: list[str] = []
    session = None
    for turn in turns:
        if turn.session_id != session:
            session = turn.session_id
            when = f" · {turn.event_time:%-d %B %Y, %H:%M}" if turn.event_time else ""
            if lines:
                lines.append("")
            lines.append(f"=== {session.replace('_', ' ')}{when} ===")
        lines.append(f"[{turn.turn_id}] {turn.speaker}: {with_caption(turn.text, turn.metadata)}")
    return "\n".join(lines) + "\n"


def load_locomo(
    store: Store, conversations: list[LoCoMoConversation], *, embedder: Embedder | None = None,
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
