"""Supersession: a newer item ends an older one's validity; nothing is deleted.

When a later fact contradicts an earlier one about the same person ("lives in Oslo",
then "moved to Bergen"), the earlier fact stays in the store — history is what lets an
agent answer "where did she live in May?" — and gets a ``valid_to`` (the newer fact's
event time, or now when it has none) plus a ``supersedes`` edge from the newer to it,
carrying the reason. ``history`` walks those edges back.

Example:
    >>> from memstrata.memory import FactItem, Store
    >>> store = Store.open(":memory:")
    >>> old = store.add(FactItem(user_id="u", text="Ana lives in Oslo"))
    >>> new = store.add(FactItem(user_id="u", text="Ana moved to Bergen"))
    >>> supersede(store, "u", old, new, "moved").valid_to is not None
    True
    >>> [i.id for i in history(store, "u", new)] == [new, old]
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .models import Edge, Item, utcnow

if TYPE_CHECKING:
    from .store.protocol import MemoryStore

RELATION = "supersedes"


def supersede(store: MemoryStore, user_id: str, old_id: str, new_id: str, reason: str) -> Item:
    """End ``old_id``'s validity where ``new_id`` begins and link them; returns the old item.

    ``valid_to`` becomes the new item's ``event_time`` (now when it has none); an
    earlier ``valid_to`` already set is kept (an item is never made valid for longer).
    Both writes commit together.

    Raises:
        KeyError: either item is not this tenant's.
        ValueError: an item would supersede itself, or the reason is empty.
    """
    if old_id == new_id:
        raise ValueError("an item cannot supersede itself")
    if not reason.strip():
        raise ValueError("supersede needs a reason")
    old, new = store.get(user_id, old_id), store.get(user_id, new_id)
    if old is None or new is None:
        missing = old_id if old is None else new_id
        raise KeyError(f"no item {missing!r} for user {user_id!r}")
    end = new.event_time or utcnow()
    if old.valid_to is not None and old.valid_to <= end:
        end = old.valid_to
    with store.transaction():
        updated = store.update(user_id, old_id, valid_to=end)
        store.add_edges([Edge(user_id=user_id, src=new_id, dst=old_id, relation=RELATION,
                              metadata={"reason": reason[:500], "valid_to": end.isoformat()})])
    return updated


def history(store: MemoryStore, user_id: str, item_id: str, limit: int = 20) -> list[Item]:
    """``item_id`` and the items it superseded, newest first (following ``supersedes``)."""
    chain: list[Item] = []
    seen: set[str] = set()
    current: str | None = item_id
    while current is not None and current not in seen and len(chain) < limit:
        seen.add(current)
        item = store.get(user_id, current)
        if item is None:
            break
        chain.append(item)
        older = store.edges(user_id, src=current, relation=RELATION)
        current = older[0].dst if older else None
    return chain
