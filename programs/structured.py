"""Structured prediction that never fails silently.

Every memstrata program predicts through ``StructuredPredict``: a ``dspy.Predict`` run
with ``CompactJSONAdapter`` (``dspy.JSONAdapter``, terser, keeping the fields' bounds),
which hands the output schema to any LM that declares ``supports_response_schema`` (the
embedded model, and API models with structured output), so decoding is constrained to
it. A parse failure gets one retry; as greedy decoding would repeat itself, the retry
samples (temperature 0.7), has twice the output budget (a JSON object cut off at
``max_tokens`` is the usual failure under a grammar) and a fresh ``rollout_id`` so no
cache replays the bad answer. A second failure raises ``ProgramParseError`` naming the
program, the model and the raw output.
"""

from __future__ import annotations

import json
import textwrap
import typing
from types import SimpleNamespace
from typing import Annotated, Any

import dspy
import pydantic
from dspy.adapters.json_adapter import _get_structured_outputs_response_format
from dspy.adapters.utils import format_field_value, serialize_for_json
from dspy.utils.exceptions import AdapterParseError

from .errors import ProgramParseError
from .lm import LOCAL_PREFIX


def _kind(annotation: Any) -> str:
    # Plain words for a field's type: small models read "list of text" better than
    # Python's typing repr.
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _kind(args[0])
    if origin is list:
        return f"list of {_kind(args[0])}" if args else "list"
    if origin is typing.Literal:
        return " or ".join(json.dumps(a) for a in args)
    names = {str: "text", bool: "true or false", int: "integer", float: "number"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _describe(name: str, field: Any) -> str:
    desc = (field.json_schema_extra or {}).get("desc", "")
    detail = f": {desc}" if desc and desc != f"${{{name}}}" else ""
    return f"{name} ({_kind(field.annotation)}{detail})"


def _label(name: str) -> str:
    return name.replace("_", " ").capitalize()


class CompactJSONAdapter(dspy.JSONAdapter):
    """``JSONAdapter`` with a short system prompt and an output schema that keeps bounds.

    Two departures from DSPy 3.4's JSONAdapter, both for small models:

    * the system message is the task, then one line per side naming the fields (~60
      tokens instead of ~350), and the inputs read as plain labelled text ("Question:
      ...") instead of ``[[ ## question ## ]]`` markers. With decoding constrained to
      the schema the walkthrough is not needed, and it costs a small model dearly:
      SmolLM2-135M scored F1 0.00-0.03 on 16 LoCoMo questions with DSPy's format and
      0.12 with plain labels, the same JSON schema constraining both;
    * the schema keeps each output field's ``maxLength``/``maxItems`` (DSPy builds it
      from the bare annotations), since under a grammar those bounds are what stop a
      small model from rambling until ``max_tokens`` cuts its JSON.

    (Overrides JSONAdapter hooks, one private: DSPy is pinned below 3.5.)
    """

    def format_system_message(self, signature: Any) -> str:
        """The task, the inputs, and the JSON keys to reply with, in order."""
        inputs = ", ".join(_describe(n, f) for n, f in signature.input_fields.items())
        outputs = ", ".join(_describe(n, f) for n, f in signature.output_fields.items())
        return (f"{textwrap.dedent(signature.instructions).strip()}\n\n"
                f"Inputs: {inputs}.\nReply in JSON with the keys, in order: {outputs}.")

    def format_user_message_content(self, signature: Any, inputs: dict[str, Any],
                                    prefix: str = "", suffix: str = "",
                                    main_request: bool = False) -> str:
        """Each input as ``Label:`` and its value (multi-line values start on a new line)."""
        parts = [prefix] if prefix else []
        for name, info in signature.input_fields.items():
            if name in inputs:
                value = str(format_field_value(field_info=info, value=inputs[name]))
                sep = "\n" if "\n" in value else " "
                parts.append(f"{_label(name)}:{sep}{value}")
        if suffix:
            parts.append(suffix)
        return "\n\n".join(parts).strip()

    def format_assistant_message_content(self, signature: Any, outputs: dict[str, Any],
                                         missing_field_message: Any = None) -> str:
        """A demo's outputs as one line of JSON (``{"a": 1, "b": [2]}``).

        That is the only shape llama-cpp-python's grammar lets a constrained model write
        (its JSON whitespace is at most one space, no newline). Shown DSPy's indented
        demos, the 1.5B Qwen began its reply the indented way, found the newline refused,
        and closed every list empty: ``{"facts": [], ...}`` on every chunk.
        """
        values = {name: _without_defaults(outputs.get(name, missing_field_message))
                  for name in signature.output_fields}
        return json.dumps(serialize_for_json(values), ensure_ascii=False)

    def _prepare_response_format(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any) -> None:
        super()._prepare_response_format(lm, lm_kwargs, signature)
        fmt = lm_kwargs.get("response_format")
        if fmt == {"type": "json_object"} and str(getattr(lm, "model", "")).startswith(
                LOCAL_PREFIX):
            # DSPy drops to schema-less JSON mode when an output is an open mapping (ReAct's
            # tool args): strict APIs reject open objects. llama.cpp's grammar takes them,
            # and without a schema a small model answers with the wrong keys.
            fields: dict[str, Any] = {
                name: (Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation,
                       ...)
                for name, f in signature.output_fields.items()}
            lm_kwargs["response_format"] = pydantic.create_model("Outputs", **fields)
            return
        if not (isinstance(fmt, type) and issubclass(fmt, pydantic.BaseModel)):
            return  # JSON mode, or no response_format at all: nothing to bound
        # DSPy's own builder (all keys required, no extra keys: what strict structured
        # outputs want), fed annotations that still carry their bounds.
        bounded = {name: SimpleNamespace(
            annotation=Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation,
            default=f.default) for name, f in signature.output_fields.items()}
        lm_kwargs["response_format"] = _get_structured_outputs_response_format(
            SimpleNamespace(output_fields=bounded), self.use_native_function_calling)


def _without_defaults(value: Any) -> Any:
    """``value`` with every pydantic model in it dumped without its default-valued fields."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    if isinstance(value, list):
        return [_without_defaults(v) for v in value]
    return value


class StructuredPredict(dspy.Module):
    """``dspy.Predict`` over JSON, with one retry and a specific error after it.

    Its one predictor is ``predict`` (``named_predictors()`` lists it as ``predict``, or
    ``<attr>.predict`` inside a program), so an optimizer sees and sets its demos and
    instructions like any ``dspy.Predict``'s; ``signature`` reads through to it.

    The adapter is this program's, not ``dspy.configure``'s: the prompt shape is part of
    the program (what its demos were written for), so a caller's global adapter does not
    silently change it. Set ``adapter`` (argument or attribute) to run it with another.

    Args:
        signature: the DSPy signature (a class with a docstring: small models answer a
            bare string signature with its literal placeholders).
        name: the program's name, used in errors and trajectories.
        max_tokens: this program's output budget, when it needs another than the LM's
            (an extractor's bounded JSON is longer than an answer).
        adapter: the adapter to format and parse with (default: ``CompactJSONAdapter()``).
    """

    def __init__(self, signature: type[dspy.Signature], name: str,
                 max_tokens: int | None = None, adapter: dspy.Adapter | None = None) -> None:
        super().__init__()
        self.predict = dspy.Predict(signature)
        self.name = name
        self.max_tokens = max_tokens
        self.adapter: dspy.Adapter = adapter or CompactJSONAdapter()

    @property
    def signature(self) -> type[dspy.Signature]:
        """The signature predicted (what ``dspy.RLM`` reads off its action predictor)."""
        return self.predict.signature

    def forward(self, **inputs: Any) -> dspy.Prediction:
        """Predict; on a parse failure retry once, then raise ``ProgramParseError``."""
        lm = dspy.settings.lm
        model = getattr(lm, "model", "the configured LM")
        last: AdapterParseError | None = None
        budget = self.max_tokens or int(getattr(lm, "kwargs", {}).get("max_tokens") or 256)
        first = {"max_tokens": self.max_tokens} if self.max_tokens else {}
        retry = {"rollout_id": 1, "temperature": 0.7, "max_tokens": 2 * budget}
        for config in (first, retry):
            with dspy.context(adapter=self.adapter):
                try:
                    return self.predict(**inputs, config=config)
                except AdapterParseError as exc:
                    last = exc
        assert last is not None
        raise ProgramParseError(self.name, model, str(last.lm_response or ""), last)
