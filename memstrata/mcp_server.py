"""An MCP server over one tenant's memory: the handle tools and ``Memory``'s verbs, bound
to one user exactly as ``ToolSession`` binds them.

Contracts:

- The tools are ``ToolSession(store, user).handle_tools()`` (``ctx_stats``, ``ctx_peek``,
  ``ctx_slice``, ``ctx_find``, ``mem_search``, ``mem_get``, ``mem_quote``, ``mem_add``,
  ``event_log``), published with their own signatures and docstrings, the verbs
  ``context``, ``read`` and ``learn``, and ``answer`` and ``expect`` when the memory has
  an LM (each verb with an agent-facing description, :data:`VERB_DOCS`). No tool takes a
  user: the tenant is fixed when the server starts, and an argument a tool does not
  declare (``user_id``...) is refused.
- The caps and refusals are the session's (and the verbs' own: ``MAX_CONTEXT_BUDGET``,
  ``MAX_READ_CHARS``, ...): a refusal reaches the client as a tool error
  (``isError``) carrying the refusal's message; results are bounded JSON objects (structured
  content, and the same JSON as text).
- Every call is one run in the store's run tables (program ``mcp.<tool>``), with the
  tool call as its step; a verb records its LLM calls and tokens as ``usage``. One
  run per call, not per client session: the client's task is not known here, a session
  may last for days and usually ends by the process being killed, and the recorder
  writes a run's steps when it closes, so a session-long run would stay ``running``
  (which pruning never removes) with its steps lost. Each run's config carries a
  ``server_session`` id that groups the calls of one server process.
- Arguments that fail the published schema (wrong type, an undeclared name) are refused
  by the SDK before the tool runs, with pydantic's message, and are not recorded.
- Calls are serialised: the SDK runs each synchronous tool on a worker thread, and one
  store connection and one ``ToolSession`` serve every client of the process.

``TenantTools`` holds the binding and the recording and imports nothing of ``mcp``;
``build_server`` wraps it in the SDK's ``MCPServer`` (the ``mcp`` extra).

Example:
    >>> from memstrata import Memory
    >>> tools = TenantTools(Memory.open(":memory:"), "ana")
    >>> tools.call("mem_add", text="Ana swims at the lido")["status"]
    'added'
    >>> [r["kind"] for r in tools.call("mem_search", query="lido")["results"]]
    ['semantic']
"""

from __future__ import annotations

import hmac
import inspect
import json
import threading
import typing
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from memstrata.memory.runs import redact_text
from memstrata.tools import HANDLE_TOOLS, ToolCall, ToolCaps, ToolError, ToolSession
from memstrata.tools.base import check_cap
from memstrata.trajectories import Recorder

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from memstrata.api import Memory

SERVER_NAME = "memstrata"
LOOPBACK = "127.0.0.1"
HANDLE_TOOL_NAMES: tuple[str, ...] = tuple(fn.__name__ for fn in HANDLE_TOOLS)
VERB_TOOL_NAMES: tuple[str, ...] = ("context", "read", "learn")
"""The memory verbs offered as tools with or without an LM."""
LM_TOOL_NAMES: tuple[str, ...] = ("answer", "expect")
"""The verbs offered only when the memory has an LM."""
WRITE_TOOLS = frozenset({"mem_add", "event_log", "read", "learn", "expect"})
MAX_CONVERSATION_ID_CHARS = 256
MAX_CONTEXT_BUDGET = 4000
"""The largest ``context`` budget a tool call may ask for, in tokens."""
MAX_READ_CHARS = 100_000
"""The longest document ``read`` takes through a tool call."""
MAX_LABEL_CHARS = 300
"""The longest ``title``, ``source`` or ``when`` of ``read``."""
MAX_TRAJECTORY_CHARS = 50_000
"""The longest trajectory ``learn`` takes through a tool call."""
MAX_USED = 50
"""The most strategy ids one ``learn`` call may name as used."""
MAX_LISTED_IDS = 50
"""The most ids of one kind a verb's result lists (the rest are counted)."""
QUOTE_CHARS = 500
"""What ``expect`` quotes of the expected and the actual message."""

