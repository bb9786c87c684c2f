"""The ``qa`` and ``answerer`` compile tasks: LoCoMo questions, split by conversation.

**The data.** Each question becomes ``dspy.Example(question=..., memories=...,
answer=gold)`` (:func:`qa_examples`), its ``memories`` exactly the block the ``memstrata``
system of ``bench locomo`` shows ``QA``: the same answer path (``bench.qa.
memstrata_answerer``: routing, hybrid retrieval, the verifier, the line packer, the
model's own token counter, LoCoMo's answer style) over a store loaded the same way
(``bench.locomo.load_locomo``: turns, no extracted facts), up to
``PersonalAnswerer.prepare``, the step before the model is called. Questions the verifier
answers itself (an abstention crediting another person) never reach ``QA`` and are left
out. LoCoMo's category 5 (adversarial) keeps its place: its gold answer is the style's
abstention cue ("Not mentioned"), which ``qa_metric`` scores as the bench does (1 for an
abstention). Questions are chosen per set with ``bench.qa.select_questions`` (at most
``limit``, spread over conversations and categories).

* ``qa`` compiles ``QA`` on those examples (inputs ``question`` and ``memories``).
* ``answerer`` compiles the whole ``PersonalAnswerer``: each example's inputs are the
  question and its tenant, and every run of the program (and of each copy the optimizer
  makes) routes, retrieves, verifies and packs for itself from the compile's store
  (``programs.answer.answering_from``); the demos land on its ``QA``. Its file also
  holds the answer settings (depth, budget), which a run using it must share.

Both are scored on the held-out conversations by ``bench locomo``'s memstrata system
(``run_locomo_bench``) answering with the program, so the held-out F1 is the one
``memstrata bench locomo --program`` reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import dspy

from memstrata.memory import Embedder, MemoryStore, Retriever, SearchWeights
from memstrata.programs import ModelHandle
from memstrata.programs.answer import AnswerSources, PersonalAnswerer, answering_from
from memstrata.programs.compiler import (
    CompileSets,
    HeldoutScore,
    Models,
    ProgramTask,
    Split,
    SplitData,
)
from memstrata.programs.metrics import Metric, qa_metric
from memstrata.programs.qa import QA
from memstrata.programs.refs import ProgramRef

from ..compile_specs import LOCOMO_SPLIT, PROGRAMS
from ..locomo import Question, apply_audit, load_locomo, read_locomo
from ..qa import QASettings, answer_settings, memstrata_answerer, run_locomo_bench, select_questions


def read_split(data: str | Path, split: Split, audit: str | Path | None = None) -> SplitData:
    """Read the LoCoMo file ``data`` and check ``split`` against it; nothing else (no
    model, no store). Its units are the conversations.

    Raises:
        ValueError: a conversation of the split is not in the file.
        LoCoMoError: the file is not LoCoMo's format.
    """
    convs = read_locomo(data)
    split.check((c.sample_id for c in convs), data)
    wanted = {*split.train, *split.val, *split.heldout}
    kept = [c for c in convs if c.sample_id in wanted]
    if audit:
        apply_audit(kept, audit)
    return SplitData(split=split, data=str(data), units={c.sample_id: c for c in kept})


def qa_examples(store: MemoryStore, handle: ModelHandle, settings: QASettings,
                questions: Sequence[Question], *, embedder: Embedder | None = None,
                weights: SearchWeights | None = None) -> list[dspy.Example]:
    """The QA examples of ``questions``, their memories as ``bench locomo``'s memstrata
    system packs them (the questions' conversations must be loaded in ``store``).

    Each example has the inputs ``question`` and ``memories`` and the labels ``answer``
    (the gold answer; the style's abstention cue for category 5), ``evidence`` (gold turn
    ids; none for category 5), ``category``, ``qid`` (also ``id``) and ``user_id`` (the
    tenant: the conversation). Questions the verifier answers without ``QA``, and
    questions without a gold answer outside category 5, are left out.
    """
    style = settings.style
    answerer = memstrata_answerer(store, handle, settings, qa=QA(style), embedder=embedder,
                                  weights=weights)
    out = []
    for q in questions:
        adversarial = q.category == 5
        if not adversarial and not q.answer:
            continue
        ready = answerer.prepare(q.question, q.sample_id)
        if ready.packed is None:  # the verifier answers it: QA is never shown it
            continue
        out.append(dspy.Example(
            question=q.question, memories=ready.memories,
            answer=style.abstain_cue if adversarial else q.answer,
            evidence=[] if adversarial else list(q.evidence), category=q.category, qid=q.qid,
            id=q.qid, user_id=q.sample_id,
        ).with_inputs("question", "memories"))
    return out


def compile_sets(store: MemoryStore, handle: ModelHandle, settings: QASettings, data: SplitData, *,
                 limit: int | None, embedder: Embedder | None = None,
                 weights: SearchWeights | None = None) -> CompileSets:
    """Load the train and validation conversations into ``store`` (as ``bench locomo``
    loads them) and build their examples (:func:`qa_examples`), at most ``limit``
    questions a set before the verifier's own answers are left out."""
    load_locomo(store, data.of([*data.split.train, *data.split.val]), embedder=embedder)

    def examples(ids: Sequence[str]) -> list[dspy.Example]:
        questions = select_questions(data.of(ids), categories=None, limit=limit)
        return qa_examples(store, handle, settings, questions, embedder=embedder,
                           weights=weights)

    sets = CompileSets(train=examples(data.split.train), val=examples(data.split.val))
    if not sets.train or not sets.val:
        raise ValueError("the train or validation set has no question QA would be asked")
    return sets


class QATask(ProgramTask):
    """``memstrata compile qa``: LoCoMo's ``QA`` on the memories the answer path packs."""

    program = "qa"
    summary = PROGRAMS["qa"].summary
    headline = "f1"
    threshold = 0.5
    default_split = LOCOMO_SPLIT
    columns = ("abstention_cat5",)

    def __init__(self, models: Models, *, embedder: Embedder | None = None,
                 weights: SearchWeights | None = None, audit: str | Path | None = None,
                 ) -> None:
        super().__init__(models, embedder=embedder, weights=weights, audit=audit)
        self.settings = QASettings.for_model(models.student.name)

    @classmethod
    def read(cls, data: str | Path, split: Split) -> SplitData:
        return read_split(data, split)

    def student(self) -> dspy.Module:
        return QA(self.settings.style)

    def metric(self) -> Metric:
        return qa_metric

    def options(self) -> dict[str, Any]:
        return {"settings": self.settings.model_dump(mode="json"),
                "embedder": getattr(self.embedder, "name", None),
                "weights": self.weights.model_dump() if self.weights is not None else None}

    def sets(self, store: MemoryStore, data: SplitData, limit: int | None) -> CompileSets:
        return compile_sets(store, self.models.student, self.settings, data, limit=limit,
                            embedder=self.embedder, weights=self.weights)

    def score(self, data: SplitData, program: ProgramRef | None, out: Path, *,
              limit: int | None, progress: bool) -> HeldoutScore:
        doc = run_locomo_bench(
            data.data, self.models.student, out, audit=self.audit, systems=("memstrata",),
            settings=self.settings, embedder=self.embedder, weights=self.weights,
            conversations=set(data.split.heldout), limit=limit, progress=progress,
            program=program.path if program is not None else None)
        scored = doc["systems"]["memstrata"]
        return HeldoutScore(
            score=scored["f1"]["overall"], llm_calls=scored["llm_calls"],
            items=scored["questions"],
            metrics={"f1_by_category": scored["f1"],
                     "f1_corrected": scored["corrected"]["f1"]["overall"],
                     "abstention_cat5": scored["abstention_cat5"],
                     "questions": scored["questions"], "failures": scored["failures"]})


class AnswererTask(QATask):
    """``memstrata compile answerer``: the whole ``PersonalAnswerer``, each run routing,
    retrieving and verifying for itself; its ``QA`` learns the demos."""

    program = "answerer"
    summary = PROGRAMS["answerer"].summary

    def student(self) -> dspy.Module:
        return PersonalAnswerer(settings=answer_settings(self.settings),
                                qa=QA(self.settings.style))

    def sets(self, store: MemoryStore, data: SplitData, limit: int | None) -> CompileSets:
        sets = super().sets(store, data, limit)
        # The program packs its own memories; the labels stay (the metric reads them).
        return CompileSets(train=[_end_to_end(e) for e in sets.train],
                           val=[_end_to_end(e) for e in sets.val])

    def running(self, store: MemoryStore) -> AbstractContextManager[None]:
        return answering_from(AnswerSources.over(
            store, retriever=Retriever(store, self.embedder, self.weights),
            count_tokens=self.models.student.count_tokens))


def _end_to_end(example: dspy.Example) -> dspy.Example:
    """``example`` asked of the answerer: the question and its tenant as inputs; the
    packed memories stay as a label only (the metric's fallback)."""
    return example.copy().with_inputs("question", "user_id")


__all__ = ["LOCOMO_SPLIT", "AnswererTask", "QATask", "compile_sets", "qa_examples",
           "read_split"]
