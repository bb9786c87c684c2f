"""The MCP streamable-HTTP endpoint inside the server, one MCP server per tenant.

``TenantMcp`` is the ASGI app at ``/mcp``. Each request's bearer key decides the tenant;
the request goes to that tenant's MCP server (``mcp_server.build_server`` over
``TenantTools(memory, tenant)``: the same tools, refusals and run records as ``memstrata
mcp``), built on the tenant's first request and kept for the app's life. So a tool never
takes a tenant, and an MCP session id of one tenant is unknown to every other tenant's
server. Admin keys are refused (``forbidden``): the tools act as one tenant. A revoked
key is refused at its next request, whatever session it opened.

The SDK's session managers each need a running task group: they run in the server's
lifespan (:meth:`TenantMcp.lifespan`), each in a task of its own started there.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from starlette.types import Receive, Scope, Send

from .auth import KeyChecker
from .errors import ApiError, error_response

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from memstrata.api import Memory


class TenantMcp:
    """The multi-tenant MCP endpoint (see the module)."""

    def __init__(self, memory: Memory, checker: KeyChecker, *, host: str,
                 max_body: int) -> None:
        self.memory, self.checker = memory, checker
        self.host, self.max_body = host, max_body
        self._managers: dict[str, Any] = {}
        self._lock = anyio.Lock()
        self._tg: TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Run the tenants' session managers while the app runs."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            finally:
                self._tg = None
                self._managers.clear()
                tg.cancel_scope.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            principal = await self.checker.principal(scope)
            if principal.admin or principal.tenant is None:
                raise ApiError("forbidden", "the MCP endpoint serves one tenant: use that "
                               "tenant's key")
            manager = await self._manager(principal.tenant)
        except ApiError as exc:
            await error_response(exc.code, exc.message, headers=exc.headers)(scope, receive,
                                                                               send)
            return
        await manager.handle_request(scope, receive, send)

    async def _manager(self, tenant: str) -> Any:
        async with self._lock:
            manager = self._managers.get(tenant)
            if manager is None:
                if self._tg is None:
                    raise ApiError("store_unavailable", "the MCP endpoint is not running "
                                   "(the app's lifespan has not started)")
                manager = await anyio.to_thread.run_sync(self._build, tenant)
                await self._tg.start(_run_manager, manager)
                self._managers[tenant] = manager
            return manager

    def _build(self, tenant: str) -> Any:
        from memstrata.mcp_server import TenantTools, build_server

        server = build_server(TenantTools(self.memory, tenant, transport="http"))
        # Builds the session manager; the app it returns is not used (routing is ours).
        server.streamable_http_app(streamable_http_path="/mcp", host=self.host,
                                   max_request_body_size=self.max_body)
        return server.session_manager


async def _run_manager(manager: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED
                       ) -> None:
    async with manager.run():
        task_status.started()
        await anyio.sleep_forever()
