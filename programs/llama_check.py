"""Is this llama.cpp build safe on this CPU? A multi-token decode, in a child process.

A llama-cpp-python built with llama.cpp's default ``GGML_NATIVE=ON`` can load a model and
decode one token, then die with a segmentation fault on any prompt of two or more tokens
(seen on an AVX-512 Xeon with 0.3.36). A crash in-process kills the caller with no message,
so the first decode of each model by each build runs in a child first: a crash there
becomes a ``ModelSetupError`` that names the fix. A pass is remembered (keyed by the
build's shared libraries and the model file), so later runs pay nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from memstrata.memory.paths import memstrata_home

from .errors import ModelSetupError

#: The tested llama-cpp-python release, and how to rebuild it portably.
LLAMA_CPP_PIN = "llama-cpp-python==0.3.36"
REBUILD = (f'CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" pip install --force-reinstall '
           f"--no-cache-dir --no-deps '{LLAMA_CPP_PIN}'")

#: What the child runs: load the model, decode a prompt of several tokens, sample two.
CHILD_CODE = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=1, n_threads_batch=1, verbose=False)
out = llm("The quick brown fox jumps over the lazy dog. Then it", max_tokens=2, temperature=0)
assert out["usage"]["prompt_tokens"] > 1, out["usage"]
print("decoded", out["usage"]["prompt_tokens"], "tokens")
"""
TIMEOUT_S = 180


def _cache_file() -> Path:
    return memstrata_home() / "decode_checks.json"


def build_fingerprint() -> str | None:
    """The installed llama-cpp-python's shared libraries (path, size, mtime), or None."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    libs = []
    for folder in spec.submodule_search_locations:
        for lib in sorted(Path(folder).rglob("*.so*")):
            st = lib.stat()
            libs.append(f"{lib}:{st.st_size}:{int(st.st_mtime)}")
    return "|".join(libs) or None


def _key(model: Path) -> str | None:
    build = build_fingerprint()
    if build is None:
        return None
    st = model.stat()
    return f"{build}#{model.resolve()}:{st.st_size}:{int(st.st_mtime)}"


def _passes() -> list[str]:
    try:
        known = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return []
    return known if isinstance(known, list) else []


def _remember(key: str) -> None:
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([*_passes()[-31:], key]))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs the check again next time


def check_decode(model: Path, *, code: str | None = None, timeout: float = TIMEOUT_S) -> str:
    """Decode a multi-token prompt with ``model`` in a child process; what it printed.

    ``code`` is what the child runs (default ``CHILD_CODE``; tests pass one that crashes).

    Raises:
        ModelSetupError: the child crashed (the signal and the rebuild command), failed
            (its last error line), or ran past ``timeout``.
    """
    try:
        done = subprocess.run([sys.executable, "-c", code or CHILD_CODE, str(model)],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ModelSetupError(f"a test decode of {model.name} ran past {timeout:.0f} s "
                              "(is the machine overloaded?)") from None
    if done.returncode < 0:
        sig = signal.Signals(-done.returncode).name
        raise ModelSetupError(
            f"llama.cpp crashed ({sig}) decoding a multi-token prompt with {model.name}: this "
            "llama-cpp-python build is not safe on this CPU (llama.cpp's default "
            f"GGML_NATIVE=ON build can do that). Rebuild it portably: {REBUILD}")
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        if "No module named 'llama_cpp'" in done.stderr:
            raise ModelSetupError(f"llama-cpp-python is not installed: {REBUILD}")
        raise ModelSetupError(f"a test decode of {model.name} failed: {lines[-1]}")
    return done.stdout.strip()


def ensure_decodes(model: Path) -> None:
    """``check_decode`` once per build and model file; a remembered pass costs nothing."""
    key = _key(model)
    if key is not None and key in _passes():
        return
    check_decode(model)
    if key is not None:
        _remember(key)
