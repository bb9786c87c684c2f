"""Run records (config, steps, tool calls, retrieved ids, verdicts) and leakage figures.

``Recorder`` writes one run to the store's ``runs``/``run_steps`` tables, redacting
secrets and noting the git commit and the database state it read; ``export_jsonl``
writes runs out; ``Leakage`` holds the prompt-leakage instrumentation of a run.
"""

from .export import export_jsonl
from .leakage import Leakage, measure
from .provenance import code_version, git_commit
from .recorder import Recorder
from .redact import MASK, redact, redact_logs, redact_text

__all__ = ["MASK", "Leakage", "Recorder", "code_version", "export_jsonl", "git_commit",
           "measure", "redact", "redact_logs", "redact_text"]
