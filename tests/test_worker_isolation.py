"""A worker's extraction and another tenant's search: the worker thread and the model
calls it makes run at a lower OS priority, and the worker's writes for one tenant leave
another tenant's cached search state (document counts, kept vectors) in place."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

import pytest

from memstrata import Memory
from memstrata.memory.store.kept_vectors import KeptVectors
from memstrata.worker import ExtractionSettings, lower_thread_priority
from tests.conftest import FakeEmbedder
from tests.test_jobs import CHUNK, add_each, facts_of, fast, messages

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="a thread's own nice value is Linux's")


def own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


class NiceProbe:
    """A reply function that records the nice value of the thread each extraction call
    runs on, and of a thread that call starts (as llama.cpp starts its compute threads)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def __call__(self, system: str, user: str, schema: Any) -> Any:
        if schema and "facts" in json.dumps(schema):
            child: list[int] = []
            thread = threading.Thread(target=lambda: child.append(own_nice()))
            thread.start()
            thread.join()
            self.seen.append((own_nice(), child[0]))
            return facts_of(user)
        return {"answer": "unknown", "evidence": []}


@linux_only
@pytest.mark.parametrize("nice", [10, 0])
def test_the_worker_thread_and_its_model_calls_run_at_lower_priority(scripted,
                                                                     nice: int) -> None:
    base = own_nice()
    probe = NiceProbe()
    m = Memory.open(":memory:", lm=scripted(probe), embedder=None,
                    extraction=fast(nice=nice))
    try:
        add_each(m, messages(CHUNK))
        m.wait("u", timeout=30)
    finally:
        m.close()
    want = min(base + nice, 19)
    assert probe.seen == [(want, want)]
    assert own_nice() == base  # the caller's thread is left as it was


@linux_only
def test_the_synchronous_path_keeps_the_callers_priority(scripted) -> None:
    base = own_nice()
    probe = NiceProbe()
    m = Memory.open(":memory:", lm=scripted(probe), embedder=None,
                    extraction=ExtractionSettings(mode="sync", nice=10))
    try:
        add_each(m, messages(CHUNK))
    finally:
        m.close()
    assert probe.seen == [(base, base)]


def test_lower_thread_priority_does_nothing_for_zero() -> None:
    before = own_nice() if sys.platform.startswith("linux") else None
    assert lower_thread_priority(0) is False
    if before is not None:
        assert own_nice() == before


def test_extraction_settings_bound_the_nice_value() -> None:
    assert ExtractionSettings().nice == 10
    for bad in (-1, 20):
        with pytest.raises(ValueError):
            ExtractionSettings(nice=bad)


def traced(m: Memory) -> list[str]:
    """The statements the memory's connection runs from now on, as they run."""
    seen: list[str] = []
    m.store.conn.raw.set_trace_callback(seen.append)
    return seen


def test_another_tenants_writes_keep_a_tenants_document_counts() -> None:
    m = Memory.open(":memory:", embedder=FakeEmbedder())
    try:
        add_each(m, [{"role": "user", "content": f"bees and honey, jar {i}"}
                     for i in range(5)], user="ana")
        assert m.store.term_docs("ana", ["bee", "honey"]) == {"bee": 5, "honey": 5}
        add_each(m, messages(3), user="ben")         # another tenant writes
        seen = traced(m)
        assert m.store.term_docs("ana", ["bee", "honey"]) == {"bee": 5, "honey": 5}
        assert not [s for s in seen if "_vocab" in s]  # kept, not read again
        m.add("more bees", user_id="ana")           # the tenant's own write: read again
        assert m.store.term_docs("ana", ["bee"]) == {"bee": 6}
        assert [s for s in seen if "_vocab" in s]
        m.delete_all(user_id="ana")
        assert m.store.term_docs("ana", ["bee", "honey"]) == {"bee": 0, "honey": 0}
    finally:
        m.close()


def test_a_rolled_back_write_leaves_no_document_count_behind() -> None:
    m = Memory.open(":memory:", embedder=FakeEmbedder())
    try:
        m.add("bees in the orchard", user_id="ana")
        assert m.store.term_docs("ana", ["bee"]) == {"bee": 1}
        with pytest.raises(RuntimeError), m._lock, m.store.transaction():
            m.add("bees again", user_id="ana")
            assert m.store.term_docs("ana", ["bee"]) == {"bee": 2}
            raise RuntimeError("roll back")
        assert m.store.term_docs("ana", ["bee"]) == {"bee": 1}
    finally:
        m.close()


def test_catching_up_an_empty_kept_model_reads_only_the_tenants_rows() -> None:
    m = Memory.open(":memory:", embedder=FakeEmbedder())
    try:
        add_each(m, messages(400), user="ben")  # 400 vector rows of another tenant
        kept = KeptVectors(("ana", "nothing-stored"), (0, 0))
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        m.store.conn.raw.set_progress_handler(count, 10)
        assert kept.catch_up(m.store.conn, "ana", "nothing-stored", (1, 0))
        m.store.conn.raw.set_progress_handler(None, 0)
        assert kept.ids == []
        # A walk over the 400 rows takes thousands of VM steps; the tenant index, a few.
        assert steps[0] < 20
    finally:
        m.close()


def test_a_capped_document_count_reads_a_sliver_and_is_kept_until_the_tenant_writes(
) -> None:
    m = Memory.open(":memory:", embedder=FakeEmbedder())
    try:
        add_each(m, [{"role": "user", "content": f"bees and honey, jar {i}"}
                     for i in range(5)], user="ana")
        seen = traced(m)
        assert m.store.term_docs("ana", ["bee", "wasp"], cap=2) == {"bee": 2, "wasp": 0}
        assert not [s for s in seen if "_vocab" in s]  # no walk of the whole list
        assert [s for s in seen if "LIMIT" in s and "_instances" in s]
        seen.clear()
        assert m.store.term_docs("ana", ["bee", "wasp"], cap=2) == {"bee": 2, "wasp": 0}
        assert not [s for s in seen if "_instances" in s or "_vocab" in s]  # kept
        m.store.term_docs("ana", ["honey"])  # a full count serves a capped one
        seen.clear()
        assert m.store.term_docs("ana", ["honey"], cap=3) == {"honey": 3}
        assert not [s for s in seen if "_instances" in s or "_vocab" in s]
        m.add("more bees", user_id="ana")  # the tenant's own write: counted again
        assert m.store.term_docs("ana", ["bee"], cap=10) == {"bee": 6}
        m.delete_all(user_id="ana")
        assert m.store.term_docs("ana", ["bee"], cap=10) == {"bee": 0}
    finally:
        m.close()
