"""What the compile tests share: a scripted model's replies to the optimizers' own prompts,
the tiny LoCoMo-format file and the CLI's models replaced by scripted ones."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def output_fields(system: str) -> list[str]:
    """The output fields a DSPy chat-format system prompt asks for."""
    block = re.search(r"Your output fields are:\n(.*?)(?:\n\n|$)", system, re.S)
    return re.findall(r"`(\w+)`", block[1]) if block else []


def optimizer_reply(system: str, schema: dict[str, Any] | None, *, text: str,
                    instruction: str) -> Any:
    """A reply to a prompt of an optimizer (not of the program under test): ``text`` in
    every field of a schema reply or of a chat-format one (``{}`` for GEPA's advice),
    ``instruction`` to a bare reflection prompt."""
    if schema is not None:
        return {k: [] if v.get("type") == "array" else {} if v.get("type") == "object"
                else text for k, v in schema.get("properties", {}).items()}
    names = output_fields(system)
    if not names:  # a bare reflection prompt
        return f"```\n{instruction}\n```"
    return "\n\n".join(f"[[ ## {n} ## ]]\n" + ("{}" if "advice" in n else text)
                       for n in names) + "\n\n[[ ## completed ## ]]"


def tiny_locomo(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    """``records`` written as a LoCoMo-format file."""
    path = tmp_path / "tiny_locomo.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def scripted_cli_models(monkeypatch: pytest.MonkeyPatch, scripted: Any,
                        reply: Callable[..., Any]) -> list[Any]:
    """Every model the CLI sets up is a scripted one answering with ``reply``; the handles
    made are listed."""
    import memstrata.programs as programs

    made: list[Any] = []

    def setup(*args: Any, **kwargs: Any) -> Any:
        made.append(scripted(reply))
        return made[-1]

    monkeypatch.setattr(programs, "setup_lm", setup)
    return made
