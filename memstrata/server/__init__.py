"""``memstrata serve``: one ASGI app (Starlette, run by uvicorn) serving a memory to any
language, every request authenticated by an API key bound to one tenant.

- ``/v1/...``: the REST API, ``Memory``'s verbs for the key's tenant, JSON in and out,
  validated by pydantic models (``models.py``; routes in ``routes.py``, those of
  ``context``, ``read``, ``learn`` and ``expect`` in ``layer_verbs.py``), errors as
  ``{"error": {"code", "message"}}`` with stable codes (``errors.py``);
- ``/openapi.json``: the OpenAPI 3.1 document built from those models (``openapi.py``);
- ``/mcp``: the MCP streamable-HTTP endpoint, one MCP server per tenant, under the same
  keys (``mcp_mount.py``);
- ``/ui``: the inspector (``memstrata.inspector``), for admin keys.

Keys (``auth.py``; stored by ``store.keys``, hashed) decide the tenant: a tenant key never
reads or writes another tenant, whatever a path or body names. Bodies are limited while
they are read (``limits.py``). Every ``Memory`` call runs on a worker thread
(``AsyncMemory``), never on the event loop. Needs the ``server`` extra.

Example:
    >>> from memstrata import Memory
    >>> from starlette.testclient import TestClient
    >>> memory = Memory.open(":memory:", embedder=None)
    >>> key, _ = memory.store.keys.create("ana")
    >>> client = TestClient(create_app(memory, mcp=False, ui=False),
    ...                     headers={"Authorization": f"Bearer {key}"})
    >>> client.post("/v1/memories", json={"messages": "I live in Faro", "infer": False}
    ...             ).json()["results"][0]["event"]
    'ADD'
    >>> client.post("/v1/search", json={"query": "Faro", "k": 3}).json()["results"][0]["text"]
    'I live in Faro'
"""

from __future__ import annotations

from memstrata.memory.extras import require

require("starlette", "server", "the server")

from .app import create_app  # noqa: E402  (after require: a missing extra names itself)

__all__ = ["create_app"]
