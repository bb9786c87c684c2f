"""Compiled programs on disk: ``save_program`` writes one JSON file, ``load_program`` reads it.

The file holds the program's name (which class rebuilds it), the options it was built
with (``QA``'s answer style, the extractor's date style, an executor's settings), DSPy's
state of its predictors (demos, instructions, field descriptions), the memstrata and
DSPy versions, optional ``meta`` (how it was compiled), and ``sha256``: a hash of the
name, options and state, checked on load, so a run that names the file can name the
exact program too (``program_hash``).

Demos keep pydantic values without their default-valued fields, as the compact adapter
shows them (``structured._without_defaults``), so a saved default program's prompts are
the same after loading as before saving.

Example:
    >>> save_program(QA(), "qa.json")                              # doctest: +SKIP
    >>> qa = load_program("qa", "qa.json")                         # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import dspy

from memstrata.memory.paths import refuse_database

from .refs import ProgramRef
from .structured import _without_defaults

FORMAT = 1


def _qa(options: dict[str, Any]) -> dspy.Module:
    from .qa import QA, AnswerStyle

    return QA(AnswerStyle.model_validate(options.get("style", {})))


def _answerer(options: dict[str, Any]) -> dspy.Module:
    from .answer import AnswerSettings, PersonalAnswerer

    return PersonalAnswerer(settings=AnswerSettings.model_validate(options.get("settings", {})),
                            qa=_qa(options))


def _extractor(options: dict[str, Any]) -> dspy.Module:
    from .extractor import Extractor

    return Extractor(**options)


def _voe_predictor(options: dict[str, Any]) -> dspy.Module:
    from .voe import VoEPredictor

    return VoEPredictor()


def _voe_responder(options: dict[str, Any]) -> dspy.Module:
    from .voe import VoEResponder

    return VoEResponder()


Builder = Callable[[dict[str, Any]], dspy.Module]

#: How each of the library's programs is rebuilt from its options before its state is loaded.
BUILDERS: dict[str, Builder] = {
    "qa": _qa, "answerer": _answerer, "extractor": _extractor,
    "voe.predictor": _voe_predictor, "voe.responder": _voe_responder,
}
_REGISTERED: dict[str, Builder] = {}


def register_program(name: str, builder: Builder) -> None:
    """Let :func:`save_program` and :func:`load_program` handle a program defined outside
    the library (a benchmark's agent) under ``name``: ``builder`` rebuilds it from the
    options :func:`program_options` recorded. Registering a name again replaces its builder.

    Raises:
        ValueError: ``name`` is one of the library's programs (``BUILDERS``).
    """
    if name in BUILDERS:
        raise ValueError(f"{name!r} is one of memstrata's programs; pick another name")
    _REGISTERED[name] = builder


def _builders() -> dict[str, Builder]:
    return {**BUILDERS, **_REGISTERED}


def program_options(program: dspy.Module) -> dict[str, Any]:
    """What ``BUILDERS`` needs to rebuild ``program`` (its constructor's options)."""
    from .answer import PersonalAnswerer
    from .executors import Executor
    from .extractor import Extractor
    from .qa import QA

    if isinstance(program, QA):
        return {"style": program.style.model_dump(mode="json")}
    if isinstance(program, PersonalAnswerer):
        return {"style": program.qa.style.model_dump(mode="json"),
                "settings": program.settings.model_dump(mode="json")}
    if isinstance(program, Extractor):
        return {"max_tokens": program.extract.max_tokens, "date_style": program.date_style}
    if isinstance(program, Executor):
        return {"settings": program.settings.model_dump(mode="json"),
                "mode": getattr(program, "mode", "inject")}
    return {}


def _state(program: dspy.Module) -> dict[str, Any]:
    originals = [(p, p.demos) for _, p in program.named_predictors()]
    try:
        for predictor, demos in originals:
            predictor.demos = [_plain_demo(d) for d in demos]
        return program.dump_state()
    finally:
        for predictor, demos in originals:
            predictor.demos = demos


def _plain_demo(demo: Any) -> Any:
    items = demo.items() if hasattr(demo, "items") else []
    values = {k: _without_defaults(v) for k, v in items}
    return demo.copy(**values) if isinstance(demo, dspy.Example) else values


def _digest(name: str, options: dict[str, Any], state: dict[str, Any]) -> str:
    blob = json.dumps([name, options, state], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def program_name(program: dspy.Module) -> str:
    """The name ``program`` is saved under (in ``BUILDERS``, or registered with
    :func:`register_program`).

    Raises:
        ValueError: it is none of them.
    """
    from .answer import PersonalAnswerer
    from .extractor import Extractor
    from .qa import QA
    from .voe import VoEPredictor, VoEResponder

    named = getattr(program, "program_name", None)  # an executor built as a known agent
    if isinstance(named, str) and named in _builders():
        return named
    for cls, name in ((QA, "qa"), (PersonalAnswerer, "answerer"), (Extractor, "extractor"),
                      (VoEPredictor, "voe.predictor"), (VoEResponder, "voe.responder")):
        if isinstance(program, cls):
            return name
    raise ValueError(f"{type(program).__name__} is not a program memstrata can save by "
                     f"name: one of {sorted(_builders())}")


def save_program(program: dspy.Module, path: str | Path, *, name: str | None = None,
                 meta: dict[str, Any] | None = None) -> str:
    """Write ``program`` (a program of ``BUILDERS`` or a registered one) to ``path`` as
    JSON; return its hash.

    Args:
        program: the (compiled) program.
        path: the file to write (its folder is created).
        name: the program's name (default: ``program_name(program)``).
        meta: how it was made (optimizer, models, train/val ids, cost), kept as given.

    Raises:
        ValueError: ``name`` is not a known program; ``path`` is a SQLite database.
    """
    refuse_database(path)
    name = name or program_name(program)
    if name not in _builders():
        raise ValueError(f"unknown program {name!r}: one of {sorted(_builders())}")
    options = program_options(program)
    state = json.loads(json.dumps(_state(program), default=str))
    digest = _digest(name, options, state)
    doc = {"format": FORMAT, "program": name, "memstrata_version": _version("memstrata"),
           "dspy_version": _version("dspy"), "sha256": digest, "options": options,
           "meta": meta or {}, "state": state}
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return digest


def read_program_file(path: str | Path) -> dict[str, Any]:
    """The parsed file, its hash checked.

    Raises:
        ValueError: not a program file, or its content does not match its hash (edited).
    """
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "program" not in doc:
        raise ValueError(f"{path} is not a memstrata program file (format {FORMAT})")
    if _digest(doc["program"], doc.get("options", {}), doc["state"]) != doc.get("sha256"):
        raise ValueError(f"{path}: its content does not match its sha256 (edited by hand?)")
    return doc


def program_hash(path: str | Path) -> str:
    """The checked hash of a program file (what run records name beside its path)."""
    return str(read_program_file(path)["sha256"])


def program_ref(path: str | Path, name: str | None = None) -> ProgramRef:
    """The reference run records and reports keep for the program file at ``path``.

    Raises:
        ValueError: not a program file, its hash fails, or it holds another program than
            ``name`` (when given).
    """
    doc = read_program_file(path)
    if name is not None and doc["program"] != name:
        raise ValueError(f"{path} holds the program {doc['program']!r}, not {name!r}")
    return ProgramRef(path=str(path), name=str(doc["program"]), sha256=str(doc["sha256"]))


def load_program(name: str, path: str | Path) -> dspy.Module:
    """The program ``name`` rebuilt from the file at ``path``, its demos and instructions
    loaded. An answerer comes back unbound (``bind`` it to a store).

    Raises:
        ValueError: the file holds another program, fails its hash check, or holds a
            program neither in ``BUILDERS`` nor registered.
    """
    doc = read_program_file(path)
    if doc["program"] != name:
        raise ValueError(f"{path} holds the program {doc['program']!r}, not {name!r}")
    builders = _builders()
    if name not in builders:
        raise ValueError(f"unknown program {name!r}: one of {sorted(builders)}")
    program = builders[name](doc.get("options", {}))
    program.load_state(doc["state"])
    return program


__all__ = ["BUILDERS", "Builder", "load_program", "program_hash", "program_name",
           "program_options", "program_ref", "read_program_file", "register_program",
           "save_program"]
