"""DSPy programs and the model setup they run on.

``setup_lm`` turns a model choice (``local/smollm2`` or any litellm ``provider/model``)
into a metered DSPy LM; ``QA``, ``Extractor``, ``Judge`` and ``AnswerJudge`` are the
programs, each predicting structured output with one retry and a specific error;
``run_executor`` runs RLM, ReAct or the scratchpad over a tool session, recorded.
"""

from .errors import ModelSetupError, ProgramParseError
from .executors import ExecutorRun, ExecutorSettings, run_executor
from .extractor import ExtractedFact, Extractor, Fact
from .judge import AnswerJudge, Judge
from .lm import EMBEDDED, ModelHandle, setup_lm, wrap_lm
from .meter import CallMeter, CallRecord, Usage
from .qa import ABSTAIN_ANSWER, QA

__all__ = [
    "ABSTAIN_ANSWER", "EMBEDDED", "QA", "AnswerJudge", "CallMeter", "CallRecord",
    "ExecutorRun", "ExecutorSettings", "ExtractedFact", "Extractor", "Fact", "Judge",
    "ModelHandle", "ModelSetupError", "ProgramParseError", "Usage", "run_executor", "setup_lm",
    "wrap_lm",
]
