"""The seed's A/B test of the VoE loop (``memstrata bench voe``).

H1: the loop raises turn-level prediction accuracy (similarity >= 0.6 between the cached
prediction and the user's actual next message) by >= 20% over a baseline that runs the
same two calls a turn with no facts. LoCoMo sessions are replayed as the conversations:
the conversation's first speaker is the user, the other speaker's real turns stand in
for the assistant's replies, and each arm's facts carry across a user's sessions (the
sessions are replayed in order). Each session starts a fresh chat with no cached
prediction, so only predictions made inside a session are scored; a session's last asked
turn is checked and (VoE arm) distilled but not answered, since its prediction would be
scored by no one. Both similarity measures are reported: rapidfuzz ratio / 100 (the one
the loop itself uses, and the one the pass decision uses) and the embedding cosine. The
decision is a chi-squared test on the 2x2 table (arm x hit/miss): pass if p < 0.05 and
the relative improvement >= 20%.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from tqdm import tqdm

from memstrata.memory import Embedder, Store
from memstrata.memory.extras import require
from memstrata.memory.models import with_caption
from memstrata.memory.voe_facts import VoEFacts, similarity
from memstrata.programs import ModelHandle, ProgramParseError
from memstrata.programs.voe import (
    HIT,
    MAX_MESSAGE_CHARS,
    VoELoop,
    VoESettings,
    history_text,
    run_turn,
)
from memstrata.trajectories import code_version

from .locomo import LoCoMoConversation, read_subset, turn_metadata

ARMS = ("baseline", "voe")


def pick_sessions(convs: list[LoCoMoConversation], limit: int | None
                  ) -> list[tuple[LoCoMoConversation, int, list[dict[str, Any]]]]:
    """``limit`` sessions taken round-robin over conversations (every conversation's
    earliest sessions first), then put back in each conversation's order."""
    rows = [[(c, index, turns) for index, _, turns in c.sessions] for c in convs]
    spread = [s for group in zip_longest(*rows) for s in group if s]
    chosen = spread[:limit] if limit is not None else spread
    order = {id(c): n for n, c in enumerate(convs)}
    return sorted(chosen, key=lambda s: (order[id(s[0])], s[1]))


def fuzzy(predicted: str, actual: str) -> float:
    """The similarity the bench scores (and the pass decision uses): rapidfuzz ratio of a
    prediction and the user's actual message, over 100 (0-1); a hit is ``>= HIT``."""
    return round(similarity(predicted, actual) / 100, 4)


class ReplayTurn(NamedTuple):
    """One LoCoMo turn as a session replay hands it to the loop.

    ``role`` is ``user`` for the conversation's first speaker, ``assistant`` for the other
    (their real turns stand in for the loop's replies); ``text`` is the turn with its
    image caption, cut to ``MAX_MESSAGE_CHARS``; ``asked`` says the loop runs a turn on it
    (it predicts, and its cached prediction is scored against it); other turns are only
    observed (added to the history).
    """

    turn: dict[str, Any]
    role: str
    text: str
    asked: bool


def replay(conv: LoCoMoConversation, turns: list[dict[str, Any]],
           max_turns: int | None = None) -> Iterator[ReplayTurn]:
    """A session's turns as ``run_voe_bench`` replays them: the user's turns are asked
    (at most ``max_turns``; a turn with no text, even after its caption, is observed as
    ``(image)``), the other speaker's observed as the assistant's."""
    asked = 0
    for turn in turns:
        text = with_caption(turn["text"], turn_metadata(turn))[:MAX_MESSAGE_CHARS].strip()
        if turn["speaker"] != conv.speakers[0]:
            yield ReplayTurn(turn, "assistant", text, False)
        elif (max_turns is not None and asked >= max_turns) or not text:
            yield ReplayTurn(turn, "user", text or "(image)", False)
        else:
            asked += 1
            yield ReplayTurn(turn, "user", text, True)


class PredictionContext(NamedTuple):
    """One prediction a replay scores, and the history its responder call is shown.

    The responder predicts at the user turn ``predicted_at`` (its ``history`` ends with
    that message: a replay leaves the loop's reply out) and the prediction is scored
    against ``actual``, the next asked user turn ``turn`` of the same session.
    """

    conversation: str
    session: int
    turn: str
    predicted_at: str
    history: str
    actual: str


def prediction_contexts(conv: LoCoMoConversation, session: int, turns: list[dict[str, Any]],
                        settings: VoESettings | None = None, max_turns: int | None = None
                        ) -> list[PredictionContext]:
    """Every prediction ``run_voe_bench`` scores in one session, in order, with the
    history the responder is shown when making it (no model: the history depends only on
    the replayed turns). A session starts a fresh chat, so its first asked turn is
    predicted by no one and is left out."""
    window = (settings or VoESettings()).history_turns
    messages: list[tuple[str, str]] = []
    pending: tuple[str, str] | None = None  # (turn id, history) of the last prediction
    out: list[PredictionContext] = []
    for step in replay(conv, turns, max_turns):
        messages.append((step.role, step.text))
        if not step.asked:
            continue
        if pending is not None:
            out.append(PredictionContext(conv.sample_id, session, step.turn["dia_id"],
                                         pending[0], pending[1], step.text))
        pending = (step.turn["dia_id"], history_text(messages, window))
    return out


