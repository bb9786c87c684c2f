"""The handle tools: bounds, clear refusals, JSON-only returns, tenant binding."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from typing import Any

import pytest

from memstrata.memory import FactItem, Store, StrategyItem
from memstrata.tools import BlobRef, ToolCaps, ToolError, ToolSession
from tests.conftest import locomo_record


def _load(store: Store, sample_id: str, **kw: Any) -> None:
    from pathlib import Path

    from memstrata.bench.locomo import load_conversation
    from memstrata.formats.locomo import _parse_conversation

    conv = _parse_conversation(Path("t.json"), 0, locomo_record(sample_id, **kw))
    load_conversation(store, conv)


@pytest.fixture
def session(store: Store) -> ToolSession:
    _load(store, "conv-a")
    s = ToolSession(store, "conv-a", caps=ToolCaps(max_slice_chars=50, max_get=2,
                                                   max_find_k=3, max_quote_chars=20))
    s.put_blob("doc", "line one Paris\nline two\nParis again, and PARIS\n" + "x" * 500)
    return s


def tools(session: ToolSession) -> dict[str, Any]:
    return {t.__name__: t for t in session.handle_tools()}


def test_blobref_shows_only_the_handle(session: ToolSession) -> None:
    ref = session.ref("doc")
    assert ref == BlobRef(key="doc", n=ref.n) and repr(ref) == f"BlobRef(key='doc', n={ref.n})"
    assert "Paris" not in repr(ref)


def test_ctx_stats_peek_slice(session: ToolSession) -> None:
    t = tools(session)
    stats = t["ctx_stats"]("doc")
    assert stats["lines"] == 4 and stats["chars"] == session.ref("doc").n
    assert t["ctx_peek"]("doc", 8)["text"] == "line one"
    piece = t["ctx_slice"]({"key": "doc"}, 5, 14)
    assert piece["text"] == "one Paris" and piece["more"]
    tail = t["ctx_slice"]("doc", stats["chars"] - 3, stats["chars"] + 40)
    assert tail == {"key": "doc", "start": stats["chars"] - 3, "end": stats["chars"],
                    "text": "xxx", "more": False}


@pytest.mark.parametrize(("call", "message"), [
    (lambda t: t["ctx_peek"]("doc", 51), "over the cap of 50"),
    (lambda t: t["ctx_slice"]("doc", 0, 1000), "over the cap of 50"),
    (lambda t: t["ctx_slice"]("doc", 10, 5), "start <= end"),
    (lambda t: t["ctx_slice"]("doc", -1, 5), "start <= end"),
    (lambda t: t["ctx_find"]("doc", "Paris", k=4), "over the cap of 3"),
    (lambda t: t["ctx_find"]("doc", "(unclosed", k=2), "invalid regular expression"),
    (lambda t: t["ctx_find"]("doc", ""), "non-empty"),
    (lambda t: t["ctx_stats"]("nope"), "no blob 'nope'"),
    (lambda t: t["mem_get"](["a", "b", "c"]), "over the cap of 2"),
    (lambda t: t["mem_quote"]("x", 21), "over the cap of 20"),
    (lambda t: t["mem_search"]("q", k=21), "over the cap of 20"),
    (lambda t: t["mem_search"]("q", kind="nonsense"), "unknown kind"),
    (lambda t: t["mem_search"]("q", polarity="maybe"), "polarity"),
    (lambda t: t["mem_search"]("q", role="Zed"), "not a known speaker"),
    (lambda t: t["mem_search"]("   "), "non-empty"),
    (lambda t: t["mem_add"]("x" * 2001), "over the cap of 2000"),
    (lambda t: t["mem_add"]("fine", kind="turn"), "kind must be one of"),
    (lambda t: t["event_log"]({"x": object()}), "JSON-serialisable"),
    (lambda t: t["event_log"]({"x": "y" * 5000}), "over the cap of 4000"),
    (lambda t: t["ctx_peek"]("doc", bogus=1), "unexpected keyword"),
])
def test_oversized_or_bad_requests_are_refused_clearly(session: ToolSession, call: Any,
                                                       message: str) -> None:
    with pytest.raises(ToolError, match=message):
        call(tools(session))
    assert session.log.calls[-1].error  # refusals are logged too


def test_ctx_find_offsets_lines_and_bounded_snippets(session: ToolSession) -> None:
    found = tools(session)["ctx_find"]("doc", "paris", k=2)
    assert [m["line"] for m in found["matches"]] == [1, 3]
    assert found["total"] == 3 and found["truncated"]
    text = session.binding.store.blobs.text("conv-a", "doc")
    assert all(text[m["offset"]:m["offset"] + 5].lower() == "paris" for m in found["matches"])
    whole = tools(session)["ctx_find"]("doc", "(?s).*", k=1)
    assert len(whole["matches"][0]["snippet"]) <= 2 * 40 + 1 + 40


def test_mem_search_returns_ids_and_one_liners_only(session: ToolSession) -> None:
    out = tools(session)["mem_search"]("guinea pig Oscar", k=3)
    first = out["results"][0]
    assert set(first) == {"id", "kind", "title", "description", "speaker", "when"}
    assert "Oscar" in first["description"] and first["title"] == "D1:1 Alice"
    assert all(len(r["description"]) <= 120 for r in out["results"])
    only_bob = tools(session)["mem_search"]("hiking violin", role="bob")
    assert {r["speaker"] for r in only_bob["results"]} == {"Bob"}


def test_mem_get_quote_add_and_polarity(session: ToolSession) -> None:
    t = tools(session)
    ids = [r["id"] for r in t["mem_search"]("Sweden grandma", k=2)["results"]]
    got = t["mem_get"](ids + ["t_missing"][:0])
    assert [g["id"] for g in got["items"]] == ids and got["missing"] == []
    assert t["mem_get"](["t_nope"]) == {"items": [], "missing": ["t_nope"]}
    quote = t["mem_quote"](ids[0], 10)
    assert len(quote["text"]) == 10 and quote["truncated"]
    added = t["mem_add"]("Check the session date before answering when",
                         kind="strategy", polarity="success", tags=["time"])
    again = t["mem_add"]("Check the session date before answering when",
                         kind="strategy", polarity="success")
    assert added["status"] == "added" and again == {"id": added["id"], "status": "merged"}
    t["mem_add"]("Never guess a date", kind="strategy", polarity="failure")
    wins = t["mem_search"]("date answering", polarity="success")["results"]
    assert [r["id"] for r in wins] == [added["id"]]
    item = session.binding.store.get("conv-a", added["id"])
    assert isinstance(item, StrategyItem) and item.source.startswith("tool:mem_add")
    # A strategy the bank retired (superseded or forgotten) is never found again.
    session.binding.store.update("conv-a", added["id"], valid_to=item.recorded_at)
    for call in ({"polarity": "success"}, {"kind": "strategy"}, {}):
        found = t["mem_search"]("date answering", **call)["results"]
        assert added["id"] not in [r["id"] for r in found]


def test_tools_print_nothing_and_return_json(session: ToolSession) -> None:
    t = tools(session)
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        results = [t["ctx_stats"]("doc"), t["ctx_find"]("doc", "two"),
                   t["mem_search"]("violin"), t["event_log"]({"type": "note", "n": 1})]
    assert buffer.getvalue() == ""
    for result in results:
        assert json.loads(json.dumps(result)) == result
    assert session.binding.store.runs.events("conv-a")[0]["payload"] == {"type": "note", "n": 1}


def test_session_is_bound_to_one_tenant(store: Store) -> None:
    _load(store, "conv-a")
    _load(store, "conv-b", speakers=("Carol", "Dan"))
    b_fact = store.add(FactItem(user_id="conv-b", text="Carol secretly owns a guinea pig farm"))
    ToolSession(store, "conv-b").put_blob("doc", "Carol's private diary")
    a = ToolSession(store, "conv-a")
    t = tools(a)
    hits = t["mem_search"]("guinea pig farm Carol", k=20)["results"]
    assert hits and all(store.nodes("conv-a", [h["id"]]) for h in hits)
    assert t["mem_get"]([b_fact]) == {"items": [], "missing": [b_fact]}
    with pytest.raises(ToolError):
        t["mem_quote"](b_fact)
    with pytest.raises(ToolError, match="no blob"):
        t["ctx_peek"]("doc")
    with pytest.raises(ToolError, match="not a known speaker"):
        t["mem_search"]("farm", role="Carol")
    # No tool takes a tenant: the agent has no way to name another user.
    import inspect
    assert all("user" not in p for fn in a.handle_tools()
               for p in inspect.signature(fn).parameters)
    added = t["mem_add"]("A note")
    assert store.get("conv-a", added["id"]) and store.get("conv-b", added["id"]) is None


def test_naive_tools_return_full_payloads(session: ToolSession) -> None:
    naive = {t.__name__: t for t in session.naive_tools()}
    whole = naive["ctx_read"]("doc")
    assert whole["chars"] == session.ref("doc").n == len(whole["text"])
    found = naive["mem_search"]("guinea pig", k=2)
    assert "channels" in found["results"][0] and "analysis" in found
    assert [fn.__name__ for fn in session.naive_tools()][:9] == \
        [fn.__name__ for fn in session.handle_tools()]
    assert naive["mem_get"].__doc__ == tools(session)["mem_get"].__doc__
    assert len(naive["ctx_peek"]("doc", 400)["text"]) == 400  # no cap
    assert len(naive["mem_get"]([r["id"] for r in found["results"]])["items"]) == 2


def test_wrong_arguments_are_refused_but_a_bug_inside_a_tool_propagates(
        session: ToolSession) -> None:
    """Only a TypeError from binding the agent's arguments is a refusal (issue 21)."""
    t = tools(session)
    with pytest.raises(ToolError, match="unexpected keyword"):
        t["ctx_peek"]("doc", bogus=1)
    with pytest.raises(ToolError, match="too many positional"):
        t["ctx_stats"]("doc", "extra")

    def broken(b: Any, ref: str) -> dict[str, Any]:
        return {"n": len(ref) + None}  # type: ignore[operator]  # a bug, not the agent's

    with pytest.raises(TypeError, match="unsupported operand"):
        session.bind(broken)("doc")
    assert session.log.calls[-1].name == "broken"


