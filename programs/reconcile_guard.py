"""The reconciler's guard: may two same-name entities be merged, by the tools' own results?

Deterministic, and independent of what the agent called or said: it runs
``compare_entities_across_conversations`` and ``detect_contradictions`` itself (not
through the session, so they are not logged as the agent's calls). See
``programs/reconciler.py`` for why a MERGE needs positive evidence and a SEPARATE does not.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from memstrata.tools import ToolSession
from memstrata.tools.personal_tools import (
    compare_entities_across_conversations,
    detect_contradictions,
)


class ReconcilerSettings(BaseModel):
    """The agent's budgets and the guard's thresholds.

    Attributes:
        max_iters: most tool-using steps before the agent must decide.
        max_llm_calls: most LLM calls for one pair, retries and the final decision
            included (each structured prediction may take 2).
        min_shared: shared distinctive attributes a MERGE needs.
        min_overlap: overlap score (0-1, see ``memory/person_compare.py``) a MERGE needs.
        max_arg_chars: the longest string the agent may pass to a tool (a name, a
            conversation id), and the longest name or conversation id a decision is
            asked about; longer ones are refused, naming the cap.
    """

    max_iters: int = Field(4, ge=1, le=20)
    max_llm_calls: int = Field(10, ge=2, le=100)
    max_arg_chars: int = Field(200, ge=1, le=10_000)
    min_shared: int = Field(2, ge=1)
    min_overlap: float = Field(0.35, ge=0.0, le=1.0)


class Guard(BaseModel):
    """The deterministic check of a MERGE, from the tools' own results."""

    merge_allowed: bool
    overlap_score: float
    shared_distinctive: int
    contradictions: int
    reason: str
    evidence: list[str] = Field(default_factory=list)



def check(session: ToolSession, name: str, conversation_a: str, conversation_b: str,
          settings: ReconcilerSettings) -> Guard:
    """The guard: may these two be merged, by the tools' own evidence?"""
    b = session.binding
    cmp = compare_entities_across_conversations(b, name, conversation_a, conversation_b)
    con = detect_contradictions(b, name, conversation_a, conversation_b)
    score, shared = cmp["overlap_score"], cmp["shared_distinctive"]
    evidence = [f"{conversation_a}:{e}" for c in con["contradictions"] for e in c["a"]["evidence"]]
    evidence += [f"{conversation_b}:{e}" for c in con["contradictions"] for e in c["b"]["evidence"]]
    evidence += [f"{x}:{s[k]}" for s in cmp["shared"] for x, k in
                 ((conversation_a, "a"), (conversation_b, "b"))]
    problems = []
    if con["count"]:
        problems.append(f"{con['count']} contradiction(s), e.g. {con['contradictions'][0]['why']}")
    if shared < settings.min_shared:
        problems.append(f"{shared} shared distinctive attribute(s), {settings.min_shared} needed")
    if score < settings.min_overlap:
        problems.append(f"overlap score {score} below {settings.min_overlap}")
    values = ", ".join(f"{s['kind']} {s['value']}" for s in cmp["shared"][:4])
    reason = "; ".join(problems) if problems else (
        f"{shared} shared distinctive attributes ({values}), overlap score {score}, "
        "no contradiction")
    return Guard(merge_allowed=not problems, overlap_score=score, shared_distinctive=shared,
                 contradictions=con["count"], reason=reason, evidence=evidence[:20])
