"""Experiment configs: E1-E12 of seed 002, each a JSON file under ``configs/``.

A config is the whole control surface of a run: which layers are packed and their
budgets, the runtime mode (inject or tools) and the door the memory comes through (the
layer cake's builder, or ``Memory``'s verbs), the executor and its limits, whether the
strategy bank starts from the curated seed pack, and the closed-loop policies (judging,
extraction, consolidation, forgetting, rollouts). ``memstrata experiment E9`` loads
``configs/E9.json``; ``--config FILE`` runs any file of the same shape, and
``--set key=value`` overrides one field (dotted keys reach nested policies).

The experiments (seed 002): E1 no layers; E2 L0 sense card; E3 L1 constraints; E4 L3
artefact summary; E5 L2 seeded strategies (no learning); E6 all four; E7 E6 with naive
tools (leakage ablation); E8 E6 in tools mode (retrieval by the agent); E9 the closed
loop, append-only; E10 + consolidation; E11 + forgetting; E12 + MaTTS rollouts with
contrastive extraction.

The configs run ``dspy.ReAct`` with at most 3 iterations: suite (a) is a write, run and
fix loop over one ``run_sparql`` tool, which needs no code sandbox; the seed validated
the RLM on query construction already and asks to hold the executor fixed. Suite (b)
runs on the RLM, as issue 7 specifies (``memstrata experiment ... --suite locomo`` sets
``executor.executor=rlm`` unless told otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memstrata.memory.bank import ConsolidationPolicy
from memstrata.memory.bank_forget import ForgettingPolicy
from memstrata.packers.context import Mode
from memstrata.packers.layers import LayerBudgets
from memstrata.programs.distill import ExtractionPolicy
from memstrata.programs.executors import ExecutorSettings
from memstrata.programs.judging import JudgingPolicy
from memstrata.programs.rollouts import RolloutPolicy

from .names import CONFIG_DIR, EXPERIMENTS


class RetrievalPolicy(BaseModel):
    """Which strategies L2 draws from. How many per polarity (the success/failure mix)
    is ``budgets.k_success``/``k_failure``, beside the layer's character budget; here is
    the scope: ``scoped`` keeps only strategies tagged with the suite's scope, so one
    ontology's lessons never reach another's tasks; and the ranking: ``dense`` adds the
    embedder's cosine channel to the lexical one, with every strategy embedded when it
    is seeded or learned.

    ``dense`` is off by default so that E1-E12 keep the lexical L2 their earlier runs
    used (a paraphrase with no shared word is then never retrieved); the embedder it
    loads is the offline static default, so turning it on costs little."""

    scoped: bool = True
    dense: bool = Field(False, description="rank L2 strategies lexical + dense (embedder)")


class ExperimentConfig(BaseModel):
    """One experiment: layers, budgets, mode, executor, and the closed-loop policies."""

    model_config = ConfigDict(extra="forbid")

    experiment: str = Field(pattern=r"^E\d+[a-z]?$|^custom$")
    title: str
    layers: list[Literal["L0", "L1", "L2", "L3"]] = Field(default_factory=list)
    budgets: LayerBudgets = Field(default_factory=LayerBudgets)
    mode: Mode = "inject"
    door: Literal["layers", "memory"] = Field(
        "layers", description="layers: the layer cake's ContextBuilder packs L0-L3; memory: "
        "the layers are read into a Memory and shown by Memory.context (inject) or reached "
        "with Memory's tools (tools), see bench/experiments/door.py")
    executor: ExecutorSettings = Field(default_factory=lambda: ExecutorSettings(
        executor="react", max_iters=3, interpreter="sandbox"))
    retrieval: RetrievalPolicy = Field(default_factory=RetrievalPolicy)
    seed_bank: bool = Field(False, description="start from the curated strategy pack")
    learn: bool = Field(False, description="judge, extract and write back after each task")
    judging: JudgingPolicy = Field(default_factory=JudgingPolicy)
    extraction: ExtractionPolicy = Field(default_factory=ExtractionPolicy)
    consolidation: ConsolidationPolicy | None = None
    forgetting: ForgettingPolicy | None = None
    rollouts: RolloutPolicy = Field(default_factory=RolloutPolicy)
    order_seed: int | None = Field(
        0, description="shuffle the tasks with this seed (None keeps the file's order)")

    @field_validator("layers")
    @classmethod
    def _unique(cls, layers: list[str]) -> list[str]:
        return sorted(set(layers))


def _override(data: dict[str, Any], assignment: str) -> None:
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ValueError(f"--set wants key=value, got {assignment!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a bare word is a string
    node = data
    *path, last = key.split(".")
    for part in path:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ValueError(f"--set {key}: {part!r} is not a group of settings")
        node = child
    node[last] = value


def load_config(name_or_path: str, overrides: list[str] | None = None) -> ExperimentConfig:
    """The config of experiment ``E1``..``E12``, or of a JSON file, with ``--set`` overrides.

    Raises:
        ValueError: an unknown experiment, an unreadable file, or an invalid config
            (the message names the file and the field).
    """
    path = CONFIG_DIR / f"{name_or_path}.json" if name_or_path in EXPERIMENTS \
        else Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"no experiment {name_or_path!r}: name one of "
                         f"{', '.join(EXPERIMENTS)} or a config file")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON config ({exc})") from exc
    for assignment in overrides or []:
        _override(data, assignment)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{path}: invalid experiment config:\n{exc}") from exc
