"""Secrets never reach a record: keys and tokens are masked before anything is written.

Three nets, applied to every string and mapping in a record: values under a secret-
sounding key (``api_key``, ``token``, ``authorization``...; in a mapping, whatever the
value's type, and in text, ``"api_key": "..."`` or ``password=...``), strings shaped like
known credentials (``sk-...``, ``Bearer ...``, AWS key ids, ``ghp_...``, Slack, Google and
Hugging Face tokens, a password in a URL), and the literal value of any environment
variable whose name says it holds a secret.

The promise. A secret that reaches memstrata through a **config**, the **LM's settings**,
a **prompt** (the task, an injected context), a **model output** (thoughts, answers, a
decision's reason), a **tool's arguments or refusal**, or an **exception** never reaches
the run records, their steps or the event log (``memory.runs`` redacts whatever it
writes, whoever calls it; ``Recorder`` redacts before it cuts a preview short, so a key
is never half kept), a JSONL export of runs (``export_jsonl``, ``memstrata runs
export``), or the CLI's output of them. A reconciler decision's reason is redacted
before it is stored with the decision's edges. The LM's settings are never recorded at
all (a run records the model's name). What a user stores **as memory** (a turn given
to ``Memory.add``, a note an agent writes with ``mem_add``, a fact extracted from a
turn) is user data and is kept, and exported by ``Memory.export``, as given: a memory
that silently rewrote what it was told would not be one; ``Memory.delete_all`` removes
it. ``memstrata bench reliability --only secrets`` checks all of this on every byte the
suite wrote.

Logs: :func:`redact_logs` masks secrets in every log record made after it is called,
whichever library logs it (at DEBUG the OpenAI SDK logs request headers and URLs, and
litellm logs whole prompts). ``setup_lm`` and ``wrap_lm`` call it, so it is in force from
the moment memstrata holds a model; an application that logs before that calls it
itself. It changes what records say, never which are made or where they go.

The rules live in ``memory.runs`` (``memory`` imports nothing of the project, and the
event log is written from ``memory`` too); this module is their public name.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from memstrata.memory.runs import (
    MASK,
    PATTERNS,
    SECRET_ENV,
    SECRET_KEY,
    env_secrets,
    redact,
    redact_text,
)

__all__ = ["MASK", "PATTERNS", "SECRET_ENV", "SECRET_KEY", "env_secrets", "redact",
           "redact_logs", "redact_text"]

_LOCK = threading.Lock()
_INSTALLED: list[Any] = []  # the factory redact_logs installed, once


def redact_logs() -> None:
    """From now on, every log record's message, traceback and stack are redacted as they
    are made (:func:`redact_text`), whoever logs. Idempotent; the factory it wraps
    (``logging.getLogRecordFactory()``) still makes the record."""
    with _LOCK:
        if _INSTALLED and logging.getLogRecordFactory() is _INSTALLED[0]:
            return
        base = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = base(*args, **kwargs)
            try:
                # Formatted now, args merged: a secret may sit in the args or the message.
                record.msg, record.args = redact_text(record.getMessage()), None
                if record.exc_info and not record.exc_text:
                    record.exc_text = redact_text(
                        logging.Formatter().formatException(record.exc_info))
                if record.stack_info:
                    record.stack_info = redact_text(record.stack_info)
            except Exception:  # a record that cannot be formatted stays as made
                pass
            return record

        logging.setLogRecordFactory(factory)
        _INSTALLED[:] = [factory]
