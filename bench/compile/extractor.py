"""The ``extractor`` compile task: the ingest ``Extractor`` on LoCoMo chunks, split by
conversation.

**The data.** The train and validation conversations are loaded into the compile's store
(``bench.locomo.load_locomo``, as ``ingest`` loads them; no embeddings: the examples need
none) and cut into chunks by the ingest's own plan (``programs.ingest.plan``: the same
``memory.chunking`` settings and call cap), so each example is a chunk the extractor is
really shown at ingest. One example a chunk (:func:`extractor_examples`): the input
``chunk`` and the labels ``extractor_metric`` reads, ``participants`` (the speakers, as
ingest grounds against them), ``evidence`` (the gold evidence turns of the LoCoMo
questions, categories 1-4, that fall in the chunk), ``user_id`` and ``date_style``
(LoCoMo's, ``LOCOMO_DATE_STYLE``, as ``bench facts`` ingests). At most ``limit`` chunks a
set (:func:`select_chunks`): chunks holding question evidence first, so the metric's
coverage half has something to cover; spread over the set's conversations round-robin,
and over each conversation from start to end; deterministic.

**The held-out score** is ``bench facts`` on the held-out conversations, extracting with
the program: each conversation is ingested by ``programs.ingest.ingest_conversation``
(``program``: the compiled file, as ``memstrata ingest --program`` takes it), its
extractions cached in the system's folder (a re-run makes no repeated call), then
evidence recall@10 is ranked by ``bench.facts.recall_through_facts`` (``facts``: fact and
QA-pair hits standing for their evidence turns; ``facts+turns``: one hybrid over both).
The headline is ``grounded_per_chunk``, the grounded facts kept per extracted chunk
(before deduplication): what a compiled prompt changes first.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import dspy
from tqdm import tqdm

from memstrata.memory import Embedder, MemoryStore, SearchWeights, Store
from memstrata.memory.chunking import Chunk
from memstrata.memory.dates import DEFAULT_DATE_STYLE, DateStyle
from memstrata.memory.facts import chunk_text
from memstrata.programs.compiler import (
    CompileSets,
    HeldoutScore,
    Models,
    ProgramTask,
    Split,
    SplitData,
)
from memstrata.programs.extractor import Extractor
from memstrata.programs.ingest import IngestReport, IngestSettings, ingest_conversation, plan
from memstrata.programs.metrics import Metric, extractor_metric
from memstrata.programs.refs import ProgramRef

from ..compile_specs import LOCOMO_SPLIT, PROGRAMS
from ..facts import locomo_ingest_settings, recall_through_facts, scored_questions
from ..locomo import LoCoMoConversation, Question, apply_audit, load_locomo
from ..retrieval import CATEGORIES
from .qa import read_split

RECALL_K = 10
"""The recall depth reported (``bench facts`` ranks 5, 10 and 25)."""


class ShownChunk(Chunk):
    """A ``Chunk`` of a compile example: the same turns, shown as the extractor reads them.

    Optimizers print examples to models (MIPROv2's dataset summary prints ten at a time);
    a ``Chunk``'s own repr is every field of every ``Turn``, several times the chunk's text,
    which a small model's context cannot hold. ``date_style`` is the style its text uses.
    """

    date_style: DateStyle = DEFAULT_DATE_STYLE

    def __repr__(self) -> str:
        return f"Chunk({chunk_text(self, self.date_style)!r})"

    def __str__(self) -> str:
        return chunk_text(self, self.date_style)


def _spread(n: int) -> list[int]:
    """``range(n)`` reordered so every prefix is spread over it (van der Corput order:
    0, n/2, n/4, 3n/4, ...): a conversation's first k chunks chosen reach its end."""
    order: list[int] = []
    seen: set[int] = set()
    for i in itertools.count():
        if len(order) == n:
            return order
        bits, frac, unit = i, 0.0, 0.5
        while bits:  # i's binary digits mirrored after the point
            frac += unit * (bits & 1)
            bits, unit = bits >> 1, unit / 2
        index = int(frac * n)
        if index not in seen:
            seen.add(index)
            order.append(index)
    return order


def select_chunks(per_conv: Sequence[Sequence[dspy.Example]], limit: int | None
                  ) -> list[dspy.Example]:
    """At most ``limit`` of the examples (one list a conversation, in chunk order), chosen
    deterministically: every chunk holding question evidence before any without, each
    tier taken round-robin across the conversations and, inside one, spread from its
    start to its end (:func:`_spread`)."""
    tiers: list[list[dspy.Example]] = []
    for with_evidence in (True, False):
        lists = []
        for chunks in per_conv:
            kept = [c for c in chunks if bool(c.evidence) == with_evidence]
            lists.append([kept[i] for i in _spread(len(kept))])
        tiers.append([e for row in itertools.zip_longest(*lists) for e in row if e])
    ordered = [e for tier in tiers for e in tier]
    return ordered[:limit] if limit is not None else ordered


def _participants(chunks: Sequence[Chunk]) -> list[str]:
    """The speakers of a conversation's chunks, in order of appearance: whom ingest
    grounds a chunk's facts against (``programs.ingest``)."""
    return list(dict.fromkeys(t.speaker for c in chunks for t in c.turns))


def extractor_examples(store: MemoryStore, conv: LoCoMoConversation, settings: IngestSettings
                       ) -> list[dspy.Example]:
    """One example a chunk of ``conv`` (loaded in ``store`` as its own tenant), chunked as
    ingest chunks it (``programs.ingest.plan``), in chunk order.

    Each has the input ``chunk`` (a :class:`ShownChunk`) and the labels ``participants``,
    ``evidence`` (gold evidence turn ids of the questions of categories 1-4 that fall in
    the chunk, in turn order), ``qids`` (those questions), ``user_id`` (the tenant),
    ``date_style`` and ``id`` (``conv-26#chunk-3``: the chunk's index in the plan).

    Raises:
        IngestError: the plan breaks the call cap of ``settings``.
    """
    sid = conv.sample_id
    chunks = plan(store, sid, sid, settings)
    people = _participants(chunks)
    asked: dict[str, list[str]] = {}  # evidence turn -> the questions citing it
    for q in conv.questions:
        if q.category in CATEGORIES:
            for turn in q.evidence:
                asked.setdefault(turn, []).append(q.qid)
    out = []
    for index, chunk in enumerate(chunks):
        evidence = [t for t in chunk.turn_ids if t in asked]
        out.append(dspy.Example(
            chunk=ShownChunk(conversation_id=chunk.conversation_id, turns=chunk.turns,
                             date_style=settings.date_style),
            participants=people, evidence=evidence,
            qids=list(dict.fromkeys(q for t in evidence for q in asked[t])),
            user_id=sid, date_style=settings.date_style, id=f"{sid}#chunk-{index}",
        ).with_inputs("chunk"))
    return out


def compile_sets(store: MemoryStore, settings: IngestSettings, data: SplitData, *,
                 limit: int | None) -> CompileSets:
    """Load the train and validation conversations into ``store`` (turns only, as ingest
    loads them) and build their examples (:func:`extractor_examples`), at most ``limit``
    chunks a set (:func:`select_chunks`).

    Raises:
        ValueError: a set has no chunk (its conversations have no turns).
    """
    load_locomo(store, data.of([*data.split.train, *data.split.val]))

    def examples(ids: Sequence[str]) -> list[dspy.Example]:
        return select_chunks([extractor_examples(store, c, settings) for c in data.of(ids)],
                             limit)

    sets = CompileSets(train=examples(data.split.train), val=examples(data.split.val))
    if not sets.train or not sets.val:
        raise ValueError("the train or validation conversations have no turns to extract")
    return sets


class ExtractorTask(ProgramTask):
    """``memstrata compile extractor``: the ingest ``Extractor`` on LoCoMo chunks, scored
    by its grounded facts and evidence recall through them on held-out conversations."""

    program = "extractor"
    summary = PROGRAMS["extractor"].summary
    headline = "grounded_per_chunk"
    # extractor_metric is half the share of proposed facts that ground, half the share of
    # the chunk's question evidence they rest on: 0.5 passes a demo whose facts all ground
    # (or half ground and cover half the evidence), the format a demo must teach; higher
    # asks a small model for coverage it rarely reaches, and no demo would bootstrap.
    threshold = 0.5
    default_split = LOCOMO_SPLIT
    columns = (f"recall@{RECALL_K}", "grounded_share")
    labeled_demos = False  # an example has no gold facts: it is no demo by itself

    def __init__(self, models: Models, *, embedder: Embedder | None = None,
                 weights: SearchWeights | None = None, audit: str | Path | None = None,
                 settings: IngestSettings | None = None) -> None:
        super().__init__(models, embedder=embedder, weights=weights, audit=audit)
        self.settings = locomo_ingest_settings(settings)

    @classmethod
    def read(cls, data: str | Path, split: Split) -> SplitData:
        return read_split(data, split)

    def student(self) -> dspy.Module:
        return Extractor(max_tokens=self.settings.max_tokens,
                         date_style=self.settings.date_style)

    def metric(self) -> Metric:
        return extractor_metric

    def options(self) -> dict[str, Any]:
        # The ingest settings hold the chunking, call cap, output budget and date style;
        # the embedder and weights shape the held-out recall.
        return {"settings": self.settings.model_dump(mode="json"),
                "embedder": getattr(self.embedder, "name", None),
                "weights": self.weights.model_dump() if self.weights is not None else None}

    def sets(self, store: MemoryStore, data: SplitData, limit: int | None) -> CompileSets:
        return compile_sets(store, self.settings, data, limit=limit)

    def score(self, data: SplitData, program: ProgramRef | None, out: Path, *,
              limit: int | None, progress: bool) -> HeldoutScore:
        """Ingest the held-out conversations with ``program`` (``None``: the uncompiled
        ``Extractor``) into ``out/facts.db``, extractions cached in
        ``out/extractions.jsonl``, and score them.

        ``limit`` caps the chunks extracted: the first N of the held-out conversations'
        chunks, in conversation and chunk order (each chunk as the whole conversation's
        plan cuts it). Recall is then computed only over the questions whose evidence
        (original and audit-corrected) lies entirely within the extracted chunks; without
        a cut it is ``bench facts``'s, over every question of categories 1-4 with evidence.

        Metrics: ``recall@10`` (the ``facts`` system of ``bench facts``),
        ``recall@10_facts+turns``, ``recall@10_corrected`` (with an audit), ``questions``
        (those recall is over), ``grounded_share`` (grounded of proposed facts),
        ``chunks``, ``facts`` (grounded), ``stored`` (after deduplication), ``proposed``,
        ``failures`` (chunks that would not parse), ``empty_chunks``, ``cached_chunks``
        and ``llm_calls_now``. ``llm_calls`` is the extraction calls the chunks took as
        recorded: a chunk read from the cache counts the calls it took when it was
        extracted, so a re-run reports the same figure (``llm_calls_now`` is what this
        run spent: 0 when all was cached).
        """
        convs = copy.deepcopy(data.of(data.split.heldout))  # the audit edits them
        if self.audit:
            apply_audit(convs, self.audit)
        out.mkdir(parents=True, exist_ok=True)
        reports: list[IngestReport] = []
        extracted: set[str] = set()  # turn ids of the extracted chunks
        cut = False
        recorded = 0
        with Store.open(out / "facts.db") as store:
            for conv, planned, take in self._planned(store, convs, limit):
                sid = conv.sample_id
                chunks = planned[:take]
                cut = cut or take < len(planned)
                extracted.update(t for c in chunks for t in c.turn_ids)
                with tqdm(total=sum(len(c.turns) for c in chunks), desc=f"extract {sid}",
                          unit="turn", disable=not progress) as bar:
                    report = ingest_conversation(
                        store, sid, sid, self.models.student, settings=self.settings,
                        cache_path=out / "extractions.jsonl", embedder=self.embedder,
                        progress=bar.update, max_chunks=take if take < len(planned) else None,
                        program=program.path if program is not None else None)
                reports.append(report)
                recorded += sum(int(s.data.get("calls") or 0)
                                for s in store.runs.steps(sid, str(report.run_id))
                                if s.kind == "extract")
            reached = {r.conversation_id for r in reports}
            questions = [q for q in scored_questions([c for c in convs if c.sample_id in reached])
                         if not cut or _within(q, extracted)]
            ranked = recall_through_facts(store, questions, embedder=self.embedder,
                                          weights=self.weights, systems=("facts", "facts+turns"),
                                          progress=progress)
        extracted_chunks = sum(r.chunks for r in reports)
        grounded = sum(r.hierarchy.facts_in for r in reports)
        proposed = sum(r.proposed.get("facts", 0) for r in reports)
        at_k = f"recall@{RECALL_K}"
        metrics: dict[str, Any] = {
            at_k: ranked["facts"][at_k]["overall"],
            f"{at_k}_facts+turns": ranked["facts+turns"][at_k]["overall"],
        }
        if self.audit:
            metrics[f"{at_k}_corrected"] = ranked["facts"]["corrected"][at_k]["overall"]
        metrics.update({
            "questions": len(questions),
            "grounded_share": round(grounded / proposed, 4) if proposed else None,
            "chunks": extracted_chunks, "facts": grounded,
            "stored": sum(r.kept.get("facts", 0) for r in reports), "proposed": proposed,
            "failures": sum(len(r.failed_chunks) for r in reports),
            "empty_chunks": sum(r.empty_chunks for r in reports),
            "cached_chunks": sum(r.cached_chunks for r in reports),
            "llm_calls_now": sum(r.llm_calls for r in reports),
            "recall_by_system": ranked,
        })
        return HeldoutScore(
            score=round(grounded / extracted_chunks, 4) if extracted_chunks else None,
            metrics=metrics, llm_calls=recorded, items=extracted_chunks)

    def _planned(self, store: MemoryStore, convs: Sequence[LoCoMoConversation], limit: int | None
                 ) -> Iterator[tuple[LoCoMoConversation, list[Chunk], int]]:
        """Each held-out conversation loaded into ``store`` as it is reached, with its
        ingest plan and how many of its chunks to extract (all, or what is left of
        ``limit``; a conversation none are left for is not loaded)."""
        left = limit
        for conv in convs:
            if left is not None and left <= 0:
                return
            load_locomo(store, [conv], embedder=self.embedder)
            planned = plan(store, conv.sample_id, conv.sample_id, self.settings)
            take = len(planned) if left is None else min(left, len(planned))
            if left is not None:
                left -= take
            yield conv, planned, take


def _within(q: Question, turns: set[str]) -> bool:
    """Whether all of a question's evidence (original and corrected) is among ``turns``."""
    return set(q.evidence) | set(q.corrected_evidence or []) <= turns


__all__ = ["RECALL_K", "ExtractorTask", "ShownChunk", "compile_sets", "extractor_examples",
           "select_chunks"]
