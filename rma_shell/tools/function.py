"""Tools from typed Python functions: ``@tool`` builds a ``ToolSpec`` from a signature.

The tool's name is the function's, its description the docstring's summary and body, and its
JSON schema comes from the parameters' type hints (nested Pydantic models, dataclasses,
TypedDicts, enums, ``Optional``, ``Literal``, defaults) with per-parameter descriptions from the
docstring's ``Args:`` (Google), ``:param x:`` (Sphinx) or NumPy section. Pydantic builds the
schema and validates the model's arguments — in strict JSON mode, so ``{"a": "2"}`` for a
``float`` is refused rather than coerced: the model is told what it got wrong. Parameters
annotated ``SessionInfo`` or ``ToolCall`` are filled in by rma and never shown to the model.

Not a toolbox: timeouts, truncation and routing by name are ``rma_shell.tools.toolbox``'s.
Needs the ``tools`` extra (``pip install "rma-agents[tools]"``: pydantic, docstring-parser).
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Any, overload

import attrs
from returns.result import Failure, Result, Success

from rma.content import Document, Image, is_rich
from rma.vocabulary import JSON, SessionInfo
from rma_shell.tools.source import ToolOutput, ToolSpec

try:
    import docstring_parser
    import pydantic
    import pydantic_core
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "typed tools need pydantic and docstring-parser: pip install 'rma-agents[tools]'"
    ) from exc

_MAX_GOT = 200


@attrs.frozen
class ToolCall:
    """What a tool function gets when it annotates a parameter ``ToolCall``: the tool's name,
    the run's ``context=`` object and the session's info."""

    name: str
    context: object
    info: SessionInfo


class FunctionTool:
    """A typed function as a tool: its ``spec``, argument validation and the call.

    Still callable as the plain function (``add(1, 2)``), so it stays unit-testable.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        strict: bool = False,
        timeout: float | None = None,
        requires_approval: bool | Callable[[Mapping[str, Any]], bool] = False,
        at_most_once: bool = False,
        repeatable: bool = False,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"@tool needs a function, got {type(fn).__name__}")
        if timeout is not None and not (isinstance(timeout, int | float) and 0 < timeout < float("inf")):
            raise ValueError(f"tool timeout must be a positive number of seconds or None, got {timeout!r}")
        if not (isinstance(requires_approval, bool) or callable(requires_approval)):
            raise TypeError(
                f"requires_approval must be a bool or a function of the arguments, got {requires_approval!r}"
            )
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or type(fn).__name__
        self.requires_approval = requires_approval
        """True, or a function of the call's arguments returning True, when a call waits for a
        person's approval (in a journal: ``approve``) before it runs."""
        self.at_most_once = bool(at_most_once)
        """A call that started and left no result (the process died) is never run again: the
        model is told it was interrupted. Otherwise it runs again with the same idempotency key."""
        self.repeatable = bool(repeatable)
        """Identical calls each run: Local's duplicate-call guard (L-16) leaves this tool alone."""
        self.timeout = None if timeout is None else float(timeout)
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - an async __call__ counts
        )
        doc = docstring_parser.parse(inspect.getdoc(fn) or "")
        self.model, self.injected = _arguments_model(fn, self.name, doc, _decorating_locals())
        schema = _clean_schema(self.model.model_json_schema())
        if strict:
            schema = strict_schema(schema)
        summary = "\n\n".join(part for part in (doc.short_description, doc.long_description) if part)
        self.spec = ToolSpec(
            name=self.name,
            description=description if description is not None else summary,
            input_schema=schema,
            strict=strict,
            repeatable=self.repeatable,
        )
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    # The declaration's fields, so ``tools=[add, lookup]`` works on every provider directly.
    @property
    def description(self) -> str:
        return self.spec.description

    @property
    def input_schema(self) -> Mapping[str, JSON]:
        return self.spec.input_schema

    @property
    def strict(self) -> bool:
        return self.spec.strict

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"

    def validate(self, arguments: Mapping[str, Any]) -> Result[dict[str, Any], str]:
        """The function's keyword arguments, or the text telling the model what is wrong."""
        try:
            text = json.dumps(dict(arguments), allow_nan=False)
            parsed = self.model.model_validate_json(text, strict=True)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, pydantic.ValidationError):
                return Failure(format_validation_error(self.name, exc))
            return Failure(f"invalid arguments for {self.name}: not a JSON object ({exc})")
        return Success({field: getattr(parsed, field) for field in type(parsed).model_fields})

    def needs_approval(self, arguments: Mapping[str, Any]) -> bool:
        rule = self.requires_approval
        return bool(rule(dict(arguments))) if callable(rule) else bool(rule)

    def inject(self, kwargs: dict[str, Any], call: ToolCall) -> dict[str, Any]:
        for param, what in self.injected.items():
            kwargs[param] = call.info if what == "info" else call
        return kwargs


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
    timeout: float | None = None,
    requires_approval: bool | Callable[[Mapping[str, Any]], bool] = False,
    at_most_once: bool = False,
    repeatable: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
    timeout: float | None = None,
    requires_approval: bool | Callable[[Mapping[str, Any]], bool] = False,
    at_most_once: bool = False,
    repeatable: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a typed function a tool: ``@tool`` or ``@tool(name=..., strict=True, timeout=5)``.

    ``strict=True`` asks hosts that support it (OpenAI-compatible servers) to hold the model
    to the schema; the schema is then made strict-compatible (every property required, optional
    ones nullable, no additional properties). ``timeout`` (seconds) bounds each call: past it
    the call is cancelled and the model gets an error result. ``requires_approval`` (True, or
    a function of the arguments) makes a call wait for ``approve`` in the run's journal;
    ``at_most_once`` keeps a call the process died in from running again (docs/durable.md);
    ``repeatable=True`` lets identical calls each run where Local would answer a repeat with
    its duplicate directive (a clock, a status poll).
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "strict": strict,
        "timeout": timeout,
        "requires_approval": requires_approval,
        "at_most_once": at_most_once,
        "repeatable": repeatable,
    }
    if fn is not None:
        return FunctionTool(fn, **options)
    return lambda f: FunctionTool(f, **options)


