"""The backend interface: every store method that code above the store calls.

``MemoryStore`` lists exactly what ``memstrata/``, ``programs/``, ``tools/``,
``formats/``, ``packers/``, ``trajectories/``, ``bench/`` (not ``bench/reliability``,
which tests the SQLite file itself) and ``memory/`` outside this package call on a store
(found by a grep for ``store.<name>`` and ``.store.<name>``; ``memory/runs.py`` and
``memory/schema.py`` are the SQLite backend's own and are not counted). The SQLite
``Store`` satisfies all of it; a second backend satisfies it part by part, so it is split
into the parts a backend brings in one piece:

- ``RecordStore``: conversations, sessions and turns; items of every kind with
  exact-duplicate merging, updates with kept versions, deletes; the kinds queries of the
  cognitive lifecycles; edges and the graph walk; a tenant's export rows, its kept
  versions restored, ``history``, ``forget_user``, ``counts``, ``owner``; transactions,
  ``close`` and the maintenance calls (``checkpoint``, ``vacuum``, ``state_pointer``).
- ``SearchStore``: what ``memory/retrieval.py`` and ``memory/expand.py`` read to search
  (refs and facets, filters, the lexical channel, the tag channel, vectors and the dense
  channel, read snapshots and the data version).
- ``AuxStore``: ``blobs`` and ``runs`` (``tools/``, ``trajectories/``, ``bench/``), and
  ``keys`` (``memstrata/server``).

The SQLite ``Store`` and the PostgreSQL ``PgStore`` (``memory/store/pg``) satisfy all
three; ``opener.open_store`` picks one from a path or a URL.

Not listed: ``Store.open`` (each backend opens its own way: a path or a URL) and the
SQLite connection (``store.conn``: ``memory/runs.py`` and ``bench/memory_api.py``'s
integrity check only).

Contracts are those of the SQLite methods of the same names (their docstrings); every
method that takes ``user_id`` reads and writes that tenant's rows only. A backend that
satisfies a part has every method of it with the same parameters (names, kinds and
defaults): ``tests/memory/store_conformance/`` checks that structurally for both
backends, and runs the same behavioural tests over both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from ..embed import Embedder
    from ..models import Conversation, Edge, Item, Session, Turn
    from ..runs import Runs
    from .blobs import Blobs
    from .filters import Filters
    from .jobs import Jobs
    from .keys import Keys
    from .kinds import Cond, Sort
    from .rows import Facets, Ref
    from .versions import Version


@runtime_checkable
class RecordStore(Protocol):
    """Records of a tenant: what every backend has (see the module)."""

    @property
    def embedder(self) -> Embedder | None: ...

    @embedder.setter
    def embedder(self, value: Embedder | None) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...  # closes the store

    def checkpoint(self) -> None: ...

    def vacuum(self) -> None: ...

    def state_pointer(self, user_id: str) -> dict[str, Any]: ...

    def counts(self, user_id: str | None = None) -> dict[str, int]: ...

    def owner(self, node_id: str) -> str | None: ...

    def speakers(self, user_id: str) -> list[str]: ...

    def conversations_with(self, user_id: str, people: Sequence[str]) -> list[str]: ...

    # conversations, sessions, turns
    def add_conversation(self, conv: Conversation) -> None: ...

    def conversation(self, user_id: str, conversation_id: str) -> Conversation | None: ...

    def conversation_ids(self, user_id: str) -> list[str]: ...

    def session_ids(self, user_id: str, conversation_id: str) -> list[str]: ...

    def delete_conversation(self, user_id: str, conversation_id: str) -> int: ...

    def add_session(self, session: Session) -> None: ...

    def add_turns(self, turns: Sequence[Turn], *, vectors: np.ndarray | None = None
                  ) -> list[str]: ...

    def turns(self, user_id: str, *, conversation_id: str | None = None,
              ids: Sequence[str] | None = None, limit: int | None = None,
              after_seq: int | None = None, newest: bool = False,
              offset: int = 0, labels: Sequence[str] | None = None) -> list[Turn]: ...

    def turn(self, user_id: str, turn_id: str) -> Turn | None: ...

    def last_turn(self, user_id: str, conversation_id: str) -> Turn | None: ...

    def update_turn(self, user_id: str, turn_id: str, text: str) -> Turn: ...

    def delete_turn(self, user_id: str, turn_id: str) -> bool: ...

    def contextual_texts(self, turns: Sequence[Turn]) -> list[str]: ...

    # items
    def add(self, item: Item) -> str: ...

    def add_many(self, items: Iterable[Item]) -> list[str]: ...

    def duplicate_of(self, item: Item) -> str | None: ...

    def get(self, user_id: str, item_id: str) -> Item | None: ...

    def get_many(self, user_id: str, item_ids: Sequence[str]) -> list[Item]: ...

    def items(self, user_id: str, *, kind: str | None = None, limit: int = 100,
              offset: int = 0) -> list[Item]: ...

    def source_ids(self, user_id: str, kind: str, source: str, *, skip: int = 0
                   ) -> list[str]: ...

    def source_items(self, user_id: str, kind: str, source: str) -> list[Item]: ...

    def last_source_text(self, user_id: str, kind: str, source: str) -> str | None: ...

    def entity_names(self, user_id: str, entity_type: str) -> list[str]: ...

    def current_ids(self, user_id: str, conversation_id: str, kinds: Sequence[str]
                    ) -> list[str]: ...

    def update(self, user_id: str, item_id: str, **changes: Any) -> Item: ...

    def delete(self, user_id: str, item_id: str) -> bool: ...

    # kinds queries (memory/cognitive/)
    def kind_items(self, user_id: str, kind: str, *, where: Sequence[Cond] = (),
                   order: Sequence[Sort] = (), limit: int | None = None) -> list[Item]: ...

    def kind_values(self, user_id: str, kind: str, fields: Sequence[str], *,
                    where: Sequence[Cond] = (), order: Sequence[Sort] = (),
                    limit: int | None = None) -> list[tuple[Any, ...]]: ...

    def kind_max(self, user_id: str, kind: str, field: str) -> Any: ...

    def kind_sources(self, user_id: str, kind: str, ids: Sequence[str], relation: str, *,
                     where: Sequence[Cond] = ()) -> dict[str, str | None]: ...

    # edges
    def add_edges(self, edges: Iterable[Edge]) -> int: ...

    def edges(self, user_id: str, *, src: str | None = None, dst: str | None = None,
              relation: str | None = None, limit: int = 1000) -> list[Edge]: ...

    def neighbors(self, user_id: str, node_ids: Sequence[str], *, hops: int = 1,
                  relations: Sequence[str] | None = None
                  ) -> dict[str, tuple[int, float, str]]: ...

    # a tenant's rows (formats/dump.py), versions, forgetting
    def conversation_rows(self, user_id: str) -> list[dict[str, Any]]: ...

    def session_rows(self, user_id: str) -> list[dict[str, Any]]: ...

    def item_ids(self, user_id: str) -> list[str]: ...

    def version_rows(self, user_id: str) -> list[dict[str, Any]]: ...

    def restore_versions(self, user_id: str, rows: Iterable[Mapping[str, Any]]) -> int: ...

    def history(self, user_id: str, node_id: str) -> list[Version]: ...

    def forget_user(self, user_id: str) -> dict[str, int]: ...


@runtime_checkable
class SearchStore(Protocol):
    """What search reads (``memory/retrieval.py``, ``memory/expand.py``, ...)."""

    def reading(self) -> AbstractContextManager[Any]: ...

    def data_version(self) -> tuple[int, int]: ...

    def refs(self, user_id: str, node_ids: Sequence[str]) -> dict[str, Ref]: ...

    def ids(self, user_id: str, refs: Sequence[Ref]) -> dict[Ref, str]: ...

    def facets(self, user_id: str, refs: Sequence[Ref]) -> dict[Ref, Facets]: ...

    def nodes(self, user_id: str, node_ids: Sequence[str], *, text: bool = True
              ) -> dict[str, dict[str, Any]]: ...

    def allowed_ids(self, user_id: str, filters: Filters) -> set[str]: ...

    def allowed_refs(self, user_id: str, filters: Filters) -> set[Ref]: ...

    def lexical(self, user_id: str, query_tokens: list[str], *, node: str, k: int,
                **options: Any) -> list[tuple[str, float]]: ...

    def lexical_refs(self, user_id: str, query_tokens: list[str], *, node: str, k: int,
                     filters: Filters | None = None, context_weight: float = 0.0,
                     common_share: float = 0.0, common_min_docs: int = 0,
                     common_budget: int = 0, idf_shift: float = 0.0
                     ) -> list[tuple[Ref, float]]: ...

    def term_docs(self, user_id: str, tokens: Sequence[str], *, cap: int | None = None
                  ) -> dict[str, int]: ...

    def texts_since(self, user_id: str, turn_rowid: int = 0, item_rowid: int = 0, *,
                    limit: int | None = None) -> tuple[list[str], int, int]: ...

    def tag_vocabulary(self, user_id: str) -> list[str]: ...

    def tagged(self, user_id: str, tags: Sequence[str], limit: int) -> list[Ref]: ...

    def set_embeddings(self, user_id: str, node_ids: Sequence[str], vectors: np.ndarray,
                       model: str) -> None: ...

    def vector_models(self, user_id: str | None) -> dict[str, int]: ...

    def vectors(self, user_id: str, model: str) -> tuple[list[str], np.ndarray]: ...

    def dense_refs(self, user_id: str, model: str, query_vec: np.ndarray, k: int, *,
                   allowed: set[Ref] | None = None, nodes: Sequence[str] = ("turn", "item"),
                   speaker: str | None = None) -> list[tuple[Ref, float]]: ...


@runtime_checkable
class AuxStore(Protocol):
    """Blobs, run records and API keys."""

    @property
    def blobs(self) -> Blobs: ...

    @property
    def runs(self) -> Runs: ...

    @property
    def jobs(self) -> Jobs: ...

    @property
    def keys(self) -> Keys: ...


@runtime_checkable
class MemoryStore(RecordStore, SearchStore, AuxStore, Protocol):
    """Everything code above the store calls: the three parts together (see the module)."""


PARTS: dict[str, type] = {"records": RecordStore, "search": SearchStore, "aux": AuxStore}
"""The parts of ``MemoryStore`` by name (what a backend's ``PARTS_SATISFIED`` names)."""


def members(part: type) -> list[str]:
    """The method and property names a protocol part declares (its own and its bases')."""
    names: set[str] = set()
    for cls in part.__mro__:
        if cls in (Protocol, object) or not getattr(cls, "_is_protocol", False):
            continue
        names.update(n for n, v in vars(cls).items()
                     if not n.startswith("_") and (callable(v) or isinstance(v, property)))
    return sorted(names)
