"""Who is calling: the ``Authorization: Bearer KEY`` of a request, checked against the
store's keys (``store.keys``, hashed and compared in constant time there).

A tenant key acts as its tenant and nothing else: a ``user_id`` a request names must be
that tenant (:func:`tenant_for`), or the request is ``forbidden`` and learns nothing about
the tenant it named. An admin key manages keys and tenants, and acts on the tenant a
request names. Every request is checked against the store (no cache), so a revoked key is
refused at its next request, by every server process sharing the store. ``last_used`` is
written at most once a minute per key and process (a write per request would slow every
search, and move the store's data version that its caches key on).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from starlette.types import Scope

from memstrata.memory.store.keys import ApiKey, Keys

from .errors import ApiError, unauthorized

TOUCH_EVERY_S = 60.0
MAX_KEY_CHARS = 200


@dataclass(frozen=True)
class Principal:
    """An accepted key: its id, its tenant (None for an admin key), whether admin."""

    key_id: str
    tenant: str | None
    admin: bool


def bearer(scope: Scope) -> str | None:
    """The credential of ``Authorization: Bearer ...`` (None without one)."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, credential = value.partition(b" ")
            if scheme.lower() != b"bearer":
                return None
            try:
                return credential.strip().decode("ascii")
            except UnicodeDecodeError:
                return None
    return None


class KeyChecker:
    """Checks bearer keys against a store's ``keys`` (see the module)."""

    def __init__(self, keys: Keys) -> None:
        self._keys = keys
        self._touched: dict[str, float] = {}
        self._lock = threading.Lock()

    def check(self, key: str | None) -> ApiKey | None:
        """The key's record when it is active, else None (blocking: a store read)."""
        if not key or len(key) > MAX_KEY_CHARS:
            return None
        found = self._keys.verify(key)
        if found is not None:
            self._touch(found.id)
        return found

    def is_admin(self, key: str) -> bool:
        """Whether ``key`` is an active admin key (the inspector's login check)."""
        found = self.check(key)
        return found is not None and found.admin

    async def principal(self, scope: Scope) -> Principal:
        """The caller of a request.

        Raises:
            ApiError: ``unauthorized`` without an active key.
        """
        key = bearer(scope)
        if key is None:
            raise unauthorized()
        found = await asyncio.to_thread(self.check, key)
        if found is None:
            raise unauthorized("the API key is not valid (unknown, malformed or revoked)")
        return Principal(found.id, found.tenant, found.admin)

    def _touch(self, key_id: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._touched.get(key_id, -TOUCH_EVERY_S) < TOUCH_EVERY_S:
                return
            self._touched[key_id] = now
        self._keys.touch(key_id)


def tenant_for(principal: Principal, named: str | None) -> str:
    """The tenant a request acts on.

    Raises:
        ApiError: ``forbidden`` for a tenant key naming another tenant;
            ``validation_error`` for an admin key naming none.
    """
    if principal.admin:
        if named is None:
            raise ApiError("validation_error", "an admin key acts on the tenant a request "
                           "names: give user_id")
        return named
    assert principal.tenant is not None
    if named is not None and named != principal.tenant:
        raise ApiError("forbidden", "this key acts only as its own tenant")
    return principal.tenant


def require_admin(principal: Principal) -> None:
    """Refuse a tenant key on an admin endpoint (``forbidden``)."""
    if not principal.admin:
        raise ApiError("forbidden", "this endpoint needs an admin key")