_ANSWER_FIELDS = ("question", "answer", "abstained", "answered_by", "reason", "evidence",
                  "evidence_from", "sources", "speakers", "about", "conversation_id",
                  "confidence", "path", "intent", "llm_calls")
"""What ``answer`` returns of ``AnswerWithProvenance``: the answer and what it rests on,
not the router's and verifier's internals (kept in the run record instead)."""


ANSWER_DOC = """Answer a question from this user's memory: routed, checked for who said
what, and returned with the evidence ids it rests on and why (or why it abstained).

Args:
    question: the question, in plain words.
    conversation_id: only this conversation (default: all of the user's).
"""
"""``answer``'s description as agents see it (the method's own docstring is for callers)."""

VERB_DOCS: dict[str, str] = {
    "answer": ANSWER_DOC,
    "context": """This user's memory for a query as one block to read before answering:
what was said, what was read, procedures, strategies from past runs, what to expect of
the user and reminders, each line opening with [id · speaker or source · date].

Args:
    query: what the block is for (the user's message or your question).
    budget: the most tokens the block takes (at most 4000).
    layers: some of conversation, semantic, procedures, strategies, voe, intentions
        (default: all).
    conversation_id: route what was said to this conversation.
""",
    "read": """Read a document (an article, a tutorial, a report) into this user's
memory: its sentences become facts, a numbered list of steps a procedure; context,
answer and mem_search find them afterwards.

Args:
    text: the document (at most 100,000 characters).
    title: its title.
    source: who published it.
    when: its date (ISO 8601).
""",
    "learn": """Learn from a finished task: what worked (success) or what to avoid
(failure) becomes a strategy that later context calls show.

Args:
    task: what the task was.
    success: whether the task succeeded, by your own check.
    trajectory: what you did, step by step (at most 50,000 characters).
    answer: the answer you gave.
    used: the strategy ids the context you worked from showed.
    rationale: why the task succeeded or failed.
""",
    "expect": """After you replied to the user (both messages stored), check what the
user last said against what was expected, learn from a surprise, and predict the user's
next message; context shows the prediction afterwards.

Args:
    conversation_id: the conversation (default: 'default').
""",
}
"""The verbs' descriptions as agents see them."""


