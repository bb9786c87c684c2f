"""A scripted tool-using policy that stands in for a model in the leakage ablation.

``SearchReadPolicy`` is a DSPy engine with no model behind it: at RLM iteration ``k`` it
writes step ``k`` of a fixed plan (search memory, read the top records, find a keyword in
the conversation blob, submit the top record). The plan only uses names both tool sets
share, so with it the naive and handle arms run the same code and differ by the tool
contract alone: what the contract does to the prompt, with model skill taken out. It is
named ``policy/search-read`` wherever a model name is expected, and never passes for a
model: its answers are the top record's text, not a reading of it.
"""

from __future__ import annotations

import re
from typing import Any

from memstrata.programs.policy_engine import PolicyEngine

NAME = "policy/search-read"
PLAN = (
    "hits = mem_search(question)\nprint(hits)",
    "ids = [h['id'] for h in hits['results'][:3]]\nrecs = mem_get(ids)\nprint(recs)",
    "words = sorted((w.strip('?.,!\\'\"') for w in question.split()), key=len)\n"
    "found = ctx_find(conversation, words[-1])\nprint(found)",
    "SUBMIT(answer=recs['items'][0]['text'][:150] if recs['items'] else 'Not mentioned')",
)
_ITERATION = re.compile(r"Iteration:\s*(\d+)\s*/")


class SearchReadPolicy(PolicyEngine):
    """The engine: reads the iteration number from the prompt and writes that plan step."""

    name = NAME

    def reply(self, request: Any) -> dict[str, Any]:
        """One plan step (or, for the final extractor, the fallback answer)."""
        user = request.messages[-1].text or ""
        schema = (request.config.response_format or {}).get("schema") or {}
        if "code" not in schema.get("properties", {}):
            return {"reasoning": "plan ended", "answer": "Not mentioned"}
        match = _ITERATION.search(user)
        step = int(match.group(1)) - 1 if match else 0
        return {"reasoning": f"plan step {step + 1}", "code": PLAN[min(step, len(PLAN) - 1)]}