def decide(table: list[list[int]]) -> dict[str, Any]:
    """Chi-squared on [[voe hits, voe misses], [baseline hits, baseline misses]]: p, the
    relative improvement of the VoE hit rate, and whether H1 passes."""
    (vh, vm), (bh, bm) = table
    voe_rate = vh / (vh + vm) if vh + vm else 0.0
    base_rate = bh / (bh + bm) if bh + bm else 0.0
    arr = np.array(table)
    stats = require("scipy.stats", "bench", "the VoE A/B test")
    # chi2_contingency needs every row and column sum above zero.
    p = float(stats.chi2_contingency(arr)[1]) if (arr.sum(0) > 0).all() and (arr.sum(1) > 0).all() \
        else 1.0
    # Relative change of the hit rate; with no baseline hits it is 0 when the VoE arm has
    # none either, and undefined (None: JSON has no infinity) when it has some.
    improvement = ((voe_rate - base_rate) / base_rate if base_rate
                   else 0.0 if voe_rate == 0 else None)
    return {"table": table, "voe_rate": round(voe_rate, 4), "baseline_rate": round(base_rate, 4),
            "p_value": p, "improvement": None if improvement is None else round(improvement, 4),
            "passed": bool(p < 0.05 and improvement is not None and improvement >= 0.2)}


