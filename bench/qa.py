"""``memstrata bench locomo``: LoCoMo question answering, four systems, one model, one run.

Every system answers with the same ``QA`` program on the same LM; only the memories
(and, for memstrata, the verification before answering) differ:

* ``no_memory``: none (how much the model guesses, or abstains, on its own);
* ``full_context``: the whole conversation, cut to the model's window (the most recent
  turns are kept; the report says how much was cut);
* ``naive_rag``: rank-bm25 top-k raw turns, no other processing;
* ``memstrata``: the personal answer path (``programs.answer.PersonalAnswerer``): routing,
  hybrid retrieval, a deterministic check of who did what (it abstains, without asking
  the model, when the memories credit the thing asked about to someone else), then
  ``QA`` over the line packer's block; every answer keeps its provenance.

Answers are cached per system, model, question and settings in ``answers.jsonl`` beside
the results, so an interrupted run continues where it stopped.

Every system answers in LoCoMo's conventions, selected here and nowhere in the library:
``QASettings.style`` (default :data:`LOCOMO_STYLE`) writes the memories' and answers'
dates as the answer key does ("8 May 2023") and abstains with the phrase its category-5
scoring looks for ("Not mentioned in the conversation.").
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import ContextWindowExceededError
from pydantic import BaseModel
from tqdm import tqdm

from memstrata.memory import Embedder, MemoryStore, Retriever, SearchWeights, Store
from memstrata.packers import MemoryLine, pack, render
from memstrata.programs import QA, ModelHandle, ProgramParseError
from memstrata.programs.answer import AnswerSettings, PersonalAnswerer
from memstrata.programs.answer_scores import score_answer
from memstrata.programs.cache import JsonlCache
from memstrata.programs.ingest import IngestSettings, ingest_conversation
from memstrata.programs.ingest import fingerprint as ingest_fingerprint
from memstrata.programs.judge import AnswerJudge
from memstrata.programs.refs import ProgramRef
from memstrata.trajectories import Recorder

from .baselines import TOKENIZERS, BM25Index
from .locomo import (
    LoCoMoConversation,
    Question,
    apply_audit,
    load_locomo,
    read_subset,
)
from .qa_personal import answer_personal, path_fingerprint
from .qa_routed import answer_routed, routed_fingerprint, routed_memory
from .qa_scores import against_baseline, summarise
from .qa_types import Answer, QASettings

SYSTEMS = ("memstrata", "naive_rag", "no_memory", "full_context")
ALL_SYSTEMS = (*SYSTEMS, "memory_routed")
"""``SYSTEMS`` (the default run) and ``memory_routed``: ``Memory.answer`` with routing
(``bench.qa_routed``), run only when named."""
NO_MEMORIES = "(no memories)"
def _fingerprint(handle: ModelHandle, settings: QASettings) -> str:
    # The program's source and its rendered prompt stand for it: any change re-answers.
    import inspect

    from memstrata.programs import qa as qa_module
    from memstrata.programs import structured
    from memstrata.programs.qa import answer_signature
    from memstrata.programs.structured import CompactJSONAdapter

    prompt = CompactJSONAdapter().format_system_message(answer_signature(settings.style))
    code = inspect.getsource(qa_module) + inspect.getsource(structured)
    blob = json.dumps([handle.name, handle.window, settings.model_dump(), prompt, code],
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def answer_cache(path: Path) -> JsonlCache[Answer]:
    """The answers cache: ``Answer`` records by key in an append-only JSONL file."""
    return JsonlCache(path, Answer)


def select_questions(convs: list[LoCoMoConversation], *, categories: set[int] | None,
                     limit: int | None) -> list[Question]:
    """Questions to ask: filtered by category, then at most ``limit`` spread evenly.

    The spread takes questions round-robin across conversations and, inside each, across
    categories (in dataset order), so a small ``--limit`` still sees every conversation
    and category rather than the first conversation's opening questions.
    """
    per_conv: list[list[Question]] = []
    for conv in convs:
        by_cat: dict[int, list[Question]] = {}
        for q in conv.questions:
            if categories is None or q.category in categories:
                by_cat.setdefault(q.category, []).append(q)
        per_conv.append([q for row in zip_longest(*by_cat.values()) for q in row if q])
    ordered = [q for row in zip_longest(*per_conv) for q in row if q]
    return ordered[:limit] if limit is not None else ordered


def _turn_lines(store: MemoryStore, conv: LoCoMoConversation) -> list[MemoryLine]:
    return [MemoryLine(id=t.turn_id or t.id, text=t.search_text(), speaker=t.speaker,
                       when=t.event_time)
            for t in store.turns(conv.sample_id, conversation_id=conv.sample_id)]


def _full_context(lines: list[MemoryLine], budget: int, handle: ModelHandle,
                  settings: QASettings) -> dict[str, Any]:
    # The longest run of most recent turns that fits, in conversation order, as raw turns.
    rendered = [render(ln, resolve_times=False, date_style=settings.style.date_style)
                for ln in lines]
    start, used = len(rendered), 0
    while start > 0:
        cost = handle.count_tokens(rendered[start - 1]) + 1  # + the line break
        if used + cost > budget:
            break
        start, used = start - 1, used + cost
    while start < len(rendered) and handle.count_tokens("\n".join(rendered[start:])) > budget:
        start += 1  # the block can count a little above its lines' sum
    return {"text": "\n".join(rendered[start:]), "turns": len(rendered) - start,
            "of": len(rendered)}


def _reserved(handle: ModelHandle, settings: QASettings, questions: list[Question]) -> int:
    # Measured, not guessed: the QA prompt with empty memories (system, demos, labels),
    # the longest question asked, the output budget and a margin.
    from memstrata.programs.structured import CompactJSONAdapter

    predict = QA(settings.style).respond.predict
    messages = CompactJSONAdapter().format(predict.signature, predict.demos,
                                           {"memories": "", "question": ""})
    scaffold = sum(handle.count_tokens(str(m["content"])) for m in messages)
    longest = max((handle.count_tokens(q.question) for q in questions), default=0)
    output = int(handle.lm.kwargs.get("max_tokens") or 256)
    return scaffold + longest + output + settings.margin


class Context(BaseModel):
    """What one system put in front of the model for one question, for the run record."""

    text: str
    retrieved: list[str] = []
    packed: list[str] = []
    note: str = ""


def _contexts(store: MemoryStore, convs: list[LoCoMoConversation], questions: list[Question],
              handle: ModelHandle, settings: QASettings
              ) -> tuple[dict[str, Callable[[Question], Context]], dict[str, Any]]:
    # The baselines' contexts; memstrata builds its own (see qa_personal.py).
    lines = {c.sample_id: _turn_lines(store, c) for c in convs}
    by_id = {sid: {ln.id: ln for ln in ls} for sid, ls in lines.items()}
    bm25 = {sid: BM25Index([ln.id for ln in ls], [ln.text for ln in ls], TOKENIZERS["bm25_tokens"])
            for sid, ls in lines.items()}
    window_budget = max(handle.window - _reserved(handle, settings, questions), 0)
    full: dict[str, dict[str, Any]] = {}

    def naive_rag(q: Question) -> Context:
        ids = bm25[q.sample_id].search(q.question, settings.naive_k)
        chosen = [by_id[q.sample_id][i] for i in ids]
        packed = pack(chosen, settings.budget, handle.count_tokens, resolve_times=False,
                      dedupe=False, date_style=settings.style.date_style)
        return Context(text=packed.text, retrieved=list(ids), packed=packed.ids)

    def full_context(q: Question) -> Context:
        if q.sample_id not in full:
            full[q.sample_id] = _full_context(lines[q.sample_id], window_budget, handle,
                                              settings)
        kept = full[q.sample_id]
        return Context(text=kept["text"], note=f"last {kept['turns']} of {kept['of']} turns")

    builders: dict[str, Callable[[Question], Context]] = {
        "naive_rag": naive_rag, "no_memory": lambda q: Context(text=NO_MEMORIES),
        "full_context": full_context}
    return builders, full


def _answer(qa: QA, handle: ModelHandle, system: str, key: str, q: Question,
            context: Callable[[Question], Context], store: MemoryStore, settings: QASettings
            ) -> Answer:
    """Answer one question with one system, recorded as a run in ``store``."""
    mark = handle.meter.mark()
    started = time.perf_counter()
    with Recorder(store, q.sample_id, f"qa.{system}", task=q.question,
                  config={"system": system, "model": handle.name, **settings.model_dump()},
                  layers=[] if system == "no_memory" else ["turns"]) as run:
        built = context(q)
        memories = built.text
        context_tokens = handle.count_tokens(memories) if memories != NO_MEMORIES else 0
        run.step("retrieve", system, input=q.question, output=built.retrieved,
                 data={"ids": built.retrieved})
        run.step("pack", system, output=built.packed,
                 data={"ids": built.packed, "tokens": context_tokens, "note": built.note})
        run.step("inject", "memories", output=memories, data={"tokens": context_tokens})
        try:
            with dspy.context(lm=handle.lm):
                pred = qa(question=q.question, memories=memories)
            answer, evidence, abstained, error = pred.answer, pred.evidence, pred.abstained, None
        except (ProgramParseError, ContextWindowExceededError) as exc:
            # Recorded and counted as a failure in the report, never dropped.
            answer, evidence, abstained, error = "", [], False, str(exc)[:500]
        usage = handle.meter.since(mark)
        output = {"answer": answer, "evidence": evidence, "abstained": abstained}
        verdict = score_answer(answer, q.answer, q.category) if not error else None
        if error:
            run.fail(error, output=output, usage=usage.model_dump())
        else:
            run.finish(output=output, verdict=verdict, usage=usage.model_dump())
    return Answer(key=key, system=system, qid=q.qid, answer=answer, evidence=evidence,
                  abstained=abstained, error=error, calls=usage.calls,
                  input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                  seconds=round(time.perf_counter() - started, 3),
                  context_tokens=context_tokens, packed=built.packed)


def _judge(judge: AnswerJudge, handle: ModelHandle, q: Question, answer: str,
           corrected: bool) -> bool | None:
    gold = q.corrected_answer if corrected and q.corrected_answer else q.answer
    if q.category == 5 or not gold:
        return None
    try:
        with dspy.context(lm=handle.lm):
            return bool(judge(question=q.question, gold_answer=str(gold),
                              generated_answer=answer).correct)
    except ProgramParseError:
        return False  # counted against the system, and visible in the judge's meter


def _walk(questions: list[Question], systems: tuple[str, ...], progress: bool
          ) -> Iterator[tuple[Question, str]]:
    # One system at a time, its questions grouped by conversation: consecutive prompts
    # then share their longest prefix (for full context, the whole conversation), which
    # an in-process llama.cpp keeps in its KV cache instead of reading it again.
    grouped = sorted(questions, key=lambda q: q.sample_id)
    bar = tqdm(total=len(questions) * len(systems), desc="answer", unit="ans",
               disable=not progress)
    with bar:
        for system in systems:
            for q in grouped:
                bar.set_postfix_str(system, refresh=False)
                yield q, system
                bar.update()


def memstrata_answerer(store: MemoryStore, handle: ModelHandle, settings: QASettings, *, qa: QA,
                       embedder: Embedder | None = None, weights: SearchWeights | None = None
                       ) -> PersonalAnswerer:
    """The ``memstrata`` system's answer path over ``store``: hybrid retrieval, the
    settings' depth and memory budget, the model's token counter, and ``qa`` answering.

    The one place it is built: ``run_locomo_bench`` answers with it, and ``bench.compile``
    builds the QA trainset from its ``prepare``, so a compiled ``QA`` learns from the very
    memories the bench shows it.
    """
    return PersonalAnswerer(
        store, retriever=Retriever(store, embedder, weights), qa=qa,
        count_tokens=handle.count_tokens, settings=answer_settings(settings))


def answer_settings(settings: QASettings) -> AnswerSettings:
    """The answer path's settings of the ``memstrata`` system under ``settings``."""
    return AnswerSettings(retrieve_k=settings.retrieve_k, budget=settings.budget)


