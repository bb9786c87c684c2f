"""``ToolSession``: the tools bound to one tenant, timed and logged.

The agent-facing functions have the implementations' signatures minus the binding, so
the agent cannot name another user. Every call is logged (``session.log``) with the size
of what it returned; refusals are logged too and then raised as ``ToolError``.

Example:
    >>> from memstrata.memory import Store
    >>> session = ToolSession(Store.open(":memory:"), user_id="u1")
    >>> ref = session.put_blob("notes", "alpha\\nbeta\\n")
    >>> ref
    BlobRef(key='notes', n=11)
    >>> tools = {t.__name__: t for t in session.handle_tools()}
    >>> tools["ctx_find"]("notes", "beta")["matches"][0]["line"]
    2
"""

from __future__ import annotations

import functools
import inspect
import json
import reprlib
import time
from collections.abc import Callable
from typing import Any

from memstrata.memory import MemoryStore, Retriever
from memstrata.memory.runs import redact, redact_text
from memstrata.packers.fit import MARK

from . import context, memory_tools, naive
from .base import Binding, CallLog, ToolCall, ToolCaps, ToolError
from .blobref import BlobRef

HANDLE_TOOLS: tuple[Callable[..., dict[str, Any]], ...] = (
    context.ctx_stats, context.ctx_peek, context.ctx_slice, context.ctx_find,
    memory_tools.mem_search, memory_tools.mem_get, memory_tools.mem_quote,
    memory_tools.mem_add, memory_tools.event_log,
)
NAIVE_TOOLS: tuple[Callable[..., dict[str, Any]], ...] = (
    context.ctx_stats, naive.ctx_peek, naive.ctx_slice, naive.ctx_find, naive.mem_search,
    naive.mem_get, naive.mem_quote, naive.mem_add, naive.event_log, naive.ctx_read,
)


def _ids_in(result: Any) -> list[str]:
    """Memory ids a result hands back (what was retrieved, for the trajectory)."""
    if not isinstance(result, dict):
        return []
    rows = result.get("results") or result.get("items") or []
    ids = [r["id"] for r in rows if isinstance(r, dict) and isinstance(r.get("id"), str)]
    if isinstance(result.get("id"), str):
        ids.append(result["id"])
    return ids


class ToolSession:
    """The memory and context tools for one tenant, with their caps and call log.

    Args:
        store: the store to read and write.
        user_id: the tenant every call is bound to.
        agent_id: recorded on what the agent writes.
        caps: the bounds (``ToolCaps()`` defaults when omitted).
        retriever: the retriever ``mem_search`` uses (a lexical-plus-graph one by default;
            pass one with an embedder for dense search).
        run_id: recorded on events and items the agent writes.
    """

    def __init__(self, store: MemoryStore, user_id: str, *, agent_id: str | None = None,
                 caps: ToolCaps | None = None, retriever: Retriever | None = None,
                 run_id: str | None = None) -> None:
        if not user_id:
            raise ValueError("a tool session needs a user_id")
        self.binding = Binding(store=store, user_id=user_id, caps=caps or ToolCaps(),
                               agent_id=agent_id, retriever=retriever, run_id=run_id)
        self.log = CallLog()

    @property
    def user_id(self) -> str:
        """The tenant this session is bound to."""
        return self.binding.user_id

    @property
    def caps(self) -> ToolCaps:
        """The caps in force."""
        return self.binding.caps

    def put_blob(self, key: str, text: str, metadata: dict[str, Any] | None = None) -> BlobRef:
        """Keep ``text`` in the store under ``key`` and return the handle to give the agent."""
        info = self.binding.store.blobs.put(self.user_id, key, text, metadata)
        return BlobRef(key=key, n=info.chars)

    def ref(self, key: str) -> BlobRef:
        """The handle of an existing blob of this tenant."""
        info = self.binding.store.blobs.info(self.user_id, key)
        if info is None:
            raise ToolError(f"no blob {key!r} for user {self.user_id!r}")
        return BlobRef(key=key, n=info.chars)

    def handle_tools(self) -> list[Callable[..., dict[str, Any]]]:
        """The bounded tools: ctx_stats/peek/slice/find, mem_search/get/quote/add, event_log."""
        return [self.bind(fn) for fn in HANDLE_TOOLS]

    def naive_tools(self) -> list[Callable[..., dict[str, Any]]]:
        """Unbounded tools for the leakage ablation only (see ``naive.py``)."""
        return [self.bind(fn) for fn in NAIVE_TOOLS]

    def bind(self, fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        """``fn`` with this session's binding filled in, logged on every call."""
        signature = inspect.signature(fn)
        params = list(signature.parameters.values())[1:]
        agent_facing = signature.replace(parameters=params)

        @functools.wraps(fn)
        def tool(*args: Any, **kwargs: Any) -> dict[str, Any]:
            started = time.perf_counter()
            call = ToolCall(name=fn.__name__, args=_loggable(signature, args, kwargs))
            try:
                try:
                    agent_facing.bind(*args, **kwargs)
                except TypeError as exc:
                    # A wrong argument name or count from the agent: say which, as a
                    # refusal. A TypeError raised inside the tool is a bug and propagates.
                    raise ToolError(f"{fn.__name__}{agent_facing}: {exc}") from None
                if (bad := _not_unicode([args, kwargs])) is not None:
                    raise ToolError(f"{fn.__name__}: arguments must be valid Unicode text; "
                                    f"{bad!r} holds a lone surrogate (undecodable bytes?)")
                result = fn(self.binding, *args, **kwargs)
                call.result_chars = len(json.dumps(result, ensure_ascii=False))
                call.ids = _ids_in(result)
                return result
            except ToolError as exc:
                call.error = _bounded(str(exc), self.binding.caps.max_error_chars)
                if call.error == str(exc):
                    raise
                raise ToolError(call.error) from None
            finally:
                call.ms = round((time.perf_counter() - started) * 1000, 3)
                self.log.calls.append(call)

        tool.__signature__ = agent_facing  # type: ignore[attr-defined]
        tool.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "b"}
        return tool


