"""What the ``memstrata`` command modules share: turning flags into library objects and
printing a result or an error the way every command does.

``memstrata.cli`` and each ``*_commands`` module import these; none of them imports
another command module for a helper. A helper that refuses a flag raises ``SystemExit``
with a one-line ``memstrata: ...`` message (``cli.main`` prints it and exits 2).
"""

from __future__ import annotations

import argparse
import errno
import json
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memstrata.memory.store.opener import describe


def one_line(exc: BaseException, limit: int = 500) -> str:
    """An error's message on one line, cut to ``limit`` characters (it may quote input)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def embedder_from_flag(enabled: bool, name: str | None = None, flag: str = "--embedder"
                       ) -> Any:
    """The embedder ``name`` picks (``--embedder``; the default static model when None),
    or None when ``enabled`` is false.

    Raises:
        SystemExit: ``name`` is no embedder (the message names ``flag``).
    """
    if not enabled:
        return None
    from memstrata.memory import default_embedder, embedder_by_name

    if name is None:
        return default_embedder()
    try:
        return embedder_by_name(name)
    except ValueError as exc:
        raise SystemExit(f"memstrata: {flag}: {exc}") from None


def opener_embedder(enabled: bool, name: str | None = None) -> Any:
    """What a command that opens a store embeds with: the model ``name`` picks
    (``--embedder``), ``"auto"`` when None (the model that embedded the store, see
    ``open_store``), or None when ``enabled`` is false.

    Raises:
        SystemExit: ``name`` is no embedder.
    """
    if not enabled:
        return None
    return "auto" if name is None else embedder_from_flag(True, name)


def add_embedder_arg(p: argparse.ArgumentParser, *, store: bool = True) -> None:
    """The ``--embedder NAME`` option: of a command that opens a store (``store``, read
    with :func:`opener_embedder`), or of one that builds its own (:func:`embedder_from_flag`)."""
    default = ("by default the model that embedded most of the store (static for a new one)"
               if store else "static by default")
    p.add_argument("--embedder", metavar="NAME",
                   help="embedding model: static (the shipped one), minilm or mpnet (extras "
                   f"of those names), or the folder of a model2vec static model; {default}")


def weights_from_json(raw: str | None) -> Any:
    """``SearchWeights`` from ``--weights``'s JSON object (the defaults when empty).

    Raises:
        SystemExit: not a JSON object of ``SearchWeights``' knobs, or a knob out of range.
    """
    from pydantic import ValidationError

    from memstrata.memory import SearchWeights

    if not raw:
        return SearchWeights()
    try:
        return SearchWeights(**json.loads(raw))
    except ValidationError as exc:
        first = exc.errors()[0]  # the knob may be any string the user typed: one line
        problem = ValueError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}")
        raise SystemExit(f"memstrata: --weights: {one_line(problem)} (see SearchWeights)"
                         ) from None
    except (json.JSONDecodeError, TypeError, ValueError) as exc:
        raise SystemExit("memstrata: --weights must be a JSON object of SearchWeights: "
                         f"{one_line(exc)}") from None


def audit_beside(data: str | Path) -> Path | None:
    """``<data>_audit_errors.json`` beside a LoCoMo file, if it exists."""
    path = Path(data).with_name(Path(data).stem + "_audit_errors.json")
    return path if path.exists() else None


def audit_path(args: argparse.Namespace) -> str | Path | None:
    """``--audit`` when given, else the audit file beside ``--data`` (or None)."""
    if args.audit is not None:
        return args.audit
    return audit_beside(args.data)


def print_report(table: str, paths: list[Path]) -> int:
    """Print a benchmark's table and the files it wrote on stdout; the exit status (0)."""
    print(table)
    print("wrote " + ", ".join(map(str, paths)))
    return 0


def csv_list(raw: str | None, what: str, cast: type = str) -> list[Any] | None:
    """The items of a comma-separated flag, each through ``cast`` (None when empty).

    Raises:
        SystemExit: an item ``cast`` refuses (the message names the flag ``what``).
    """
    if not raw:
        return None
    try:
        return [cast(x.strip()) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"memstrata: {what} must be a comma-separated list, got {raw!r}") from None


