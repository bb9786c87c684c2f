"""API keys in the store (``store.keys``): the same contract on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstrata.memory.store.keys import KEY_PREFIX, key_id
from memstrata.memory.store.opener import open_store


def _check_contract(store: Any) -> None:
    keys = store.keys
    key, record = keys.create("ana", name="app")
    assert key.startswith(KEY_PREFIX) and key_id(key) == record.id and len(key) > 50
    assert record.tenant == "ana" and not record.admin and record.last_used is None
    admin_key, admin = keys.create(admin=True)
    assert admin.admin and admin.tenant is None
    assert keys.verify(key) == record
    assert keys.verify(admin_key).admin
    # A wrong secret, another key's secret under this id, junk: all refused alike.
    secret = key.split("_", 2)[2]
    for wrong in (key[:-1] + ("A" if key[-1] != "A" else "B"), key + "x",
                  f"{KEY_PREFIX}{admin.id}_{secret}", "", "ms_", "ms__x", "Bearer " + key,
                  KEY_PREFIX + "0" * 12 + "_" + secret, key.upper(), "ms_\ud800" + "0" * 11,
                  "x" * 10_000):
        assert keys.verify(wrong) is None, wrong
    # Only the hash is stored.
    rows = keys._select(None, "SELECT hash FROM api_keys WHERE id = ?", (record.id,))
    assert rows[0]["hash"] == hashlib.sha256(key.encode()).hexdigest()
    for bad in ({"tenant": None}, {"tenant": "x", "admin": True}, {"tenant": ""},
                {"tenant": "a\x00b"}, {"tenant": "x" * 257}, {"tenant": "x", "name": "n" * 201}):
        with pytest.raises(ValueError):
            keys.create(**bad)
    keys.touch(record.id)
    assert keys.get(record.id).last_used is not None
    other, other_record = keys.create("ben")
    assert [k.id for k in keys.records()] == [record.id, admin.id, other_record.id]
    assert [k.id for k in keys.records("ana")] == [record.id]
    assert keys.tenants() == ["ana", "ben"]
    # Forgetting a tenant's memories leaves its keys; revoking is separate.
    store.forget_user("ana")
    assert keys.verify(key) == keys.get(record.id)
    assert keys.revoke(record.id) and not keys.revoke(record.id)
    assert keys.verify(key) is None and keys.get(record.id).revoked_at is not None
    assert [k.id for k in keys.records(revoked=False)] == [admin.id, other_record.id]
    assert keys.revoke_tenant("ben") == 1 and keys.verify(other) is None
    assert keys.tenants() == [] and keys.get("nonesuch") is None


def test_keys_on_sqlite(tmp_path: Path) -> None:
    with open_store(tmp_path / "k.db", embedder=None) as store:
        _check_contract(store)


@pytest.mark.postgres
def test_keys_on_postgres_and_shared_between_stores(pg_db_url: str) -> None:
    """The same contract on PostgreSQL (the app role reaches the table through its grant,
    no tenant set); a key revoked through one store is refused by another at once."""
    with open_store(pg_db_url, embedder=None) as store:
        _check_contract(store)
    with open_store(pg_db_url, embedder=None) as one, open_store(pg_db_url,
                                                                  embedder=None) as two:
        key, record = one.keys.create("cy")
        assert two.keys.verify(key) == record
        assert two.keys.revoke(record.id)
        assert one.keys.verify(key) is None


@pytest.fixture
def pg_world(pg_db_url: str) -> Iterator[Any]:
    from tests.server.server_helpers import make_world

    world = make_world(pg_db_url)
    yield world
    world.memory.close()


@pytest.mark.postgres
def test_the_server_over_postgres(pg_world: Any) -> None:
    """The REST API over a PostgreSQL store: the same answers and refusals as SQLite's."""
    from tests.server.server_helpers import client

    world = pg_world
    with client(world, "ana", mcp=False, ui=False) as c:
        hits = c.post("/v1/search", json={"query": "Lisbon", "k": 5}).json()["results"]
        assert {h["id"] for h in hits} == set(world.ids["ana"])
        assert c.get(f"/v1/memories/{world.ids['ben'][0]}").status_code == 404
        assert c.post("/v1/search", json={"query": "x", "user_id": "ben"}).status_code == 403
        world.memory.store.keys.revoke(world.keys["ana"][3:15])
        assert c.get("/v1/me").status_code == 401
