"""``AsyncMemory``: :class:`~memstrata.api.Memory`'s verbs as coroutines, for asyncio apps.

An ``AsyncMemory`` wraps one ``Memory`` and holds no logic of its own: each verb awaits
the ``Memory`` method of the same name on a worker thread (``asyncio.to_thread``), so the
event loop never blocks on the store or a model, and every contract (arguments, results,
errors, tenant isolation) is the wrapped method's. ``Memory`` is safe to share between
threads, so any number of tasks may await verbs at once; calls that touch the store are
serialised by its lock as they are between threads.

Cancelling a task that awaits a verb stops the wait, not the call: the thread finishes
it (a write is then committed or rolled back whole, as in a thread).

Example:
    >>> import asyncio
    >>> async def main() -> str:
    ...     async with await AsyncMemory.open(":memory:") as m:
    ...         await m.add("I moved to Lisbon last spring", user_id="ana", infer=False)
    ...         return (await m.search("where does she live?", user_id="ana", k=1))[0].text
    >>> asyncio.run(main())
    'I moved to Lisbon last spring'
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator, Iterable, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from memstrata.api import Memory
from memstrata.memory.retrieval import DEFAULT_MIN_SCORE

if TYPE_CHECKING:
    import dspy

    from memstrata.formats.dump import ExportFile
    from memstrata.formats.records import ConversationRecord
    from memstrata.memory import Filters, Hit
    from memstrata.memory.cognitive import ReadReport
    from memstrata.memory.reembed import ReembedReport
    from memstrata.memory.store.versions import Version
    from memstrata.packers.memory_context import ContextSettings, MemoryContext
    from memstrata.programs.expectation import Expectation
    from memstrata.programs.ingest import IngestSettings
    from memstrata.programs.learning import Lesson
    from memstrata.programs.lm import ModelHandle
    from memstrata.programs.routed_answer import RouteChoice, RoutedAnswer
    from memstrata.programs.voe import VoESettings
    from memstrata.tools import ToolSession
    from memstrata.worker import ExtractionSettings

P = ParamSpec("P")
R = TypeVar("R")


async def _off_loop(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)`` on a worker thread, awaited."""
    return await asyncio.to_thread(fn, *args, **kwargs)


