"""The extraction job routes: ``Memory.jobs``, ``Memory.job`` and ``Memory.wait`` for the
key's tenant (an admin key names the tenant, or lists every tenant's jobs)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import ApiError
from .models import Results, TenantQuery, _Request
from .routes import Call, Endpoint

MAX_WAIT_S = 60.0


class JobsQuery(_Request):
    """``GET /v1/jobs`` query parameters."""

    status: str | None = None
    limit: int = 100


class WaitRequest(_Request):
    """``POST /v1/wait``: block until the tenant's jobs are done or parked."""

    timeout: float = Field(10.0, ge=0, le=MAX_WAIT_S)


class WaitResponse(BaseModel):
    """Jobs per status once none is pending or running (``timed_out`` otherwise)."""

    model_config = ConfigDict(extra="allow")

    timed_out: bool = False


async def _jobs(call: Call) -> Any:
    q = call.query
    # An admin key without a user_id sees every tenant's jobs (an operator's view).
    tenant = None if call.principal.admin and not q.user_id else call.tenant
    return {"results": await call.memory.jobs(tenant, status=q.status, limit=q.limit)}


async def _job(call: Call) -> Any:
    tenant = None if call.principal.admin and not call.query.user_id else call.tenant
    found = await call.memory.job(call.id, user_id=tenant)
    if found is None:
        raise ApiError("not_found", "no such job")
    return found


async def _wait(call: Call) -> Any:
    try:
        counts = await call.memory.wait(call.tenant, timeout=call.body.timeout)
    except TimeoutError:
        return {"timed_out": True}
    return {"timed_out": False, **counts}


ENDPOINTS: list[Endpoint] = [
    Endpoint("GET", "/v1/jobs", _jobs, "Extraction jobs, newest first (Memory.jobs)",
             query=JobsQuery, response=Results),
    Endpoint("GET", "/v1/jobs/{id}", _job, "One job with its fact events (Memory.job)",
             query=TenantQuery),
    Endpoint("POST", "/v1/wait", _wait, "Wait for the tenant's jobs (Memory.wait)",
             body=WaitRequest, response=WaitResponse),
]
