"""Model setup: the embedded engine's request mapping, clear errors, and metering."""

from __future__ import annotations

from typing import Any

import dspy
import pytest
from dspy.lm15 import Config, ContextLengthError, Message, Request

from memstrata.programs import ModelSetupError, setup_lm
from memstrata.programs.llama_engine import LlamaCppEngine, _response_format


class FakeLlama:
    """Stands in for ``llama_cpp.Llama``: records the call, returns a fixed completion."""

    def __init__(self, content: str = '{"answer": "x"}', error: Exception | None = None):
        self.content, self.error, self.calls = content, error, []

    def create_chat_completion(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.error:
            raise self.error
        return {"id": "c1", "choices": [{"message": {"content": self.content},
                                         "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 5}}

    def tokenize(self, data: bytes, add_bos: bool = False, special: bool = False) -> list[int]:
        return list(range(len(data.split())))

    def reset(self) -> None:
        self.calls.append("reset")


def _engine(tmp_path, llama: FakeLlama) -> LlamaCppEngine:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    engine = LlamaCppEngine(gguf)
    engine._llama = llama  # skip loading weights
    return engine


def test_schema_is_handed_to_llama_cpp_in_its_own_shape() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert _response_format({"type": "json_schema", "schema": schema}) == {
        "type": "json_object", "schema": schema}
    assert _response_format({"type": "json_object"}) == {"type": "json_object"}
    assert _response_format(None) is None


def test_bounds_llama_cpp_cannot_parse_are_lowered() -> None:
    from memstrata.programs.llama_engine import MAX_SCHEMA_LENGTH

    schema = {"type": "object", "properties": {
        "code": {"type": "string", "maxLength": 5000},
        "ids": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 40}},
        "notes": {"anyOf": [{"type": "string", "maxLength": 900}, {"type": "null"}]}}}
    props = _response_format({"type": "json_schema", "schema": schema})["schema"]["properties"]
    assert props["code"]["maxLength"] == MAX_SCHEMA_LENGTH
    assert props["ids"] == schema["properties"]["ids"]  # small bounds are kept as they are
    assert props["notes"]["anyOf"][0]["maxLength"] == MAX_SCHEMA_LENGTH
    assert schema["properties"]["code"]["maxLength"] == 5000  # the caller's schema untouched


def test_a_property_with_a_default_is_optional_for_the_grammar() -> None:
    # DSPy's strict schema requires every property; a grammar would then make a small
    # model fill in every optional field.
    fact = {"type": "object", "additionalProperties": False,
            "properties": {"subject": {"type": "string"},
                           "time": {"type": "string", "default": ""}},
            "required": ["subject", "time"]}
    schema = {"type": "object", "properties": {"facts": {"type": "array", "items": fact}},
              "required": ["facts"]}
    out = _response_format({"type": "json_schema", "schema": schema})["schema"]
    assert out["properties"]["facts"]["items"]["required"] == ["subject"]
    assert out["required"] == ["facts"]


def test_engine_maps_request_and_usage(tmp_path) -> None:
    llama = FakeLlama()
    engine = _engine(tmp_path, llama)
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    request = Request(model="local/m", system="be brief",
                      messages=(Message.user("hi"),),
                      config=Config(max_tokens=64, temperature=0.0,
                                    response_format={"type": "json_schema", "schema": schema}))
    response = engine.complete(request)
    call = llama.calls[0]
    assert call["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "hi"}]
    assert call["response_format"] == {"type": "json_object", "schema": schema}
    assert call["max_tokens"] == 64 and call["temperature"] == 0.0
    assert response.message.text == '{"answer": "x"}'
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 5)
    assert engine.count_tokens("three little words") == 3
    assert LlamaCppEngine.load_state(engine.dump_state()).model_path == engine.model_path


def test_prefix_cache_off_evaluates_every_prompt_whole(tmp_path) -> None:
    request = Request(model="local/m", messages=(Message.user("hi"),))
    for mode, resets in (("off", 2), ("last", 0), ("ram", 0)):
        llama = FakeLlama()
        engine = _engine(tmp_path, llama)
        engine.prefix_cache = mode
        engine.complete(request)
        engine.complete(request)
        assert llama.calls.count("reset") == resets
        assert LlamaCppEngine.load_state(engine.dump_state()).prefix_cache == mode


def test_engine_turns_a_window_overflow_into_a_context_length_error(tmp_path) -> None:
    engine = _engine(tmp_path, FakeLlama(error=ValueError(
        "Requested tokens (9000) exceed context window of 8192")))
    with pytest.raises(ContextLengthError, match="n_ctx=8192"):
        engine.complete(Request(model="local/m", messages=(Message.user("x"),)))


def test_embedded_lm_counts_calls_and_tokens(tmp_path) -> None:
    llama = FakeLlama('{"answer": "Oslo"}')
    handle = setup_lm("local/smollm2", engine=_engine(tmp_path, llama))
    assert handle.lm.supports_response_schema
    assert handle.tokenizer == "model"

    class Ask(dspy.Signature):
        """Answer."""

        question: str = dspy.InputField()
        answer: str = dspy.OutputField()

    with dspy.context(lm=handle.lm, adapter=dspy.JSONAdapter()):
        assert dspy.Predict(Ask)(question="where?").answer == "Oslo"
    usage = handle.meter.since(0)
    assert (usage.calls, usage.input_tokens, usage.output_tokens) == (1, 12, 5)
    assert "schema" in llama.calls[0]["response_format"]


def test_missing_gguf_file_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ModelSetupError, match="no GGUF model file"):
        setup_lm(f"local/{tmp_path / 'absent.gguf'}")


def test_unknown_provider_names_the_fix() -> None:
    with pytest.raises(ModelSetupError, match="provider/model"):
        setup_lm("nosuchprovider-xyz/some-model")


def test_missing_api_key_names_the_variable(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelSetupError, match="OPENAI_API_KEY"):
        setup_lm("openai/gpt-4o-mini")


def test_api_model_with_key_is_configured_without_any_call(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    handle = setup_lm("openai/gpt-4o-mini", max_tokens=100)
    assert handle.lm.model == "openai/gpt-4o-mini"
    assert handle.window >= 8192
    assert handle.count_tokens("hello world") > 0
    assert handle.meter.since(0).calls == 0


def test_local_server_needs_no_key() -> None:
    handle = setup_lm("ollama_chat/llama3.1", api_base="http://127.0.0.1:9")
    assert handle.lm.kwargs.get("api_base") == "http://127.0.0.1:9"
    assert handle.name == "ollama_chat/llama3.1"


def test_litellm_uses_its_bundled_cost_map_not_the_network() -> None:
    import os

    import memstrata

    assert memstrata.__version__
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