def _bounded(message: str, limit: int) -> str:
    """``message`` cut to ``limit`` chars, its start and end kept: refusals quote the
    agent's arguments mid-message and end on what is allowed. Secrets are masked first
    (``memory.runs.redact_text``): a key cut in half would no longer look like one."""
    message = redact_text(message)
    if len(message) <= limit:
        return message
    half = (limit - len(MARK) - 2) // 2
    return f"{message[:half]} {MARK} {message[-half:]}"


def _not_unicode(args: Any, limit: int = 10_000) -> str | None:
    """The start of the first string in ``args`` that UTF-8 cannot encode (a lone
    surrogate: SQLite and JSON transports refuse it), or None. Visits at most ``limit``
    values, without recursion (an agent's JSON may nest thousands deep)."""
    stack, seen = [args], 0
    while stack and seen < limit:
        value = stack.pop()
        seen += 1
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return value[:40]
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
    return None


CLIP_CHARS = 1_000
"""Characters of a string argument a call's log redacts, then shows the first 200 of."""
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 200
_SHORT.maxlevel = 3


def _loggable(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> dict[str, Any]:
    """The call's arguments by name, each cut short (a log, not a copy; reprlib keeps a
    structure nested thousands deep from recursing)."""
    names = list(signature.parameters)[1:]
    named = dict(zip(names, args, strict=False)) | kwargs
    # Redacted before it is cut to 200 characters (a key cut in half no longer looks like
    # one), but only what could be shown: redacting a 6 MB argument whole took seconds.
    return {k: (v if isinstance(v, int | float | bool | None)
                else _SHORT.repr(redact(_clipped(v)))[:200]) for k, v in named.items()}


def _clipped(value: Any, depth: int = 0) -> Any:
    """``value`` with what ``_SHORT`` cannot show left out: strings cut to
    :data:`CLIP_CHARS`, containers to their first 20 entries, levels past its depth."""
    if isinstance(value, str):
        return value[:CLIP_CHARS]
    if depth > _SHORT.maxlevel and isinstance(value, dict | list | tuple):
        return MARK
    if isinstance(value, dict):
        return {(k[:CLIP_CHARS] if isinstance(k, str) else k): _clipped(v, depth + 1)
                for k, v in list(value.items())[:20]}
    if isinstance(value, list | tuple):
        return [_clipped(v, depth + 1) for v in value[:20]]
    return value
