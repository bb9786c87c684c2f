"""The ``memory_routed`` system of ``bench locomo``: questions asked through the door.

Each question goes to ``Memory.answer`` with routing (``programs.routed_answer``) over
the same store: a simple recall takes exactly the ``memstrata`` system's answerer (the
same ``PersonalAnswerer``, its LoCoMo answer style and memory budget), a computation, a
temporal comparison, a contradiction or a synthesis takes the adaptive reasoner over
the tenant's turns and facts. Each answer is a recorded run (``qa.memory_routed``: the
path, the intent, the evidence, the calls), beside the ``memory.answer`` run the verb
writes itself.
"""

from __future__ import annotations

import hashlib
import inspect
import time

from dspy.utils.exceptions import ContextWindowExceededError

from memstrata import Memory
from memstrata.memory import MemoryStore
from memstrata.programs import ModelHandle, ProgramParseError
from memstrata.programs.answer import PersonalAnswerer
from memstrata.programs.answer_scores import score_answer
from memstrata.trajectories import Recorder

from .locomo import Question
from .qa_types import Answer, QASettings


def routed_memory(store: MemoryStore, handle: ModelHandle, answerer: PersonalAnswerer) -> Memory:
    """A ``Memory`` over the bench's store whose recall path is ``answerer`` (the
    ``memstrata`` system's, so the two differ only where routing sends a question to
    the reasoner) and whose searches use its retriever."""
    memory = Memory(store, lm=handle)
    memory.retriever = answerer.retriever
    memory._answerer = answerer  # the bench's answerer: its style, budget and retrieval
    return memory


def routed_fingerprint() -> str:
    """A hash of the routing and reasoning code: any change re-answers the system."""
    from memstrata.memory.cognitive import recall, whole
    from memstrata.programs import effort, reasoning, routed_answer

    from . import qa_routed

    code = "".join(inspect.getsource(m) for m in (recall, whole, effort, reasoning,
                                                    routed_answer, qa_routed))
    return hashlib.sha256(code.encode()).hexdigest()[:8]


def answer_routed(memory: Memory, handle: ModelHandle, key: str, q: Question, store: MemoryStore,
                  settings: QASettings) -> Answer:
    """Answer one question through ``Memory.answer``, recorded as a run in ``store``."""
    mark = handle.meter.mark()
    started = time.perf_counter()
    with Recorder(store, q.sample_id, "qa.memory_routed", task=q.question,
                  config={"system": "memory_routed", "model": handle.name,
                          **settings.model_dump()}, layers=["turns", "items"]) as run:
        try:
            out, error = memory.answer(q.question, user_id=q.sample_id), None
        except (ProgramParseError, ContextWindowExceededError) as exc:
            out, error = None, str(exc)[:500]  # a failure in the report, never dropped
        usage = handle.meter.since(mark)
        if out is not None:
            run.step("route", out.path, input=q.question,
                     output={"intent": out.intent, "model_intent": out.model_intent},
                     data={"llm_calls": out.llm_calls, "memory_run": out.run_id})
            run.step("retrieve", out.path, output=out.retrieved, data={"ids": out.retrieved})
        answer = out.answer if out is not None else ""
        # Turns by their ids in the conversation (D1:3), as the other systems cite them.
        labels = {s.id: s.turn_id for s in out.sources if s.turn_id} if out else {}
        evidence = [labels.get(e, e) for e in out.evidence] if out else []
        output = {"answer": answer, "evidence": evidence,
                  "abstained": out.abstained if out else False,
                  "path": out.path if out else None}
        if error:
            run.fail(error, output=output, usage=usage.model_dump())
        else:
            run.finish(output=output, verdict=score_answer(answer, q.answer, q.category),
                       usage=usage.model_dump())
    return Answer(key=key, system="memory_routed", qid=q.qid, answer=answer,
                  evidence=evidence,
                  abstained=out.abstained if out is not None else False, error=error,
                  calls=usage.calls, input_tokens=usage.input_tokens,
                  output_tokens=usage.output_tokens,
                  seconds=round(time.perf_counter() - started, 3), provenance=out)
