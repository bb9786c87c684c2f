"""``memstrata bench verify``: the attribution check alone, on every LoCoMo question, no LLM.

What it reports, overall and per conversation: the share of category-5 (adversarial)
questions the check abstains on, and the share of categories 1-4 it wrongly abstains on;
a sweep of the two thresholds; a leave-one-conversation-out estimate (thresholds chosen
on the other conversations, scored on the held-out one), so the figure is not only a fit
to the split; and two bounds that explain the gap to a target:

* ``cat5_kinds``: category-5 questions whose gold evidence was said by someone other than
  the person named (a swapped person: what the check is for) against those whose evidence
  is the named person's own (a swapped detail: "grandpa's gift" where it was grandma's);
* ``oracle``: the same "someone else said it" test with the gold evidence in hand.
"""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import product
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from memstrata.memory import Store
from memstrata.memory.route import Router
from memstrata.memory.verify import Verification, VerifySettings, decide, verify

from .locomo import load_locomo, read_subset

MARGINS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3)
FLOORS = (0.0, 0.2, 0.3, 0.4, 0.5)
MAX_FALSE = 0.05


class VerifyRow(BaseModel):
    """One question: its category, the gold evidence's speakers, and the check's scores."""

    qid: str
    sample_id: str
    category: int
    question: str
    gold_speakers: list[str]
    verification: Verification

    @property
    def kind(self) -> str:
        """``person_swap``, ``detail_swap``, ``no_evidence`` or ``not_checked`` (no single
        person named, or nothing left to check)."""
        person = self.verification.person
        if person is None or self.verification.verdict == "not_checked":
            return "not_checked"
        if not self.gold_speakers:
            return "no_evidence"
        return "detail_swap" if person in self.gold_speakers else "person_swap"


def score_questions(data: str | Path, *, settings: VerifySettings | None = None,
                    conversations: set[str] | None = None) -> list[VerifyRow]:
    """Route and verify every question of a LoCoMo file (an in-memory store, no LLM)."""
    settings = settings or VerifySettings()
    convs = read_subset(data, conversations)
    rows: list[VerifyRow] = []
    with Store.open(":memory:") as store:
        load_locomo(store, convs)
        router = Router(store)
        for conv in convs:
            said = {t["dia_id"]: t["speaker"] for _, _, turns in conv.sessions for t in turns}
            for q in conv.questions:
                route = router.route(conv.sample_id, q.question)
                indexes = [router.index(conv.sample_id, c) for c in route.conversations]
                person = route.people[0] if len(route.people) == 1 else None
                checked = verify(indexes, q.question, person, settings=settings,
                                 span=route.span)
                gold = sorted({said[e] for e in q.evidence if e in said})
                rows.append(VerifyRow(qid=q.qid, sample_id=q.sample_id, category=q.category,
                                      question=q.question, gold_speakers=gold,
                                      verification=checked))
    return rows


