"""What the LoCoMo QA benchmark's modules share: LoCoMo's answer style, the settings of a
run and the answer record each system's answer is cached as."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, SerializeAsAny, model_validator

from memstrata.formats.locomo import ABSTAIN_ANSWER, ABSTAIN_CUE
from memstrata.programs.answer import AnswerWithProvenance
from memstrata.programs.qa import AnswerStyle
from memstrata.programs.routed_answer import RoutedAnswer

from .locomo import LOCOMO_DATE_STYLE

LOCOMO_STYLE = AnswerStyle(date_style=LOCOMO_DATE_STYLE, abstain_answer=ABSTAIN_ANSWER,
                           abstain_prompt=ABSTAIN_CUE, example_ids="D")
"""LoCoMo's answer-key conventions for ``QA`` and the packers: long dates ("8 May 2023"),
the model taught to say "Not mentioned", answering "Not mentioned in the conversation.",
worked examples with ids shaped like LoCoMo's (``D3:7``)."""


class QASettings(BaseModel):
    """The knobs of a run; any change starts a fresh cache key."""

    budget: int = 600
    """Tokens of memories packed for ``memstrata`` and ``naive_rag`` (see ``for_model``)."""
    retrieve_k: int = 40
    """Hits memstrata retrieves before packing (the packer keeps what fits)."""
    naive_k: int = 10
    """Turns naive RAG takes (then cut to the same budget)."""
    margin: int = 64
    """Tokens kept free in the window beyond the measured prompt scaffold, the longest
    question and the answer (chat templates add a few tokens per message)."""
    style: AnswerStyle = Field(default_factory=lambda: LOCOMO_STYLE)
    """How every system's memories and answers write dates and abstain (LoCoMo's)."""

    @classmethod
    def for_model(cls, name: str, **overrides: Any) -> QASettings:
        """Defaults for a model: the 135M SmolLM2 reads best from a few lines.

        On LoCoMo dev questions SmolLM2-135M scored F1 0.12-0.15 with 120-160 memory
        tokens and 0.07-0.12 with 250-600 (40-80 questions a setting): past a few lines,
        more memories distract it more than they inform it. Other models get 600.
        """
        if name == "local/smollm2":
            overrides.setdefault("budget", 200)
        return cls(**overrides)


class Answer(BaseModel):
    """One system's answer to one question, with its cost (the cached record)."""

    key: str
    system: str
    qid: str
    answer: str
    evidence: list[str] = []
    abstained: bool = False
    error: str | None = None
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    context_tokens: int = 0
    packed: list[str] = []
    """Ids of the turns a baseline showed the model (memstrata's and the door's are in
    their ``provenance``; ``qa_scores.shown`` reads either)."""
    judge: dict[str, bool] | None = None
    # SerializeAsAny: memory_routed's RoutedAnswer keeps its path and intent in the cache.
    provenance: SerializeAsAny[AnswerWithProvenance] | None = None
    """memstrata's route, verification and evidence (None for the baselines and old caches);
    a :class:`RoutedAnswer`, with its path and intent, for ``memory_routed``."""

    @model_validator(mode="before")
    @classmethod
    def _routed(cls, data: Any) -> Any:
        # Read back from the cache, a routed answer's provenance is its own type again
        # (the field's declared type would drop its path and intent).
        if (isinstance(data, dict) and data.get("system") == "memory_routed"
                and isinstance(data.get("provenance"), dict)):
            data = {**data, "provenance": RoutedAnswer.model_validate(data["provenance"])}
        return data


__all__ = ["LOCOMO_STYLE", "Answer", "QASettings"]
