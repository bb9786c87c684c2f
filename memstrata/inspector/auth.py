"""Who may use the inspector, and the token that guards its forms.

With a ``check_key`` (the inspector inside ``memstrata serve``), a browser logs in once
with an admin API key, which is then kept in a cookie: ``HttpOnly`` (no script reads
it), ``SameSite=Strict`` (no other site's page sends it), ``Secure`` over HTTPS, scoped
to the inspector's path. The key itself, not a session id: every request asks
``check_key`` again, so a revoked key stops working at once, and several server
processes sharing one PostgreSQL database accept the same cookie with no session
table between them. The cookie carries what an ``Authorization`` header would carry
to the REST API; the server stores nothing of it. Without a ``check_key`` (the local
``memstrata ui``) there is no login.

Every form that changes something carries a CSRF token: an HMAC of a fixed label under
the admin key (so any server process can check it, and a page of another site, which
cannot read ours, cannot forge it), or, without a login, under a random secret of this
app.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

COOKIE = "memstrata_inspector_key"
MAX_KEY_CHARS = 512
"""A longer cookie or form value is refused before ``check_key`` sees it."""
_LABEL = b"memstrata-inspector-form"


class Gate:
    """The inspector's login and CSRF checks (see the module)."""

    def __init__(self, check_key: Callable[[str], bool] | None) -> None:
        self.check_key = check_key
        self._local_secret = secrets.token_bytes(32)

    @property
    def login(self) -> bool:
        """Whether requests must carry an accepted key."""
        return self.check_key is not None

    def accepts(self, key: str | None) -> bool:
        """Whether ``key`` is an admin key (always, without a login)."""
        if self.check_key is None:
            return True
        if not key or len(key) > MAX_KEY_CHARS or not key.isascii() or not key.isprintable():
            return False
        return bool(self.check_key(key))

    def allowed(self, request: Request) -> bool:
        """Whether the request may see the inspector."""
        return self.accepts(request.cookies.get(COOKIE))

    def csrf(self, request: Request) -> str:
        """The CSRF token forms of this session carry."""
        key = request.cookies.get(COOKIE) if self.login else None
        secret = key.encode() if key else self._local_secret
        return hmac.new(secret, _LABEL, hashlib.sha256).hexdigest()

    def csrf_ok(self, request: Request, token: object) -> bool:
        """Whether a submitted form's token is this session's."""
        return isinstance(token, str) and hmac.compare_digest(token, self.csrf(request))

    @staticmethod
    def remember(request: Request, response: Response, key: str) -> None:
        """Set the login cookie on ``response``."""
        response.set_cookie(COOKIE, key, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path=cookie_path(request))

    @staticmethod
    def forget(request: Request, response: Response) -> None:
        """Clear the login cookie."""
        response.delete_cookie(COOKIE, httponly=True, samesite="strict",
                               secure=request.url.scheme == "https", path=cookie_path(request))


def cookie_path(request: Request) -> str:
    """The inspector's own path (where it is mounted), so the cookie goes nowhere else."""
    root = request.scope.get("root_path", "").rstrip("/")
    return f"{root}/" if root else "/"
