"""DSPy programs and the model setup they run on.

``setup_lm`` turns a model choice (``local/smollm2`` or any litellm ``provider/model``)
into a metered DSPy LM; ``QA``, ``Extractor``, ``Judge`` and ``AnswerJudge`` are the
programs, each predicting structured output with one retry and a specific error;
``run_executor`` runs RLM, ReAct or the scratchpad over a tool session, recorded;
``PersonalAnswerer`` routes a question, verifies who did what, then answers with ``QA``,
returning every answer with its provenance; ``Reconciler`` decides whether one name in
two conversations is one person (MERGE) or two (SEPARATE).
"""

from .answer import AnswerWithProvenance, PersonalAnswerer
from .errors import ModelSetupError, ProgramParseError
from .executors import ExecutorRun, ExecutorSettings, run_executor
from .extractor import Extractor
from .judge import AnswerJudge, Judge
from .lm import EMBEDDED, ModelHandle, setup_lm, wrap_lm
from .meter import CallMeter, CallRecord, Usage
from .qa import ABSTAIN_ANSWER, QA
from .reconciler import ReconcileDecision, Reconciler, ReconcilerSettings

__all__ = [
    "ABSTAIN_ANSWER", "EMBEDDED", "QA", "AnswerJudge", "AnswerWithProvenance", "CallMeter",
    "CallRecord", "ExecutorRun", "ExecutorSettings", "Extractor", "Judge", "ModelHandle",
    "ModelSetupError", "PersonalAnswerer", "ProgramParseError", "ReconcileDecision",
    "Reconciler", "ReconcilerSettings", "Usage", "run_executor", "setup_lm", "wrap_lm",
]
