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

import json
import re
from typing import Any

NAME = "policy/search-read"
PLAN = (
    "hits = mem_search(question)\nprint(hits)",
    "ids = [h['id'] for h in hits['results'][:3]]\nrecs = mem_get(ids)\nprint(recs)",
    "words = sorted((w.strip('?.,!\\'\"') for w in question.split()), key=len)\n"
    "found = ctx_find(conversation, words[-1])\nprint(found)",
    "SUBMIT(answer=recs['items'][0]['text'][:150] if recs['items'] else 'Not mentioned')",
)
_ITERATION = re.compile(r"Iteration:\s*(\d+)\s*/")


class SearchReadPolicy:
    """The engine: reads the iteration number from the prompt and writes that plan step."""

    supports_response_schema = True
    supported_params = frozenset({"temperature", "max_tokens", "response_format", "seed"})
    n_ctx = 1_000_000

    def count_tokens(self, text: str) -> int:
        """A 4-characters-a-token estimate (the policy has no tokenizer)."""
        return max(1, len(text) // 4)

    def complete(self, request: Any) -> Any:
        """One plan step (or, for the final extractor, the fallback answer)."""
        from dspy.lm15 import Message, Response, TextPart, Usage

        user = request.messages[-1].text or ""
        schema = (request.config.response_format or {}).get("schema") or {}
        if "code" in schema.get("properties", {}):
            match = _ITERATION.search(user)
            step = int(match.group(1)) - 1 if match else 0
            out: dict[str, Any] = {"reasoning": f"plan step {step + 1}",
                                   "code": PLAN[min(step, len(PLAN) - 1)]}
        else:
            out = {"reasoning": "plan ended", "answer": "Not mentioned"}
        text = json.dumps(out)
        prompt = "".join(m.text or "" for m in request.messages)
        return Response(id=None, model=NAME, message=Message.assistant([TextPart(text)]),
                        finish_reason="stop",
                        usage=Usage(input_tokens=self.count_tokens(prompt),
                                    output_tokens=self.count_tokens(text)))

    def stream(self, request: Any) -> Any:
        """The response as events."""
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        """Nothing to free."""