class AsyncMemory:
    """A :class:`~memstrata.api.Memory` whose verbs are coroutines (see the module).

    Build with :meth:`open` (``await``), or wrap an open ``Memory``:
    ``AsyncMemory(memory)``. ``memory`` is the wrapped object, for what is not a verb
    (``store``, ``lm``, ``programs``). Each verb's contract is the ``Memory`` method's.
    """

    def __init__(self, memory: Memory) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(f"AsyncMemory wraps a Memory, not {type(memory).__name__}")
        self.memory = memory

    @classmethod
    def open(cls, path: str | Path = "memstrata.db", *,
             lm: str | dspy.BaseLM | ModelHandle | None = None,
             embedder: Any = "auto", ingest: IngestSettings | None = None,
             programs: dict[str, str | Path] | None = None,
             durability: Literal["normal", "full"] = "normal",
             extraction: str | ExtractionSettings = "background") -> Opening:
        """:meth:`Memory.open <memstrata.api.Memory.open>` on a worker thread (opening may
        migrate a file or load a model), wrapped: ``m = await AsyncMemory.open(path)``,
        or ``async with AsyncMemory.open(path) as m:`` (closed on the way out)."""
        return Opening(functools.partial(
            Memory.open, path, lm=lm, embedder=embedder, ingest=ingest, programs=programs,
            durability=durability, extraction=extraction), cls)

    async def close(self) -> None:
        """Close the store (waits for no call in flight: close after the last one)."""
        await _off_loop(self.memory.close)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- writing ------------------------------------------------------------------------

    async def add(self, messages: Any, *, user_id: str, agent_id: str | None = None,
                  conversation_id: str | None = None, session_id: str | None = None,
                  timestamp: datetime | str | float | None = None,
                  metadata: dict[str, Any] | None = None, infer: bool = True,
                  skip_roles: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """:meth:`Memory.add <memstrata.api.Memory.add>`."""
        return await _off_loop(functools.partial(
            self.memory.add, messages, user_id=user_id, agent_id=agent_id,
            conversation_id=conversation_id, session_id=session_id, timestamp=timestamp,
            metadata=metadata, infer=infer, skip_roles=skip_roles))

    async def flush(self, user_id: str, conversation_id: str | None = None
                    ) -> list[dict[str, Any]]:
        """:meth:`Memory.flush <memstrata.api.Memory.flush>`."""
        return await _off_loop(self.memory.flush, user_id, conversation_id)

    async def wait(self, user_id: str | None = None, timeout: float | None = None
                   ) -> dict[str, Any]:
        """:meth:`Memory.wait <memstrata.api.Memory.wait>` (a worker thread waits; the
        event loop does not)."""
        return await _off_loop(self.memory.wait, user_id, timeout)

    async def jobs(self, user_id: str | None = None, *, status: str | None = None,
                   limit: int = 100) -> list[dict[str, Any]]:
        """:meth:`Memory.jobs <memstrata.api.Memory.jobs>`."""
        return await _off_loop(functools.partial(self.memory.jobs, user_id, status=status,
                                                 limit=limit))

    async def job(self, id: str, *, user_id: str | None = None) -> dict[str, Any] | None:
        """:meth:`Memory.job <memstrata.api.Memory.job>`."""
        return await _off_loop(functools.partial(self.memory.job, id, user_id=user_id))

    async def prune_jobs(self, user_id: str | None = None, *,
                         older_than_days: float | None = None,
                         before: datetime | date | str | float | None = None,
                         status: str | Sequence[str] = "done", dry_run: bool = False
                         ) -> dict[str, int]:
        """:meth:`Memory.prune_jobs <memstrata.api.Memory.prune_jobs>`."""
        return await _off_loop(functools.partial(
            self.memory.prune_jobs, user_id, older_than_days=older_than_days, before=before,
            status=status, dry_run=dry_run))

    async def import_conversations(self, records: Iterable[ConversationRecord], *,
                                   user_id: str, agent_id: str | None = None,
                                   progress: Callable[[int], None] | None = None,
                                   replace: bool = False) -> dict[str, int]:
        """:meth:`Memory.import_conversations
        <memstrata.api.Memory.import_conversations>` (``progress`` is called on the
        worker thread)."""
        return await _off_loop(functools.partial(
            self.memory.import_conversations, records, user_id=user_id, agent_id=agent_id,
            progress=progress, replace=replace))

    # -- reading ------------------------------------------------------------------------

    async def search(self, query: str, *, user_id: str, k: int = 10,
                     filters: Filters | dict[str, Any] | None = None,
                     min_score: float = DEFAULT_MIN_SCORE, limit: int | None = None
                     ) -> list[Hit]:
        """:meth:`Memory.search <memstrata.api.Memory.search>`."""
        return await _off_loop(functools.partial(
            self.memory.search, query, user_id=user_id, k=k, filters=filters,
            min_score=min_score, limit=limit))

    async def get(self, id: str, *, user_id: str | None = None) -> dict[str, Any] | None:
        """:meth:`Memory.get <memstrata.api.Memory.get>`."""
        return await _off_loop(functools.partial(self.memory.get, id, user_id=user_id))

    async def get_all(self, user_id: str, *, kind: str | None = None, limit: int = 100,
                      offset: int = 0) -> list[dict[str, Any]]:
        """:meth:`Memory.get_all <memstrata.api.Memory.get_all>`."""
        return await _off_loop(functools.partial(
            self.memory.get_all, user_id, kind=kind, limit=limit, offset=offset))

    async def history(self, id: str, *, user_id: str | None = None) -> list[Version]:
        """:meth:`Memory.history <memstrata.api.Memory.history>`."""
        return await _off_loop(functools.partial(self.memory.history, id, user_id=user_id))

    # -- changing and forgetting --------------------------------------------------------

    async def update(self, id: str, text: str, *, user_id: str | None = None
                     ) -> dict[str, Any]:
        """:meth:`Memory.update <memstrata.api.Memory.update>`."""
        return await _off_loop(functools.partial(self.memory.update, id, text,
                                                 user_id=user_id))

    async def delete(self, id: str, *, user_id: str | None = None) -> bool:
        """:meth:`Memory.delete <memstrata.api.Memory.delete>`."""
        return await _off_loop(functools.partial(self.memory.delete, id, user_id=user_id))

    async def delete_all(self, user_id: str) -> dict[str, int]:
        """:meth:`Memory.delete_all <memstrata.api.Memory.delete_all>`."""
        return await _off_loop(self.memory.delete_all, user_id)

    # -- answering and tools ------------------------------------------------------------

    async def answer(self, question: str, *, user_id: str,
                     conversation_id: str | None = None, route: RouteChoice = "auto"
                     ) -> RoutedAnswer:
        """:meth:`Memory.answer <memstrata.api.Memory.answer>` (the model call runs on
        the worker thread)."""
        return await _off_loop(functools.partial(
            self.memory.answer, question, user_id=user_id, conversation_id=conversation_id,
            route=route))

    async def context(self, query: str, *, user_id: str, budget: int = 600,
                      layers: Iterable[str] | None = None,
                      conversation_id: str | None = None,
                      settings: ContextSettings | None = None) -> MemoryContext:
        """:meth:`Memory.context <memstrata.api.Memory.context>`."""
        return await _off_loop(functools.partial(
            self.memory.context, query, user_id=user_id, budget=budget, layers=layers,
            conversation_id=conversation_id, settings=settings))

    async def read(self, text: str, *, user_id: str, title: str | None = None,
                   source: str | None = None,
                   when: datetime | date | str | float | None = None,
                   progress: Callable[[int], object] | None = None) -> ReadReport:
        """:meth:`Memory.read <memstrata.api.Memory.read>` (``progress`` is called on the
        worker thread)."""
        return await _off_loop(functools.partial(
            self.memory.read, text, user_id=user_id, title=title, source=source, when=when,
            progress=progress))

    async def learn(self, run: Any, *, user_id: str, success: bool, task: str | None = None,
                    used: Iterable[str] = (), rationale: str = "",
                    method: Literal["llm", "trace"] | None = None,
                    tags: Iterable[str] = ()) -> Lesson:
        """:meth:`Memory.learn <memstrata.api.Memory.learn>`."""
        return await _off_loop(functools.partial(
            self.memory.learn, run, user_id=user_id, success=success, task=task, used=used,
            rationale=rationale, method=method, tags=tags))

    async def expect(self, user_id: str, *, conversation_id: str | None = None,
                     settings: VoESettings | None = None, predictor: Any = None
                     ) -> Expectation:
        """:meth:`Memory.expect <memstrata.api.Memory.expect>`."""
        return await _off_loop(functools.partial(
            self.memory.expect, user_id, conversation_id=conversation_id, settings=settings,
            predictor=predictor))

    def tool_session(self, user_id: str, *, agent_id: str | None = None) -> ToolSession:
        """:meth:`Memory.tool_session <memstrata.api.Memory.tool_session>`: synchronous,
        as its tools are (building it touches no store). Its tools are not serialised
        with the verbs awaited meanwhile: use :meth:`tools` where those may overlap."""
        return self.memory.tool_session(user_id, agent_id=agent_id)

    def tools(self, user_id: str, *, agent_id: str | None = None) -> list[Callable[..., Any]]:
        """:meth:`Memory.tools <memstrata.api.Memory.tools>`: synchronous, as DSPy's
        ``ReAct`` and ``RLM`` call them (building them touches no store)."""
        return self.memory.tools(user_id, agent_id=agent_id)

    # -- moving a tenant ----------------------------------------------------------------

    async def export(self, user_id: str, path: str | Path) -> int:
        """:meth:`Memory.export <memstrata.api.Memory.export>`."""
        return await _off_loop(self.memory.export, user_id, path)

    async def import_(self, path: str | Path | ExportFile, *, user_id: str | None = None
                      ) -> dict[str, int]:
        """:meth:`Memory.import_ <memstrata.api.Memory.import_>`."""
        return await _off_loop(functools.partial(self.memory.import_, path, user_id=user_id))

    async def reembed(self, *, user_id: str,
                      progress: Callable[[int], object] | None = None) -> ReembedReport:
        """:meth:`Memory.reembed <memstrata.api.Memory.reembed>` (``progress`` is called on
        the worker thread)."""
        return await _off_loop(functools.partial(self.memory.reembed, user_id=user_id,
                                                 progress=progress))


__all__ = ["AsyncMemory"]


class Opening:
    """What :meth:`AsyncMemory.open` returns: await it for the memory, or use it as an
    async context manager (the memory is closed when the block ends)."""

    def __init__(self, opener: Callable[[], Memory], cls: type[AsyncMemory]) -> None:
        self._opener = opener
        self._cls = cls
        self._opened: AsyncMemory | None = None

    async def _open(self) -> AsyncMemory:
        return self._cls(await _off_loop(self._opener))

    def __await__(self) -> Generator[Any, None, AsyncMemory]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncMemory:
        self._opened = await self._open()
        return self._opened

    async def __aexit__(self, *exc: object) -> None:
        if self._opened is not None:
            await self._opened.close()
