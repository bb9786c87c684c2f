"""Message content as the chat APIs send it: the text is read, nothing else is lost unsaid.

Content is a string, or a list of parts: plain strings, or typed objects of the OpenAI Chat
Completions API, the OpenAI Responses API or Anthropic's Messages API. Each part is one of:

* **text**, read and joined with newlines: plain strings, ``text`` (Chat, Anthropic),
  ``input_text`` and ``output_text`` (Responses), ``refusal`` (Chat, Responses: its
  ``refusal`` field);
* **not text**, skipped and named (see :attr:`Content.skipped`): media (``image_url``,
  ``input_audio``, ``file`` in Chat; ``input_image``, ``input_file``, ``input_audio`` in
  Responses; ``image``, ``document`` in Anthropic) and a model's private reasoning
  (``thinking``, ``redacted_thinking``, ``reasoning``, ``reasoning_text``,
  ``summary_text``): reasoning is not what was said, and redacted reasoning has no text;
* **tool plumbing**: calls (``tool_use``, ``server_tool_use``, ``mcp_tool_use``, rendered
  ``name(arguments)``) and results (``tool_result``, ``mcp_tool_result`` and every
  ``*_tool_result``, whose content is a string or parts, read the same way), kept apart in
  :attr:`Content.tool`.

Any other part is refused: a ``ValueError`` naming the part's position and its type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text",
              "refusal": "refusal"}
"""Part type -> the field that holds its text."""
MEDIA_PARTS = frozenset({"image_url", "input_audio", "file", "input_image", "input_file",
                         "image", "document"})
REASONING_PARTS = frozenset({"thinking", "redacted_thinking", "reasoning", "reasoning_text",
                             "summary_text"})
TOOL_CALL_PARTS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
TOOL_RESULT_PARTS = frozenset({"tool_result", "mcp_tool_result"})


@dataclass
class Content:
    """What a message's content holds: its own text, tool plumbing, and what was not read."""

    text: list[str] = field(default_factory=list)
    tool: list[str] = field(default_factory=list)
    """Text of tool calls (``name(arguments)``) and tool results."""
    skipped: list[str] = field(default_factory=list)
    """Types of the parts not read as text (media, reasoning), each named once, in order."""
    tool_parts: list[str] = field(default_factory=list)
    """Types of the tool parts, each named once, in order."""

    def skip(self, kind: str) -> None:
        if kind not in self.skipped:
            self.skipped.append(kind)

    def add_tool(self, kind: str, text: str) -> None:
        if kind not in self.tool_parts:
            self.tool_parts.append(kind)
        if text.strip():
            self.tool.append(text)


def read_content(content: Any, where: str = "content") -> Content:
    """The text, tool plumbing and skipped part types of a message's ``content``.

    Args:
        content: None, a string, or a list of parts (see the module).
        where: how errors name the content (``"content"``).

    Raises:
        ValueError: content of another type, or a part that is refused (names its position
            and type).
    """
    out = Content()
    _read_into(out, content, where)
    return out


def tool_call_text(name: Any, arguments: Any) -> str:
    """A tool call as text: ``name(arguments)``, arguments as given or as JSON."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)
    return f"{name if isinstance(name, str) else 'tool'}({args})"


def is_tool_result(kind: str) -> bool:
    """Whether a part or item type is a tool's result (not a call)."""
    return kind in TOOL_RESULT_PARTS or kind.endswith(("_tool_result", "_call_output"))


def _read_into(out: Content, content: Any, where: str) -> None:
    if content is None:
        return
    if isinstance(content, str):
        out.text.append(content)
        return
    if not isinstance(content, list | tuple):
        raise ValueError(f"{where} must be a string or a list of content parts, not "
                         f"{type(content).__name__}")
    for n, part in enumerate(content):
        _read_part(out, part, f"{where} part {n}")


def _read_part(out: Content, part: Any, where: str) -> None:
    if isinstance(part, str):
        out.text.append(part)
        return
    if not isinstance(part, dict):
        raise ValueError(f"{where} is a {type(part).__name__}, not a string or an object")
    kind = part.get("type")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f'{where} has no "type"')
    if kind in TEXT_PARTS:
        text = part.get(TEXT_PARTS[kind])
        if not isinstance(text, str):
            raise ValueError(f'{where} ({kind}) has no "{TEXT_PARTS[kind]}" string')
        out.text.append(text)
    elif kind in MEDIA_PARTS or kind in REASONING_PARTS:
        out.skip(kind)
    elif kind in TOOL_CALL_PARTS:
        out.add_tool(kind, tool_call_text(part.get("name"), part.get("input", {})))
    elif kind in TOOL_RESULT_PARTS or kind.endswith("_tool_result"):
        result = Content()
        _read_into(result, part.get("content"), f"{where} ({kind})")
        for skipped in result.skipped:
            out.skip(skipped)
        out.add_tool(kind, "\n".join(t for t in [*result.text, *result.tool] if t))
    else:
        raise ValueError(f"{where} has type {kind!r}, which memstrata does not read (it "
                         f"reads text, input_text, output_text, refusal and plain strings; "
                         f"skips media and reasoning; keeps tool calls and results apart)")
