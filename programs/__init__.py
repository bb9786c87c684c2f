"""DSPy programs and the model setup they run on.

``setup_lm`` turns a model choice (``local/smollm2`` or any litellm ``provider/model``)
into a metered DSPy LM; ``QA``, ``Extractor``, ``Judge`` and ``AnswerJudge`` are the
programs, each predicting structured output with one retry and a specific error.
"""

from .errors import ModelSetupError, ProgramParseError
from .extractor import ExtractedFact, Extractor, Fact
from .judge import AnswerJudge, Judge
from .lm import EMBEDDED, ModelHandle, setup_lm
from .meter import CallMeter, CallRecord, Usage
from .qa import ABSTAIN_ANSWER, QA

__all__ = [
    "ABSTAIN_ANSWER", "EMBEDDED", "QA", "AnswerJudge", "CallMeter", "CallRecord", "ExtractedFact",
    "Extractor", "Fact", "Judge", "ModelHandle", "ModelSetupError", "ProgramParseError", "Usage",
    "setup_lm",
]
