"""The embedded offline models (SmolLM2, Qwen2.5-Coder) run in-process by llama-cpp-python.

``LlamaCppEngine`` implements DSPy 3.4's engine interface (``complete(Request) ->
Response``) and declares ``supports_response_schema``, so ``dspy.JSONAdapter`` hands it
the output schema and llama.cpp constrains decoding to it. That is what makes small models
usable: without the grammar they often return unparseable structured output (see
DESIGN.md). The OpenAI-compatible llama.cpp server route drops the schema, hence
in-process.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Literal

from dspy.clients.engines.base import validate_request
from dspy.lm15 import ContextLengthError, Message, Response, TextPart, Usage, response_to_events

from memstrata.memory.extras import require

from .errors import ModelSetupError
from .llama_check import ensure_decodes
from .models import smollm2_path

DEFAULT_N_CTX = 8192
PrefixCache = Literal["ram", "last", "off"]
#: Appended to the missing-``[local]`` error: llama-cpp-python builds from source.
INSTALL_HINT = ('it builds from source with a C compiler and CMake; build it portably: '
                'CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF"')


# llama.cpp expands maxLength N into N nested optional rules; its grammar parser refuses
# a schema whose repetitions add up past a fixed limit, and llama-cpp-python then crashes
# the process (seen: maxLength 400 + 1200 segfaulted; 400 + 800 ran). Larger bounds are
# lowered to this before the schema reaches llama.cpp.
MAX_SCHEMA_LENGTH = 800


def _bounded(schema: Any) -> Any:
    """``schema`` as llama.cpp's grammar should hold it: every maxLength/maxItems above
    ``MAX_SCHEMA_LENGTH`` lowered to it, and a property with a default not required.

    DSPy makes every property required before a schema reaches an engine (OpenAI's strict
    structured outputs demand it); a grammar then forces a small model to write every
    optional field of every object, and it fills them with whatever a worked example
    held (one "location" copied into every fact). A property that keeps its default in
    the schema is optional again here; pydantic fills the default when it is left out.
    """
    if isinstance(schema, list):
        return [_bounded(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _bounded(v) for k, v in schema.items()}
    for key in ("maxLength", "maxItems"):
        if isinstance(out.get(key), int) and out[key] > MAX_SCHEMA_LENGTH:
            out[key] = MAX_SCHEMA_LENGTH
    props = out.get("properties")
    if isinstance(props, dict) and isinstance(out.get("required"), list):
        out["required"] = [n for n in out["required"]
                           if not (isinstance(props.get(n), dict) and "default" in props[n])]
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
        check: before the first in-process load, decode a test prompt in a child process
            (``llama_check.ensure_decodes``, remembered per build and model), so a build
            that crashes on this CPU raises ``ModelSetupError`` instead of killing the
            caller.
        prefix_cache: how the evaluated prompt prefix (the KV cache) carries across calls.
            ``last`` (default) reuses the previous call's longest common prefix
            (llama-cpp-python's own behaviour, free): calls of one program share their
            instructions and demos, and consecutive questions over the same memories share
            those too. ``ram`` also keeps the states of recent prompts, up to
            ``cache_mb``, and starts each call from the longest cached prefix, so programs
            that take turns (a predictor and a responder) each keep theirs; saving a state
            costs ~0.4 s per 1,000 prompt tokens with the 1.5B model, so it pays only when
            programs alternate. ``off`` evaluates every prompt whole (the baseline the
            prefix-cache benchmark measures against).
        cache_mb: the ``ram`` cache's size.

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
                 n_threads: int | None = None, seed: int = 0, check: bool = True,
                 prefix_cache: PrefixCache = "last", cache_mb: int = 512) -> None:
        self.model_path = Path(model_path) if model_path is not None else smollm2_path()
        if not self.model_path.is_file():
            raise ModelSetupError(f"no GGUF model file at {self.model_path}")
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.seed = seed
        self.check = check
        self.prefix_cache = prefix_cache
        self.cache_mb = cache_mb
        self._llama: Any = None
        self._lock = threading.RLock()

    @property
    def llama(self) -> Any:
        """The loaded ``llama_cpp.Llama`` (loaded on first access)."""
        with self._lock:
            if self._llama is None:
                llama_cpp = require("llama_cpp", "local", "the local models", INSTALL_HINT)
                Llama = llama_cpp.Llama
                self.preflight()
                # llama-cpp-python decodes on half the cores by default; use them all.
                threads = self.n_threads or os.cpu_count() or 1
                self._llama = Llama(model_path=str(self.model_path), n_ctx=self.n_ctx,
                                    n_threads=threads, n_threads_batch=threads,
                                    seed=self.seed, verbose=False)
                if self.prefix_cache == "ram":
                    cache = llama_cpp.LlamaRAMCache(capacity_bytes=self.cache_mb << 20)
                    self._llama.set_cache(cache)
            return self._llama

    def preflight(self) -> None:
        """Run the child-process decode check now (once; see ``check``)."""
        if self.check:
            ensure_decodes(self.model_path)
            self.check = False

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
            if self.prefix_cache == "off":
                self.llama.reset()
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

    def clear_cache(self) -> None:
        """Drop every evaluated prompt this engine keeps (the KV cache and the ``ram``
        cache): after a tenant is forgotten, none of its text stays in memory here."""
        with self._lock:
            if self._llama is not None:
                self._llama.reset()
                if self.prefix_cache == "ram":
                    llama_cpp = require("llama_cpp", "local", "the local models", INSTALL_HINT)
                    self._llama.set_cache(
                        llama_cpp.LlamaRAMCache(capacity_bytes=self.cache_mb << 20))

    def close(self) -> None:
        """Free the weights; the next call loads them again."""
        with self._lock:
            if self._llama is not None:
                self._llama.close()
                self._llama = None

    def dump_state(self) -> dict[str, Any]:
        """Settings that rebuild this engine (DSPy saves them with a program's LM)."""
        return {"model_path": str(self.model_path), "n_ctx": self.n_ctx,
                "n_threads": self.n_threads, "seed": self.seed,
                "prefix_cache": self.prefix_cache, "cache_mb": self.cache_mb}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> LlamaCppEngine:
        """The engine ``dump_state`` described."""
        return cls(state.get("model_path"), n_ctx=state.get("n_ctx", DEFAULT_N_CTX),
                   n_threads=state.get("n_threads"), seed=state.get("seed", 0),
                   prefix_cache=state.get("prefix_cache", "last"),
                   cache_mb=state.get("cache_mb", 512))
