"""What the server tests share: a memory with two tenants and their keys, a client per key,
and a real uvicorn on 127.0.0.1 in a thread."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from starlette.testclient import TestClient

from memstrata import Memory
from memstrata.server import create_app


@dataclass
class World:
    """A memory over ``path`` with ana's and ben's turns, and a key for each (and admin)."""

    memory: Memory
    keys: dict[str, str]
    ids: dict[str, list[str]] = field(default_factory=dict)

    def auth(self, who: str) -> dict[str, str]:
        """The Authorization header of ``who``'s key (``ana``, ``ben``, ``admin``)."""
        return {"Authorization": f"Bearer {self.keys[who]}"}


def make_world(target: str | Path) -> World:
    """Two tenants with turns, and keys for them and an admin (see :class:`World`)."""
    memory = Memory.open(target, embedder=None)
    keys = {who: memory.store.keys.create(who)[0] for who in ("ana", "ben")}
    keys["admin"] = memory.store.keys.create(admin=True, name="ops")[0]
    world = World(memory, keys)
    world.ids["ana"] = [e["id"] for e in memory.add(
        [{"role": "user", "content": "I moved to Lisbon in May"},
         {"role": "assistant", "content": "How do you like Lisbon?"}], user_id="ana",
        infer=False)]
    world.ids["ben"] = [e["id"] for e in memory.add(
        [{"role": "user", "content": "My locker code is zorblax 4471 at the Lisbon gym"}],
        user_id="ben", infer=False)]
    return world


@contextlib.contextmanager
def client(world: World, who: str | None = None, **options: Any) -> Iterator[TestClient]:
    """A TestClient of the app over ``world`` (its lifespan running), sending ``who``'s
    key; ``options`` go to ``create_app``."""
    app = create_app(world.memory, **options)
    with TestClient(app, headers=world.auth(who) if who else None,
                    raise_server_exceptions=True) as c:
        yield c


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def uvicorn_server(app: Any) -> Iterator[str]:
    """``app`` served by a real uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
