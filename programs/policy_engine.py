"""``PolicyEngine``: a DSPy engine with a script, not a model, behind it.

The scripted policies (``policy/search-read`` for E7, ``policy/reconcile`` for the
reconciler) take model skill out of a measurement: they play a fixed plan through the
same prompts, parsing and tools a model would. This base answers DSPy's engine
interface; a policy only says what to reply to a request, as a dict.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any


class PolicyEngine(ABC):
    """The engine interface (``complete``, ``stream``, ``close``) around ``reply``."""

    name = "policy"
    supports_response_schema = True
    supported_params = frozenset({"temperature", "max_tokens", "response_format", "seed"})
    n_ctx = 1_000_000

    def count_tokens(self, text: str) -> int:
        """A 4-characters-a-token estimate (a policy has no tokenizer)."""
        return max(1, len(text) // 4)

    @abstractmethod
    def reply(self, request: Any) -> dict[str, Any]:
        """The output fields for one request; subclasses play their plan here."""

    def complete(self, request: Any) -> Any:
        """``reply`` as a DSPy response, with token counts estimated both ways."""
        from dspy.lm15 import Message, Response, TextPart, Usage

        text = json.dumps(self.reply(request))
        prompt = "".join(m.text or "" for m in request.messages)
        return Response(id=None, model=self.name, message=Message.assistant([TextPart(text)]),
                        finish_reason="stop",
                        usage=Usage(input_tokens=self.count_tokens(prompt),
                                    output_tokens=self.count_tokens(text)))

    def stream(self, request: Any) -> Any:
        """The response as events."""
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:  # noqa: B027 - a script holds no resources: nothing to free
        """Nothing to free."""