def serialise(value: object) -> ToolOutput:
    """A tool function's return value as what the model reads: text as is, ``Success``/
    ``Failure`` as they are, a rich result (an ``Image``, a ``Document``, a list of parts) as
    its list of parts, anything JSON can hold (models, dataclasses, dicts, lists,
    numbers, enums, dates) as JSON text."""
    if isinstance(value, str):
        return value
    if isinstance(value, Success | Failure):
        return value
    if isinstance(value, Image | Document):  # a rich result: the handler renders it
        return [value]
    if isinstance(value, list | tuple) and is_rich(value):
        return list(value)
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError:
        return Failure(f"the tool returned a {type(value).__name__}, which cannot be serialised to JSON")


def format_validation_error(tool_name: str, exc: pydantic.ValidationError) -> str:
    """One line per bad field, the same text on every host: ``- a: Input should be … (got "2")``."""
    lines = [f"invalid arguments for {tool_name}:"]
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error["loc"]) or "(arguments)"
        line = f"- {loc}: {error['msg']}"
        if error["type"] not in ("missing", "extra_forbidden") and "input" in error:
            got = json.dumps(error["input"], default=repr)
            line += f" (got {got if len(got) <= _MAX_GOT else got[:_MAX_GOT] + '…'})"
        lines.append(line)
    return "\n".join(lines)


def _decorating_locals() -> dict[str, Any]:
    """The local names where ``@tool`` (or ``FunctionTool(...)``) was applied: the first frame
    outside this module. Under ``from __future__ import annotations`` a parameter's annotation
    is a string, and a type defined in the enclosing function is found only there."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back  # type: ignore[assignment]
    return dict(frame.f_locals) if frame is not None else {}


def _type_hints(fn: Callable[..., Any], name: str, local_names: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters' type hints, string annotations resolved in the function's module and,
    failing that, where the decorator was applied; else a ``TypeError`` saying how to fix it."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except NameError:
        pass
    except (TypeError, ValueError, AttributeError, SyntaxError) as exc:
        raise TypeError(f"tool {name}: cannot read its signature and type hints ({exc})") from exc
    try:
        return typing.get_type_hints(fn, localns=dict(local_names), include_extras=True)
    except (TypeError, ValueError, AttributeError, SyntaxError) as exc:
        raise TypeError(f"tool {name}: cannot read its signature and type hints ({exc})") from exc
    except NameError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        raise TypeError(
            f"tool {name}: the annotation {missing!r} names a type that is neither in its module nor "
            "where @tool was applied (under `from __future__ import annotations` annotations are "
            "strings, resolved when the tool is built). Define the type at module level, or before "
            "the @tool line in the same function, or apply @tool where the type is visible"
        ) from exc


def _arguments_model(
    fn: Callable[..., Any],
    name: str,
    doc: docstring_parser.Docstring,
    local_names: Mapping[str, Any] | None = None,
) -> tuple[type[pydantic.BaseModel], dict[str, str]]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"tool {name}: cannot read its signature and type hints ({exc})") from exc
    hints = _type_hints(fn, name, local_names or {})
    described = {p.arg_name: p.description for p in doc.params if p.description}
    fields: dict[str, Any] = {}
    injected: dict[str, str] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name}: *{param.name} / **{param.name} cannot be declared to a model")
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(
                f"tool {name}: parameter {param.name} is positional-only; tools are called by name"
            )
        annotation = hints.get(param.name, Any)
        args = typing.get_args(annotation)
        if len(args) == 2 and type(None) in args:  # ``X | None`` injects like ``X``
            plain = next(a for a in args if a is not type(None))
            if plain is SessionInfo or plain is ToolCall:
                annotation = plain
        if annotation is SessionInfo:
            injected[param.name] = "info"
            continue
        if annotation is ToolCall:
            injected[param.name] = "call"
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, pydantic.Field(default, description=described.get(param.name)))
    try:
        model = pydantic.create_model(
            f"{name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
        model.model_json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
        raise TypeError(f"tool {name}: its parameters cannot be described as JSON ({exc})") from exc
    return model, injected


def _clean_schema(schema: dict[str, Any]) -> dict[str, JSON]:
    """Drop the generated model's own title (noise to the model); keep everything else."""
    schema = dict(schema)
    schema.pop("title", None)
    schema.setdefault("properties", {})
    return schema


def strict_schema(schema: Mapping[str, Any]) -> dict[str, JSON]:
    """A copy that OpenAI-style strict mode accepts: every object closed and fully required,
    optional properties made nullable instead of absent."""

    def visit(node: Any) -> Any:
        if isinstance(node, list):
            return [visit(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {key: visit(value) for key, value in node.items()}
        if out.get("type") == "object" and "properties" in out:
            props: dict[str, Any] = out["properties"]
            required = set(out.get("required", ()))
            for key, prop in list(props.items()):
                if key not in required:
                    prop = {k: v for k, v in prop.items() if k != "default"}
                    props[key] = {"anyOf": [prop, {"type": "null"}]} if "anyOf" not in prop else prop
                    if "anyOf" in prop and {"type": "null"} not in prop["anyOf"]:
                        props[key] = {**prop, "anyOf": [*prop["anyOf"], {"type": "null"}]}
            out["required"] = list(props)
            out["additionalProperties"] = False
        return out

    result: dict[str, JSON] = visit(dict(schema))
    return result
