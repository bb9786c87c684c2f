"""``memstrata bench cognitive``: seed 003's L1-L6 progressive evaluation, two systems.

Each run reads every scenario's articles (in date order) into a fresh store, twice:
into one tenant's cognitive memory (``CognitiveMemory.read``: episodes, semantic facts
with their edges, procedures), which the ``AdaptiveReasoner`` answers from; and, as
plain dated passages (the same sentences, as turns), into another tenant that the
baseline answers from: one search, one answer call, no memory types. Both run on the
same model. Answers are scored by the scenario's rules (``scoring.score``), or by the
answer judge when one is given. Every question of each system is a recorded run.

Per level the report gives the median over runs of the mean score, the LLM calls and
the search rounds per question; the metacognition figures are pooled over all runs.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import dspy
from tqdm import tqdm

from memstrata import Memory
from memstrata.memory import MemoryStore, Retriever, Store, Turn
from memstrata.memory.cognitive import CognitiveMemory
from memstrata.memory.models import Conversation, Session
from memstrata.programs import ModelHandle, ProgramParseError
from memstrata.programs.reasoning import AdaptiveReasoner, ReasoningTrace
from memstrata.trajectories.recorder import Recorder

from .baseline import PlainAnswerer, article_time, passages
from .metacognition import metacognition, question_row
from .scenarios import Scenario, ScenarioFile, default_scenarios_path, load_scenarios
from .scoring import score

TARGETS = {"L1": 1.0, "L2": 0.85, "L3": 0.70, "L4": 0.80, "L5": 0.90, "L6": 0.95}


def _plain_tenant(store: MemoryStore, user: str, scenario: Scenario) -> None:
    """The scenario's sentences as dated turns of one conversation (the baseline's)."""
    conv = f"{scenario.level}-articles"
    store.add_conversation(Conversation(id=conv, user_id=user, title=scenario.title))
    turns: list[Turn] = []
    for n, (article, sentence) in enumerate(passages(scenario)):
        session = f"{conv}:{article.id}"
        if not turns or turns[-1].session_id != session:
            store.add_session(Session(id=session, user_id=user, conversation_id=conv,
                                      index=len({t.session_id for t in turns}),
                                      started_at=article_time(article)))
        turns.append(Turn(user_id=user, conversation_id=conv, session_id=session,
                          turn_id=f"{article.id}:{n}", seq=n, speaker=article.source,
                          text=sentence, event_time=article_time(article)))
    store.add_turns(turns)


def _judge(judge: Any, question: Any, answer: str) -> float:
    with dspy.context(lm=judge.lm):
        from memstrata.programs import AnswerJudge

        verdict = AnswerJudge()(question=question.question, gold_answer=question.answer,
                                generated_answer=answer)
    return 1.0 if verdict.correct else 0.0


def run_cognitive_bench(handle: ModelHandle, out_dir: str | Path, *,
                        scenarios: str | Path | None = None, runs: int = 3,
                        levels: set[str] | None = None, judge: ModelHandle | None = None,
                        progress: bool = True, through_memory: bool = False
                        ) -> dict[str, Any]:
    """Run the evaluation ``runs`` times; writes and returns the ``cognitive.json`` doc.

    ``through_memory``: the ``cognitive`` system reads the articles with ``Memory.read``
    and answers with ``Memory.answer`` (routed: a simple recall to the personal answerer,
    the rest to the reasoner over the same memory) instead of the reasoner alone; the
    document says which (``"path"``). The baseline is the same either way.

    Raises:
        ScenarioFileError: the scenario file is missing or malformed.
        ValueError: ``runs`` < 1, or ``levels`` names no level of the file.
    """
    if runs < 1:
        raise ValueError("runs must be at least 1")
    spec: ScenarioFile = load_scenarios(scenarios or default_scenarios_path())
    chosen = [s for s in spec.scenarios if levels is None or s.level in levels]
    if not chosen:
        raise ValueError(f"no scenario of level {sorted(levels or [])} in the file; it has "
                         f"{sorted({s.level for s in spec.scenarios})}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    total = runs * sum(len(s.questions) for s in chosen) * 2
    bar = tqdm(total=total, unit="answer", desc="cognitive", disable=not progress)
    reasoner, plain = AdaptiveReasoner(), PlainAnswerer()
    with (out / "cognitive_answers.jsonl").open("w") as log:
        for run in range(1, runs + 1):
            db = out / f"cognitive_run{run}.db"
            db.unlink(missing_ok=True)
            with Store.open(db) as store, dspy.context(lm=handle.lm):
                door = Memory(store, lm=handle) if through_memory else None
                for scenario in chosen:
                    mind = CognitiveMemory(store, f"cognitive:{scenario.level}")
                    for article in sorted(scenario.articles, key=lambda a: a.date):
                        if door is not None:
                            door.read(article.text, user_id=mind.user_id, title=article.title,
                                      source=article.source, when=article.date)
                        else:
                            mind.read(article.text, title=article.title,
                                      source=article.source, when=article.date)
                    plain_user = f"plain:{scenario.level}"
                    _plain_tenant(store, plain_user, scenario)
                    retriever = Retriever(store, store.embedder)
                    for question in scenario.questions:
                        for system in ("cognitive", "baseline"):
                            row = _answer(system, handle, judge, store, mind, retriever,
                                          door, plain_user, reasoner, plain, scenario,
                                          question)
                            row["run"] = run
                            rows.append(row)
                            log.write(json.dumps(row, default=str) + "\n")
                            log.flush()
                            bar.update(1)
    bar.close()
    doc = summarise(rows, model=handle.name, runs=runs, scenarios=spec.name,
                    judged=judge is not None)
    doc["seconds"] = round(time.perf_counter() - started, 1)
    doc["path"] = "memory" if through_memory else "reasoner"
    (out / "cognitive.json").write_text(json.dumps(doc, indent=2))
    from .report import write_reports

    write_reports(doc, out)
    return doc


def _answer(system: str, handle: ModelHandle, judge: ModelHandle | None, store: MemoryStore,
            mind: CognitiveMemory, retriever: Retriever, door: Memory | None, plain_user: str,
            reasoner: AdaptiveReasoner, plain: PlainAnswerer, scenario: Scenario,
            question: Any) -> dict[str, Any]:
    """One system's answer to one question, scored, recorded as a run."""
    user = mind.user_id if system == "cognitive" else plain_user
    mark = handle.meter.mark()
    trace: ReasoningTrace | None = None
    error = None
    with Recorder(store, user, f"cognitive.{system}", task=question.question,
                  config={"level": scenario.level, "question_id": question.id,
                          "model": handle.name}) as rec:
        try:
            if system == "cognitive":
                if door is not None:
                    routed = door.answer(question.question, user_id=mind.user_id)
                    pred = dspy.Prediction(answer=routed.answer, trace=routed.reasoning)
                    rec.step("route", routed.path, output=routed.intent,
                             data={"memory_run": routed.run_id})
                else:
                    pred = reasoner(question=question.question, mind=mind)
                answer, trace = pred.answer, pred.trace
                if trace is not None:  # None: routed to the answerer
                    # As data, not output: a step's output is cut to a preview.
                    rec.step("trace", "reasoner", output=answer,
                             data=trace.model_dump(mode="json"))
            else:
                pred = plain(question=question.question, store=store, retriever=retriever,
                             user_id=plain_user)
                answer = pred.answer
                rec.step("retrieve", "baseline", output=pred.shown)
        except ProgramParseError as exc:
            answer, error = "", str(exc)[:500]
        usage = handle.meter.since(mark)
        value = _judge(judge, question, answer) if judge and answer else score(
            answer, question.score)
        rec.finish(output={"answer": answer, "error": error},
                   verdict={"score": value, "gold": question.answer},
                   usage=usage.model_dump())
    return question_row(system, scenario, question, answer, value, usage.calls, trace,
                        mind, error)


