"""``BlobRef``: the handle an agent holds instead of a large text."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class BlobRef(BaseModel):
    """A reference to a text kept in the store: its key and its length in characters.

    The agent sees ``BlobRef(key='chat-1', n=27345)`` and reads the text through the
    ``ctx_*`` tools, a bounded piece at a time.

    Example:
        >>> BlobRef(key="chat-1", n=27345)
        BlobRef(key='chat-1', n=27345)
    """

    model_config = ConfigDict(frozen=True)

    key: str
    n: int

    def __repr__(self) -> str:
        return f"BlobRef(key={self.key!r}, n={self.n})"

    __str__ = __repr__
