"""One place that turns a user's model choice into a configured, metered DSPy LM.

``setup_lm("local/NAME")`` runs a model of the offline catalogue in-process
(``LlamaCppEngine``; ``programs/models.py``), ``local/PATH.gguf`` any GGUF file; any other
``provider/model`` goes to litellm through ``dspy.LM`` (keys from the environment,
``api_base`` for Ollama, vLLM or llama.cpp servers). Every LM carries a ``CallMeter``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from memstrata.memory.extras import locate
from memstrata.trajectories.redact import redact_logs

from .errors import ModelSetupError
from .llama_engine import DEFAULT_N_CTX, INSTALL_HINT, LlamaCppEngine, PrefixCache
from .meter import CallMeter
from .models import EMBEDDED, MODELS, model_path

LOCAL_PREFIX = "local/"
# When litellm does not know a model's window, assume a small one rather than overflow.
FALLBACK_WINDOW = 8192
EXAMPLES = ("openai/gpt-4o-mini", "anthropic/claude-3-5-haiku-latest",
            "ollama_chat/llama3.1 --api-base http://localhost:11434",
            "hosted_vllm/Qwen/Qwen2.5-7B-Instruct --api-base http://localhost:8000/v1")


@dataclass
class ModelHandle:
    """A configured LM with what packers and reports need to know about it.

    Attributes:
        name: the model as the user named it (``local/smollm2``, ``openai/gpt-4o-mini``).
        lm: the ``dspy.LM``.
        window: the context window in tokens.
        count_tokens: the model's tokenizer where it has one, else litellm's estimate.
        tokenizer: which tokenizer ``count_tokens`` uses, for reports.
        meter: counts every call made through ``lm``.
    """

    name: str
    lm: dspy.LM
    window: int
    count_tokens: Callable[[str], int]
    tokenizer: str
    meter: CallMeter


def _approximate_tokens(text: str) -> int:
    # Conservative: English averages ~4 characters per token; 3 over-counts, so a budget
    # measured this way is never exceeded by the real tokenizer on ordinary text.
    return math.ceil(len(text) / 3)


def _litellm_counter(model: str) -> tuple[Callable[[str], int], str]:
    import litellm

    def count(text: str) -> int:
        return int(litellm.token_counter(model=model, text=text))

    try:
        count("probe")
    except Exception:
        return _approximate_tokens, "estimate (3 chars/token)"
    return count, "litellm"


def _litellm_window(model: str) -> int:
    import litellm

    try:
        info = litellm.get_model_info(model)
    except Exception:
        return FALLBACK_WINDOW
    return int(info.get("max_input_tokens") or info.get("max_tokens") or FALLBACK_WINDOW)


def _check_litellm_model(model: str, api_base: str | None) -> None:
    import litellm

    litellm.suppress_debug_info = True  # it prints a provider list to stdout on errors
    try:
        _, provider, _, _ = litellm.get_llm_provider(model=model, api_base=api_base)
    except Exception as exc:
        raise ModelSetupError(
            f"litellm does not know the model {model!r}. Name it as provider/model, "
            f"for example: {'; '.join(EXAMPLES)}; or use the offline {EMBEDDED}.") from exc
    if api_base:
        return  # a local server: no key needed, and litellm cannot tell which it wants
    env = litellm.validate_environment(model=model)
    if not env.get("keys_in_environment", True):
        missing = ", ".join(env.get("missing_keys") or ["the provider's API key"])
        raise ModelSetupError(
            f"{model} ({provider}) needs {missing} set in the environment; or use the "
            f"offline {EMBEDDED}, which needs no key.")


def local_model_path(choice: str) -> Path:
    """The GGUF file a ``local/...`` choice names: a catalogue model or a path.

    Raises:
        ModelSetupError: a catalogue model that is not installed (with the install
            command), or a path that is not a file (with the catalogue's names).
    """
    name = choice[len(LOCAL_PREFIX):]
    if name in MODELS:
        return model_path(name)
    path = Path(name).expanduser()
    if not path.is_file():
        raise ModelSetupError(
            f"{choice}: no GGUF model file at {path}; name a GGUF file (local/PATH.gguf) or one of "
            f"{', '.join(LOCAL_PREFIX + m for m in MODELS)} (memstrata models list)")
    return path


def setup_lm(choice: str = EMBEDDED, *, api_base: str | None = None, temperature: float = 0.0,
             max_tokens: int = 256, n_ctx: int = DEFAULT_N_CTX, cache: bool = False,
             engine: Any = None, n_threads: int | None = None,
             prefix_cache: PrefixCache = "last") -> ModelHandle:
    """A configured LM for ``choice``.

    Args:
        choice: ``local/NAME`` (a model of ``memstrata models list``), ``local/PATH.gguf``
            (any GGUF file), or any litellm ``provider/model``.
        api_base: a server address for self-hosted providers (Ollama, vLLM, llama.cpp).
        temperature: sampling temperature; 0 by default so benchmark runs repeat.
        max_tokens: the longest output per call.
        n_ctx: the context window for local models.
        cache: DSPy's response cache; off by default so the meter counts real calls.
        engine: an engine to use instead (tests pass scripted fakes).
        n_threads: CPU threads of a local model (default: every core). On a machine
            shared with other work, fewer threads than cores decode faster: threads
            that wait on a busy core stall the others at every step.
        prefix_cache: how a local model carries evaluated prompt prefixes across calls
            (``last``, ``ram`` or ``off``; see ``LlamaCppEngine``).

    From the first call on, log records are redacted (``trajectories.redact_logs``).

    Raises:
        MissingExtraError: a ``local/...`` choice without the ``local`` extra installed.
        ModelSetupError: what to install or set, when the model cannot be set up.

    Example:
        >>> handle = setup_lm("local/smollm2")  # doctest: +SKIP
        >>> dspy.configure(lm=handle.lm)  # doctest: +SKIP
    """
    redact_logs()  # from here on memstrata holds a model, maybe its keys: logs mask them
    meter = CallMeter()
    if choice.startswith(LOCAL_PREFIX) or engine is not None:
        if engine is None:
            # Located, not imported: its first import follows the decode check (preflight).
            locate("llama_cpp", "local", "the local models", INSTALL_HINT)
            engine = LlamaCppEngine(local_model_path(choice), n_ctx=n_ctx, n_threads=n_threads,
                                    prefix_cache=prefix_cache)
            engine.preflight()  # a build that crashes on this CPU fails here, with the fix
        lm = dspy.LM(choice, engine=engine, temperature=temperature, max_tokens=max_tokens,
                     cache=cache, num_retries=0, callbacks=[meter])
        counter = getattr(engine, "count_tokens", None)
        return ModelHandle(choice, lm, getattr(engine, "n_ctx", n_ctx),
                           counter or _approximate_tokens,
                           "model" if counter else "estimate (3 chars/token)", meter)
    _check_litellm_model(choice, api_base)
    kwargs: dict[str, Any] = {"api_base": api_base} if api_base else {}
    lm = dspy.LM(choice, temperature=temperature, max_tokens=max_tokens, cache=cache,
                 callbacks=[meter], **kwargs)
    count, tokenizer = _litellm_counter(choice)
    return ModelHandle(choice, lm, _litellm_window(choice), count, tokenizer, meter)


def wrap_lm(lm: dspy.BaseLM, name: str | None = None, window: int = FALLBACK_WINDOW
            ) -> ModelHandle:
    """A ``ModelHandle`` around an LM built elsewhere (``dspy.utils.DummyLM`` in tests, or
    a user's own ``dspy.LM``): a meter is attached so its calls are counted too, and log
    records are redacted from then on (``trajectories.redact_logs``)."""
    redact_logs()
    meter = CallMeter()
    lm.callbacks = [*(getattr(lm, "callbacks", None) or []), meter]
    return ModelHandle(name or str(getattr(lm, "model", "lm")), lm, window,
                       _approximate_tokens, "estimate (3 chars/token)", meter)
