"""Typed final output: the terminal tool that carries the answer (``output_type=``).

``output_tool(T)`` builds the tool the model must call to finish — its schema is ``T``'s (a
Pydantic model, a dataclass, a ``TypedDict``; any other type is wrapped as ``{"result": T}``)
— and validates its arguments the way typed tools are validated (Pydantic, strict JSON mode).
``run(..., output_type=T)`` uses it: the session ends through that tool, an invalid answer
goes back to the model with the validation errors (bounded by ``max_reprompts``), and
``SessionResult.output`` holds the ``T`` value. Not a handler: the session's handler adapter
answers the tool's calls itself.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any, Final

import pydantic
from returns.result import Failure, Result, Success

from rma.vocabulary import JSON
from rma_shell.tools.function import format_validation_error
from rma_shell.tools.source import ToolSpec

DEFAULT_OUTPUT_TOOL: Final = "final_result"
ACCEPTED: Final = "Final answer received."


class OutputTool:
    """The terminal tool of a typed answer: ``spec`` to declare, ``validate`` for each call."""

    def __init__(
        self, output_type: Any, *, name: str = DEFAULT_OUTPUT_TOOL, description: str | None = None
    ) -> None:
        self.output_type = output_type
        self.name = name
        try:
            adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(output_type)
            schema = adapter.json_schema()
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
            raise TypeError(f"output_type {output_type!r} cannot be described as JSON ({exc})") from exc
        self._wrapped = schema.get("type") != "object" or "properties" not in schema
        if self._wrapped:
            wrapper = pydantic.create_model(
                f"{name}_arguments",
                __config__=pydantic.ConfigDict(extra="forbid"),
                result=(output_type, ...),
            )
            self._model: type[pydantic.BaseModel] | None = wrapper
            self._adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(wrapper)
            schema = wrapper.model_json_schema()
        else:
            self._model = None
            self._adapter = adapter
        schema = dict(schema)
        schema.pop("title", None)
        doc = inspect.getdoc(output_type) if inspect.isclass(output_type) else None
        own = doc if doc and not doc.startswith(("dict(", "Usage docs:", "A base class")) else None
        self.spec = ToolSpec(
            name=name,
            description=description
            or "Call this tool once to give your final answer: its arguments are the answer."
            + (f" {own}" if own else ""),
            input_schema=schema,
            # A repeated invalid answer gets its validation errors (and uses a re-prompt) on
            # every host: Local's duplicate guard must not answer it instead.
            repeatable=True,
        )

    # The declaration's fields, so ``tools=[..., output]`` works on every provider directly.
    @property
    def description(self) -> str:
        return self.spec.description

    @property
    def input_schema(self) -> Mapping[str, JSON]:
        return self.spec.input_schema

    @property
    def repeatable(self) -> bool:
        return True

    def validate(self, arguments: Mapping[str, Any]) -> Result[Any, str]:
        """The typed answer, or the validation errors to send back to the model."""
        try:
            text = json.dumps(dict(arguments), allow_nan=False)
            value = self._adapter.validate_json(text, strict=True)
        except pydantic.ValidationError as exc:
            return Failure(
                format_validation_error(self.name, exc)
                + f"\nCall {self.name} again with the corrected answer."
            )
        except (TypeError, ValueError) as exc:
            return Failure(f"invalid arguments for {self.name}: not a JSON object ({exc})")
        if self._wrapped:
            return Success(getattr(value, "result"))  # noqa: B009 - the wrapper's one field
        return Success(value)

    def __repr__(self) -> str:
        return f"OutputTool({self.name!r}, {self.output_type!r})"


def output_tool(
    output_type: Any, *, name: str = DEFAULT_OUTPUT_TOOL, description: str | None = None
) -> OutputTool:
    """The terminal tool for ``output_type`` — declare its ``spec`` on hosts whose tools are
    fixed remotely (a Claude agent's tools: add it to the ``AgentSpec``)."""
    return OutputTool(output_type, name=name, description=description)
