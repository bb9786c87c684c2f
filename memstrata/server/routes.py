"""The REST API: ``Memory``'s verbs under ``/v1`` for the key's tenant, and the admin
endpoints, each declared once as an :class:`Endpoint` (method, path, handler, request and
response models), from which both the routes and the OpenAPI document are built.

Every handler runs the same steps (:func:`_dispatch`): the key (``unauthorized``), the
admin check (``forbidden``), the query and body validated by their models
(``bad_json``/``validation_error``), then the verb, awaited on ``AsyncMemory`` (never on
the event loop). The tenant is the key's (``auth.tenant_for``): an id of another tenant's
memory is ``not_found``, as an id that does not exist.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from memstrata.aio import AsyncMemory
from memstrata.compat import to_mem0
from memstrata.memory.store.keys import ApiKey, Keys

from . import models as m
from .auth import KeyChecker, Principal, require_admin, tenant_for
from .errors import ApiError
from .limits import parse_json


@dataclass
class Call:
    """One request as a handler sees it: validated, authenticated."""

    request: Request
    principal: Principal
    memory: AsyncMemory
    keys: Keys
    body: Any = None
    query: Any = None

    @property
    def tenant(self) -> str:
        """The tenant acted on (see ``auth.tenant_for``)."""
        named = getattr(self.body, "user_id", None)
        if named is None:
            named = getattr(self.query, "user_id", None)
        return tenant_for(self.principal, named)

    @property
    def id(self) -> str:
        """The ``{id}`` of the path."""
        return str(self.request.path_params["id"])


Handler = Callable[[Call], Awaitable[Any]]


@dataclass(frozen=True)
class Endpoint:
    """One operation of the API (see the module)."""

    method: str
    path: str
    handler: Handler
    summary: str
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    status: int = 200
    admin: bool = False
    media: str = "application/json"
    errors: tuple[str, ...] = ()
    """Codes this operation may answer beyond those every operation may (``openapi``)."""


# -- the verbs ------------------------------------------------------------------------------


async def _add(call: Call) -> Any:
    b = call.body
    events = await call.memory.add(
        b.messages, user_id=call.tenant, agent_id=b.agent_id,
        conversation_id=b.conversation_id, session_id=b.session_id, timestamp=b.timestamp,
        metadata=b.metadata, infer=b.infer, skip_roles=b.skip_roles)
    return {"results": events}


async def _search(call: Call) -> Any:
    b = call.body
    tenant = call.tenant
    options: dict[str, Any] = {"filters": b.filters, "limit": b.limit}
    if b.k is not None:
        options["k"] = b.k
    if b.min_score is not None:
        options["min_score"] = b.min_score
    hits = await call.memory.search(b.query, user_id=tenant, **options)
    if b.format == "mem0":
        return to_mem0(hits, user_id=tenant)
    return {"results": [h.model_dump(mode="json") for h in hits]}


async def _get_all(call: Call) -> Any:
    q = call.query
    rows = await call.memory.get_all(call.tenant, kind=q.kind, limit=q.limit, offset=q.offset)
    return {"results": rows}


async def _get(call: Call) -> Any:
    found = await call.memory.get(call.id, user_id=call.tenant)
    if found is None:
        raise ApiError("not_found", "no such memory")
    return found


async def _update(call: Call) -> Any:
    try:
        return await call.memory.update(call.id, call.body.text, user_id=call.tenant)
    except KeyError:
        raise ApiError("not_found", "no such memory") from None


async def _history(call: Call) -> Any:
    versions = await call.memory.history(call.id, user_id=call.tenant)
    if not versions:
        raise ApiError("not_found", "no such memory")
    return {"results": [v.model_dump(mode="json") for v in versions]}


async def _delete(call: Call) -> Any:
    if not await call.memory.delete(call.id, user_id=call.tenant):
        raise ApiError("not_found", "no such memory")
    return {"deleted": True}


async def _delete_all(call: Call) -> Any:
    return {"deleted": await call.memory.delete_all(call.tenant)}


async def _answer(call: Call) -> Any:
    from memstrata.mcp_server import _ANSWER_FIELDS

    tenant = call.tenant  # a key naming another tenant is refused before anything else
    if call.memory.memory.lm is None:
        raise ApiError("no_model", "this server was started without --lm: answer needs one")
    out = await call.memory.answer(call.body.question, user_id=tenant,
                                   conversation_id=call.body.conversation_id,
                                   route=call.body.route)
    return out.model_dump(mode="json", include={*_ANSWER_FIELDS, "run_id"})


async def _flush(call: Call) -> Any:
    events = await call.memory.flush(call.tenant, call.body.conversation_id)
    return {"results": events}


async def _export(call: Call) -> Response:
    tenant = call.tenant
    handle, name = tempfile.mkstemp(prefix="memstrata-export-", suffix=".jsonl")
    os.close(handle)
    try:
        await call.memory.export(tenant, name)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return FileResponse(name, media_type="application/x-ndjson",
                        filename="memstrata-export.jsonl",
                        background=BackgroundTask(Path(name).unlink, missing_ok=True))


async def _me(call: Call) -> Any:
    p = call.principal
    return {"key_id": p.key_id, "tenant": p.tenant, "admin": p.admin}


# -- admin ----------------------------------------------------------------------------------


def _key_json(record: ApiKey) -> dict[str, Any]:
    return record.model_dump(mode="json")


async def _keys_list(call: Call) -> Any:
    import asyncio

    found = await asyncio.to_thread(call.keys.records, call.query.tenant,
                                    revoked=call.query.revoked)
    return {"results": [_key_json(k) for k in found]}


async def _keys_create(call: Call) -> Any:
    import asyncio

    b = call.body
    try:
        key, record = await asyncio.to_thread(call.keys.create, b.tenant, admin=b.admin,
                                              name=b.name)
    except ValueError as exc:
        raise ApiError("validation_error", str(exc)) from None
    return {"key": key, "record": _key_json(record)}


async def _keys_revoke(call: Call) -> Any:
    import asyncio

    if await asyncio.to_thread(call.keys.get, call.id) is None:
        raise ApiError("not_found", "no such key")
    return {"revoked": await asyncio.to_thread(call.keys.revoke, call.id)}


async def _tenants(call: Call) -> Any:
    import asyncio

    return {"results": await asyncio.to_thread(call.keys.tenants)}


async def _tenant_delete(call: Call) -> Any:
    import asyncio

    tenant = str(call.request.path_params["tenant"])
    deleted = await call.memory.delete_all(tenant)
    revoked = await asyncio.to_thread(call.keys.revoke_tenant, tenant)
    return {"deleted": deleted, "revoked_keys": revoked}


ENDPOINTS: list[Endpoint] = [
    Endpoint("POST", "/v1/memories", _add, "Store messages as turns (Memory.add)",
             body=m.AddRequest, response=m.Results),
    Endpoint("GET", "/v1/memories", _get_all, "A page of memories, newest first "
             "(Memory.get_all)", query=m.ListQuery, response=m.Results),
    Endpoint("DELETE", "/v1/memories", _delete_all, "Forget every memory of the tenant "
             "(Memory.delete_all)", query=m.TenantQuery, response=m.Deleted),
    Endpoint("GET", "/v1/memories/{id}", _get, "One memory (Memory.get)",
             query=m.TenantQuery),
    Endpoint("PUT", "/v1/memories/{id}", _update, "New text as a new version "
             "(Memory.update)", body=m.UpdateRequest, response=m.UpdateEvent),
    Endpoint("DELETE", "/v1/memories/{id}", _delete, "Delete one memory (Memory.delete)",
             query=m.TenantQuery, response=m.Deleted),
    Endpoint("GET", "/v1/memories/{id}/history", _history, "Every version "
             "(Memory.history)", query=m.TenantQuery, response=m.VersionsResponse),
    Endpoint("POST", "/v1/search", _search, "Hybrid search (Memory.search)",
             body=m.SearchRequest, response=m.HitsResponse),
    Endpoint("POST", "/v1/answer", _answer, "Answer with evidence, on the path the question "
             "calls for (Memory.answer)", body=m.AnswerRequest, response=m.AnswerResponse,
             errors=("no_model", "model_error")),
    Endpoint("POST", "/v1/flush", _flush, "Extract unextracted turns now (Memory.flush)",
             body=m.FlushRequest, response=m.Results),
    Endpoint("GET", "/v1/export", _export, "The tenant as JSONL (Memory.export)",
             query=m.TenantQuery, media="application/x-ndjson"),
    Endpoint("GET", "/v1/me", _me, "Who the key is", response=m.Identity),
    Endpoint("GET", "/v1/admin/keys", _keys_list, "Keys (admin)", query=m.KeyQuery,
             response=m.KeysResponse, admin=True),
    Endpoint("POST", "/v1/admin/keys", _keys_create, "A new key, shown once (admin)",
             body=m.CreateKeyRequest, response=m.NewKey, status=201, admin=True),
    Endpoint("DELETE", "/v1/admin/keys/{id}", _keys_revoke, "Revoke a key (admin)",
             response=m.Revoked, admin=True),
    Endpoint("GET", "/v1/admin/tenants", _tenants, "Tenants with an active key (admin)",
             response=m.TenantsResponse, admin=True),
    Endpoint("DELETE", "/v1/admin/tenants/{tenant}", _tenant_delete, "Forget a tenant and "
             "revoke its keys (admin)", response=m.TenantDeleted, admin=True),
]
"""Every REST operation (``jobs.py`` adds the job routes where ``Memory`` has jobs)."""


# -- dispatch -------------------------------------------------------------------------------


def routes(endpoints: list[Endpoint], memory: AsyncMemory, checker: KeyChecker,
           keys: Keys) -> list[Route]:
    """One Starlette route per path, dispatching on the method."""
    by_path: dict[str, dict[str, Endpoint]] = {}
    for e in endpoints:
        by_path.setdefault(e.path, {})[e.method] = e

    def endpoint_for(methods: dict[str, Endpoint]) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            # Starlette answers HEAD on every GET route: the GET's operation, no body.
            method = "GET" if request.method == "HEAD" else request.method
            return await _dispatch(methods[method], request, memory, checker, keys)
        return run

    return [Route(path, endpoint_for(methods), methods=list(methods))
            for path, methods in by_path.items()]


async def _dispatch(e: Endpoint, request: Request, memory: AsyncMemory, checker: KeyChecker,
                    keys: Keys) -> Response:
    principal = await checker.principal(request.scope)
    if e.admin:
        require_admin(principal)
    call = Call(request, principal, memory, keys)
    if e.query is not None:
        call.query = _validated(e.query, dict(request.query_params))
    elif request.query_params:
        raise ApiError("validation_error", f"{e.method} {e.path} takes no query parameters")
    if e.body is not None:
        call.body = _validated(e.body, parse_json(await request.body()))
    try:
        result = await e.handler(call)
    except ApiError:
        raise
    except KeyError:
        raise ApiError("not_found", "no such memory") from None
    except (ValueError, TypeError) as exc:
        raise ApiError("validation_error", str(exc)) from None
    if isinstance(result, Response):
        return result
    return JSONResponse(result, status_code=e.status)


def _validated(model: type[BaseModel], data: Any) -> BaseModel:
    if not isinstance(data, dict):
        raise ApiError("validation_error", "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = [{"loc": list(err["loc"]), "msg": err["msg"], "type": err["type"]}
                   for err in exc.errors(include_url=False, include_input=False)]
        raise ApiError("validation_error", f"{exc.error_count()} invalid field(s): "
                       + "; ".join(f"{'.'.join(map(str, d['loc'])) or 'body'}: {d['msg']}"
                                   for d in details[:5]), details=details) from None
