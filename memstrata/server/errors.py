"""The server's errors: one JSON shape, stable codes.

Every error response is ``{"error": {"code": CODE, "message": TEXT}}`` (plus ``"details"``
for a validation error: pydantic's list, bounded), with the HTTP status of its code:

==========================  ======  =====================================================
code                        status  when
==========================  ======  =====================================================
``bad_json``                400     the body is not JSON (or nests deeper than allowed)
``validation_error``        422     JSON of the wrong shape, or a value ``Memory`` refuses
``unauthorized``            401     no ``Authorization: Bearer KEY``, or not an active key
``forbidden``               403     a tenant key naming another tenant; an admin endpoint
``not_found``               404     no such route, or no such memory for this tenant
``method_not_allowed``      405     the route exists, the method does not
``too_large``               413     a body over the server's limit
``no_model``                409     ``answer``, ``expect`` (or ``learn`` by ``llm``) on a
                                    server started without ``--lm``
``model_error``             502     the model's output could not be used
``store_unavailable``       503     the store cannot be read or written
``internal_error``          500     a bug (the message says nothing of it)
==========================  ======  =====================================================

The codes are an interface: clients switch on them; messages are for people.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse, Response

from memstrata.errors import MemstrataError

STATUS: dict[str, int] = {
    "bad_json": 400, "validation_error": 422, "unauthorized": 401, "forbidden": 403,
    "not_found": 404, "method_not_allowed": 405, "too_large": 413, "no_model": 409,
    "model_error": 502, "store_unavailable": 503, "internal_error": 500,
}
"""Each stable code and its HTTP status."""
MAX_MESSAGE_CHARS = 500
MAX_DETAILS = 20


class ApiError(MemstrataError):
    """A request refused with one of :data:`STATUS`'s codes; the handler turns it into
    the JSON error response."""

    def __init__(self, code: str, message: str, *, details: list[Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        if code not in STATUS:
            raise ValueError(f"no error code {code!r}")
        super().__init__(message)
        self.code, self.message = code, message
        self.details, self.headers = details, headers

    @property
    def status(self) -> int:
        """The HTTP status of the code."""
        return STATUS[self.code]


def error_response(code: str, message: str, *, details: list[Any] | None = None,
                   headers: Mapping[str, str] | None = None) -> Response:
    """The JSON error response (see the module); the message is cut to one bounded line."""
    # Messages may quote input: a lone surrogate would not encode as UTF-8.
    text = " ".join(str(message).split())[:MAX_MESSAGE_CHARS].encode(
        "utf-8", "replace").decode("utf-8")
    body: dict[str, Any] = {"code": code, "message": text}
    if details:
        body["details"] = _jsonable(details[:MAX_DETAILS])
    return JSONResponse({"error": body}, status_code=STATUS[code], headers=headers)


def unauthorized(message: str = "send an API key: 'Authorization: Bearer KEY'") -> ApiError:
    """The 401 with the ``WWW-Authenticate`` challenge."""
    return ApiError("unauthorized", message,
                    headers={"WWW-Authenticate": 'Bearer realm="memstrata"'})


def _jsonable(value: Any) -> Any:
    """``value`` as JSON (pydantic's error details may hold any input; text stays short)."""
    text = json.dumps(value, default=lambda v: repr(v)[:200], ensure_ascii=True)
    return json.loads(text.encode("utf-8", "replace"))


__all__ = ["STATUS", "ApiError", "error_response", "unauthorized"]
