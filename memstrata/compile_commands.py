"""``memstrata compile`` and ``memstrata bench compile``: DSPy's optimizers on memstrata's
programs (see ``bench/compile.py`` for the data, the optimizers and their budgets)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstrata.agent_commands import add_model_args, model_from_args

if TYPE_CHECKING:
    from memstrata.programs.compiler import Budget, Optimizer

_DEFAULT_DATA = Path("..") / "shared" / "data" / "locomo" / "locomo_dev.json"
_SPLIT_HELP = ("comma-separated ids: LoCoMo sample ids, or the ontology suite's levels "
               "for sparql; train, validation and held-out units must be disjoint")


def program_file(path: str | None, uses: tuple[str, ...], command: str) -> str | None:
    """``--program FILE`` checked before any model loads: a program file (hash intact)
    holding one of the programs ``command`` uses; exits naming them otherwise."""
    if path is None:
        return None
    from memstrata.programs.compiled import program_ref

    try:
        name = program_ref(path).name
    except (OSError, ValueError) as exc:
        raise SystemExit(f"memstrata: --program: {exc}") from None
    if name not in uses:
        raise SystemExit(f"memstrata: --program: {path} holds the program {name}; {command} "
                         f"uses {' or '.join(uses)}")
    return path


def _budgets(raw: list[str] | None, optimizers: list[str]) -> dict[Optimizer, Budget]:
    """``--budget N`` (one optimizer) or ``--budget OPT=N`` (any): each optimizer's
    default budget with its main knob replaced."""
    from pydantic import ValidationError

    from memstrata.programs.compiler import BUDGETS, OPTIMIZERS, Budget

    out: dict[Optimizer, Budget] = {}
    for item in raw or []:
        name, _, value = item.rpartition("=")
        if not name and len(optimizers) == 1:
            name = optimizers[0]
        if name not in OPTIMIZERS:
            raise SystemExit(f"memstrata: --budget {item!r}: give N, or OPT=N with OPT one of "
                             f"{', '.join(OPTIMIZERS)}")
        try:
            out[name] = Budget(**{**BUDGETS[name].model_dump(), "main": int(value)})
        except (ValueError, ValidationError):
            raise SystemExit(f"memstrata: --budget {item!r}: N must be a whole number >= 1"
                             ) from None
    return out


def _task_class(args: argparse.Namespace):
    from memstrata.bench.compile import TASKS

    return TASKS[args.program]


def _split(args: argparse.Namespace, heldout: bool = False):
    """The split, checked against --data: unknown or shared units exit here, before any
    model loads. Unset --train/--val/--heldout take the program's defaults."""
    from memstrata.programs.compiler import Split

    task = _task_class(args)
    default = task.default_split
    try:
        split = Split.parse(args.train or ",".join(default.train),
                            args.val or ",".join(default.val),
                            (args.heldout or ",".join(default.heldout)) if heldout else None,
                            unit=task.unit)
        # A task reads without models: a bad file or id stops here, before any loads.
        return task.read(_data(args), split)
    except (ValueError, OSError) as exc:  # a LoCoMoError (a malformed file) is one too
        raise SystemExit(f"memstrata: {exc}") from None


def _data(args: argparse.Namespace) -> str:
    """--data, else the program's default data (LoCoMo's dev file for conversations)."""
    return args.data or _task_class(args).default_data or str(_DEFAULT_DATA)


