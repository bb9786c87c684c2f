"""``create_app``: the server's one ASGI app (see the package's docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from memstrata.aio import AsyncMemory

from .auth import KeyChecker
from .errors import ApiError, error_response
from .layer_verbs import ENDPOINTS as LAYER_VERBS
from .limits import DEFAULT_MAX_BODY, BodyLimit
from .mcp_mount import TenantMcp
from .openapi import openapi
from .routes import ENDPOINTS, Endpoint, routes

if TYPE_CHECKING:
    from memstrata.api import Memory

log = logging.getLogger("memstrata.server")

TITLE = "memstrata"


def create_app(memory: Memory, *, max_body: int = DEFAULT_MAX_BODY,
               host: str = "127.0.0.1", mcp: bool = True, ui: bool = True) -> Starlette:
    """The server over ``memory``: REST under ``/v1``, ``/openapi.json``, MCP at ``/mcp``
    and the inspector at ``/ui``, every request at most ``max_body`` bytes. ``GET
    /healthz`` needs no key: 200 ``{"status": "ok", "version"}`` while the store answers
    a read, 503 ``store_unavailable`` when it cannot.

    Args:
        memory: the memory served (the app does not close it). Its store holds the keys.
        max_body: the request body limit in bytes (``too_large`` over it).
        host: the address the server listens on: on loopback, the MCP endpoint checks
            ``Host`` and ``Origin`` (DNS-rebinding protection, the SDK's).
        mcp: mount the MCP endpoint (needs the ``mcp`` extra).
        ui: mount the inspector at ``/ui`` (admin keys log in).

    Returns:
        The Starlette app; ``app.state`` holds ``memory``, ``endpoints`` and ``openapi``
        (the document).
    """
    from memstrata import __version__

    checker = KeyChecker(memory.store.keys)
    amemory = AsyncMemory(memory)
    endpoints: list[Endpoint] = [*ENDPOINTS, *LAYER_VERBS, *_job_endpoints(memory)]
    document = openapi(endpoints, title=TITLE, version=__version__)

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(document)

    async def healthz(request: Request) -> Response:
        # A load balancer's probe: no key, and ready only while the store answers a read.
        try:
            await asyncio.to_thread(memory.store.keys.get, "healthz")
        except Exception as exc:  # any backend's fault: the probe says so, the log why
            log.error("health check: the store cannot be read: %s", exc)
            return error_response("store_unavailable", "the store cannot be read now")
        return JSONResponse({"status": "ok", "version": __version__})

    table: list[BaseRoute] = [Route("/openapi.json", openapi_json, methods=["GET"]),
                              Route("/healthz", healthz, methods=["GET"]),
                              *routes(endpoints, amemory, checker, memory.store.keys)]
    tenant_mcp = TenantMcp(memory, checker, host=host, max_body=max_body) if mcp else None
    if tenant_mcp is not None:
        table.append(Route("/mcp", tenant_mcp, methods=["GET", "POST", "DELETE"]))
    if ui and (inspector := _inspector(memory, checker)) is not None:
        table.append(Mount("/ui", app=inspector))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if tenant_mcp is None:
            yield
            return
        async with tenant_mcp.lifespan():
            yield

    app = Starlette(routes=table, lifespan=lifespan,
                    middleware=[Middleware(BodyLimit, max_body=max_body)],
                    exception_handlers={
                        ApiError: _api_error, HTTPException: _http_error,
                        sqlite3.Error: _store_error, RuntimeError: _runtime_error,
                        Exception: _internal_error})
    app.state.memory, app.state.endpoints, app.state.openapi = memory, endpoints, document
    return app


def _job_endpoints(memory: Memory) -> list[Endpoint]:
    """The job routes, where ``Memory`` runs extraction in the background."""
    if not hasattr(memory, "jobs"):
        return []
    from .jobs import ENDPOINTS as JOBS

    return list(JOBS)


def _inspector(memory: Memory, checker: KeyChecker) -> Any:
    """The inspector's app (admin keys only), or None where it is not installed."""
    try:
        from memstrata.inspector.app import create_app as inspector_app
    except ImportError:
        return None
    return inspector_app(memory, check_key=checker.is_admin)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.code, exc.message, details=exc.details, headers=exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return error_response("method_not_allowed", f"{request.method} is not allowed here",
                              headers=exc.headers)
    if exc.status_code == 404:
        return error_response("not_found", "no such route")
    return error_response("validation_error" if exc.status_code < 500 else "internal_error",
                          str(exc.detail))


async def _store_error(request: Request, exc: Exception) -> Response:
    log.error("store error on %s %s: %s", request.method, request.url.path, exc)
    return error_response("store_unavailable", "the store cannot be read or written now")


async def _runtime_error(request: Request, exc: Exception) -> Response:
    from memstrata.programs.errors import ProgramParseError
    from memstrata.programs.ingest import IngestError

    if isinstance(exc, ProgramParseError | IngestError):
        return error_response("model_error", str(exc))
    log.exception("unexpected error on %s %s", request.method, request.url.path,
                  exc_info=exc)
    return error_response("internal_error", "an unexpected error; see the server's log")


async def _internal_error(request: Request, exc: Exception) -> Response:
    return error_response("internal_error", "an unexpected error; see the server's log")
