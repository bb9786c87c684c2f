"""A ``BlobRef`` as the RLM sandbox sees it: a handle, never the text.

In the sandbox the value is a ``str`` subclass holding the key, so it passes through the
tool bridge as the key itself (``ctx_find(conversation, "Paris")`` just works), while
``print`` and ``repr`` show ``BlobRef(key='chat-1', n=27345)``.
"""

from __future__ import annotations

import json

from dspy.primitives.sandbox_serializable import SandboxSerializable

from memstrata.tools import BlobRef

_DEFINE = '''import json as _json
class BlobRef(str):
    """A handle to a text kept outside the sandbox: read it with the ctx_* tools."""
    def __new__(cls, key, n):
        obj = str.__new__(cls, key)
        obj.key, obj.n = key, n
        return obj
    def __repr__(self):
        return f"BlobRef(key={self.key!r}, n={self.n})"
    __str__ = __repr__
'''


class SandboxBlobRef(SandboxSerializable):
    """Wraps a ``BlobRef`` for ``dspy.RLM`` inputs: only the key and length go in."""

    def __init__(self, ref: BlobRef, hint: str = "read it with ctx_stats, ctx_peek, "
                 "ctx_find and ctx_slice") -> None:
        self.ref = ref
        self.hint = hint

    def sandbox_setup(self) -> str:
        """Nothing to import (the class is defined with the value, out of the prompt)."""
        return ""

    def to_sandbox(self) -> bytes:
        """The key and length, as JSON."""
        return json.dumps({"key": self.ref.key, "n": self.ref.n}).encode()

    def sandbox_assignment(self, var_name: str, data_expr: str) -> str:
        """Define the handle class and bind the variable to a handle."""
        return f"{_DEFINE}{var_name} = BlobRef(**_json.loads({data_expr}))"

    def rlm_preview(self, max_chars: int = 500) -> str:
        """What the model sees: the handle and how to read it."""
        return f"{self.ref!r}: a handle, not the text; {self.hint}"[:max_chars]

    def __str__(self) -> str:
        return repr(self.ref)
