"""The core install (``pip install memstrata``, no extras) works, and a missing extra names itself.

Each check runs in a child interpreter whose ``sys.meta_path`` hides every extra's modules,
as if only the core were installed: it imports the core packages, stores and searches
turns with the default embedder, and answers a question with ``QA`` under a scripted LM.
No network, no model. (``python -m memstrata.bench.core_install`` measures a real core
install into a fresh virtual environment.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memstrata.memory.extras import EXTRAS, PACKAGES, MissingExtraError, locate, require

ROOT = Path(__file__).resolve().parents[1]

#: Every extra's top-level modules, hidden in the child.
HIDDEN = sorted({m for modules in EXTRAS.values() for m in modules})

#: Installed first in the child: imports of a hidden module fail as if it were absent.
PRELUDE = f"""
import importlib.abc, sys

HIDDEN = {HIDDEN!r}

class HideExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden)", name=name)
        return None

for name in [m for m in sys.modules if m.partition(".")[0] in HIDDEN]:
    del sys.modules[name]
sys.meta_path.insert(0, HideExtras())
"""

CORE_PACKAGES = ("memstrata.memory", "memstrata.programs", "memstrata.tools",
                 "memstrata.packers", "memstrata.trajectories", "memstrata.formats",
                 "memstrata.cli")


def run_core(body: str, tmp_path: Path) -> dict:
    """Run ``body`` in a child with the extras hidden; it prints one JSON line at the end."""
    code = PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "MEMSTRATA_HOME": str(tmp_path / "home"),
                               "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_require_and_locate_name_the_extra() -> None:
    with pytest.raises(MissingExtraError, match=r"pip install 'memstrata\[bench\]'") as caught:
        require("memstrata_no_such_module", "bench", "the example")
    assert isinstance(caught.value, ImportError) and isinstance(caught.value, RuntimeError)
    assert caught.value.extra == "bench" and "\n" not in str(caught.value)
    with pytest.raises(MissingExtraError, match=r"memstrata\[local\]"):
        locate("memstrata_no_such_module", "local", "the example")
    assert require("json", "bench", "the example").__name__ == "json"


def test_core_imports_stores_searches_and_answers_without_extras(tmp_path: Path) -> None:
    out = run_core(f"""
        import importlib, json
        from datetime import datetime

        for name in {CORE_PACKAGES!r}:
            importlib.import_module(name)

        import dspy
        from dspy.utils import DummyLM
        from memstrata.memory import Retriever, Store, Turn, default_embedder
        from memstrata.packers import from_hits, pack
        from memstrata.programs import QA

        store = Store.open({str(tmp_path / "memory.db")!r})
        rows = [("Caroline", "I moved from Sweden four years ago."),
                ("Melanie", "I painted a lake sunrise last year."),
                ("Caroline", "My grandma gave me a necklace.")]
        store.add_turns([
            Turn(user_id="u", conversation_id="c", session_id="s1", turn_id=f"D1:{{n}}",
                 seq=n, speaker=who, text=text, event_time=datetime(2023, 5, 8))
            for n, (who, text) in enumerate(rows, 1)])
        embedder = default_embedder()
        hits = Retriever(store, embedder).search("u", "Where did Caroline move from?", k=2)
        packed = pack(from_hits(hits), 200, lambda s: len(s.split()))
        lm = DummyLM([{{"answer": "Sweden", "evidence": ["D1:1"]}}],
                     adapter=dspy.JSONAdapter())
        with dspy.context(lm=lm):
            answer = QA()(question="Where did Caroline move from?", memories=packed.text)
        store.close()
        hidden = sorted(m for m in sys.modules if m.partition(".")[0] in HIDDEN)
        print(json.dumps({{"embedder": embedder.name, "dim": int(embedder.encode(["x"]).shape[1]),
                          "top": hits[0].turn_id, "answer": answer.answer,
                          "evidence": answer.evidence, "hidden_loaded": hidden}}))
    """, tmp_path)
    assert out["embedder"] == "minilm-static-256" and out["dim"] == 256
    assert out["top"] == "D1:1"
    assert out["answer"] == "Sweden" and out["evidence"] == ["D1:1"]
    assert out["hidden_loaded"] == []


def test_memory_facade_without_extras(tmp_path: Path) -> None:
    out = run_core(f"""
        import json
        from memstrata import Memory

        memory = Memory.open({str(tmp_path / "facade.db")!r})
        memory.add("hi", user_id="u", infer=False)
        memory.add("I moved from Sweden four years ago", user_id="u", infer=False)
        found = memory.search("Where did I move from?", user_id="u")
        memory.close()
        print(json.dumps({{"texts": [hit.text for hit in found]}}))
    """, tmp_path)
    assert out["texts"] and "Sweden" in out["texts"][0]


def test_features_of_an_extra_name_it(tmp_path: Path) -> None:
    out = run_core("""
        import json
        from memstrata.memory import MiniLMEmbedder
        from memstrata.memory.extras import MissingExtraError

        def error_of(call):
            try:
                call()
            except MissingExtraError as exc:
                return {"extra": exc.extra, "message": str(exc)}
            return None

        from memstrata.programs import setup_lm
        from memstrata.programs.sandbox import deno_binary
        from memstrata.bench.baselines import BM25Index
        from memstrata.bench.report import retrieval_chart
        from memstrata.bench.voe import decide

        def ontology():
            import memstrata.bench.ontology  # noqa: F401

        from memstrata.cli import main

        got = {
            "local/smollm2": error_of(lambda: setup_lm("local/smollm2")),
            "local/qwen2.5-coder-1.5b": error_of(lambda: setup_lm("local/qwen2.5-coder-1.5b")),
            "MiniLMEmbedder": error_of(MiniLMEmbedder),
            "deno": error_of(deno_binary),
            "BM25Index": error_of(lambda: BM25Index(["a"], ["text"], str.split)),
            "chart": error_of(lambda: retrieval_chart({"systems": {}}, None)),
            "voe": error_of(lambda: decide([[1, 1], [1, 1]])),
            "ontology": error_of(ontology),
        }
        import contextlib, io

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            got["cli_exit"] = main(["chat", "--user", "u", "--lm", "local/smollm2",
                                    "--db", DB])
        got["cli_stderr"] = err.getvalue()
        print(json.dumps(got))
    """.replace("DB", repr(str(tmp_path / "chat.db"))), tmp_path)
    expected = {"local/smollm2": "local", "local/qwen2.5-coder-1.5b": "local",
                "MiniLMEmbedder": "minilm", "deno": "sandbox", "BM25Index": "bench",
                "chart": "bench", "voe": "bench", "ontology": "ontology"}
    for feature, extra in expected.items():
        assert out[feature] is not None, f"{feature} did not raise MissingExtraError"
        assert out[feature]["extra"] == extra, (feature, out[feature])
        assert f"pip install 'memstrata[{extra}]'" in out[feature]["message"]
    # The command line: one line naming the extra, exit status 2.
    assert out["cli_exit"] == 2
    assert out["cli_stderr"].count("\n") == 1
    assert out["cli_stderr"].startswith("memstrata: ") and "memstrata[local]" in out["cli_stderr"]


def test_extras_map_matches_pyproject() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["optional-dependencies"]
    core = " ".join(project["dependencies"]).lower()
    for extra, modules in EXTRAS.items():
        specs = " ".join(declared[extra]).lower()
        for module in modules:
            if module != "torch":  # torch comes with sentence-transformers, build chosen by user
                assert PACKAGES[module].lower() in specs, (extra, module)
                assert PACKAGES[module].lower() not in core, module
    assert declared["all"] == [f"memstrata[{','.join(EXTRAS)}]"]
