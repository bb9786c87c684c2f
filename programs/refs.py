"""How a run names the program file it ran: path, program and checked hash."""

from __future__ import annotations

from pydantic import BaseModel


class ProgramRef(BaseModel):
    """A program file as a run names it: its path as given, its program and its hash
    (``programs.compiled.program_ref`` reads one from a file)."""

    path: str
    name: str
    sha256: str


__all__ = ["ProgramRef"]