def _limits(args: argparse.Namespace) -> None:
    for flag in ("limit", "heldout_limit"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise SystemExit(f"memstrata: --{flag.replace('_', '-')} must be at least 1")


def _require_optuna(optimizers: list[str]) -> None:
    if "mipro" in optimizers:
        from memstrata.memory.extras import require

        require("optuna", "optimize", "MIPROv2 (--optimizer mipro)")


def _models(args: argparse.Namespace):
    """The student (--lm) and, when named, the teacher and the reflection model; a name
    given twice is one model (one engine, one meter)."""
    from memstrata.programs import setup_lm
    from memstrata.programs.compiler import Models

    student = model_from_args(args)
    loaded = {student.name: student}

    def named(choice: str | None):
        if not choice:
            return None
        if choice not in loaded:
            loaded[choice] = setup_lm(choice, n_ctx=args.n_ctx, max_tokens=args.max_tokens,
                                      n_threads=args.threads, prefix_cache=args.prefix_cache)
        return loaded[choice]

    return Models(student=student, teacher=named(args.teacher_lm),
                  reflection=named(args.reflection_lm))


def _task(args: argparse.Namespace, models):
    """The program's compile task over ``models`` and the retrieval options."""
    from memstrata.cli_support import audit_path, embedder_from_flag, weights_from_json

    if args.data is None:  # audit_path looks beside --data
        args.data = _data(args)
    return _task_class(args)(models, embedder=embedder_from_flag(not args.no_dense),
                             weights=weights_from_json(args.weights), audit=audit_path(args))


def cmd_compile(args: argparse.Namespace) -> int:
    """Compile one of memstrata's programs with one of DSPy's optimizers on dev data, and
    write it as a program file (used by name: `bench locomo --program` for qa and
    answerer, `ingest --program` for the extractor, `chat --program` for voe, `experiment
    --program` for sparql, `Memory.open(programs=...)`). Train and validation sets are
    whole units (LoCoMo conversations; the ontology suite's levels for sparql). The
    compile is recorded as a run in --db (every LLM call a step); its wall time and LLM
    calls are printed and kept in the file's meta."""
    from memstrata.memory.store.opener import describe, open_store
    from memstrata.programs.compiler import BUDGETS, CompileJob, compile_program

    _limits(args)
    budget = _budgets(args.budget, [args.optimizer]).get(args.optimizer,
                                                         BUDGETS[args.optimizer])
    data = _split(args)
    _require_optuna([args.optimizer])
    models = _models(args)
    out = Path(args.out)
    db = args.db or f"{out}.db"
    job = CompileJob(task=_task(args, models), optimizer=args.optimizer, data=data, out=out,
                     budget=budget, limit=args.limit)
    with open_store(db) as store:
        result = compile_program(job, store)
    print(f"wrote {out} ({result.wall_s:.0f} s, {result.llm_calls} LLM calls; run "
          f"{result.run_id} in {describe(db)})", file=sys.stderr)
    print(json.dumps({"program": result.program.model_dump(), "optimizer": result.optimizer,
                      "wall_s": result.wall_s, "llm_calls": result.llm_calls,
                      "usage": {r: u.model_dump() for r, u in result.usage.items()},
                      "run_id": result.run_id, "db": db}))
    return 0


def cmd_bench_compile(args: argparse.Namespace) -> int:
    """For one program: the uncompiled program and each optimizer's compiled one, scored
    side by side on held-out units in one run (qa and answerer: bench locomo's memstrata
    F1 on the held-out questions; each program's own measure otherwise), each compile's
    wall time and LLM calls beside its gain. Writes compile.json, compile.md and
    compile.png to --out, the programs to --out/programs and each system's held-out work
    to --out/heldout (cached: a re-run resumes; a program whose recipe is unchanged is not
    compiled again)."""
    from memstrata.bench.compile import compile_table, run_compile_bench, write_compile_outputs
    from memstrata.cli_support import csv_list, print_report
    from memstrata.programs.compiler import OPTIMIZERS

    _limits(args)
    optimizers = csv_list(args.optimizers, "--optimizers") or list(OPTIMIZERS)
    if unknown := [o for o in optimizers if o not in OPTIMIZERS]:
        raise SystemExit(f"memstrata: unknown optimizer(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(OPTIMIZERS)}")
    budgets = _budgets(args.budget, optimizers)
    data = _split(args, heldout=True)
    if not data.split.heldout:
        raise SystemExit("memstrata: --heldout must name at least one unit")
    _require_optuna(optimizers)
    models = _models(args)
    doc = run_compile_bench(
        _task(args, models), data.data, args.out, split=data.split, optimizers=optimizers,
        budgets=budgets, limit=args.limit, heldout_limit=args.heldout_limit)
    return print_report(compile_table(doc), write_compile_outputs(doc, args.out))


def _add_common(p: argparse.ArgumentParser) -> None:
    from memstrata.agent_commands import lm_help
    from memstrata.bench.compile_specs import PROGRAMS
    from memstrata.programs.compile_plan import DEFAULT_LIMIT

    programs = "; ".join(f"{name}: {spec.summary} (split by {spec.split.unit}; default train "
                         f"{','.join(spec.split.train)}, val "
                         f"{','.join(spec.split.val)})" for name, spec in PROGRAMS.items())
    p.add_argument("program", choices=list(PROGRAMS), metavar="PROGRAM",
                   help=f"the program to compile: {programs}")
    p.add_argument("--data", help="the program's data: LoCoMo-format JSON (default "
                   "../shared/data/locomo/locomo_dev.json), the ontology task file for sparql "
                   "(default the shipped tasks)")
    p.add_argument("--train", help=f"training units ({_SPLIT_HELP}; default: the program's)")
    p.add_argument("--val", help="validation units (default: the program's)")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                   help="at most N examples per train and validation set, spread over units "
                   f"and categories (default {DEFAULT_LIMIT}: what the budgets are sized for)")
    p.add_argument("--teacher-lm", metavar="MODEL",
                   help="the model that bootstraps demos (default --lm); " + lm_help("same forms"))
    p.add_argument("--reflection-lm", metavar="MODEL",
                   help="the model that writes instructions: MIPROv2's prompt model, GEPA's "
                   "reflection LM, SIMBA's rule writer (default --teacher-lm, then --lm)")
    p.add_argument("--no-dense", action="store_true",
                   help="retrieval without embeddings (as bench locomo --no-dense)")
    p.add_argument("--weights", help="memstrata fusion knobs as JSON (see SearchWeights)")
    p.add_argument("--audit", help="audit corrections JSON for LoCoMo (default: "
                   "<data>_audit_errors.json beside --data, if present): the corrected F1 "
                   "is reported too")
    add_model_args(p)


