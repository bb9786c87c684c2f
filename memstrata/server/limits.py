"""The request size limit, enforced while the body is read.

``BodyLimit`` wraps the whole app (REST, MCP and the inspector). A request whose
``Content-Length`` is over the limit is answered 413 before a byte of its body is read;
one without it (chunked) is read chunk by chunk and cut off as soon as the running total
passes the limit, so a client can never make the server hold more than the limit (plus
one chunk) of its body. A body cut off before the app answered gets the 413 error; one
cut off after (an app that streams) ends the request there.

JSON is read with :func:`parse_json`, which bounds nesting too (Python's parser recurses
once per level and stops near a thousand; what reads the value after it need not take
that many).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError, error_response

DEFAULT_MAX_BODY = 1024 * 1024
"""The default limit: 1 MiB, room for a batch of messages at ``Memory``'s own caps
(256 KiB a message); larger imports go through ``memstrata import``."""
MAX_JSON_DEPTH = 64
"""Most levels of nesting in a request's JSON (``Memory`` takes 20 in metadata)."""


class BodyTooLarge(Exception):
    """Raised into the app when the body being read passes the limit."""


class BodyLimit:
    """An ASGI wrapper refusing bodies over ``max_body`` bytes (see the module)."""

    def __init__(self, app: ASGIApp, max_body: int = DEFAULT_MAX_BODY) -> None:
        if max_body < 1:
            raise ValueError(f"the body limit must be at least 1 byte, not {max_body}")
        self.app, self.max_body = app, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(limit, send)
            return
        read = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > limit:
                    raise BodyTooLarge
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await _too_large(limit, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(limit: int, send: Send) -> None:
    response = error_response("too_large", f"the request body is over {limit:,} bytes",
                              headers={"Connection": "close"})
    await response({"type": "http"}, _no_body, send)


async def _no_body() -> Message:
    return {"type": "http.disconnect"}


def parse_json(body: bytes) -> Any:
    """The body's JSON value.

    Raises:
        ApiError: ``bad_json``: empty, not UTF-8, not JSON, ``NaN``/``Infinity``, or
            nested deeper than :data:`MAX_JSON_DEPTH`.
    """
    if not body.strip():
        raise ApiError("bad_json", "the request body is empty; send a JSON object")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError("bad_json", f"the body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise ApiError("bad_json", f"the body is not JSON: {exc}") from None
    except RecursionError:  # the C parser's own guard, near a thousand levels
        raise ApiError("bad_json", f"the JSON nests more than {MAX_JSON_DEPTH} levels"
                       ) from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise ApiError("bad_json", f"the JSON nests more than {MAX_JSON_DEPTH} levels")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    """The deepest nesting of arrays and objects in a parsed value (no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, level)
        if level > MAX_JSON_DEPTH:
            break
        stack.extend((child, level + 1) for child in node)
    return deepest
