"""The inspector's ASGI app: server-rendered pages over one ``Memory``.

Pages: the tenants; a tenant's conversations, sessions and memories; what a tenant read,
learned and expects (documents, semantic facts, procedures, strategies, expectations,
the facts surprises taught, intentions); a conversation's turns with the facts extracted
from them, each fact linked to its evidence turns; one memory with its versions and
links; a search with every hit's channels and scores; the recorded
runs with their LLM calls, tokens and latency; the extraction jobs (when the memory
keeps a job queue); forgetting a tenant, after a confirmation. Every page reads one
tenant, named in its address (``?u=``), and is bounded (``views``).

Links are built from the app's own routes under the path it is served at (ASGI
``root_path``), so it works alone or mounted under a prefix. Nothing is fetched from
another origin: one stylesheet, no script, and a Content-Security-Policy that says so.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route, Router
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstrata.api import Memory
from memstrata.errors import MemstrataError

from . import views
from .auth import Gate
from .tenants import list_tenants

HERE = Path(__file__).resolve().parent
MAX_OFFSET = 10**9
"""The largest page offset an address may ask for."""
MAX_FORM_BYTES = 16 * 1024
"""The largest form body accepted (a login key, a confirmation)."""
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
     b"frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
]


class _Headers:
    """Adds :data:`SECURITY_HEADERS` to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *(h for h in SECURITY_HEADERS if h[0] not in names)]
            await send(message)

        await self.app(scope, receive, sending)


class BadRequest(MemstrataError, ValueError):
    """An address or form the inspector cannot serve (a missing or malformed field); the
    app answers it with a 400 page."""


