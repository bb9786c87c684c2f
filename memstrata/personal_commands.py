"""``memstrata reconcile``: is one name in several conversations one person?"""

from __future__ import annotations

import argparse
import json
import time

from memstrata.memory.store.opener import describe, open_store

POLICY_NAMES = ("policy", "policy/reconcile")


def _model(args: argparse.Namespace):
    """The model (``--lm``), or the scripted policy for ``--lm policy``."""
    from memstrata.agent_commands import model_from_args
    from memstrata.programs import setup_lm
    from memstrata.programs.reconcile_policy import NAME, ReconcilePolicy

    if args.lm in POLICY_NAMES:
        return setup_lm(NAME, engine=ReconcilePolicy())
    return model_from_args(args)


def _show(result, partners: dict[str, list[str]]) -> None:
    """One pair's decision, for people."""
    a, b = result.conversation_a, result.conversation_b
    print(f"── {a} (with {', '.join(partners.get(a, []))}) vs "
          f"{b} (with {', '.join(partners.get(b, []))})")
    if result.error:
        print(f"failed: {result.error}")
        return
    d = result.decision
    print(f"decision: {d.decision} (confidence {d.confidence})")
    print(f"reason: {d.reason}")
    note = " — overridden by the guard" if d.overridden else ""
    print(f"agent proposed: {d.proposal.decision} ({d.proposal.confidence}) "
          f"{d.proposal.reason!r}{note}")
    print(f"guard: merge {'allowed' if d.guard.merge_allowed else 'refused'}: {d.guard.reason}")
    tools = ", ".join(f"{c.name}{' (refused)' if c.error else ''}" for c in d.tool_calls)
    print(f"tools called: {tools or 'none'} · LLM calls {d.llm_calls} · {d.wall_s} s")
    print(f"stored: {json.dumps(d.stored)}")


def cmd_reconcile(args: argparse.Namespace) -> int:
    """Decide, for every pair of conversations in which someone called --person speaks,
    whether it is one person (MERGE) or two (SEPARATE), with a ReAct agent over four
    tools (get_entity_timeline, get_conversation_context,
    compare_entities_across_conversations, detect_contradictions). The conversations
    are loaded under one tenant. A MERGE needs positive evidence from the tools (shared
    distinctive attributes, no contradiction); otherwise the decision is SEPARATE, and
    the agent's own proposal is shown beside it. Each decision is stored (a person entity
    and same_as edges, or a distinct_from edge) with its reason, and logged."""
    from memstrata.agent_commands import from_flags
    from memstrata.bench.locomo import load_locomo, read_subset
    from memstrata.programs.reconcile_run import reconcile_person
    from memstrata.programs.reconciler import ReconcilerSettings
    from memstrata.tools import ToolSession
    from memstrata.tools.personal_tools import corpus

    convs = [c.strip() for c in args.conversations.split(",") if c.strip()]
    if len(convs) < 2:
        raise SystemExit("memstrata: --conversations needs at least two sample ids")
    if not args.person.strip():
        raise SystemExit("memstrata: --person must not be empty")
    settings = from_flags(ReconcilerSettings, {
        "max-iters": ("max_iters", args.max_iters),
        "max-llm-calls": ("max_llm_calls", args.max_llm_calls),
        "min-shared": ("min_shared", args.min_shared),
        "min-overlap": ("min_overlap", args.min_overlap)})
    user = args.user or args.person.strip().casefold()
    try:
        data = read_subset(args.data, set(convs))
    except ValueError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    handle = _model(args)
    started = time.perf_counter()
    with open_store(args.db) as store:
        load_locomo(store, data, tenant=user)
        session = ToolSession(store, user)
        people = corpus(session.binding)
        partners = {c: [p for p in people.people(c) if p.casefold() != args.person.casefold()]
                    for c in convs}
        try:
            results = reconcile_person(session, handle, args.person.strip(), convs, settings)
        except ValueError as exc:
            raise SystemExit(f"memstrata: {exc}") from None
    wall = round(time.perf_counter() - started, 1)
    decisions = [r.decision for r in results if r.decision]
    if args.json:
        print(json.dumps({"person": args.person, "user": user, "model": handle.name,
                          "wall_s": wall, "llm_calls": handle.meter.since(0).calls,
                          "pairs": [r.model_dump(mode="json") for r in results]}, indent=2))
    else:
        for result in results:
            _show(result, partners)
        merges = sum(d.decision == "MERGE" for d in decisions)
        print(f"── {len(results)} pair(s) on {handle.name}: {merges} MERGE, "
              f"{len(decisions) - merges} SEPARATE, {len(results) - len(decisions)} failed · "
              f"LLM calls {handle.meter.since(0).calls} · {wall} s · store {describe(args.db)} "
              f"(tenant {user!r})")
    return 1 if len(decisions) < len(results) else 0


def add_reconcile_args(p: argparse.ArgumentParser) -> None:
    """The flags of ``memstrata reconcile`` beyond --data and the model flags."""
    p.add_argument("--conversations", required=True,
                   help="comma-separated sample ids, e.g. chat-1,chat-2,chat-3")
    p.add_argument("--person", required=True, help="the name to reconcile, e.g. Ben")
    p.add_argument("--db", default=":memory:",
                   help="store file to keep the conversations and decisions in (default: "
                   "in memory, nothing kept)")
    p.add_argument("--user", help="the tenant the conversations go under (default: the "
                   "person's name, lower-cased)")
    p.add_argument("--max-iters", type=int, default=4, help="most agent steps per pair (4)")
    p.add_argument("--max-llm-calls", type=int, default=10,
                   help="most LLM calls per pair, retries included (10)")
    p.add_argument("--min-shared", type=int, default=2,
                   help="shared distinctive attributes a MERGE needs (2)")
    p.add_argument("--min-overlap", type=float, default=0.35,
                   help="overlap score a MERGE needs, 0-1 (0.35)")
    p.add_argument("--json", action="store_true", help="print every decision as JSON")
    p.epilog = ("--lm policy runs a scripted tool-reading policy instead of a model "
                "(compare, detect contradictions, decide): the agent's plumbing without "
                "model skill.")
