"""A scripted policy that stands in for a model in the reconciler (``--lm policy``).

``ReconcilePolicy`` is a DSPy engine with no model behind it: at ReAct step 1 it calls
``compare_entities_across_conversations``, at step 2 ``detect_contradictions``, then it
finishes; its decision reads the two observations back from the trajectory (MERGE when
nothing contradicts and at least two distinctive attributes are shared, else SEPARATE).
It exercises the whole agent path — prompts, tool calls, parsing, the guard, storage —
with model skill taken out, and is named ``policy/reconcile`` wherever a model name is
expected. It never passes for a model.
"""

from __future__ import annotations

import re
from typing import Any

from .policy_engine import PolicyEngine

NAME = "policy/reconcile"
PLAN = ("compare_entities_across_conversations", "detect_contradictions")
_FIELDS = {"name": r"^Name:\s*(.+)$", "conversation_a": r"^Conversation a:\s*(\S+)",
           "conversation_b": r"^Conversation b:\s*(\S+)"}


def _number(pattern: str, text: str, default: float) -> float:
    found = re.findall(pattern, text)
    return float(found[-1]) if found else default


def decide(trajectory: str) -> dict[str, Any]:
    """The policy's decision from the observations in a trajectory."""
    score = _number(r'"overlap_score":\s*([0-9.]+)', trajectory, 0.0)
    shared = int(_number(r'"shared_distinctive":\s*(\d+)', trajectory, 0))
    count = int(_number(r'"count":\s*(\d+)', trajectory, 0))
    merge = count == 0 and shared >= 2 and score >= 0.35
    return {"reasoning": "read the comparison and the contradiction check",
            "decision": "MERGE" if merge else "SEPARATE",
            "reason": f"policy: overlap score {score}, {shared} shared distinctive "
                      f"attribute(s), {count} contradiction(s)",
            "confidence": 0.7 if merge else 0.8}


class ReconcilePolicy(PolicyEngine):
    """The engine: reads the step number off the trajectory and plays the plan."""

    name = NAME

    def reply(self, request: Any) -> dict[str, Any]:
        """One plan step, or the decision."""
        user = request.messages[-1].text or ""
        system = request.system if isinstance(request.system, str) else "".join(
            p.text for p in request.system or ())
        # A ReAct step asks for next_tool_name (its open next_tool_args mapping means DSPy
        # may send no schema, only JSON mode: read the system message as well).
        if "next_tool_name" not in system:
            return decide(user)
        step = len(re.findall(r"tool_name_\d+", user))
        if step >= len(PLAN):
            return {"next_thought": "plan done", "next_tool_name": "finish",
                    "next_tool_args": {}}
        args = {k: (m.group(1).strip() if (m := re.search(p, user, re.M)) else "")
                for k, p in _FIELDS.items()}
        return {"next_thought": f"plan step {step + 1}", "next_tool_name": PLAN[step],
                "next_tool_args": args}
