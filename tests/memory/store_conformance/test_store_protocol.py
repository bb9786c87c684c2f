"""The backend interface (``memory/store/protocol.py``): the SQLite ``Store`` satisfies
all of ``MemoryStore`` and the PostgreSQL ``PgStore`` the parts it names, structurally
(every member present with the protocol's parameters: names, kinds, defaults); the
protocol lists exactly what code above the store calls; the ``postgres`` extra matches
between pyproject.toml and ``memory/extras.py``."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from memstrata.memory import Store
from memstrata.memory.extras import EXTRAS, PACKAGES
from memstrata.memory.store.protocol import PARTS, MemoryStore, members

ROOT = Path(__file__).resolve().parents[3]


def _mismatches(cls: type, part: type) -> list[str]:
    """Members of ``part`` that ``cls`` lacks or declares with other parameters."""
    out = []
    for name in members(part):
        want = inspect.getattr_static(part, name)
        have = inspect.getattr_static(cls, name, None)
        if have is None:
            out.append(f"{name}: missing")
        elif isinstance(want, property) != isinstance(have, property):
            out.append(f"{name}: property on one side only")
        elif not isinstance(want, property):
            want_params = _params(want)
            have_params = _params(getattr(cls, name))
            if want_params != have_params:
                out.append(f"{name}: {have_params} != {want_params}")
    return out


def _params(fn: Any) -> list[tuple[str, Any, Any]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


def test_sqlite_store_satisfies_the_whole_interface() -> None:
    for part in PARTS.values():
        assert _mismatches(Store, part) == []
    with Store.open(":memory:", embedder=None) as store:
        assert isinstance(store, MemoryStore)  # runtime_checkable: every member present


def test_pg_store_satisfies_the_parts_it_names() -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from memstrata.memory.store.pg import PARTS_SATISFIED, PgStore

    assert {"records", "aux"} <= set(PARTS_SATISFIED) <= set(PARTS)
    unopened = PgStore(None, "nowhere", embedder=None)  # no pool: nothing is called
    for name in PARTS_SATISFIED:
        assert _mismatches(PgStore, PARTS[name]) == []
        assert isinstance(unopened, PARTS[name])
    if set(PARTS_SATISFIED) == set(PARTS):  # every part: the whole interface
        assert isinstance(unopened, MemoryStore)


def test_the_interface_lists_what_code_above_the_store_calls() -> None:
    """Every public ``Store`` member called as ``<...store>.name`` outside the store package
    (memory/runs.py and bench/reliability excepted: the SQLite backend's own) is in the
    protocol, and every protocol member is called somewhere."""
    public = {n for n in dir(Store) if not n.startswith("_")}
    used: set[str] = set()
    pattern = re.compile(r"\b\w*store\.(\w+)", re.IGNORECASE)
    for folder in ("memstrata", "programs", "tools", "formats", "bench", "memory", "packers",
                   "trajectories"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(("memory/store/", "bench/reliability/")) or rel in (
                    "memory/runs.py", "memory/schema.py"):
                continue
            used |= {m for m in pattern.findall(path.read_text()) if m in public}
    listed = set(members(MemoryStore))
    not_listed = used - listed - {"open", "conn"}  # constructors differ; the SQLite handle
    assert not_listed == set()
    assert listed - used == set()


def test_postgres_extra_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["postgres"] == ["psycopg[binary,pool]>=3.2,<4"]
    assert "postgres" in re.search(r"\[(.*)\]", extras["all"][0]).group(1).split(",")
    assert any(r.startswith("pgserver") for r in extras["dev"])
    # The modules the extra brings, and the distributions memory/extras.py names for them.
    # psycopg_pool comes as psycopg's own `pool` extra: the map names it for the message.
    assert EXTRAS["postgres"] == ("psycopg",)
    assert (PACKAGES["psycopg"], PACKAGES["psycopg_pool"]) == ("psycopg", "psycopg-pool")
    # Every extra memory/extras.py knows is in pyproject.toml and in `all`.
    in_all = set(re.search(r"\[(.*)\]", extras["all"][0]).group(1).split(","))
    assert set(EXTRAS) <= set(extras) and set(EXTRAS) <= in_all
    assert "memstrata.memory.store.pg" in tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
