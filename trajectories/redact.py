"""Secrets never reach a record: keys and tokens are masked before anything is written.

Three nets, applied to every string and mapping in a record: values under a secret-
sounding key (``api_key``, ``token``, ``authorization``...), strings shaped like known
credentials (``sk-...``, ``Bearer ...``, AWS key ids, ``ghp_...``), and the literal value
of any environment variable whose name says it holds a secret.
"""

from __future__ import annotations

import os
import re
from typing import Any

MASK = "[REDACTED]"
SECRET_KEY = re.compile(r"(api[_-]?key|secret|token|password|passwd|authorization|"
                        r"credential|private[_-]?key|access[_-]?key)", re.I)
SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)$", re.I)
PATTERNS = [
    re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bBearer\s+[A-Za-z0-9._\-+/=]{12,}", re.I),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bxox[abpr]-[A-Za-z0-9\-]{10,}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}\b"),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"),
    re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),  # user:password in a URL
]
# Counts, flags and budgets named like secrets ("max_tokens") are not secrets.
_NOT_SECRET = re.compile(r"(max_|_count$|^n_|tokens$|tokenizer)", re.I)


def _env_secrets() -> list[str]:
    return sorted((v for k, v in os.environ.items() if SECRET_ENV.search(k) and len(v) >= 8),
                  key=len, reverse=True)


def redact_text(text: str, env_secrets: list[str] | None = None) -> str:
    """``text`` with every credential-shaped substring and secret env value masked."""
    for value in _env_secrets() if env_secrets is None else env_secrets:
        if value in text:
            text = text.replace(value, MASK)
    for pattern in PATTERNS:
        text = pattern.sub(MASK, text)
    return text


def redact(obj: Any, env_secrets: list[str] | None = None) -> Any:
    """A copy of a JSON-like value with secrets masked (keys, shapes, env values)."""
    secrets = _env_secrets() if env_secrets is None else env_secrets
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            name = str(key)
            if (SECRET_KEY.search(name) and not _NOT_SECRET.search(name)
                    and isinstance(value, str) and value):
                out[key] = MASK
            else:
                out[key] = redact(value, secrets)
        return out
    if isinstance(obj, list | tuple):
        return [redact(v, secrets) for v in obj]
    return obj