def _budget_epilog() -> str:
    from memstrata.programs.compile_plan import budget_help

    return ("Budgets (--budget N, or OPT=N) are sized for a 2-core CPU with the embedded "
            "1.5B model and qa (~10 s a call, one call a run): BootstrapFewShot in ~5-30 "
            f"min; MIPROv2 and GEPA ~3x that, SIMBA ~6x. {budget_help()}. An extractor run "
            "is one longer call (~25 s), a SPARQL run an agent loop of 2-4 calls: scale the "
            "budgets down for them. One model thread. Resuming: GEPA keeps its "
            "state in FILE.gepa/ and continues from it when run again with the same --out; "
            "BootstrapFewShot, MIPROv2 and SIMBA cannot resume and start over.")


def add_compile_parsers(sub: Any, bsub: Any) -> None:
    """``memstrata compile`` under ``sub`` and ``memstrata bench compile`` under ``bsub``."""
    from memstrata.programs.compile_plan import OPTIMIZERS

    p = sub.add_parser("compile", help="compile a program with a DSPy optimizer on LoCoMo "
                       "dev conversations", description=cmd_compile.__doc__,
                       epilog=_budget_epilog())
    _add_common(p)
    p.add_argument("--optimizer", required=True, choices=OPTIMIZERS,
                   help="BootstrapFewShot, MIPROv2 (needs the optimize extra), GEPA or SIMBA")
    p.add_argument("--budget", action="append", metavar="N",
                   help="the optimizer's budget (see below)")
    p.add_argument("--out", required=True, metavar="FILE", help="the program file to write")
    p.add_argument("--db", help="store (file or postgresql:// URL) for the loaded "
                   "conversations and the compile's run record (default FILE.db beside "
                   "--out: the train and validation conversations are loaded as tenants, as "
                   "bench locomo loads them, so they are never mixed into a store of your "
                   "own)")
    p.set_defaults(func=cmd_compile)

    p = bsub.add_parser("compile", help="uncompiled vs each optimizer's compiled program, "
                        "scored on held-out conversations in one run",
                        description=cmd_bench_compile.__doc__, epilog=_budget_epilog())
    _add_common(p)
    p.add_argument("--heldout", help="held-out units, scored only (default: the program's)")
    p.add_argument("--heldout-limit", type=int,
                   help="at most N held-out examples (default all): qa/answerer questions "
                   "spread over categories, the extractor's first N chunks, VoE positions "
                   "spread over the conversations, SPARQL tasks spread over the levels")
    p.add_argument("--optimizers", help="comma-separated subset of "
                   f"{', '.join(OPTIMIZERS)} (default: all)")
    p.add_argument("--budget", action="append", metavar="OPT=N",
                   help="an optimizer's budget (repeatable; see below)")
    p.add_argument("--out", default="out", help="output folder (default ./out)")
    p.set_defaults(func=cmd_bench_compile)


__all__ = ["add_compile_parsers", "cmd_bench_compile", "cmd_compile"]