__all__ = ["add_embedder_arg", "at_least", "audit_beside", "audit_path", "csv_list",
           "embedder_from_flag", "one_line", "opener_embedder", "port_number", "print_report",
           "weights_from_json"]


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum`` (hits, rows, runs kept)."""

    def whole(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return whole


def port_number(raw: str) -> int:
    """An argparse type: a TCP port, 1-65535."""
    try:
        port = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {raw!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, not {port}")
    return port


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` for a server to accept on, bound before the
    server says where it listens.

    Raises:
        SystemExit: the address cannot be bound (a port in use, an address this machine
            does not have, a port below 1024 without the right), in one line.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        hint = " (another server is there: give --port)" if exc.errno == errno.EADDRINUSE else ""
        raise SystemExit(f"memstrata: cannot listen on {host}:{port}: "
                         f"{exc.strerror or exc}{hint}") from None
    sock.set_inheritable(True)
    return sock


class NotFound(SystemExit):
    """A command's exit for something asked for that is not there (a store, a memory, a
    run): its message, and exit code 1 (other refusals exit 2; see ``cli.main``)."""


def no_store(db: str) -> NotFound:
    """The exit for a ``--db`` path with no store yet."""
    return NotFound(f"memstrata: no store at {describe(db)} (create one with 'memstrata "
                    "add', 'memstrata read' or 'memstrata import', or give --db)")


@contextmanager
def stdin_as_file(name: str) -> Iterator[str]:
    """``name`` itself, or for ``-`` a file holding stdin (the readers take a path)."""
    if name != "-":
        yield name
        return
    with tempfile.TemporaryDirectory(prefix="memstrata-stdin-") as folder:
        path = Path(folder) / "stdin"
        binary = getattr(sys.stdin, "buffer", None)  # bytes as given; text if only text
        with path.open("wb") as out:
            if binary is not None:
                shutil.copyfileobj(binary, out)
            else:
                out.write(sys.stdin.read().encode("utf-8", "surrogatepass"))
        try:
            yield str(path)
        except SystemExit as exc:  # an error names the file: stdin, not the temporary copy
            if isinstance(exc.code, str):
                raise type(exc)(exc.code.replace(str(path), "stdin")) from None
            raise


@contextmanager
def stdout_as_file(name: str) -> Iterator[str]:
    """``name`` itself, or for ``-`` a file whose content goes to stdout once the block
    is done (the writers take a path and write it whole)."""
    if name != "-":
        yield name
        return
    with tempfile.TemporaryDirectory(prefix="memstrata-stdout-") as folder:
        path = Path(folder) / "stdout"
        yield str(path)
        with path.open(encoding="utf-8") as written:
            shutil.copyfileobj(written, sys.stdout)


def when_arg(edge: str) -> Callable[[str], datetime]:
    """An argparse type: an ISO date or datetime, or a time phrase said now ("yesterday",
    "last week", "2024", "in May") read as the ``edge`` (``start`` or ``end``) of the span
    it names, in UTC."""

    def parse(raw: str) -> datetime:
        try:
            return datetime.fromisoformat(raw)
        except ValueError:
            pass
        from memstrata.memory.timeparse import normalise_time

        # A date phrase is a few words: a long value is not parsed (dateparser is slow on one)
        span = (normalise_time(raw, datetime.now(UTC)) if raw.strip() and len(raw) <= 100
                else None)
        if span is None:
            raise argparse.ArgumentTypeError(
                f"not a date: {raw!r} (an ISO date or datetime such as 2026-01-31 or "
                "2026-01-31T12:00, or a phrase such as yesterday, last week or 2024)")
        return span.start if edge == "start" else span.end

    return parse


def query_arg(raw: str) -> str:
    """An argparse type: a query or question that is not blank."""
    if not raw.strip():  # an unset shell variable, most often: say so, not "no hits"
        raise argparse.ArgumentTypeError("the query is blank")
    return raw
