"""The root of memstrata's errors: every error the library raises on purpose derives from
:class:`MemstrataError`, and keeps the builtin base it always had, so ``except
MemstrataError`` catches any of them and ``except ValueError`` (or ``RuntimeError``,
``sqlite3.Error``, ``ImportError``) still catches what it caught before.

The family, each defined beside the code that raises it:

========================================================  ==============================
error                                                     also a
========================================================  ==============================
``memstrata.memory.locking.StoreError``                   ``sqlite3.DatabaseError``
``memstrata.memory.store.pg.connection.PgStoreError``     ``StoreError``
``memstrata.memory.extras.MissingExtraError``             ``ImportError``, ``RuntimeError``
``memstrata.formats.records.ImportFormatError``           ``ValueError``
``memstrata.formats.locomo.LoCoMoError``                  ``ImportFormatError``
``memstrata.tools.base.ToolError``                        ``ValueError``
``memstrata.tools.calculator.CalculatorError``            ``ValueError``
``memstrata.programs.errors.ModelSetupError``             ``RuntimeError``
``memstrata.programs.errors.ProgramParseError``           ``RuntimeError``
``memstrata.programs.ingest.IngestError``                 ``RuntimeError``
``memstrata.programs.binding.UnboundProgramError``        ``RuntimeError``
``memstrata.programs.models.ModelInstallError``           ``RuntimeError``
``memstrata.programs.sandbox.SandboxError``               ``ModelSetupError``
``memstrata.programs.sandbox.SandboxStartError``          ``SandboxError``, DSPy's
                                                          ``CodeInterpreterError``
``memstrata.programs.sandbox.SandboxLimitError``          DSPy's ``CodeExecutionError``
``memstrata.bench.cognitive.scenarios.ScenarioFileError`` ``ValueError``
``memstrata.server.errors.ApiError``                      (an HTTP error code; no builtin)
``memstrata.memory.store.jobs.LeaseLost``                 ``RuntimeError``
``memstrata.worker.JobTimeoutError``                      ``TimeoutError``
``memstrata.inspector.app.BadRequest``                    ``ValueError``
``memstrata.inspector.views.NotFound``                    ``LookupError``
``memstrata.api.MemoryNotFoundError``                     ``KeyError``
========================================================  ==============================

Its warnings derive from :class:`MemstrataWarning` the same way.

This module imports nothing of memstrata, so every layer, the lowest included, may
import it.
"""

from __future__ import annotations

__all__ = ["MemstrataError", "MemstrataWarning"]


class MemstrataError(Exception):
    """Base of every error memstrata raises on purpose; its message is one line that says
    what went wrong and, where there is one, what to do about it."""


class MemstrataWarning(UserWarning):
    """Base of the warnings memstrata gives (``EmbedderMismatchWarning``, in
    ``memstrata.memory.reembed``): something works, but not as well as it could, and the
    message says how to fix it. The command line prints each as one line."""