def _median(by_run: dict[int, list[dict[str, Any]]], key: str, *, total: bool = False
            ) -> float:
    """The median over runs of each run's mean (or ``total``) of ``key``."""
    values = []
    for group in by_run.values():
        xs = [float(g[key] or 0) for g in group]
        values.append(sum(xs) if total else sum(xs) / len(xs))
    return round(statistics.median(values), 4) if values else 0.0


def summarise(rows: list[dict[str, Any]], *, model: str, runs: int, scenarios: str,
              judged: bool) -> dict[str, Any]:
    """The ``cognitive.json`` document from the per-question rows of every run."""
    levels: dict[str, Any] = {}
    for level in sorted({r["level"] for r in rows}, key=lambda x: int(x[1:])):
        per_run: dict[str, dict[int, list[dict[str, Any]]]] = {"cognitive": {}, "baseline": {}}
        for r in rows:
            if r["level"] == level:
                per_run[r["system"]].setdefault(r["run"], []).append(r)

        levels[level] = {
            "score": _median(per_run["cognitive"], "score"),
            "baseline": _median(per_run["baseline"], "score"),
            "llm_calls": _median(per_run["cognitive"], "llm_calls", total=True),
            "baseline_llm_calls": _median(per_run["baseline"], "llm_calls", total=True),
            "steps_per_question": _median(per_run["cognitive"], "steps"),
            "questions": len(next(iter(per_run["cognitive"].values()), [])),
            "run_scores": [round(sum(g["score"] for g in grp) / len(grp), 4)
                           for _, grp in sorted(per_run["cognitive"].items())],
            "target": TARGETS.get(level),
            "errors": sum(1 for r in rows if r["level"] == level and r["error"]),
        }
    return {"model": model, "runs": runs, "scenarios": scenarios,
            "scoring": "judge" if judged else "rules", "levels": levels,
            "metacognition": metacognition([r for r in rows if r["system"] == "cognitive"],
                                           runs)}