class TenantTools:
    """The handle tools (and ``answer``) of one tenant, serialised and recorded.

    Args:
        memory: the open memory; its store, retriever and LM are used.
        user_id: the tenant every call is bound to.
        agent_id: recorded on the runs and on what ``mem_add`` writes.
        caps: the tool caps (``ToolCaps()`` defaults when omitted).
        transport: recorded in each run's config (``stdio`` or ``http``).
    """

    def __init__(self, memory: Memory, user_id: str, *, agent_id: str | None = None,
                 caps: ToolCaps | None = None, transport: str = "stdio") -> None:
        if not isinstance(user_id, str) or not user_id.strip() or len(user_id) > 256:
            raise ValueError("--user must be a non-empty string of at most 256 characters")
        self.memory = memory
        self.session = ToolSession(memory.store, user_id, agent_id=agent_id, caps=caps,
                                   retriever=memory.retriever)
        self._bound = {t.__name__: t for t in self.session.handle_tools()}
        self._lock = threading.Lock()
        # One id per server process: the runs of one client session (stdio) share it, so
        # they can be read back together; HTTP clients of one process share it too.
        self.server_session = f"mcp_{uuid.uuid4().hex[:16]}"
        self._config: dict[str, Any] = {
            "transport": transport, "server_session": self.server_session,
            "caps": self.session.caps.model_dump(),
            "model": memory.lm.name if memory.lm is not None else None,
            "programs": memory.programs}

    @property
    def user_id(self) -> str:
        """The tenant."""
        return self.session.user_id

    @property
    def names(self) -> list[str]:
        """The tools offered: the handle tools, ``context``, ``read`` and ``learn``, and
        ``answer`` and ``expect`` when there is an LM."""
        lm = self.memory.lm is not None
        return [*HANDLE_TOOL_NAMES, *VERB_TOOL_NAMES, *(LM_TOOL_NAMES if lm else ())]

    def signature(self, name: str) -> tuple[inspect.Signature, dict[str, Any], str]:
        """A tool's agent-facing signature with its annotations resolved to types (what a
        schema is built from), those annotations by name, and its docstring."""
        if name in VERB_DOCS:
            fn, doc = getattr(TenantTools, name), VERB_DOCS[name]
        else:
            fn = next(f for f in HANDLE_TOOLS if f.__name__ == name)
            doc = inspect.getdoc(fn) or ""
        # Postponed annotations (``from __future__``): resolve them in the tool's module.
        # The first parameter is the binding (``self`` for ``answer``): never published.
        hints = typing.get_type_hints(fn)
        params = [p.replace(annotation=hints.get(p.name, Any))
                  for p in list(inspect.signature(fn).parameters.values())[1:]]
        hints = {p.name: p.annotation for p in params} | {"return": hints["return"]}
        return inspect.Signature(params, return_annotation=hints["return"]), hints, doc

    def call(self, name: str, /, **kwargs: Any) -> dict[str, Any]:
        """Call one tool as the bound tenant and record the call as a run.

        Raises:
            ToolError: a refusal (over a cap, unknown id or key, bad argument), or a tool
                this server does not offer.
        """
        if name in VERB_DOCS and name in self.names:
            return cast(dict[str, Any], getattr(self, name)(**kwargs))
        tool = self._bound.get(name)
        if tool is None:
            raise ToolError(f"no tool {name!r}; tools: {', '.join(self.names)}")
        with self._lock:
            rec = self._start(name, task=_task(name, kwargs))
            log = self.session.log
            mark = len(log.calls)
            self.session.binding.run_id = rec.run_id  # on what mem_add / event_log write
            failure: BaseException | None = None
            try:
                return tool(**kwargs)
            except BaseException as exc:
                failure = exc
                raise
            finally:
                self.session.binding.run_id = None
                calls = log.since(mark)
                del log.calls[mark:]  # a long-lived server must not grow the log forever
                self._close(rec, calls, failure)

    def answer(self, question: str, conversation_id: str | None = None) -> dict[str, Any]:
        """``Memory.answer`` for the bound tenant, recorded as a run with its LLM usage.

        Raises:
            ToolError: no LM, a question over the query cap, a bad conversation id, or a
                model whose output could not be parsed.
        """
        handle = self.memory.lm
        if handle is None:
            raise ToolError("answer: this server was started without --lm")
        with self._lock:
            # Cut: the run is opened before the question's length is checked.
            rec = self._start("answer", task=question[:2000] if isinstance(question, str) else "",
                              config={"conversation_id": conversation_id})
            mark = handle.meter.mark()
            try:
                _check_question(question, conversation_id, self.session.caps)
                out = self._answer(question, conversation_id)
            except BaseException as exc:
                rec.fail(exc if not isinstance(exc, ToolError) else str(exc),
                         usage=handle.meter.since(mark).model_dump())
                raise
            result = out.model_dump(mode="json", include=set(_ANSWER_FIELDS))
            rec.step("retrieve", "answer", input=question, data={"ids": out.retrieved})
            rec.finish(output=result, usage=handle.meter.since(mark).model_dump())
            return result

    def context(self, query: str, budget: int = 600, layers: list[str] | None = None,
                conversation_id: str | None = None) -> dict[str, Any]:
        """``Memory.context`` for the bound tenant: the block, its ids and each layer's
        ids and tokens (no LLM call).

        Raises:
            ToolError: a query over the query cap, a budget over
                :data:`MAX_CONTEXT_BUDGET`, an unknown layer, a bad conversation id.
        """
        def run() -> dict[str, Any]:
            _check_text_arg("context", "query", query, self.session.caps.max_query_chars)
            check_cap("context", _whole(budget, "budget"), MAX_CONTEXT_BUDGET, "a budget of")
            _check_conversation("context", conversation_id)
            ctx = self.memory.context(query, user_id=self.user_id, budget=budget,
                                      layers=layers, conversation_id=conversation_id)
            return {"text": ctx.text, "ids": ctx.ids, "tokens": ctx.tokens,
                    "budget": ctx.budget,
                    "layers": {n: {"ids": u.ids, "tokens": u.tokens}
                               for n, u in ctx.layers.items()}}

        return self._verb("context", query, run)

    def read(self, text: str, title: str | None = None, source: str | None = None,
             when: str | None = None) -> dict[str, Any]:
        """``Memory.read`` for the bound tenant: the ids it wrote (at most
        :data:`MAX_LISTED_IDS` facts listed, all counted).

        Raises:
            ToolError: empty text, text over :data:`MAX_READ_CHARS`, a label over
                :data:`MAX_LABEL_CHARS`, a date that does not parse.
        """
        def run() -> dict[str, Any]:
            _check_text_arg("read", "text", text, MAX_READ_CHARS)
            for name, value in (("title", title), ("source", source), ("when", when)):
                if value is not None:
                    _check_text_arg("read", name, value, MAX_LABEL_CHARS)
            report = self.memory.read(text, user_id=self.user_id, title=title,
                                      source=source, when=when)
            return {"episode_id": report.episode_id, "procedure_id": report.procedure_id,
                    "facts": report.facts[:MAX_LISTED_IDS], "facts_total": len(report.facts),
                    "triggered": report.triggered[:MAX_LISTED_IDS]}

        return self._verb("read", title or source or text, run)

    def learn(self, task: str, success: bool, trajectory: str = "", answer: str = "",
              used: list[str] | None = None, rationale: str = "") -> dict[str, Any]:
        """``Memory.learn`` for the bound tenant (by the LM when there is one, else
        from the trace): the strategies written and the decisions taken.

        Raises:
            ToolError: no task, a text over its cap, more than :data:`MAX_USED` ids, or
                a model whose output could not be parsed.
        """
        def run() -> dict[str, Any]:
            _check_text_arg("learn", "task", task, self.session.caps.max_query_chars)
            if not isinstance(success, bool):
                raise ToolError("learn: success must be true or false")
            for name, value in (("trajectory", trajectory), ("answer", answer),
                                ("rationale", rationale)):
                _check_text_arg("learn", name, value, MAX_TRAJECTORY_CHARS, empty=True)
            ids = list(used or [])
            check_cap("learn", len(ids), MAX_USED, "a list of used ids of length")
            lesson = self.memory.learn(
                {"task": task, "trajectory": trajectory, "answer": answer},
                user_id=self.user_id, success=success, used=[str(i) for i in ids],
                rationale=rationale)
            return {"task": lesson.task, "success": lesson.success, "method": lesson.method,
                    "strategies": lesson.strategies[:MAX_LISTED_IDS],
                    "decisions": lesson.decisions[:MAX_LISTED_IDS],
                    "used": lesson.used[:MAX_LISTED_IDS], "llm_calls": lesson.llm_calls}

        return self._verb("learn", task, run)

    def expect(self, conversation_id: str | None = None) -> dict[str, Any]:
        """``Memory.expect`` for the bound tenant: the check of the user's last message
        (quoted at most :data:`QUOTE_CHARS`), the fact a surprise taught, the new
        prediction.

        Raises:
            ToolError: no LM, a bad conversation id, a conversation with no turn, or a
                model whose output could not be parsed.
        """
        def run() -> dict[str, Any]:
            _check_conversation("expect", conversation_id)
            out = self.memory.expect(self.user_id, conversation_id=conversation_id)
            checked = out.checked
            return {"conversation_id": out.conversation_id, "id": out.id,
                    "prediction": out.prediction, "needed_info": out.needed_info,
                    "checked": None if checked is None else {
                        "expected": checked.expected[:QUOTE_CHARS],
                        "actual": checked.actual[:QUOTE_CHARS], "turn": checked.turn,
                        "score": checked.score, "violation": checked.violation},
                    "fact": out.fact, "fact_id": out.fact_id, "llm_calls": out.llm_calls}

        return self._verb("expect", f"expect in {conversation_id or 'default'}", run)

    def _verb(self, name: str, task: str, run: Callable[[], dict[str, Any]]
              ) -> dict[str, Any]:
        """One verb call as a run (program ``mcp.<name>``, its LLM usage counted): a
        refusal or a bad argument becomes a ``ToolError`` with a bounded message."""
        from memstrata.programs.errors import ProgramParseError

        handle = self.memory.lm
        with self._lock:
            rec = self._start(name, task=str(task)[:300])
            mark = handle.meter.mark() if handle is not None else 0

            def usage() -> dict[str, Any] | None:
                return handle.meter.since(mark).model_dump() if handle is not None else None

            try:
                result = run()
            except (ToolError, ProgramParseError, ValueError, TypeError, KeyError,
                    RuntimeError) as exc:
                message = self._bounded(str(exc) if isinstance(exc, ToolError)
                                        else f"{name}: {exc}")
                rec.fail(message, usage=usage())
                raise ToolError(message) from None
            except BaseException as exc:
                rec.fail(exc, usage=usage())
                raise
            rec.step("tool", name, output_chars=len(json.dumps(result, default=str)))
            rec.finish(output=result, usage=usage())
            return result

    def _answer(self, question: str, conversation_id: str | None) -> Any:
        from memstrata.programs.errors import ProgramParseError

        try:
            return self.memory.answer(question, user_id=self.user_id,
                                      conversation_id=conversation_id)
        except ProgramParseError as exc:  # a weak model's output: the caller may retry
            raise ToolError(self._bounded(f"answer: {exc}")) from None

    def _bounded(self, message: str) -> str:
        return redact_text(message)[: self.session.caps.max_error_chars]

    def _start(self, name: str, *, task: str, config: dict[str, Any] | None = None
               ) -> Recorder:
        rec = Recorder(self.memory.store, self.user_id, f"mcp.{name}", task=task,
                       config={**self._config, **(config or {})},
                       agent_id=self.session.binding.agent_id)
        rec.start()
        return rec

    def _close(self, rec: Recorder, calls: list[ToolCall], failure: BaseException | None
               ) -> None:
        """Write the call as the run's step (as executors write theirs) and close it: a
        refusal closes the run as ``error`` with the refusal's message."""
        for call in calls:
            rec.step("tool", call.name, input=call.args, output=call.error or "",
                     output_chars=call.result_chars, ms=call.ms,
                     data={"ids": call.ids, "error": call.error})
        sizes = [c.result_chars for c in calls if c.error is None]
        leakage = {"tool_calls": len(calls), "tool_return_chars": sum(sizes),
                   "large_returns": sum(s >= self.session.caps.large_return_chars
                                        for s in sizes)}
        if failure is None:
            rec.finish(output={"ids": [i for c in calls for i in c.ids]}, leakage=leakage)
        else:
            rec.fail(str(failure) if isinstance(failure, ToolError) else failure,
                     leakage=leakage)


