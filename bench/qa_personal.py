"""The ``memstrata`` system of ``bench locomo``: the ``PersonalAnswerer`` path, recorded.

The baselines answer with ``QA`` over a context they build; memstrata answers through
``programs.answer.PersonalAnswerer`` (route, retrieve, verify attribution, then ``QA``),
so the verifier's abstentions and every answer's provenance are part of what is scored.
Each answer is a recorded run: route, retrieve, verify, pack, inject (when the model was
asked) and the final answer with its provenance.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time

import dspy
from dspy.utils.exceptions import ContextWindowExceededError

from memstrata.memory import MemoryStore
from memstrata.programs import ModelHandle, ProgramParseError
from memstrata.programs.answer import PersonalAnswerer
from memstrata.programs.answer_scores import score_answer
from memstrata.programs.refs import ProgramRef
from memstrata.trajectories import Recorder

from .locomo import Question
from .qa_types import Answer, QASettings


def path_fingerprint(answerer: PersonalAnswerer) -> str:
    """A hash of the answer path's code and settings: any change re-answers memstrata."""
    from memstrata.memory import attribution, route, verify
    from memstrata.programs import answer

    from . import qa_personal

    code = "".join(inspect.getsource(m) for m in (attribution, route, verify, answer,
                                                    qa_personal))
    blob = json.dumps([code, answerer.settings.model_dump()], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def answer_personal(answerer: PersonalAnswerer, handle: ModelHandle, key: str, q: Question,
                    store: MemoryStore, settings: QASettings, program: ProgramRef | None = None
                    ) -> Answer:
    """Answer one question through the personal path, recorded as a run in ``store``
    (``program``: the compiled QA program it answers with, named in the record)."""
    mark = handle.meter.mark()
    started = time.perf_counter()
    with Recorder(store, q.sample_id, "qa.memstrata", task=q.question,
                  config={"system": "memstrata", "model": handle.name,
                          **settings.model_dump(),
                          "answer": answerer.settings.model_dump(),
                          "program": program.model_dump() if program is not None else None},
                  layers=["turns", "items"]) as run:
        try:
            with dspy.context(lm=handle.lm):
                pred = answerer(question=q.question, user_id=q.sample_id)
            prov, error = pred.provenance, None
        except (ProgramParseError, ContextWindowExceededError) as exc:
            # Recorded and counted as a failure in the report, never dropped.
            prov, error, pred = None, str(exc)[:500], None
        usage = handle.meter.since(mark)
        memories = pred.memories if pred is not None else ""
        context_tokens = handle.count_tokens(memories) if memories else 0
        if prov is not None:
            run.step("route", prov.route.scope, input=q.question,
                     output=prov.route.model_dump(mode="json"))
            run.step("retrieve", "memstrata", input=q.question, output=prov.retrieved,
                     data={"ids": prov.retrieved})
            run.step("verify", prov.verification.verdict, output=prov.verification.reason,
                     data=prov.verification.model_dump(mode="json"))
            if prov.answered_by == "model":
                run.step("pack", "memstrata", output=prov.packed,
                         data={"ids": prov.packed, "tokens": context_tokens})
                run.step("inject", "memories", output=memories, data={"tokens": context_tokens})
        answer = prov.answer if prov is not None else ""
        output = (prov.model_dump(mode="json", include={"answer", "abstained", "evidence",
                                                        "answered_by", "reason", "confidence"})
                  if prov is not None else {"answer": "", "evidence": [], "abstained": False})
        if error:
            run.fail(error, output=output, usage=usage.model_dump())
        else:
            verdict = score_answer(answer, q.answer, q.category)
            run.finish(output=output, verdict=verdict, usage=usage.model_dump())
    return Answer(key=key, system="memstrata", qid=q.qid, answer=answer,
                  evidence=prov.evidence if prov is not None else [],
                  abstained=prov.abstained if prov is not None else False, error=error,
                  calls=usage.calls, input_tokens=usage.input_tokens,
                  output_tokens=usage.output_tokens,
                  seconds=round(time.perf_counter() - started, 3),
                  context_tokens=context_tokens, provenance=prov)
