"""The OpenAPI 3.1 document of the REST API, built from the endpoints' pydantic models.

Each :class:`~memstrata.server.routes.Endpoint` gives one operation: its request body's
schema (a ``$ref`` into ``components.schemas``), its query parameters (one per field of
its query model), its response's schema, and the error responses every operation may
give (``ErrorResponse``; the codes in ``errors.py``), and those only some give (the
endpoint's ``errors``: ``no_model``, ``model_error``). Every operation but ``GET
/healthz`` needs the bearer key (``components.securitySchemes.bearer``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from .errors import STATUS
from .models import ErrorResponse
from .routes import Endpoint

REF = "#/components/schemas/{model}"
HEALTHZ: dict[str, Any] = {
    "operationId": "get_healthz", "summary": "Whether the server and its store answer "
    "(no key needed: a load balancer's probe)", "security": [], "parameters": [],
    "responses": {
        "200": {"description": "ready", "content": {"application/json": {"schema": {
            "type": "object", "properties": {"status": {"const": "ok"},
                                             "version": {"type": "string"}}}}}},
        "503": {"description": "the store cannot be read", "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}}}
"""``GET /healthz``, the one operation without the bearer key (``app.py`` serves it)."""


def openapi(endpoints: list[Endpoint], *, title: str, version: str) -> dict[str, Any]:
    """The document (see the module)."""
    used: set[type[BaseModel]] = {ErrorResponse}
    for e in endpoints:
        used.update(m for m in (e.body, e.response) if m is not None)
    ordered = sorted(used, key=lambda cls: cls.__name__)
    _, schemas = models_json_schema([(cls, "validation") for cls in ordered],
                                    ref_template=REF)
    paths: dict[str, dict[str, Any]] = {"/healthz": {"get": HEALTHZ}}
    for e in endpoints:
        paths.setdefault(e.path, {})[e.method.lower()] = _operation(e)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version,
                 "description": "memstrata's memory verbs for the key's tenant. Errors: "
                 "{\"error\": {\"code\", \"message\"}} with the codes "
                 + ", ".join(STATUS) + "."},
        "paths": paths,
        "components": {"schemas": schemas.get("$defs", {}),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }


def _operation(e: Endpoint) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{e.method.lower()}_{e.path.strip('/').replace('/', '_')}"
                       .replace("{", "").replace("}", ""),
        "summary": e.summary,
        "parameters": [{"name": name, "in": "path", "required": True,
                        "schema": {"type": "string"}}
                       for name in _path_names(e.path)],
        "responses": {str(e.status): _response(e)},
    }
    if e.query is not None:
        schema = e.query.model_json_schema()
        for name, prop in schema.get("properties", {}).items():
            op["parameters"].append({"name": name, "in": "query",
                                     "required": name in schema.get("required", []),
                                     "schema": prop})
    if e.body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"$ref": REF.format(model=e.body.__name__)}}}}
    error = {"content": {"application/json": {
        "schema": {"$ref": REF.format(model=ErrorResponse.__name__)}}}}
    codes = sorted({STATUS[c] for c in ("bad_json", "validation_error", "unauthorized",
                                        "forbidden", "not_found", "too_large", *e.errors)})
    for status in codes:
        op["responses"][str(status)] = {"description": "an error (see the codes)", **error}
    return op


def _response(e: Endpoint) -> dict[str, Any]:
    if e.media != "application/json":
        return {"description": "OK", "content": {e.media: {"schema": {"type": "string"}}}}
    schema: dict[str, Any] = ({"$ref": REF.format(model=e.response.__name__)}
                              if e.response is not None else {"type": "object"})
    return {"description": "OK", "content": {"application/json": {"schema": schema}}}


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]
