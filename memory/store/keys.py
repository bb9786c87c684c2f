"""API keys: who may call a server over this store, and as which tenant.

``store.keys`` is a ``Keys`` over the store's ``api_keys`` table (schema migration 12).
A key is ``ms_<id>_<secret>``: ``id`` 12 hex characters, public (it names the key in
listings and logs), ``secret`` 32 random bytes (``secrets.token_urlsafe``). Only the
SHA-256 of the whole key is stored: a key carries 256 random bits, so a fast hash is as
safe as a slow one would be (nothing to guess, no dictionary to try), and a stolen table
gives no key back. :meth:`Keys.verify` finds the row by the key's id and compares the
hashes with ``hmac.compare_digest`` (constant time), so a wrong secret takes as long
whichever of its bytes differ.

Each key is either bound to one tenant (``tenant``: every call made with it acts as that
tenant) or an admin key (``admin``, no tenant), which manages keys and tenants. A revoked
key stays listed (``revoked_at``) and is never accepted again. ``last_used`` is written by
:meth:`Keys.touch` (the server touches a key at most once a minute, not on every call).

The table's tenant column is ``tenant``, not ``user_id``, on purpose: forgetting a tenant
(``forget_user``, which empties every table with a ``user_id`` column) deletes its
memories, not the keys that reach them. Revoke those with :meth:`Keys.revoke_tenant`.

Part of the store; written once over ``StoreTables``' hooks (``?`` placeholders), and run
on PostgreSQL by ``pg/keys.py``'s subclass. The table spans tenants (a key is looked up
before its tenant is known), so it has no row-level security there; see
``pg/schema.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from ..models import UTCDateTime, utcnow
from .blobs import StoreTables

KEY_PREFIX = "ms_"
"""Every key starts so: a key pasted into a log or a repository is recognisable."""
ID_HEX = 12
"""Hex characters of a key's public id."""
SECRET_BYTES = 32
"""Random bytes of a key's secret."""
_DUMMY_HASH = hashlib.sha256(b"no such key").hexdigest()


class ApiKey(BaseModel):
    """What is stored about a key: everything but the key itself."""

    id: str
    tenant: str | None
    admin: bool
    name: str = ""
    created_at: UTCDateTime
    last_used: UTCDateTime | None = None
    revoked_at: UTCDateTime | None = None

    @property
    def active(self) -> bool:
        """Not revoked."""
        return self.revoked_at is None


