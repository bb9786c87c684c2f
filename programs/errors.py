"""The errors a caller of ``memstrata.programs`` can act on."""

from __future__ import annotations

from memstrata.errors import MemstrataError


class ModelSetupError(MemstrataError, RuntimeError):
    """No language model could be set up; the message says what to install or set."""


class ProgramParseError(MemstrataError, RuntimeError):
    """A model's output could not be parsed into a program's fields, even after a retry.

    Attributes:
        program: the program's name (``QA``, ``Extractor``, ``Judge``).
        raw: the last raw model output, cut to 500 characters.
    """

    def __init__(self, program: str, model: str, raw: str, cause: Exception) -> None:
        self.program = program
        self.raw = raw[:500]
        super().__init__(
            f"{program}: the output of {model} could not be parsed, twice (the retry constrained "
            f"decoding to the JSON schema). Last output: {self.raw!r}. Cause: {cause}")
