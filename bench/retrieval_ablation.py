"""``bench retrieval --ablate``: what each channel and prior of the hybrid is worth, on each
corpus, by switching it off alone.

For every knob in :data:`ABLATE` that the weights switch on, every question is ranked
with that knob at 0 and the rest as given; a piece's worth is the recall it costs to
lose, with a 95% paired bootstrap interval over questions (``intervals.paired_difference``)
as its noise. The cross-validated figure leaves one conversation out at a time: the
other conversations choose on or off (by mean recall@10; a tie keeps the piece), and the
held-out one is scored with that choice, so a piece whose gain is fitted to a few
conversations shows none there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memstrata.memory import SearchWeights

from .intervals import paired_difference
from .metrics import recall_at_k
from .retrieval_cv import Evaluate, Question

ABLATE = ("expansion", "speaker_channels", "speaker_field", "tags", "context",
          "session", "speaker_boost", "role_boost", "time_boost", "when_boost", "where_boost",
          "asking", "recency", "graph", "dense")
"""The knobs that switch a channel or a prior on (0 switches it off)."""
KS = (5, 10)


def _recalls(ranked: dict[str, list[str]], questions: Sequence[Question], k: int
             ) -> list[float]:
    return [recall_at_k(ranked[q.qid], q.evidence, k) for q in questions]


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def _held_out(on: dict[str, list[str]], off: dict[str, list[str]],
              questions: Sequence[Question]) -> tuple[dict[str, float], int]:
    """Leave-one-conversation-out recall of choosing on/off on the other conversations,
    and how many folds chose off."""
    scored: dict[int, list[float]] = {k: [] for k in KS}
    chose_off = 0
    for conversation in sorted({q.sample_id for q in questions}):
        train = [q for q in questions if q.sample_id != conversation]
        test = [q for q in questions if q.sample_id == conversation]
        keep = _mean(_recalls(on, train, 10)) >= _mean(_recalls(off, train, 10))
        chose_off += not keep
        for k in KS:
            scored[k] += _recalls(on if keep else off, test, k)
    return {f"recall@{k}": _mean(v) for k, v in scored.items()}, chose_off


def ablate(evaluate: Evaluate[Any], questions: Sequence[Question],
           weights: SearchWeights) -> dict[str, Any]:
    """Each piece of :data:`ABLATE` that ``weights`` switches on, switched off alone over
    ``questions`` (those with evidence): ``full`` (recall@5/@10 as given) and, per knob,
    ``off`` (recall without it), ``delta`` (full minus off, with its 95% paired
    interval), ``cv`` (leave-one-conversation-out, see the module; None with one
    conversation) and ``folds_off`` (the folds that chose to switch it off)."""
    scored = [q for q in questions if q.evidence]
    full = dict(evaluate(weights, scored))
    out: dict[str, Any] = {"full": {f"recall@{k}": _mean(_recalls(full, scored, k))
                                    for k in KS}, "knobs": {}}
    several = len({q.sample_id for q in scored}) > 1
    for knob in ABLATE:
        if knob not in SearchWeights.model_fields or not getattr(weights, knob):
            continue
        off = dict(evaluate(weights.model_copy(update={knob: 0}), scored))
        entry: dict[str, Any] = {"off": {}, "delta": {}}
        for k in KS:
            a, b = _recalls(full, scored, k), _recalls(off, scored, k)
            diff, interval = paired_difference(a, b)
            entry["off"][f"recall@{k}"] = _mean(b)
            entry["delta"][f"recall@{k}"] = {"value": diff, "interval": interval}
        entry["cv"], entry["folds_off"] = _held_out(full, off, scored) if several else (None, 0)
        out["knobs"][knob] = entry
    if several:
        out["cv_full"] = {f"recall@{k}": _mean(_recalls(full, scored, k)) for k in KS}
    return out


def ablation_markdown(corpora: dict[str, Any]) -> list[str]:
    """The ablation tables of a ``retrieval.json`` document's corpora (markdown lines)."""
    lines: list[str] = []
    for corpus, doc in corpora.items():
        found = doc["systems"].get("memstrata", {}).get("ablation")
        if not found:
            continue
        full = found["full"]
        lines += ["", f"## Ablation on {corpus}: each piece switched off alone", "",
                  f"All on: recall@5 {full['recall@5']:.3f}, recall@10 "
                  f"{full['recall@10']:.3f}. delta = all on minus this piece off, with its 95% "
                  "paired bootstrap interval; cv = leave-one-conversation-out recall when the "
                  "other conversations choose on or off.", "",
                  "| piece off | @5 | @10 | delta @5 | delta @10 | cv @5 | cv @10 | folds off |",
                  "|---|---:|---:|---|---|---:|---:|---:|"]
        for knob, e in found["knobs"].items():
            cells = []
            for k in KS:
                d = e["delta"][f"recall@{k}"]
                span = d["interval"]
                cells.append(f"{d['value']:+.3f}" + (f" [{span[0]:+.3f}, {span[1]:+.3f}]"
                                                     if span else ""))
            cv = e["cv"] or {}
            lines.append(
                f"| {knob} | {e['off']['recall@5']:.3f} | {e['off']['recall@10']:.3f} | "
                f"{cells[0]} | {cells[1]} | {cv.get('recall@5', float('nan')):.3f} | "
                f"{cv.get('recall@10', float('nan')):.3f} | {e['folds_off']} |")
    return lines
