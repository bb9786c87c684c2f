"""The checks behind ``memstrata doctor``: what a newcomer's first run needs, each one line.

Every check returns a ``Check``; none raises. ``FAIL`` is a problem the main job would hit
(its detail says the fix), ``warn`` something worth knowing that does not stop it.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

Status = Literal["ok", "warn", "FAIL"]
#: The x86-64 features llama.cpp's portable build (GGML_NATIVE=OFF) compiles for.
PORTABLE_CPU_FLAGS = ("avx", "avx2", "fma", "f16c")


class Check(BaseModel):
    """One line of the doctor's report."""

    name: str
    status: Status
    detail: str


def _python() -> Check:
    version = platform.python_version()
    ok = sys.version_info >= (3, 11)
    return Check(name="python", status="ok" if ok else "FAIL",
                 detail=version if ok else f"{version}: memstrata needs Python 3.11 or newer")


def _llama_build() -> Check:
    from memstrata.programs.llama_check import LLAMA_CPP_PIN, REBUILD

    tested = LLAMA_CPP_PIN.split("==")[1]
    try:
        version = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return Check(name="llama-cpp-python", status="FAIL",
                     detail=f"not installed (the [local] extra); install it portably: {REBUILD}")
    if version != tested:
        return Check(name="llama-cpp-python", status="warn",
                     detail=f"{version} (memstrata is tested with {tested})")
    return Check(name="llama-cpp-python", status="ok", detail=version)


def _cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> Check:
    if platform.machine() not in ("x86_64", "AMD64") or not cpuinfo.exists():
        return Check(name="cpu", status="ok", detail=f"{platform.machine()} (not checked)")
    flags: set[str] = set()
    for line in cpuinfo.read_text(errors="replace").splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    missing = [f for f in PORTABLE_CPU_FLAGS if f not in flags]
    if missing:
        return Check(name="cpu", status="FAIL", detail=(
            f"lacks {', '.join(missing)}, which the portable llama.cpp build uses; rebuild "
            'with CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF"'))
    extra = " avx512" if "avx512f" in flags else ""
    return Check(name="cpu", status="ok", detail=f"x86-64 with {' '.join(PORTABLE_CPU_FLAGS)}"
                 f"{extra}")


def _models(lm: str, decode: Callable[[Path], str]) -> list[Check]:
    """The default model installed and every installed catalogue model verified + decoded."""
    from memstrata.programs.lm import LOCAL_PREFIX, local_model_path
    from memstrata.programs.models import MODELS, ModelSetupError, installed_path, sha256_of

    checks = []
    wanted = lm[len(LOCAL_PREFIX):] if lm.startswith(LOCAL_PREFIX) else None
    for spec in MODELS.values():
        path = installed_path(spec)
        name = f"model {spec.name}"
        if path is None:
            if spec.name == wanted:
                checks.append(Check(name=name, status="FAIL", detail=(
                    f"not installed and the main job uses it; install it with: "
                    f"memstrata models install {spec.name}")))
            continue
        if not spec.bundled and sha256_of(path) != spec.sha256:
            checks.append(Check(name=name, status="FAIL", detail=(
                f"{path} is corrupt (sha256 differs); reinstall it with: memstrata models "
                f"install {spec.name} --force")))
            continue
        checks.append(_decode_check(name, path, decode))
    if wanted is not None and wanted not in MODELS:
        try:
            checks.append(_decode_check(f"model {wanted}", local_model_path(lm), decode))
        except ModelSetupError as exc:
            checks.append(Check(name=f"model {wanted}", status="FAIL", detail=str(exc)))
    return checks


def _decode_check(name: str, path: Path, decode: Callable[[Path], str]) -> Check:
    from memstrata.programs.errors import ModelSetupError

    try:
        said = decode(path)
    except ModelSetupError as exc:
        return Check(name=name, status="FAIL", detail=str(exc))
    return Check(name=name, status="ok", detail=f"{path} ({said})")


def _sandbox() -> Check:
    from memstrata.programs.sandbox import sandbox_factory

    try:
        interpreter = sandbox_factory()()
        try:
            out = interpreter.execute("print(6 * 7)").strip()
        finally:
            interpreter.shutdown()
    except Exception as exc:  # any failure to start is the finding itself
        return Check(name="sandbox", status="FAIL", detail=(
            f"the RLM sandbox does not start ({str(exc).splitlines()[0][:200]}); install it "
            "with: memstrata sandbox install"))
    ok = out.endswith("42")
    return Check(name="sandbox", status="ok" if ok else "FAIL",
                 detail="Deno + Pyodide run code offline" if ok else f"printed {out[:80]!r}")


def _data(path: Path) -> Check:
    from memstrata.bench.locomo import LoCoMoError, read_locomo

    if not path.exists():
        return Check(name="data", status="FAIL", detail=(
            f"no LoCoMo data at {path}; the benchmarks need it (or pass --data FILE)"))
    try:
        convs = read_locomo(path)
    except LoCoMoError as exc:
        return Check(name="data", status="FAIL", detail=f"{path}: {exc}")
    return Check(name="data", status="ok", detail=(
        f"{path}: {len(convs)} conversations, {sum(len(c.questions) for c in convs)} questions"))


def run_checks(*, data: Path, lm: str, sandbox: bool = True,
               decode: Callable[[Path], str] | None = None) -> list[Check]:
    """Every check, in the order a first run meets them.

    Args:
        data: the LoCoMo file the main job reads.
        lm: the main job's model (must be installed when it is a ``local/`` one).
        sandbox: also start the RLM sandbox.
        decode: the child-process decode check (``llama_check.check_decode``; tests pass
            a fake).
    """
    from memstrata.programs.llama_check import check_decode

    checks = [_python(), _llama_build(), _cpu()]
    checks += _models(lm, decode or check_decode)
    if sandbox:
        checks.append(_sandbox())
    checks.append(_data(data))
    return checks