def _task(name: str, kwargs: dict[str, Any]) -> str:
    """A run's task line: the call as the client made it, cut short (the step keeps the
    arguments; the recorder masks secrets)."""
    try:
        shown = json.dumps(kwargs, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        shown = repr(kwargs)
    return f"{name} {shown[:300]}"


def _check_text_arg(tool: str, name: str, value: Any, most: int, *, empty: bool = False
                    ) -> None:
    """A text argument: a string (non-blank unless ``empty``) of at most ``most``."""
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise ToolError(f"{tool}: {name} must be a {'' if empty else 'non-empty '}string")
    check_cap(tool, len(value), most, f"a {name} of length")


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolError(f"{name} must be a whole number of at least 1")
    return value


def _check_conversation(tool: str, conversation_id: Any) -> None:
    if conversation_id is not None and (
            not isinstance(conversation_id, str) or not conversation_id.strip()
            or len(conversation_id) > MAX_CONVERSATION_ID_CHARS):
        raise ToolError(f"{tool}: conversation_id must be a non-empty string of at most "
                        f"{MAX_CONVERSATION_ID_CHARS} characters")


def _check_question(question: Any, conversation_id: Any, caps: ToolCaps) -> None:
    """``answer``'s arguments, refused as the tools refuse theirs (the query cap applies)."""
    if not isinstance(question, str) or not question.strip():
        raise ToolError("answer: question must be a non-empty string")
    check_cap("answer", len(question), caps.max_query_chars, "a question of length")
    _check_conversation("answer", conversation_id)


# -- the MCP server ------------------------------------------------------------------------


def build_server(tools: TenantTools) -> MCPServer:
    """An ``MCPServer`` publishing ``tools.names``, each calling ``tools.call``.

    Raises:
        MissingExtraError: the ``mcp`` extra is not installed.
    """
    from memstrata.memory.extras import require

    require("mcp", "mcp", "the MCP server")
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError as McpToolError
    from mcp.server.mcpserver.tools import Tool
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
    from mcp.types import ToolAnnotations
    from pydantic import ConfigDict

    published = []
    for name in tools.names:
        signature, hints, doc = tools.signature(name)

        def tool(_name: str = name, **kwargs: Any) -> dict[str, Any]:
            try:
                return tools.call(_name, **kwargs)
            except ToolError as exc:  # a refusal: the client sees it as isError + message
                raise McpToolError(str(exc)) from None

        # The SDK builds the input schema from the signature: the tool's own, resolved.
        fn = _named(name, doc, signature, hints, tool)
        spec = Tool.from_function(fn, annotations=ToolAnnotations(
            read_only_hint=name not in WRITE_TOOLS, destructive_hint=False,
            open_world_hint=False))
        # Refuse undeclared arguments (a ``user_id`` above all) instead of dropping them.
        base = spec.fn_metadata.arg_model
        strict = cast(type[ArgModelBase], type(base.__name__, (base,), {
            "model_config": ConfigDict(extra="forbid", arbitrary_types_allowed=True)}))
        spec.fn_metadata.arg_model = strict
        spec.parameters = strict.model_json_schema(by_alias=True)
        published.append(spec)
    return MCPServer(SERVER_NAME, version=_version(), tools=published, log_level="WARNING",
                     instructions=f"Long-term memory of one user ({tools.user_id!r}): search "
                     "with mem_search, then fetch with mem_get or mem_quote; or call context "
                     "for one block of every layer.")


def _named(name: str, doc: str, signature: inspect.Signature, hints: dict[str, Any],
           call: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """``call`` presented as the tool ``name``: its docstring, signature and annotations."""

    def fn(**kwargs: Any) -> dict[str, Any]:
        return call(**kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    fn.__signature__ = signature  # type: ignore[attr-defined]
    fn.__annotations__ = dict(hints)
    return fn


class BearerGuard:
    """An ASGI wrapper that answers 401 to any HTTP request without ``Authorization:
    Bearer <token>``; lifespan events pass through (they start the session manager).

    The token is compared in constant time. Nothing else about the request is checked
    here: the SDK's DNS-rebinding protection (on for 127.0.0.1) checks Host and Origin.
    """

    def __init__(self, app: Any, token: str) -> None:
        if not token:
            raise ValueError("a bearer token must not be empty")
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self._authorised(scope):
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"www-authenticate", b'Bearer realm="memstrata"')]})
            await send({"type": "http.response.body",
                        "body": b'{"error": "a bearer token is required"}'})
            return
        await self.app(scope, receive, send)

    def _authorised(self, scope: dict[str, Any]) -> bool:
        for key, value in scope.get("headers", ()):
            if key.lower() == b"authorization":
                scheme, _, credential = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(
                    credential.strip(), self._token)
        return False


def serve_stdio(server: MCPServer) -> None:
    """Serve over stdin/stdout until the client closes them. While serving, the SDK points
    fd 1 at stderr, so stray output cannot corrupt the protocol."""
    import anyio

    anyio.run(server.run_stdio_async)


def serve_http(server: MCPServer, *, port: int, token: str) -> None:
    """Serve streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (loopback only), every
    request required to carry ``Authorization: Bearer <token>``."""
    import uvicorn

    app = BearerGuard(server.streamable_http_app(host=LOOPBACK), token)
    uvicorn.Server(uvicorn.Config(app, host=LOOPBACK, port=port, log_level="warning")).run()


def _version() -> str:
    # The installed distribution's: importing the package root would pull in its face.
    from importlib import metadata

    try:
        return metadata.version("memstrata")
    except metadata.PackageNotFoundError:
        return ""


__all__ = ["HANDLE_TOOL_NAMES", "LOOPBACK", "SERVER_NAME", "BearerGuard", "TenantTools",
           "build_server", "serve_http", "serve_stdio"]