def key_hash(key: str) -> str:
    """The stored form of a key: its SHA-256, hex (see the module for why SHA-256)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_id(key: str) -> str | None:
    """The public id of a well-formed key (``ms_<id>_<secret>``), else None."""
    if not isinstance(key, str) or not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    kid, sep, secret = key[len(KEY_PREFIX):].partition("_")
    if not sep or not secret or len(kid) != ID_HEX or not all(
            c in "0123456789abcdef" for c in kid):
        return None
    return kid


def _check_tenant(tenant: Any) -> str:
    if (not isinstance(tenant, str) or not tenant.strip() or len(tenant) > 256
            or "\x00" in tenant):
        raise ValueError("a key's tenant must be a non-empty string of at most 256 "
                         "characters without NUL")
    try:
        tenant.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a key's tenant is not valid Unicode text") from None
    return tenant


class Keys(StoreTables):
    """The ``api_keys`` table of one store (reach it as ``store.keys``; see the module)."""

    COLUMNS = "id, tenant, admin, name, created_at, last_used, revoked_at"

    def create(self, tenant: str | None = None, *, admin: bool = False, name: str = ""
               ) -> tuple[str, ApiKey]:
        """A new key: for ``tenant``, or an admin key (``admin=True``, no tenant).
        Returns the key (shown once: only its hash is kept) and its record.

        Raises:
            ValueError: both or neither of a tenant and ``admin``; a bad tenant id; a name
                over 200 characters.
        """
        if admin == (tenant is not None):
            raise ValueError("a key is either bound to one tenant or an admin key")
        if tenant is not None:
            _check_tenant(tenant)
        if not isinstance(name, str) or len(name) > 200 or "\x00" in name:
            raise ValueError("a key's name is a string of at most 200 characters")
        kid = secrets.token_hex(ID_HEX // 2)
        key = f"{KEY_PREFIX}{kid}_{secrets.token_urlsafe(SECRET_BYTES)}"
        record = ApiKey(id=kid, tenant=tenant, admin=admin, name=name, created_at=utcnow())
        with self.store.transaction():
            self._change(tenant, "INSERT INTO api_keys (id, hash, tenant, admin, name,"
                         " created_at) VALUES (?, ?, ?, ?, ?, ?)",
                         (kid, key_hash(key), tenant, admin, name,
                          record.created_at.isoformat()))
        return key, record

    def verify(self, key: str) -> ApiKey | None:
        """The record of an active key, or None (malformed, unknown, wrong secret or
        revoked). The hashes are compared in constant time."""
        kid = key_id(key)
        rows = self._select(None, f"SELECT hash, {self.COLUMNS} FROM api_keys WHERE id = ?",
                            (kid,)) if kid else []
        stored = rows[0]["hash"] if rows else _DUMMY_HASH
        # Compared even when no row matched, so an unknown id costs what a wrong secret does.
        same = hmac.compare_digest(stored.encode(), key_hash(key if isinstance(key, str)
                                                             else "").encode())
        if not rows or not same:
            return None
        found = self._record(rows[0])
        return found if found.active else None

    def touch(self, key_id: str, when: datetime | None = None) -> None:
        """Record that the key was used (now, or at ``when``)."""
        with self.store.transaction():
            self._change(None, "UPDATE api_keys SET last_used = ? WHERE id = ?",
                         ((when or utcnow()).isoformat(), key_id))

    def get(self, key_id: str) -> ApiKey | None:
        """One key's record (revoked ones too), or None."""
        rows = self._select(None, f"SELECT {self.COLUMNS} FROM api_keys WHERE id = ?",
                            (key_id,))
        return self._record(rows[0]) if rows else None

    def records(self, tenant: str | None = None, *, revoked: bool = True) -> list[ApiKey]:
        """Every key (of one tenant), oldest first; ``revoked=False`` leaves out revoked
        ones."""
        where, args = [], []
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        if not revoked:
            where.append("revoked_at IS NULL")
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        return [self._record(r) for r in self._select(
            None, f"SELECT {self.COLUMNS} FROM api_keys{clause} ORDER BY created_at, id",
            args)]

    def revoke(self, key_id: str) -> bool:
        """Revoke one key; True if it was active."""
        with self.store.transaction():
            return self._change(None, "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND"
                                " revoked_at IS NULL", (utcnow().isoformat(), key_id)) > 0

    def revoke_tenant(self, tenant: str) -> int:
        """Revoke every active key of one tenant; how many."""
        with self.store.transaction():
            return self._change(None, "UPDATE api_keys SET revoked_at = ? WHERE tenant = ?"
                                " AND revoked_at IS NULL", (utcnow().isoformat(), tenant))

    def tenants(self) -> list[str]:
        """The tenants with an active key, sorted."""
        return sorted(r["tenant"] for r in self._select(
            None, "SELECT DISTINCT tenant FROM api_keys WHERE tenant IS NOT NULL AND"
            " revoked_at IS NULL"))

    def _record(self, row: dict[str, Any]) -> ApiKey:
        return ApiKey.model_validate({**{k: row[k] for k in (
            "id", "tenant", "name", "created_at", "last_used", "revoked_at")},
            "admin": bool(row["admin"])})


__all__ = ["ID_HEX", "KEY_PREFIX", "ApiKey", "Keys", "key_hash", "key_id"]