class _Inspector:
    """The routes' shared state: the memory, the login gate, the templates."""

    def __init__(self, memory: Memory, gate: Gate) -> None:
        self.memory = memory
        self.gate = gate
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                      autoescape=True, undefined=jinja2.StrictUndefined)
        self.env.filters["clip"] = _clip
        self.env.filters["when"] = _when
        self.env.filters["num"] = _num
        self.router: Router | None = None

    @property
    def has_jobs(self) -> bool:
        return hasattr(self.memory, "jobs")

    def href(self, request: Request, name: str, **params: Any) -> str:
        """The path of route ``name`` under this app's root, with ``params`` (None ones
        left out) as its query."""
        assert self.router is not None
        path = self.router.url_path_for(name, **({"path": params.pop("path")}
                                                 if name == "static" else {}))
        root = request.scope.get("root_path", "").rstrip("/")
        query = urlencode({k: v for k, v in params.items() if v is not None})
        return f"{root}{path}" + (f"?{query}" if query else "")

    def render(self, request: Request, template: str, status: int = 200,
               **context: Any) -> HTMLResponse:
        """A page from ``template`` with the shared context (links, the CSRF token)."""
        html = self.env.get_template(template).render(
            href=lambda name, **p: self.href(request, name, **p),
            csrf=self.gate.csrf(request), login=self.gate.login, has_jobs=self.has_jobs,
            user=context.pop("user", None), **context)
        return HTMLResponse(html, status_code=status)

    def page(self, fn: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """A route behind the login, its refusals rendered as pages."""

        def endpoint(request: Request) -> Response:
            if not self.gate.allowed(request):
                return self.render(request, "login.html", status=401, error=None)
            try:
                return fn(request)
            except views.NotFound as exc:
                return self.render(request, "error.html", status=404, title="Not found",
                                   message=str(exc))
            except (BadRequest, ValueError) as exc:
                return self.render(request, "error.html", status=400, title="Bad request",
                                   message=str(exc))

        return endpoint

    # -- the pages ---------------------------------------------------------------------

    def users(self, request: Request) -> Response:
        size, offset = _size(request), _offset(request, "o")
        tenants = list_tenants(self.memory.store, limit=size + 1, offset=offset)
        return self.render(request, "users.html",
                           tenants=None if tenants is None else views.page(tenants, offset,
                                                                           size),
                           size=size)

    def user(self, request: Request) -> Response:
        u, size = _user(request), _size(request)
        data = views.user_page(self.memory, u, conv_offset=_offset(request, "co"),
                               item_offset=_offset(request, "io"), size=size)
        jobs = self.memory.jobs(user_id=u, limit=size) if self.has_jobs else None
        return self.render(request, "user.html", user=u, size=size, jobs=jobs, **data)

    def knowledge(self, request: Request) -> Response:
        u, size = _user(request), _size(request)
        offsets = {name: _offset(request, f"o_{name}") for name, *_ in views.KNOWLEDGE}
        sections = views.knowledge_page(self.memory, u, offsets=offsets, size=size)
        return self.render(request, "knowledge.html", user=u, size=size, sections=sections)

    def conversation(self, request: Request) -> Response:
        u, c, size = _user(request), _required(request, "c"), _size(request)
        after = _int(request, "after", None, low=-1)
        data = views.conversation_page(self.memory, u, c, after=None if after in (None, -1)
                                       else after, size=size)
        return self.render(request, "conversation.html", user=u, size=size, **data)

    def node(self, request: Request) -> Response:
        u, node_id = _user(request), _required(request, "id")
        data = views.memory_page(self.memory, u, node_id)
        return self.render(request, "memory.html", user=u, node_id=node_id, **data)

    def search(self, request: Request) -> Response:
        u = _user(request)
        q = request.query_params.get("q", "")
        k = int(_int(request, "k", 10, low=1, high=100) or 10)
        min_score = _float(request, "min", 0.1)
        hits, error = [], None
        if q.strip():
            try:
                hits = self.memory.search(q, user_id=u, k=k, min_score=min_score)
            except ValueError as exc:
                error = str(exc)
        return self.render(request, "search.html", user=u, q=q, k=k, min_score=min_score,
                           hits=hits, error=error)

    def runs(self, request: Request) -> Response:
        u, size = _user(request), _size(request)
        return self.render(request, "runs.html", user=u, size=size,
                           runs=views.runs_page(self.memory, u, size=size))

    def run(self, request: Request) -> Response:
        u, run_id = _user(request), _required(request, "id")
        return self.render(request, "run.html", user=u,
                           **views.run_page(self.memory, u, run_id))

    def jobs(self, request: Request) -> Response:
        if not self.has_jobs:
            raise views.NotFound("this memory keeps no extraction jobs")
        u = request.query_params.get("u") or None
        status = request.query_params.get("status") or None
        size = _size(request)
        jobs = self.memory.jobs(user_id=u, status=status, limit=size)
        return self.render(request, "jobs.html", user=u, job_status=status, size=size,
                           jobs=jobs[:size])

    def job(self, request: Request) -> Response:
        u, job_id = _user(request), _required(request, "id")
        found = self.memory.job(job_id, user_id=u) if hasattr(self.memory, "job") else None
        if found is None:
            raise views.NotFound(f"user {u!r} has no job {job_id!r}")
        return self.render(request, "job.html", user=u, job=found)

    def forget(self, request: Request) -> Response:
        if request.method == "GET":
            u = _user(request)
            counts = self.memory.store.counts(u)
            return self.render(request, "forget.html", user=u, counts=counts, error=None)
        form = _form(request)
        u = str(form.get("u") or "")
        if not self.gate.csrf_ok(request, form.get("csrf")):
            return self.render(request, "error.html", status=403, title="Forbidden",
                               message="The form has expired or did not come from this "
                               "page; open the user's page and try again.")
        if not u:
            raise BadRequest("the form names no user")
        if form.get("confirm") != u:
            return self.render(request, "forget.html", status=400, user=u,
                               counts=self.memory.store.counts(u),
                               error="Type the user id exactly to confirm.")
        deleted = self.memory.delete_all(u)
        return self.render(request, "forgotten.html", forgotten=u, deleted=deleted)

    def login(self, request: Request) -> Response:
        if not self.gate.login:
            return RedirectResponse(self.href(request, "users"), status_code=303)
        if request.method == "GET":
            if self.gate.allowed(request):
                return RedirectResponse(self.href(request, "users"), status_code=303)
            return self.render(request, "login.html", error=None)
        key = str(_form(request).get("key") or "").strip()
        if not self.gate.accepts(key):
            return self.render(request, "login.html", status=401,
                               error="That is not an admin API key.")
        response = RedirectResponse(self.href(request, "users"), status_code=303)
        self.gate.remember(request, response, key)
        return response

    def logout(self, request: Request) -> Response:
        if not self.gate.csrf_ok(request, _form(request).get("csrf")):
            return self.render(request, "error.html", status=403, title="Forbidden",
                               message="The form did not come from this page.")
        response = RedirectResponse(self.href(request, "login"), status_code=303)
        self.gate.forget(request, response)
        return response


def create_app(memory: Memory, *, check_key: Callable[[str], bool] | None = None
               ) -> Starlette:
    """The inspector over ``memory`` as an ASGI app (serve it alone, or mount it).

    Args:
        memory: the memory shown; the app does not close it.
        check_key: accepts the keys that may use the inspector (``memstrata serve``
            passes one that accepts admin API keys only); a browser without an accepted
            key gets a login page. None: no login (``memstrata ui``, on loopback).
    """
    app = _Inspector(memory, Gate(check_key))

    def sync(fn: Callable[[Request], Response]) -> Callable[[Request], Response]:
        # Starlette runs a plain function in its thread pool: the store calls block.
        return app.page(fn)

    def awaiting_form(fn: Callable[[Request], Response]) -> Any:
        """An endpoint that reads a (bounded) form, then runs ``fn`` in the thread pool."""
        from starlette.concurrency import run_in_threadpool

        async def endpoint(request: Request) -> Response:
            if request.method == "POST":
                try:
                    request.state.form = await _read_form(request)
                except BadRequest as exc:
                    return app.render(request, "error.html", status=413,
                                      title="Too large", message=str(exc))
            return await run_in_threadpool(fn, request)

        return endpoint

    routes = [
        Route("/", sync(app.users), name="users"),
        Route("/user", sync(app.user), name="user"),
        Route("/knowledge", sync(app.knowledge), name="knowledge"),
        Route("/conversation", sync(app.conversation), name="conversation"),
        Route("/memory", sync(app.node), name="memory"),
        Route("/search", sync(app.search), name="search"),
        Route("/runs", sync(app.runs), name="runs"),
        Route("/run", sync(app.run), name="run"),
        Route("/jobs", sync(app.jobs), name="jobs"),
        Route("/job", sync(app.job), name="job"),
        Route("/forget", awaiting_form(app.page(app.forget)), methods=["GET", "POST"],
              name="forget"),
        Route("/login", awaiting_form(app.login), methods=["GET", "POST"], name="login"),
        Route("/logout", awaiting_form(app.page(app.logout)), methods=["POST"],
              name="logout"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    starlette = Starlette(routes=routes)
    app.router = starlette.router
    starlette.add_middleware(_Headers)
    return starlette


async def _read_form(request: Request) -> FormData:
    """The request's urlencoded form, refused past :data:`MAX_FORM_BYTES`."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise BadRequest("the form is too large")
    from urllib.parse import parse_qsl

    pairs: list[tuple[str, str | UploadFile]] = list(
        parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    return FormData(pairs)


def _form(request: Request) -> FormData:
    form = getattr(request.state, "form", None)
    return form if isinstance(form, FormData) else FormData()


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name, "")
    if not value.strip() or len(value) > 1024:
        raise BadRequest(f"the address needs '{name}' (a non-empty id)")
    return value


def _user(request: Request) -> str:
    value = _required(request, "u")
    if len(value) > 256:
        raise BadRequest("a user id is at most 256 characters")
    return value


def _int(request: Request, name: str, default: int | None, *, low: int = 0,
         high: int = MAX_OFFSET) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"'{name}' must be a whole number") from None
    return min(max(value, low), high)


def _float(request: Request, name: str, default: float) -> float:
    raw = request.query_params.get(name)
    try:
        value = default if not raw else float(raw)
    except ValueError:
        raise BadRequest(f"'{name}' must be a number from 0 to 1") from None
    return min(max(value, 0.0), 1.0) if value == value else default  # NaN: the default


def _size(request: Request) -> int:
    return int(_int(request, "n", views.PAGE, low=1, high=views.MAX_PAGE) or views.PAGE)


def _offset(request: Request, name: str) -> int:
    return int(_int(request, name, 0) or 0)


def _clip(text: Any, chars: int = views.LIST_CHARS) -> str:
    """``text`` cut to ``chars`` characters, with an ellipsis when cut."""
    text = "" if text is None else str(text)
    return text if len(text) <= chars else text[:chars].rstrip() + " …"


def _when(value: Any) -> str:
    """A time as ``YYYY-MM-DD HH:MM`` UTC (empty for None)."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    try:
        return str(value.strftime("%Y-%m-%d %H:%M"))
    except AttributeError:
        return str(value)


def _num(value: Any, digits: int = 3) -> str:
    """A number for a table cell (empty for None)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