def time_local_step(settings: VoESettings, calls: int = 200) -> dict[str, float]:
    """The loop's model-free part (the VoE check and the retrieval) with a full ring
    buffer of ``max_facts`` facts: p50/p95/max milliseconds over ``calls`` turns."""
    rng = np.random.default_rng(0)
    words = ["hiking", "tea", "cello", "garden", "tomatoes", "sailing", "python", "jazz",
             "paris", "running", "books", "dogs", "baking", "chess", "yoga", "camping"]
    with Store.open(":memory:") as store:
        facts = VoEFacts(store, settings.max_facts)
        for i in range(settings.max_facts):
            picks = rng.choice(words, size=3, replace=False).tolist()
            facts.add("u", f"The user mentioned {' and '.join(picks)} (note {i})", picks)
        cached = facts.facts("u")
        lat = []
        for i in range(calls):
            needed = rng.choice(words, size=3, replace=False).tolist()
            message = f"I was thinking about {needed[0]} again today, number {i}"
            started = time.perf_counter()
            similarity("I will talk about my weekend plans", message)
            facts.search(cached, needed, settings.top_k, settings.min_score)
            lat.append((time.perf_counter() - started) * 1000)
    lat.sort()
    return {"facts": settings.max_facts, "p50": round(lat[len(lat) // 2], 3),
            "p95": round(lat[int(len(lat) * 0.95)], 3), "max": round(lat[-1], 3)}


def run_voe_bench(data: str | Path, handle: ModelHandle, out_dir: str | Path, *,
                  embedder: Embedder | None, limit: int | None = 60,
                  max_turns: int | None = None, settings: VoESettings | None = None,
                  conversations: set[str] | None = None, progress: bool = True
                  ) -> dict[str, Any]:
    """Replay ``limit`` sessions through both arms; returns the ``voe.json`` document.

    Args:
        max_turns: score at most this many user turns per session (quick runs).
    """
    settings = settings or VoESettings()
    sessions = pick_sessions(read_subset(data, conversations), limit)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    failures = 0
    started = time.perf_counter()
    user_turns = sum(min(sum(t["speaker"] == c.speakers[0] for t in turns),
                         max_turns or 10**9) for c, _, turns in sessions)
    bar = tqdm(total=user_turns * len(ARMS), unit="turn", desc="voe", disable=not progress)
    mark = handle.meter.mark()
    with Store.open(out / "voe.db") as store, (out / "voe_turns.jsonl").open("w") as log:
        for arm in ARMS:
            for conv, index, turns in sessions:
                user = f"{arm}:{conv.sample_id}"
                VoEFacts(store).set_prediction(user, "")  # a new session is a new chat
                loop = VoELoop(store, user, settings, use_facts=arm == "voe",
                               persist_history=False)
                steps = list(replay(conv, turns, max_turns))
                last = max((n for n, step in enumerate(steps) if step.asked), default=-1)
                for n, step in enumerate(steps):
                    if not step.asked:
                        loop.observe(step.role, step.text)
                        continue
                    try:
                        # The session's last asked turn makes no prediction anyone scores:
                        # it only checks the cached one and distils a surprise.
                        result = run_turn(loop, handle, step.text, reply_to_history=False,
                                          respond=n != last)
                    except ProgramParseError:
                        failures += 1
                        bar.update()
                        continue
                    row = {"arm": arm, "conversation": conv.sample_id, "session": index,
                           "turn": step.turn["dia_id"], "actual": step.text,
                           "predicted": result.cached_prediction, "llm_calls": result.llm_calls,
                           "local_ms": result.local_ms, "fact": result.fact}
                    rows.append(row)
                    log.write(json.dumps(row) + "\n")
                    bar.update()
    bar.close()
    calls = handle.meter.since(mark).calls
    scored = [r for r in rows if r["predicted"]]
    if embedder is not None and scored:
        actual = embedder.encode([r["actual"] for r in scored])
        predicted = embedder.encode([r["predicted"] for r in scored])
        for r, cos in zip(scored, (actual * predicted).sum(1).tolist(), strict=True):
            r["cosine"] = round(float(cos), 4)
    for r in scored:
        r["fuzzy"] = fuzzy(r["predicted"], r["actual"])
    doc = _summary(rows, scored, calls, failures, embedder is not None)
    doc["local_ms_at_max_facts"] = time_local_step(settings)
    doc.update({"benchmark": "VoE A/B (seed 000, H1)", "model": handle.name, "data": str(data),
                "sessions": len(sessions), "max_turns": max_turns,
                "settings": settings.model_dump(), "code": code_version(),
                "wall_s": round(time.perf_counter() - started, 1)})
    return doc


def _summary(rows: list[dict[str, Any]], scored: list[dict[str, Any]], calls: int,
             failures: int, with_cosine: bool) -> dict[str, Any]:
    arms: dict[str, dict[str, Any]] = {}
    tables: dict[str, list[list[int]]] = {}
    for measure in ("fuzzy", "cosine") if with_cosine else ("fuzzy",):
        table = []
        for arm in ("voe", "baseline"):
            mine = [r for r in scored if r["arm"] == arm]
            hits = sum(1 for r in mine if r[measure] >= HIT)
            table.append([hits, len(mine) - hits])
            entry = arms.setdefault(arm, {"turns": len(mine),
                                          "user_turns": sum(r["arm"] == arm for r in rows)})
            entry["hits" if measure == "fuzzy" else "hits_cosine"] = hits
            entry[f"mean_{measure}"] = round(sum(r[measure] for r in mine) / len(mine), 4) \
                if mine else 0.0
        tables[measure] = table
    arms["voe"]["facts_stored"] = sum(1 for r in rows if r["arm"] == "voe" and r["fact"])
    primary = decide(tables["fuzzy"])
    local = sorted(r["local_ms"] for r in rows) or [0.0]
    return {
        "arms": {"baseline": arms["baseline"], "voe": arms["voe"]},
        "p_value": primary["p_value"], "improvement": primary["improvement"],
        "passed": primary["passed"], "fuzzy": primary,
        "cosine": decide(tables["cosine"]) if with_cosine else None,
        "llm_calls_per_turn": round(calls / max(len(rows) + failures, 1), 3),
        "failures": failures,
        "local_ms": {"p50": local[len(local) // 2], "p95": local[int(len(local) * 0.95)],
                     "max": local[-1]},
    }


def voe_table(doc: dict[str, Any]) -> str:
    """The A/B result as text."""
    lines = [f"VoE A/B on {doc['model']}: {doc['sessions']} sessions per arm",
             "", "| arm | scored turns | hits (fuzzy >= 0.6) | hits (cosine >= 0.6) | "
             "mean fuzzy | mean cosine |", "|---|---|---|---|---|---|"]
    for arm in ("baseline", "voe"):
        a = doc["arms"][arm]
        lines.append(f"| {arm} | {a['turns']} | {a['hits']} | {a.get('hits_cosine', '-')} | "
                     f"{a['mean_fuzzy']} | {a.get('mean_cosine', '-')} |")
    for measure in ("fuzzy", "cosine"):
        d = doc.get(measure)
        if d:
            lines.append(f"{measure}: table {d['table']} (voe, baseline x hit, miss), "
                         f"p = {d['p_value']:.4g}, improvement = {d['improvement']}, "
                         f"passed = {d['passed']}")
    lines.append(f"LLM calls per turn: {doc['llm_calls_per_turn']}; local check + retrieval "
                 f"p95 {doc['local_ms']['p95']} ms; facts stored (voe arm): "
                 f"{doc['arms']['voe']['facts_stored']}; failures: {doc['failures']}")
    at_max = doc.get("local_ms_at_max_facts")
    if at_max:
        lines.append(f"check + retrieval with {at_max['facts']} facts: p50 {at_max['p50']} ms, "
                     f"p95 {at_max['p95']} ms, max {at_max['max']} ms (target < 5 ms)")
    lines.append(f"H1 passed: {doc['passed']}")
    return "\n".join(lines)


def write_voe_outputs(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """``voe.json`` and ``voe.md``."""
    out = Path(out_dir)
    paths = [out / "voe.json", out / "voe.md"]
    paths[0].write_text(json.dumps(doc, indent=2))
    paths[1].write_text(voe_table(doc) + "\n")
    return paths
