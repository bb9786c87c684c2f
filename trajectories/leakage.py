"""Prompt-leakage figures for one run: how much of the environment leaked into prompts.

"A lot of RLM quality is downstream of the shape of information you let leak back into
the iterative prompt" (seed 002): these are the numbers that show that shape.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field


class Leakage(BaseModel):
    """Per-run leakage instrumentation.

    Attributes:
        iterations: action steps the executor took.
        context_chars_per_iteration: characters of the prompt sent at each iteration.
        context_chars_mean: their mean (0 when there were none).
        stdout_chars: characters the agent's code printed, over the run.
        variables_info_chars: size of the variables summary shown to the model each
            iteration.
        tool_calls: tool calls made.
        tool_return_chars: characters those calls returned, in total.
        large_returns: tool returns of at least ``large_return_threshold`` characters.
        large_return_threshold: the X in "returns over X characters".
        sub_calls: LLM calls made from inside the agent's code (``llm_query``...).
        llm_calls: every LLM call of the run, sub-calls included.
    """

    iterations: int = 0
    context_chars_per_iteration: list[int] = Field(default_factory=list)
    context_chars_mean: float = 0.0
    stdout_chars: int = 0
    variables_info_chars: int = 0
    tool_calls: int = 0
    tool_return_chars: int = 0
    large_returns: int = 0
    large_return_threshold: int = 2000
    sub_calls: int = 0
    llm_calls: int = 0


def measure(*, context_chars: Sequence[int], stdout_chars: int, variables_info_chars: int,
            tool_return_sizes: Sequence[int], large_return_threshold: int, sub_calls: int,
            llm_calls: int) -> Leakage:
    """Assemble the figures from what an executor observed."""
    contexts = [int(c) for c in context_chars]
    return Leakage(
        iterations=len(contexts),
        context_chars_per_iteration=contexts,
        context_chars_mean=round(sum(contexts) / len(contexts), 1) if contexts else 0.0,
        stdout_chars=stdout_chars,
        variables_info_chars=variables_info_chars,
        tool_calls=len(tool_return_sizes),
        tool_return_chars=sum(tool_return_sizes),
        large_returns=sum(1 for s in tool_return_sizes if s >= large_return_threshold),
        large_return_threshold=large_return_threshold,
        sub_calls=sub_calls,
        llm_calls=llm_calls,
    )
