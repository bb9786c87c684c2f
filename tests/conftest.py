"""Shared fixtures: a deterministic fake embedder, stores, and LoCoMo-format file builders."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstrata.memory import Store

# The PostgreSQL server and database fixtures (started only by a test that asks for one).
from tests.pg_fixtures import make_database, pg_admin, pg_db_url, pg_server, pg_url  # noqa: F401

_WORD = re.compile(r"\w+", re.UNICODE)


class FakeEmbedder:
    """A deterministic bag-of-words embedder: each lower-cased word hashes into a bucket.

    Texts that share words get a higher cosine than texts that share none; a text with no
    words at all maps to a fixed unit vector, so every row is unit length.
    """

    name = "fake-hash"
    dim = 64

    def __init__(self) -> None:
        self.calls = 0

    @classmethod
    def bucket(cls, word: str) -> int:
        """The bucket of one word (stable across processes, unlike ``hash``)."""
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "little") % cls.dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """A ``(len(texts), 64)`` float32 array of unit vectors."""
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            if not words:
                out[row, 0] = 1.0
                continue
            for word in words:
                out[row, self.bucket(word)] += 1.0
            out[row] /= np.linalg.norm(out[row])
        return out


@pytest.fixture
def embedder() -> FakeEmbedder:
    """A fresh fake embedder."""
    return FakeEmbedder()


@pytest.fixture
def store() -> Iterator[Store]:
    """An in-memory store, closed after the test."""
    s = Store.open(":memory:")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[Store]:
    """A store in a real file (WAL mode), closed after the test."""
    s = Store.open(tmp_path / "memory.db")
    try:
        yield s
    finally:
        s.close()


def locomo_record(
    sample_id: str = "conv-1",
    *,
    speakers: tuple[str, str] = ("Alice", "Bob"),
    sessions: dict[int, list[dict[str, Any]]] | None = None,
    dates: dict[int, str] | None = None,
    qa: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One conversation in LoCoMo's JSON shape (defaults: two short sessions)."""
    if sessions is None:
        sessions = {
            1: [
                {"speaker": speakers[0], "dia_id": "D1:1",
                 "text": "I adopted a guinea pig named Oscar last week."},
                {"speaker": speakers[1], "dia_id": "D1:2",
                 "text": "Lovely! I started learning the violin."},
                {"speaker": speakers[0], "dia_id": "D1:3",
                 "text": "Here is my new garden.", "img_url": ["https://example.invalid/a.jpg"],
                 "blip_caption": "a photo of sunflowers next to a wooden fence",
                 "query": "garden sunflowers"},
            ],
            2: [
                {"speaker": speakers[1], "dia_id": "D2:1",
                 "text": "We went hiking in the Alps yesterday."},
                {"speaker": speakers[0], "dia_id": "D2:2",
                 "text": "Amazing, I visited Sweden to see my grandma."},
            ],
        }
    if dates is None:
        dates = {n: f"1:56 pm on {7 + n} May, 2023" for n in sessions}
    conversation: dict[str, Any] = {"speaker_a": speakers[0], "speaker_b": speakers[1]}
    for n, turns in sessions.items():
        if n in dates:
            conversation[f"session_{n}_date_time"] = dates[n]
        conversation[f"session_{n}"] = turns
    return {
        "sample_id": sample_id,
        "conversation": conversation,
        "qa": qa if qa is not None else [],
        "observation": {},
        "session_summary": {},
        "event_summary": {},
    }


@pytest.fixture
def make_record() -> Callable[..., dict[str, Any]]:
    """Builder of LoCoMo conversation records (see :func:`locomo_record`)."""
    return locomo_record


@pytest.fixture
def write_json(tmp_path: Path) -> Callable[[str, Any], Path]:
    """Write a JSON value (or raw text, for malformed files) under ``tmp_path``."""

    def write(name: str, value: Any) -> Path:
        path = tmp_path / name
        text = value if isinstance(value, str) else json.dumps(value)
        path.write_text(text, encoding="utf-8")
        return path

    return write


