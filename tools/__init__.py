"""Handle-based tools over the store and over large blobs. JSON in, JSON out, bounded.

``ToolSession(store, user_id)`` binds the tools to one tenant: ``handle_tools()`` gives
``ctx_stats``, ``ctx_peek``, ``ctx_slice``, ``ctx_find`` (read a ``BlobRef`` a bounded
piece at a time), ``mem_search`` (ids and one-liners), ``mem_get`` (full, capped),
``mem_quote``, ``mem_add`` and ``event_log``. Caps are ``ToolCaps`` settings; a request
over a cap raises ``ToolError`` with a message that says what is allowed.
``personal_tools(session)`` binds the reconciler's four (``personal_tools.py``).
"""

from .base import Binding, ToolCall, ToolCaps, ToolError
from .blobref import BlobRef
from .personal_tools import PERSONAL_TOOLS, personal_tools
from .session import HANDLE_TOOLS, NAIVE_TOOLS, ToolSession

__all__ = ["HANDLE_TOOLS", "NAIVE_TOOLS", "PERSONAL_TOOLS", "Binding", "BlobRef", "ToolCall",
           "ToolCaps", "ToolError", "ToolSession", "personal_tools"]