def compiled_qa(path: str | Path, settings: QASettings) -> tuple[QA, ProgramRef]:
    """The compiled ``QA`` in the program file at ``path`` (``programs.compiled``): a
    ``qa`` program, or the ``QA`` of an ``answerer`` one; and its reference (path and
    checked hash).

    Raises:
        ValueError: the file holds neither, fails its hash check, or was compiled for
            another answer style than ``settings.style`` (its demos would then teach dates
            and abstentions the bench's key does not expect), or (an answerer) for another
            retrieval depth or memory budget than ``settings``'.
    """
    from memstrata.programs.compiled import load_program, program_ref

    ref = program_ref(path)
    if ref.name not in ("qa", "answerer"):
        raise ValueError(f"{path} holds the program {ref.name}, not qa or answerer")
    program = load_program(ref.name, path)
    if isinstance(program, PersonalAnswerer):
        wanted = answer_settings(settings)
        if program.settings != wanted:
            raise ValueError(f"{path} was compiled with the answer settings "
                             f"{program.settings.model_dump()}, not this run's "
                             f"{wanted.model_dump()}")
        program = program.qa
    assert isinstance(program, QA)
    if program.style != settings.style:
        raise ValueError(f"{path} was compiled for the answer style {program.style.model_dump()}, "
                         f"not this run's {settings.style.model_dump()}")
    return program, ref