def test_hostile_argument_values_are_refused_clearly(session: ToolSession) -> None:
    """Found by the reliability fuzzer: each of these raised something else."""
    t = tools(session)
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ToolError, match="whole number"):
        t["mem_search"]("Paris", k="5")
    with pytest.raises(ToolError, match="whole number"):
        t["ctx_find"]("doc", "Paris", k=deep)
    with pytest.raises(ToolError, match="whole number"):
        t["mem_quote"](session.binding.store.turns("conv-a")[0].id, max_chars=2.5)
    with pytest.raises(ToolError, match="lone surrogate"):
        t["ctx_stats"]("\udcff")
    with pytest.raises(ToolError, match="role must be"):
        t["mem_search"]("Paris", role=["Caroline"])
    with pytest.raises(ToolError, match="kind"):
        t["mem_add"]("a note", kind={"k": deep})
    with pytest.raises(ToolError, match="tags must be"):
        t["mem_add"]("a note", tags=5)
    with pytest.raises(ToolError, match="JSON-serialisable"):
        t["event_log"]({"deep": deep})
    with pytest.raises(ToolError, match="at most 64"):
        t["mem_get"]("t_" + "a" * 100_000)
    with pytest.raises(ToolError, match="query of length"):
        t["mem_search"]("Paris " * 1000)
    assert len(session.log.calls[-1].args["query"]) <= 200


