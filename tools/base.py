"""What every tool shares: the caps, the refusal error, the tenant binding, the call log.

A tool is a plain function whose first parameter is a ``Binding`` (the store, the tenant
and the caps); ``ToolSession`` binds it, so the agent-facing signature has no way to name
a tenant. Tools return JSON-serialisable dicts and never print.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from memstrata.errors import MemstrataError
from memstrata.memory import MemoryStore, Retriever
from memstrata.packers.fit import MARK, flatten


class ToolCaps(BaseModel):
    """Upper bounds on what one tool call may return. Safe defaults; all are settings.

    Attributes:
        max_slice_chars: the most characters ``ctx_peek``/``ctx_slice`` return.
        max_find_k: the most matches ``ctx_find`` returns.
        snippet_chars: characters of context on each side of a ``ctx_find`` match.
        max_pattern_chars: the longest pattern ``ctx_find`` accepts.
        max_query_chars: the longest query ``mem_search`` accepts.
        find_timeout_s: wall-clock limit on one regular-expression scan.
        max_search_k: the most results ``mem_search`` returns.
        description_chars: length of the one-line descriptions ``mem_search`` returns.
        max_get: the most ids one ``mem_get`` call may ask for.
        max_item_chars: an item's text in ``mem_get`` is cut to this length.
        max_quote_chars: the most characters ``mem_quote`` returns.
        max_add_chars: the longest text ``mem_add`` accepts.
        max_event_chars: the largest serialised object ``event_log`` accepts.
        large_return_chars: a return at least this large counts as a leak in the
            instrumentation (it does not refuse anything).
        max_error_chars: a refusal's message is cut to this length (it may quote the
            agent's own arguments, which are unbounded).
    """

    max_slice_chars: int = Field(2000, ge=1)
    max_find_k: int = Field(50, ge=1)
    snippet_chars: int = Field(40, ge=0)
    max_pattern_chars: int = Field(200, ge=1)
    max_query_chars: int = Field(1000, ge=1)
    find_timeout_s: float = Field(0.5, gt=0)
    max_search_k: int = Field(20, ge=1)
    description_chars: int = Field(120, ge=20)
    max_get: int = Field(5, ge=1)
    max_item_chars: int = Field(4000, ge=1)
    max_quote_chars: int = Field(1000, ge=1)
    max_add_chars: int = Field(2000, ge=1)
    max_event_chars: int = Field(4000, ge=1)
    large_return_chars: int = Field(2000, ge=1)
    max_error_chars: int = Field(600, ge=80)


class ToolError(MemstrataError, ValueError):
    """A request a tool refuses (over a cap, unknown id or key, bad pattern). The message
    says what was wrong and what is allowed, so an agent can correct its next call."""


@dataclass
class Binding:
    """One tenant's view of the store, fixed when a tool session starts."""

    store: MemoryStore
    user_id: str
    caps: ToolCaps
    agent_id: str | None = None
    retriever: Retriever | None = None
    run_id: str | None = None


class ToolCall(BaseModel):
    """One tool call as the session logged it (for trajectories and leakage counts)."""

    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    result_chars: int = 0
    ids: list[str] = Field(default_factory=list)
    ms: float = 0.0
    error: str | None = None


@dataclass
class CallLog:
    """The calls of one session, in order."""

    calls: list[ToolCall] = field(default_factory=list)

    def since(self, mark: int) -> list[ToolCall]:
        """Calls made after position ``mark`` (``len(log.calls)`` taken earlier)."""
        return self.calls[mark:]


def one_line(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    flat = flatten(text)
    return flat if len(flat) <= width else flat[: width - 1].rstrip() + MARK


def check_cap(name: str, value: int, cap: int, what: str) -> None:
    """Refuse ``value`` over ``cap`` with a message naming the cap; refuse a ``value``
    that is not a whole number (the agent's ``k`` may arrive as ``"5"`` or ``2.5``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"{name}: {what.rstrip(' =:')} must be a whole number, "
                        f"got {type(value).__name__} {shown(value, 40)}")
    if value > cap:
        raise ToolError(f"{name}: {what} {value} is over the cap of {cap}; ask for less "
                        f"(narrow the range, or search first and fetch fewer)")


def shown(value: Any, chars: int = 80) -> str:
    """An agent's argument as a message quotes it: its repr, cut to about ``chars``, and
    never recursing far into a structure (an agent's JSON may nest thousands deep)."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = chars
    short.maxlevel = 2
    return short.repr(value)


def clipped(value: Any, chars: int = 200, items: int = 20, depth: int = 4) -> Any:
    """A JSON value with every string cut to ``chars``, every list and object to ``items``
    entries and nesting to ``depth``: stored fields (names, metadata) can be any size, a
    tool's answer cannot."""
    if isinstance(value, str):
        return value if len(value) <= chars else value[: chars - 1] + MARK
    if depth <= 0 and isinstance(value, dict | list | tuple):
        return MARK
    if isinstance(value, dict):
        return {clipped(k, chars, items, 0): clipped(v, chars, items, depth - 1)
                for k, v in list(value.items())[:items]}
    if isinstance(value, list | tuple):
        return [clipped(v, chars, items, depth - 1) for v in value[:items]]
    return value
