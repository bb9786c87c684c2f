"""The programs ``memstrata compile`` takes, by name, without DSPy: what each is (one line
of ``--help``) and the split of its data it compiles on unless told. The tasks in
``bench.compile`` take their ``summary`` and ``default_split`` from here, and the command
line builds its parser from this table alone (importing DSPy costs every command ~1.5 s).
"""

from __future__ import annotations

from typing import NamedTuple

from memstrata.programs.compile_plan import Split

LOCOMO_SPLIT = Split(train=("conv-26", "conv-30", "conv-41"), val=("conv-43",),
                     heldout=("conv-47",))
"""The LoCoMo programs' default: three conversations train, one validates, one is held out."""
LEVEL_SPLIT = Split(train=("L1", "L2"), val=("L3",), heldout=("L4", "L5"), unit="level")
"""The SPARQL agent's default: the ontology suite's levels, easy ones to train on."""


class ProgramSpec(NamedTuple):
    """One compilable program: its ``--help`` line and its default split."""

    summary: str
    split: Split


PROGRAMS: dict[str, ProgramSpec] = {
    "qa": ProgramSpec("the QA of the answer path, on the memories it is shown", LOCOMO_SPLIT),
    "answerer": ProgramSpec("the whole answer path (route, retrieve, verify, QA), run end to "
                            "end", LOCOMO_SPLIT),
    "extractor": ProgramSpec("the ingest extractor (facts, entities, QA pairs per chunk of "
                             "turns)", LOCOMO_SPLIT),
    "voe": ProgramSpec("the VoE responder's prediction of the user's next message (what "
                       "bench voe scores), on replayed LoCoMo sessions", LOCOMO_SPLIT),
    "sparql": ProgramSpec("the ontology suite's SPARQL agent (ReAct over run_sparql, E6's "
                          "memory)", LEVEL_SPLIT),
}
"""Every program ``memstrata compile`` takes (``bench.compile.TASKS`` has one task each)."""