def run_locomo_bench(
    data: str | Path, handle: ModelHandle, out_dir: str | Path, *,
    audit: str | Path | None = None, judge: ModelHandle | None = None,
    systems: tuple[str, ...] = SYSTEMS, settings: QASettings | None = None,
    embedder: Embedder | None = None, weights: SearchWeights | None = None,
    conversations: set[str] | None = None, categories: set[int] | None = None,
    limit: int | None = None, progress: bool = True, ingest: IngestSettings | None = None,
    program: str | Path | None = None,
) -> dict[str, Any]:
    """Answer, score and cost LoCoMo questions for each system; returns ``locomo.json``.

    Args:
        data: a LoCoMo-format JSON file.
        handle: the answering model (``setup_lm``).
        out_dir: where the answer cache lives (and the caller writes the reports).
        audit: the audit corrections; without it the corrected key equals the original.
        judge: a model for LLM-as-judge accuracy; ``None`` leaves ``judge`` null.
        systems: which of ``ALL_SYSTEMS`` to run.
        settings: budgets, depths and LoCoMo's answer style (``QASettings``).
        embedder, weights: memstrata's retrieval (dense channel, fusion knobs).
        conversations, categories, limit: a subset for quick runs (see ``select_questions``).
        progress: a progress bar on stderr.
        ingest: extract facts with ``handle`` before answering (memstrata then retrieves
            them beside the turns); extractions are cached in ``out_dir``, and their calls
            are reported under ``ingest``, apart from the answers' costs. Facts are
            written in the settings' date style, whatever ``ingest`` says.
        program: a compiled ``qa`` or ``answerer`` program file (``memstrata compile``):
            the ``memstrata`` system answers with its ``QA`` instead of the hand-written ``QA`` (the
            baselines keep that one, as the reference). Its path and SHA-256 are named
            under ``"program"`` in the result, in each memstrata run record, and in the
            answers' cache key. See ``compiled_qa`` for the errors.
    """
    unknown = set(systems) - set(ALL_SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}; choose from {ALL_SYSTEMS}")
    settings = settings or QASettings.for_model(handle.name)
    if ingest is not None:
        ingest = ingest.model_copy(update={"date_style": settings.style.date_style})
    convs = read_subset(data, conversations)
    audited = apply_audit(convs, audit) if audit else 0
    questions = select_questions(convs, categories=categories, limit=limit)
    asked = {q.sample_id for q in questions}
    convs = [c for c in convs if c.sample_id in asked]
    compiled, ref = compiled_qa(program, settings) if program is not None else (None, None)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cache = answer_cache(out / "answers.jsonl")
    fingerprint = _fingerprint(handle, settings)
    qa = QA(settings.style)
    answer_judge = AnswerJudge()
    results: dict[str, list[tuple[Question, Answer]]] = {s: [] for s in systems}
    order = {q.qid: n for n, q in enumerate(questions)}
    # The store stays in DIR: every answer run is recorded there (retrieved, packed and
    # injected memories, LLM usage, F1), and the runs point at its state.
    with Store.open(out / "locomo.db") as store:
        load_locomo(store, convs, embedder=embedder)
        extracted = [] if ingest is None or not {"memstrata", "memory_routed"} & set(
            systems) else [
            ingest_conversation(store, c.sample_id, c.sample_id, handle, settings=ingest,
                                cache_path=out / "extractions.jsonl", embedder=embedder)
            for c in tqdm(convs, desc="extract", unit="conv", disable=not progress)]
        builders, full = _contexts(store, convs, questions, handle, settings)
        personal = memstrata_answerer(store, handle, settings, qa=compiled or qa,
                                      embedder=embedder, weights=weights)
        path = path_fingerprint(personal)
        if ref is not None:  # another program, other answers
            path += f"+program{ref.sha256[:12]}"
        if extracted and ingest is not None:  # facts change what is retrieved: their own key
            path += f"+facts{ingest_fingerprint(handle, ingest)}"
        routed = routed_memory(store, handle, personal) if "memory_routed" in systems else None
        for q, system in _walk(questions, systems, progress):
            key = f"{system}|{handle.name}|{q.qid}|{fingerprint}"
            key += f"+{path}" if system == "memstrata" else ""  # its own code, its own key
            key += f"+{path}+{routed_fingerprint()}" if system == "memory_routed" else ""
            record = cache.get(key)
            if record is None:
                if system == "memstrata":
                    record = answer_personal(personal, handle, key, q, store, settings,
                                             program=ref)
                elif routed is not None and system == "memory_routed":
                    record = answer_routed(routed, handle, key, q, store, settings)
                else:
                    record = _answer(qa, handle, system, key, q, builders[system], store,
                                     settings)
                cache.put(record)
            elif system == "naive_rag" and not record.packed:
                # A record cached before answers kept what they were shown: naive RAG's
                # packing is LLM-free and deterministic, so it is rebuilt, not re-asked.
                record.packed = builders[system](q).packed
            if judge is not None and record.judge is None:
                verdicts = {"original": _judge(answer_judge, judge, q, record.answer, False),
                            "corrected": _judge(answer_judge, judge, q, record.answer, True)}
                if all(v is not None for v in verdicts.values()):
                    record.judge = {k: bool(v) for k, v in verdicts.items()}
                    cache.put(record)
            results[system].append((q, record))
        for rows in results.values():
            rows.sort(key=lambda row: order[row[0].qid])
        for q in questions:  # full-context truncation figures, even on a cached run
            if "full_context" in systems and q.sample_id not in full:
                builders["full_context"](q)
    return {
        "benchmark": "locomo-qa",
        "model": handle.name,
        "judge_model": judge.name if judge else None,
        "tokenizer": handle.tokenizer,
        "window": handle.window,
        "data": str(data),
        "program": ref.model_dump() if ref is not None else None,
        "audit": str(audit) if audit else None,
        "audit_entries_applied": audited,
        "conversations": sorted(asked),
        "settings": settings.model_dump(),
        "full_context": {sid: {"turns_kept": v["turns"], "turns_total": v["of"]}
                         for sid, v in sorted(full.items())},
        "ingest": None if not extracted else {
            "llm_calls": sum(r.llm_calls for r in extracted),
            "turns": sum(r.turns for r in extracted),
            "cached_chunks": sum(r.cached_chunks for r in extracted),
            "empty_chunks": sum(r.empty_chunks for r in extracted),
            "failed_chunks": sum(len(r.failed_chunks) for r in extracted),
            "facts": sum(r.kept.get("facts", 0) for r in extracted),
            "qa": sum(r.kept.get("qa", 0) for r in extracted),
            "seconds": round(sum(r.seconds for r in extracted), 1)},
        "systems": {s: summarise(rows, judged=judge is not None) for s, rows in results.items()},
        # Pairwise on the same questions: every system against naive RAG (the target's
        # baseline), and the routed door against the answerer it routes from.
        "against": {"naive_rag": against_baseline(results, "naive_rag"),
                    "memstrata": against_baseline(results, "memstrata", ("memory_routed",))},
    }
