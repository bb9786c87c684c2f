"""What a task suite is: the base class and the shared pieces of the two suites,
(a) SPARQL over Brick (``ontology_suite.py``) and (b) LoCoMo (``locomo_suite.py``).

A suite supplies the tasks in order, what the memory layers are made of (the L0 card,
L1 constraints, the L3 artefact, the curated L2 seed pack), the agent's signature and
tools, the deterministic checks a judge may use (never gold), and the grade against
gold (used only to report, never to learn).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
from pydantic import BaseModel, Field

from memstrata.memory.models import StrategyItem
from memstrata.memory.store.protocol import MemoryStore
from memstrata.packers.context import Mode
from memstrata.packers.layers import LayerBudgets
from memstrata.programs.executors import Executor, ExecutorRun, ExecutorSettings
from memstrata.programs.judging import Check
from memstrata.programs.refs import ProgramRef
from memstrata.tools import ToolSession

MEMORY_DESC = "what memory holds for this task (sense card, constraints, strategies, guide)"
# Tools the agent may use to reach L2/L3 itself in tools mode (seed 002's mode 2).
MEMORY_TOOLS = ("mem_search", "mem_get", "ctx_peek", "ctx_slice", "ctx_find")


class SuiteTask(BaseModel):
    """One task as the runner sees it."""

    id: str
    level: str
    question: str


class Grade(BaseModel):
    """A task's outcome against gold: reported, never learned from."""

    success: bool
    score: float = 0.0
    status: str = ""
    findings: list[str] = Field(default_factory=list)


class LayerSources(BaseModel):
    """The raw material of the layers, before packing (None or empty: layer has none)."""

    card: str | None = None
    constraints: list[str] = Field(default_factory=list)
    derived: list[str] = Field(default_factory=list)
    artefact: tuple[str, str] | None = None


class Suite(ABC):
    """A sequence of tasks with their layers, agent, checks and gold grading.

    ``program`` names the compiled program (``programs.compiled.BUILDERS``) that may stand
    in for the agent (``memstrata experiment --program FILE``); ``None``: the suite's
    agent is always the one built per run.
    """

    name: str
    scope: str
    user_id: str
    program: str | None = None

    @abstractmethod
    def tasks(self) -> list[SuiteTask]:
        """The tasks, in the suite's own order."""

    def prepare(self, store: MemoryStore) -> None:  # noqa: B027 - most suites need no data
        """Load what the tasks need into ``store`` (nothing by default)."""

    def sources(self, budgets: LayerBudgets | None = None) -> LayerSources:
        """The layers' raw material (none by default); ``budgets`` lets a source that is
        built to a size (the L0 card) be built to the run's."""
        return LayerSources()

    def seed_pack(self) -> list[StrategyItem]:
        """The curated strategies that seed the bank in E5-E8 (none by default)."""
        return []

    @abstractmethod
    def signature(self) -> type[dspy.Signature]:
        """The agent's signature: the task and a ``memory`` input in, one answer out."""

    @abstractmethod
    def tools(self, session: ToolSession, settings: ExecutorSettings, mode: Mode
              ) -> list[Callable[..., Any]]:
        """The agent's tools, bound to ``session`` so every call is logged."""

    def compiled_agent(self, path: str | Path, settings: ExecutorSettings, mode: Mode
                       ) -> tuple[Executor, ProgramRef]:
        """The compiled agent in the program file at ``path``, for a run with
        ``settings`` in ``mode``, and its reference (path and checked SHA-256).

        Raises:
            ValueError: this suite's agent takes no compiled program (the default), or
                the file does not fit (see the suite's own).
        """
        raise ValueError(f"the {self.name} suite's agent takes no compiled program (the "
                         "ontology suite's SPARQL agent does)")

    @abstractmethod
    def checks(self, task: SuiteTask, run: ExecutorRun) -> list[Check]:
        """Deterministic checks of an attempt that need no gold answer."""

    @abstractmethod
    def grade(self, task: SuiteTask, run: ExecutorRun) -> Grade:
        """The attempt against gold."""


def memory_tools(session: ToolSession, settings: ExecutorSettings, mode: Mode
                 ) -> list[Callable[..., Any]]:
    """The tools that reach L2/L3 in tools mode (none in inject mode)."""
    if mode != "tools":
        return []
    pool = session.handle_tools() if settings.tools == "handles" else session.naive_tools()
    return [t for t in pool if t.__name__ in MEMORY_TOOLS]


def load_seed(path: Path, user_id: str, scope: str) -> tuple[list[str], list[StrategyItem]]:
    """A curated seed file's constraint lines and strategies (tagged ``scope`` and seed)."""
    data = json.loads(path.read_text())
    items = [StrategyItem(user_id=user_id, title=s["title"], description=s["description"],
                          text=s["text"], polarity=s["polarity"], source="seed",
                          tags=[scope, "seed"]) for s in data.get("strategies", [])]
    return list(data.get("constraints", [])), items
