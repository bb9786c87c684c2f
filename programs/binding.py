"""``Live``: what a program uses but an optimizer must never copy (a store, a retriever).

DSPy's optimizers copy the program they tune (``Module.deepcopy``, ``reset_copy``) and
run the copies, sometimes in threads. A module that holds a live ``Store`` as a plain
attribute then hands the optimizer either a copied SQLite connection (it cannot be) or,
after DSPy's fallback to a shallow copy, the *same* connection shared by every copy.
A program keeps such things in a ``Live`` holder instead: its state for DSPy is only its
predictors, and a copy of the program is *unbound*: it holds nothing live and says so on
use, until it is bound again (``program.bind(...)``) or given its resources at call time.

Example:
    >>> import copy
    >>> held = Live("a live thing", what="store")
    >>> copy.deepcopy(held).bound
    False
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from memstrata.errors import MemstrataError

T = TypeVar("T")


class UnboundProgramError(MemstrataError, RuntimeError):
    """A program copy (or one built without its resources) was run with nothing bound."""


class Live(Generic[T]):
    """A holder for live resources that copying never duplicates nor shares.

    ``copy.deepcopy``, ``copy.copy`` and pickling all give an *empty* holder: the copy of
    a program shares no store and opens no connection of its own. ``get`` on an empty
    holder raises :class:`UnboundProgramError` naming what is missing and how to give it.

    Args:
        value: the resources (``None``: unbound).
        what: what they are, for the error ("a store", "a tool session").
    """

    __slots__ = ("_value", "what")

    def __init__(self, value: T | None = None, *, what: str = "its resources") -> None:
        self._value = value
        self.what = what

    @property
    def bound(self) -> bool:
        """Whether something is held."""
        return self._value is not None

    def get(self) -> T:
        """The held resources; raises ``UnboundProgramError`` when there are none."""
        if self._value is None:
            raise UnboundProgramError(
                f"this program has no {self.what} bound (a copy made by an optimizer, or "
                f"one built without it): call .bind(...) on it or pass the resources at "
                "call time")
        return self._value

    def __deepcopy__(self, memo: dict[int, Any]) -> Live[T]:
        return Live(what=self.what)

    def __copy__(self) -> Live[T]:
        return Live(what=self.what)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unbound, (self.what,))

    def __repr__(self) -> str:
        return f"Live({self.what}, {'bound' if self.bound else 'unbound'})"


def _unbound(what: str) -> Live[Any]:
    return Live(what=what)


__all__ = ["Live", "UnboundProgramError"]
