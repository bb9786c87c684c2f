"""``bench retrieval --ablate``: each piece switched off alone, its recall cost with a paired
interval, and the leave-one-conversation-out choice of on or off."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memstrata.bench.retrieval_ablation import ablate, ablation_markdown
from memstrata.memory import SearchWeights


@dataclass
class Q:
    qid: str
    sample_id: str
    evidence: list[str]


QUESTIONS = [Q(f"{c}{n}", c, ["e"]) for c in ("a", "b", "c") for n in range(4)]


def _evaluate(weights: SearchWeights, questions: Sequence[Q]) -> dict[str, list[str]]:
    """Without the graph every question loses its evidence; with the tags conversation
    "a"'s first question loses it (the tags hurt there, and only there)."""
    out = {}
    for q in questions:
        found = weights.graph > 0 and not (weights.tags > 0 and q.qid == "a0")
        out[q.qid] = ["x", "e"] if found else ["x"] * 10 + ["e"]
    return out


def test_each_piece_is_switched_off_alone_and_judged_left_out() -> None:
    weights = SearchWeights(recency=0)
    doc = ablate(_evaluate, QUESTIONS, weights)
    assert doc["full"] == {"recall@5": round(11 / 12, 4), "recall@10": round(11 / 12, 4)}
    knobs = doc["knobs"]
    assert "recency" not in knobs  # already off: nothing to take away
    graph = knobs["graph"]
    assert graph["off"]["recall@10"] == 0.0
    assert graph["delta"]["recall@10"]["value"] == round(11 / 12, 4)
    assert graph["delta"]["recall@10"]["interval"][0] > 0  # well clear of noise
    assert graph["folds_off"] == 0 and graph["cv"]["recall@10"] == round(11 / 12, 4)
    tags = knobs["tags"]
    assert tags["delta"]["recall@10"]["value"] < 0  # the tags cost a question
    # Left out, "a" is judged by "b" and "c", where the tags cost nothing: a tie keeps
    # them, and "a" pays for them; the other folds see the cost and switch them off.
    assert tags["folds_off"] == 2 and tags["cv"]["recall@10"] == round(11 / 12, 4)
    # A piece that changes nothing: zero difference, and a tie keeps it on.
    assert knobs["asking"]["delta"]["recall@5"]["value"] == 0.0
    assert knobs["asking"]["folds_off"] == 0
    lines = ablation_markdown({"toy": {"systems": {"memstrata": {"ablation": doc}}}})
    assert any(line.startswith("| graph | 0.000 | 0.000 | +0.917") for line in lines)