def test_a_calls_log_shows_its_arguments_cut_and_redacted(
        session: ToolSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call's log holds each argument cut to 200 characters, a secret masked before the
    cut, and only what it shows is redacted: a 6 MB argument was redacted whole (seconds
    a call; the reliability fuzzer's ``ctx_slice`` hang)."""
    import memstrata.tools.session as tool_session

    seen: list[int] = []
    real = tool_session.redact
    monkeypatch.setattr(tool_session, "redact", lambda value: seen.append(len(value)) or
                        real(value))
    t = tools(session)
    secret = "x" * 150 + " sk-proj-" + "A" * 48
    with pytest.raises(ToolError):
        t["ctx_slice"]("alpha " * 1_000_000, 0, "alpha " * 1_000_000)
    assert max(seen) <= tool_session.CLIP_CHARS
    logged = session.log.calls[-1].args
    assert all(len(v) <= 200 for v in (logged["ref"], logged["end"]))
    t["mem_search"](secret)
    shown = session.log.calls[-1].args["query"]
    assert "[REDACTED]" in shown and "AAAA" not in shown


def test_mem_get_cuts_every_stored_field(session: ToolSession) -> None:
    """A stored field of any size (metadata, a source turn id) comes back short."""
    store = session.binding.store
    turn = store.turns("conv-a")[0]
    store.conn.execute("UPDATE turns SET turn_id = ?, metadata = ? WHERE id = ?",
                       ("t" * 100_000, json.dumps({"x": "y" * 100_000}), turn.id))
    got = tools(session)["mem_get"]([turn.id])["items"][0]
    assert len(json.dumps(got)) < 2_000
