"""What every part of the store shares, with no SQL: node ids and refs, the facets search
priors read, the tenant's index token, timestamps as stored, the exact-duplicate key.

SQLite-specific: a ``Ref`` names a row by its SQLite ``rowid`` (a PostgreSQL backend keeps
an integer identity column in its place); ``tenant_token`` is the FTS5 term that marks a
tenant's index rows; timestamps are stored as ISO-8601 text (``_ts``/``_dt``)."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from ..models import Item, as_utc

TURN_PREFIX, ITEM_PREFIX = "t_", "i_"

_TABLE = {"turn": "turns", "item": "items"}  # a node type's table


Ref = tuple[str, int]
"""A turn or item by its node type and rowid: what search channels rank and fuse.

Mapping rowids to ids costs a row lookup each (~2 us at 100k items); a search ranks
hundreds of candidates but returns ten, so ids are read for those it keeps."""


def node_type(node_id: str) -> str:
    """``"turn"`` or ``"item"``, read from the id's prefix."""
    return "turn" if node_id.startswith(TURN_PREFIX) else "item"


class Facets(NamedTuple):
    """What search priors read of a turn or item (event time as stored, ISO text)."""

    speaker: str | None
    event_time: str | None
    conversation_id: str | None
    session_id: str | None


def tenant_token(user_id: str) -> str:
    """The prefix of a tenant's index terms (a hash: any user id makes a plain FTS5 token)."""
    return "u" + hashlib.sha1(user_id.encode()).hexdigest()[:20]


def _ts(value: datetime | None) -> str | None:
    value = as_utc(value)
    return value.isoformat() if value else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def content_hash(item: Item) -> str:
    """Exact-duplicate key: kind, speaker, subject person, scope (``Item.SCOPE``) and
    whitespace/case-folded text."""
    folded = " ".join(item.text.casefold().split())
    parts: list[str | list[str]] = [item.kind, item.speaker or "", item.about or "", folded]
    scope = [str(getattr(item, name) or "") for name in item.SCOPE]
    if any(scope):  # unscoped rows keep the key they always had
        parts.append(scope)
    key = json.dumps(parts)
    return hashlib.sha256(key.encode()).hexdigest()


def _nbytes(value: Any) -> int:
    """Bytes of the arrays in a cached value (what the cache's byte budget counts)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, tuple | list) and len(value) <= 4:
        return sum(_nbytes(v) for v in value)
    return 0


def _versioned(item: Item) -> tuple[Any, ...]:
    """What makes a new version of an item: its content and validity. Merging tags,
    evidence or confidence (an exact duplicate arriving again) or bumping a use counter
    (``Item.UNVERSIONED``) keeps the version."""
    data = {k: v for k, v in item.data().items() if k not in item.UNVERSIONED}
    return (item.text, item.title, item.speaker, item.about, item.event_time, item.valid_to,
            json.dumps(data, sort_keys=True, default=str))