def _rate(values: list[bool]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def rates(rows: list[VerifyRow], decisions: list[bool]) -> dict[str, Any]:
    """Category-5 abstention and category 1-4 false abstention of some decisions."""
    cat5 = [d for r, d in zip(rows, decisions, strict=True) if r.category == 5]
    rest = [d for r, d in zip(rows, decisions, strict=True) if r.category != 5]
    return {"abstention_cat5": _rate(cat5), "false_abstention_cat1_4": _rate(rest),
            "n_cat5": len(cat5), "n_cat1_4": len(rest)}


def decisions(rows: list[VerifyRow], settings: VerifySettings) -> list[bool]:
    """Whether the check abstains on each row under ``settings`` (scores reused)."""
    return [decide(r.verification.model_copy(update={"settings": settings})).abstain
            for r in rows]


def sweep(rows: list[VerifyRow], base: VerifySettings) -> list[dict[str, Any]]:
    """Rates at every (margin, floor) of the grid, the other knobs as in ``base``."""
    out = []
    for margin, floor in product(MARGINS, FLOORS):
        s = base.model_copy(update={"margin": margin, "floor": floor})
        out.append({"margin": margin, "floor": floor, **rates(rows, decisions(rows, s))})
    return out


def _pick(points: list[dict[str, Any]]) -> dict[str, Any]:
    # Most category-5 abstention with false abstention within MAX_FALSE; ties: fewer false.
    ok = [p for p in points if (p["false_abstention_cat1_4"] or 0) <= MAX_FALSE] or points
    return max(ok, key=lambda p: (p["abstention_cat5"] or 0, -(p["false_abstention_cat1_4"]
                                                                or 0)))


def held_out(rows: list[VerifyRow], base: VerifySettings) -> dict[str, Any]:
    """Leave one conversation out: pick thresholds on the rest, score the one left out."""
    per: dict[str, Any] = {}
    chosen: list[bool] = []
    kept: list[VerifyRow] = []
    for sid in sorted({r.sample_id for r in rows}):
        train = [r for r in rows if r.sample_id != sid]
        test = [r for r in rows if r.sample_id == sid]
        best = _pick(sweep(train, base))
        s = base.model_copy(update={"margin": best["margin"], "floor": best["floor"]})
        made = decisions(test, s)
        per[sid] = {"margin": best["margin"], "floor": best["floor"], **rates(test, made)}
        chosen += made
        kept += test
    return {"pooled": rates(kept, chosen), "per_conversation": per}


def summarise(rows: list[VerifyRow], settings: VerifySettings) -> dict[str, Any]:
    """The whole report (see the module docstring) as one JSON-ready dict."""
    made = decisions(rows, settings)
    by_conv: dict[str, list[int]] = defaultdict(list)
    by_cat: dict[str, list[bool]] = defaultdict(list)
    kinds: dict[str, list[bool]] = defaultdict(list)
    for n, row in enumerate(rows):
        by_conv[row.sample_id].append(n)
        by_cat[str(row.category)].append(made[n])
        if row.category == 5:
            kinds[row.kind].append(made[n])
    oracle = [r.kind == "person_swap" for r in rows]
    return {
        "benchmark": "locomo-verify",
        "settings": settings.model_dump(),
        "questions": len(rows),
        "overall": rates(rows, made),
        "per_conversation": {sid: rates([rows[i] for i in ids], [made[i] for i in ids])
                             for sid, ids in sorted(by_conv.items())},
        "abstention_by_category": {c: _rate(v) for c, v in sorted(by_cat.items())},
        "cat5_kinds": {k: {"questions": len(v), "abstained": _rate(v)}
                       for k, v in sorted(kinds.items())},
        "oracle": rates(rows, oracle),
        "held_out": held_out(rows, settings),
        "sweep": sweep(rows, settings),
    }


def verify_markdown(doc: dict[str, Any]) -> str:
    """The report as a short Markdown table (overall, per conversation, held out)."""
    def line(name: str, r: dict[str, Any]) -> str:
        return (f"| {name} | {r['abstention_cat5']} | {r['false_abstention_cat1_4']} "
                f"| {r['n_cat5']} | {r['n_cat1_4']} |")

    s = doc["settings"]
    out = [f"LoCoMo attribution check (no LLM): margin {s['margin']}, floor {s['floor']}, "
           f"window {s['window']}", "",
           "| split | cat-5 abstention | cat 1-4 false abstention | n cat-5 | n cat 1-4 |",
           "|---|---|---|---|---|", line("all", doc["overall"])]
    out += [line(sid, r) for sid, r in doc["per_conversation"].items()]
    out += [line("held out (pooled)", doc["held_out"]["pooled"]),
            line("oracle (gold evidence speakers)", doc["oracle"]), ""]
    out += [f"- cat-5 {k}: {v['questions']} questions, abstained {v['abstained']}"
            for k, v in doc["cat5_kinds"].items()]
    return "\n".join(out) + "\n"


def run_verify_bench(data: str | Path, out_dir: str | Path, *,
                     settings: VerifySettings | None = None,
                     conversations: set[str] | None = None) -> dict[str, Any]:
    """Score, summarise and write ``verify.json``, ``verify.md`` and ``verdicts.jsonl``."""
    settings = settings or VerifySettings()
    rows = score_questions(data, settings=settings, conversations=conversations)
    doc = summarise(rows, settings)
    doc["data"] = str(data)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verify.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    (out / "verify.md").write_text(verify_markdown(doc), encoding="utf-8")
    with (out / "verdicts.jsonl").open("w", encoding="utf-8") as fh:
        for row, abstained in zip(rows, decisions(rows, settings), strict=True):
            fh.write(json.dumps({**row.model_dump(mode="json"), "kind": row.kind,
                                 "abstained": abstained}) + "\n")
    return doc
