"""``AsyncMemory``: Memory's verbs as coroutines, under concurrent asyncio tasks."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path

import pytest

from memstrata.aio import AsyncMemory
from memstrata.api import Memory

SYNC_ONLY = {"open", "close", "tools", "tool_session"}
"""Verbs that are not plain delegations: ``open`` and ``close`` are checked apart, and
``tools`` and ``tool_session`` stay synchronous (DSPy calls the tools)."""


def _public(cls: type) -> dict[str, object]:
    return {name: fn for name, fn in vars(cls).items()
            if not name.startswith("_") and callable(getattr(cls, name))}


def test_every_verb_of_memory_is_wrapped_with_its_own_parameters() -> None:
    """No verb is missing and none drifts: same names, kinds and defaults as Memory's."""
    verbs, wrapped = _public(Memory), _public(AsyncMemory)
    assert set(verbs) <= set(wrapped), sorted(set(verbs) - set(wrapped))
    for name in verbs:
        mine = list(inspect.signature(getattr(AsyncMemory, name)).parameters.values())
        theirs = list(inspect.signature(getattr(Memory, name)).parameters.values())
        assert [(p.name, p.kind, p.default) for p in mine] == [
            (p.name, p.kind, p.default) for p in theirs], name
        if name not in SYNC_ONLY:
            assert inspect.iscoroutinefunction(getattr(AsyncMemory, name)), name


def test_concurrent_tasks_of_two_tenants(tmp_path: Path) -> None:
    async def main() -> None:
        async with await AsyncMemory.open(tmp_path / "m.db", embedder=None) as m:
            async def writer(user: str, n: int) -> list[str]:
                events = await m.add(f"{user} note {n} about zebras", user_id=user,
                                     infer=False, conversation_id=f"c{n % 3}")
                return [e["id"] for e in events]

            ids = await asyncio.gather(*(writer(u, n) for u in ("ana", "ben")
                                         for n in range(40)))
            assert len({i for group in ids for i in group}) == 80
            found = await asyncio.gather(*(m.search("zebras note", user_id=u, limit=100)
                                           for u in ("ana", "ben") for _ in range(10)))
            for n, hits in enumerate(found):
                user = "ana" if n < 10 else "ben"
                assert len(hits) == 40 and all(h.text.startswith(user) for h in hits)
            one = ids[0][0]
            assert (await m.get(one, user_id="ana"))["id"] == one
            assert await m.get(one, user_id="ben") is None
            changed = await m.update(one, "ana note about giraffes", user_id="ana")
            assert changed["previous"] == "ana note 0 about zebras"
            assert [v.text for v in await m.history(one)][-1] == "ana note about giraffes"
            assert len(await m.get_all("ana", kind="turn", limit=500)) == 40
            assert await m.export("ana", tmp_path / "ana.jsonl") > 0
            assert await m.delete(one, user_id="ana")
            assert (await m.delete_all("ana"))["turns"] == 39
            assert await m.search("zebras", user_id="ana") == []
            assert len(await m.search("zebras", user_id="ben", k=5)) == 5
            assert (await m.import_(tmp_path / "ana.jsonl"))["turns"] == 40
            assert await m.flush("ben") == []  # no LM: nothing is extracted
            with pytest.raises(RuntimeError, match="needs an LM"):
                await m.answer("what?", user_id="ben")
            with pytest.raises(ValueError, match="user_id"):
                await m.add("x", user_id="")

    asyncio.run(main())


class _Gated(Memory):
    """A Memory whose search waits until another task opens the gate."""

    gate = threading.Event()

    def search(self, *args, **kwargs):  # type: ignore[no-untyped-def,override]
        if not self.gate.wait(5):
            raise TimeoutError("the gate was never opened: the event loop was blocked")
        return super().search(*args, **kwargs)


def test_a_verb_never_blocks_the_event_loop(tmp_path: Path) -> None:
    """The search waits on a gate that only another task on the loop opens: were the
    search run on the loop's thread, the gate would never open."""
    memory = _Gated.open(tmp_path / "g.db", embedder=None)
    memory.add("hello world", user_id="ana", infer=False)

    async def main() -> list[str]:
        m = AsyncMemory(memory)
        searching = asyncio.create_task(m.search("hello world", user_id="ana", min_score=0))
        await asyncio.sleep(0.05)
        memory.gate.set()
        hits = await searching
        await m.close()
        return [h.text for h in hits]

    assert asyncio.run(main()) == ["hello world"]


def test_wraps_only_a_memory() -> None:
    with pytest.raises(TypeError, match="wraps a Memory"):
        AsyncMemory("memstrata.db")  # type: ignore[arg-type]


def test_open_is_awaited_or_used_as_a_context_manager(tmp_path: Path) -> None:
    path = tmp_path / "a.db"

    async def main() -> tuple[list[str], bool]:
        async with AsyncMemory.open(path, embedder=None) as m:
            await m.add("I moved to Lisbon in May", user_id="ana")
            inside = m
        closed = False
        try:
            await inside.search("Lisbon", user_id="ana")
        except Exception:
            closed = True  # the block closed the store
        again = await AsyncMemory.open(path, embedder=None)
        try:
            hits = await again.search("Lisbon", user_id="ana")
        finally:
            await again.close()
        return [h.text for h in hits], closed

    texts, closed = asyncio.run(main())
    assert texts == ["I moved to Lisbon in May"] and closed