class ScriptedEngine:
    """A DSPy engine that answers from a Python function: deterministic, offline, instant.

    ``reply(system, user, schema)`` returns the output fields as a dict (sent as JSON) or
    raw text. Requests are kept in ``requests``; usage counts words, so token figures
    are non-zero and checkable. Set ``fail_after`` to raise ``KeyboardInterrupt`` on a
    later call (a simulated interruption).
    """

    supports_response_schema = True
    supported_params = frozenset({"temperature", "max_tokens", "response_format", "seed"})
    n_ctx = 4096

    def __init__(self, reply: Callable[[str, str, dict[str, Any] | None], Any]) -> None:
        self.reply = reply
        self.requests: list[Any] = []
        self.fail_after: int | None = None

    def count_tokens(self, text: str) -> int:
        """Words and punctuation marks, a stand-in tokenizer."""
        return len(re.findall(r"\w+|[^\w\s]", text))

    def complete(self, request: Any) -> Any:
        """One scripted response."""
        from dspy.lm15 import Message, Response, TextPart, Usage

        if self.fail_after is not None and len(self.requests) >= self.fail_after:
            raise KeyboardInterrupt
        self.requests.append(request)
        system = request.system if isinstance(request.system, str) else "".join(
            p.text for p in request.system or ())
        user = request.messages[-1].text or ""  # the live question, after any demos
        fmt = request.config.response_format
        out = self.reply(system, user, fmt.get("schema") if fmt else None)
        text = out if isinstance(out, str) else json.dumps(out)
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(text)]),
                        finish_reason="stop",
                        usage=Usage(input_tokens=self.count_tokens(system + user),
                                    output_tokens=self.count_tokens(text)))

    def stream(self, request: Any) -> Any:
        """The response as events."""
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        """Nothing to free."""


def field(user: str, name: str) -> str:
    """The value of input field ``name`` in a user message (``Label: value`` blocks)."""
    label = re.escape(name.replace("_", " ").capitalize())
    m = re.search(rf"(?:^|\n\n){label}:[ \n](.*?)(?=\n\n[A-Z][a-z ]*:[ \n]|\Z)", user, re.S)
    return m[1].strip() if m else ""


@pytest.fixture
def scripted() -> Callable[..., Any]:
    """Build a metered ``ModelHandle`` over a ``ScriptedEngine`` with a reply function."""
    from memstrata.programs import setup_lm

    def make(reply: Callable[[str, str, dict[str, Any] | None], Any], name: str = "local/scripted"):
        return setup_lm(name, engine=ScriptedEngine(reply))

    return make


class InProcessInterpreter:
    """A test double for DSPy's sandbox: runs code with ``exec`` in one persistent
    namespace, tools as globals, ``SUBMIT`` ending the run. Not a sandbox; tests only."""

    def __init__(self) -> None:
        self.tools: dict[str, Callable[..., Any]] = {}
        self.output_fields: list[dict[str, Any]] | None = None
        self.namespace: dict[str, Any] = {}
        self.executed: list[str] = []
        self.shut = False

    def start(self) -> None:
        """Nothing to start."""

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        """Run ``code``; return what it printed, or ``FinalOutput`` if it called SUBMIT."""
        import contextlib
        import io

        from dspy.primitives.code_interpreter import CodeExecutionError, FinalOutput

        class _Submit(Exception):
            pass

        def submit(*args: Any, **kwargs: Any) -> None:
            raise _Submit(kwargs or {"answer": args[0] if args else None})

        self.executed.append(code)
        self.namespace.update({name: self._bridge(tool) for name, tool in self.tools.items()})
        self.namespace.update(variables or {})
        self.namespace["SUBMIT"] = submit
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stdout(buffer):
                exec(compile(code, "<agent>", "exec"), self.namespace)
        except _Submit as done:
            return FinalOutput(done.args[0])
        except SyntaxError:
            raise
        except Exception as exc:
            raise CodeExecutionError(f"{type(exc).__name__}: {exc}") from exc
        return buffer.getvalue()

    def shutdown(self) -> None:
        """Mark it shut."""
        self.shut = True

    @staticmethod
    def _bridge(tool: Callable[..., Any]) -> Callable[..., Any]:
        """Call a host tool as the sandbox does: arguments bound to names by the tool's
        signature, both ways through JSON."""
        import inspect

        signature = inspect.signature(tool)

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            sent = json.loads(json.dumps(bound.arguments))
            return json.loads(json.dumps(tool(**sent)))

        return call


@pytest.fixture
def interpreter() -> InProcessInterpreter:
    """One in-process interpreter (a mock sandbox)."""
    return InProcessInterpreter()
