"""The shared vocabulary: frozen values every provider normalizes into and every result is made of.

Raw provider events stay raw (decoded JSON values) and travel beside the normalized fields:
normalization is additive, never lossy. Every value here is JSON-encodable through
``rma.codec_json`` (D-7). This module holds data only — no loop logic, no I/O.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from rma.content import Part, content_parts, text_of

JSON = Any
"""A decoded JSON value (dict, list, str, int, float, bool or None)."""


def _json_tuple(items: Iterable[JSON]) -> tuple[JSON, ...]:
    return tuple(items)


def _optional_json_tuple(items: Iterable[JSON] | None) -> tuple[JSON, ...] | None:
    return None if items is None else tuple(items)


def _uses_tuple(items: Iterable[ToolUse]) -> tuple[ToolUse, ...]:
    return tuple(items)


def _frozen_map(value: Mapping[str, JSON]) -> Mapping[str, JSON]:
    """A read-only copy: metadata handed to user code must not leak back into the session."""
    return MappingProxyType(dict(value))


class Terminal(enum.StrEnum):
    """The canonical terminal vocabulary, identical for every provider (P-5)."""

    END_TURN = "end_turn"
    REQUIRES_ACTION = "requires_action"
    TERMINATED = "terminated"


def _nonneg(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative int, got {value!r}")


@attrs.frozen
class Usage:
    """Token usage. Cache fields are filled where the provider reports them (D-1)."""

    input_tokens: int = attrs.field(default=0, validator=_nonneg)
    output_tokens: int = attrs.field(default=0, validator=_nonneg)
    cache_read_input_tokens: int = attrs.field(default=0, validator=_nonneg)
    cache_creation_input_tokens: int = attrs.field(default=0, validator=_nonneg)
    raw: tuple[JSON, ...] = attrs.field(default=(), converter=_json_tuple)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.raw + other.raw,
        )


def _required_str(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} is required and must be a non-empty string, got {value!r}")


def _input_map(value: object) -> Mapping[str, JSON]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"ToolUse.input must be a mapping, got {type(value).__name__}")
    return value


@attrs.frozen
class ToolUse:
    """A tool call the model asked for. ``id`` may be None for providers without ids (D-2).

    ``input_error`` is set when the model's input cannot be a tool's input — it does not parse
    to a JSON object, or it nests deeper than ``MAX_TOOL_INPUT_DEPTH`` — and says so in words
    for the model. Such a use is never run: the session answers it with ``input_error`` as an
    ``is_error`` result the model sees (as Local answers bad arguments), and ``input`` is ``{}``.
    """

    id: str | None
    name: str = attrs.field(validator=_required_str)
    # Mappings are not hashable: equality compares the input, hashing leaves it out.
    input: Mapping[str, JSON] = attrs.field(factory=dict, converter=_input_map, hash=False)
    input_error: str | None = None


MAX_TOOL_INPUT_DEPTH = 100
"""How deeply a tool input may nest objects and arrays. Schemas a model is given nest a few
levels; hundreds of levels are an attack or a broken model, and would exhaust the stack of
whatever walks the value next (a deep copy for the handler, an encoder, the handler itself)."""

INVALID_TOOL_INPUT_TEMPLATE = (
    "The input you sent to {name} is not a valid JSON object ({reason}). You sent: {raw}. "
    "Call {name} again with a single JSON object that matches its input schema."
)
"""The ``is_error`` text a rejected tool input is answered with (Local's wording for arguments)."""

_RAW_PREVIEW_CHARS = 200


def tool_input_problem(value: object) -> str | None:
    """Why ``value`` cannot be a tool's input (not a JSON object, nested too deeply), or None.

    Iterative, so a value of any depth is judged without recursion.
    """
    if not isinstance(value, Mapping):
        return f"expected a JSON object, got {_json_kind(value)}"
    stack: list[tuple[Mapping[str, JSON] | list[JSON] | tuple[JSON, ...], int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_TOOL_INPUT_DEPTH:
            return f"nested more than {MAX_TOOL_INPUT_DEPTH} levels deep"
        for child in item.values() if isinstance(item, Mapping) else item:
            if isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1))
    return None


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


def rejected_tool_input(name: str, reason: str, raw: object) -> str:
    """The words a rejected input is answered with, quoting (the start of) what the model sent."""
    text = raw if isinstance(raw, str) else _preview_json(raw)
    if len(text) > _RAW_PREVIEW_CHARS:
        text = text[:_RAW_PREVIEW_CHARS] + "…"
    return INVALID_TOOL_INPUT_TEMPLATE.format(name=name, reason=reason, raw=text)


def _preview_json(value: object) -> str:
    try:
        return json.dumps(value, default=str)
    except (ValueError, TypeError, RecursionError):
        return "(not shown: nested too deeply)"


@attrs.frozen
class ToolResult:
    """What a handler returned for one tool use (D-3): its text, and its rich ``content``.

    ``content`` is empty for a text result. A rich result (``rma.content``: text, images,
    documents) holds its ordered parts there and, in ``text``, their text as a text-only
    reader sees it (``rma.content.text_of``); hosts render ``content`` (``ToolResult.of``
    builds one).
    """

    tool_use_id: str | None
    text: str = ""
    is_error: bool = False
    content: tuple[Part, ...] = attrs.field(
        default=(), converter=content_parts, metadata={"rma.codec_json.omit_empty": True}
    )

    @classmethod
    def of(cls, tool_use_id: str | None, parts: Iterable[Part], is_error: bool = False) -> ToolResult:
        """A rich result of ``parts``; plain text alone stays a text result."""
        parts = content_parts(parts)
        if all(isinstance(p, str) for p in parts):
            return cls(tool_use_id, "".join(str(p) for p in parts), is_error)
        return cls(tool_use_id, text_of(parts), is_error, parts)


@attrs.frozen
class TurnResult:
    """One turn, normalized: the raw events verbatim plus what the loop needs (D-4, P-4)."""

    terminal: Terminal = attrs.field(default=Terminal.TERMINATED, converter=Terminal)
    stop_reason: JSON = None
    text: str = ""
    custom_tool_uses: tuple[ToolUse, ...] = attrs.field(default=(), converter=_uses_tuple)
    server_tool_uses: tuple[JSON, ...] = attrs.field(default=(), converter=_json_tuple)
    usage: Usage | None = None
    events: tuple[JSON, ...] = attrs.field(default=(), converter=_json_tuple)


@attrs.frozen
class SessionResult:
    """What a request ended with (D-5, S-61).

    ``text`` is the final turn's text (the decision on S-62 — see docs/decisions.md);
    ``reason`` says why a ``terminated`` result was produced by the library (``halted``,
    ``max_turns_exceeded``, ``unresolved_requires_action``, ``guard_failed``,
    ``no_terminal_tool``) and is None when the provider itself ended the request (S-79).
    """

    terminal: Terminal = attrs.field(default=Terminal.TERMINATED, converter=Terminal)
    stop_reason: JSON = None
    session_id: str | None = None
    text: str = ""
    custom_tool_uses: tuple[ToolUse, ...] = attrs.field(default=(), converter=_uses_tuple)
    server_tool_uses: tuple[JSON, ...] = attrs.field(default=(), converter=_json_tuple)
    usage: Usage = attrs.field(factory=Usage)
    turns: int = 0
    events: tuple[JSON, ...] = attrs.field(default=(), converter=_json_tuple)
    transcript: tuple[JSON, ...] | None = attrs.field(default=None, converter=_optional_json_tuple)
    reason: str | None = None
    resumed: bool = False
    output: Any = attrs.field(default=None, eq=False)
    """The typed final answer when the run asked for one (``output_type=``), else None. Set by
    the shell from the validated terminal-tool call; not part of the value (a replay, which
    folds the log without the type, gives None)."""


@attrs.frozen
class SessionInfo:
    """Session identity handed to handlers (D-6, S-17). Grows by fields, never by arity."""

    session_id: str | None = None
    provider: str | None = None
    metadata: Mapping[str, JSON] = attrs.field(factory=dict, converter=_frozen_map, hash=False)
    tool_use_id: str | None = None
    """In a tool call's info: the call's tool-use id (None outside a tool call)."""
    idempotency_key: str | None = None
    """In a tool call's info: ``"<scope>:<tool_use_id>"``, the same on every attempt of one call —
    across a journal's ``resume`` and a Temporal retry — so a side-effecting tool can pass it to
    the system it changes (a payment's idempotency key, an upsert's id) and be applied once. The
    scope is the journal key or workflow id when there is one, else the host's session id."""
    attempt: int = 1
    """In a tool call's info: 1 on the call's first run; 2, 3, … when a resumed session or a
    retried activity runs a call again whose earlier run started but left no recorded result."""


def call_info(info: SessionInfo, tool_use_id: str, scope: str | None, attempt: int = 1) -> SessionInfo:
    """``info`` for one tool call: its id, idempotency key (under ``scope``, else the session id)
    and attempt."""
    prefix = scope if scope is not None else info.session_id
    key = f"{prefix}:{tool_use_id}" if prefix else tool_use_id
    return attrs.evolve(info, tool_use_id=tool_use_id, idempotency_key=key, attempt=attempt)


def _nonempty_str(_inst: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"outcome.{attribute.name} must be a non-empty string")


def _opt_pos_int(_inst: object, attribute: attrs.Attribute[int | None], value: object) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(f"outcome.{attribute.name} must be a positive int or None")


@attrs.frozen
class Outcome:
    """A graded goal: the session runs until a grader finds the rubric satisfied (D-12)."""

    description: str = attrs.field(validator=_nonempty_str)
    rubric: str = attrs.field(validator=_nonempty_str)
    max_iterations: int | None = attrs.field(default=None, validator=_opt_pos_int)


BUDGET_CURRENCIES: frozenset[str] = frozenset({"USD"})
"""The currencies the Claude Managed Agents API accepts for a budget (wire §9.5: ``USD`` only)."""

_MINOR_UNITS = re.compile(r"[0-9]+")


def budget_problem(max_list_cost: object, currency: object) -> tuple[str, str] | None:
    """(field, why) when a budget is not one the API accepts, else None.

    ``max_list_cost`` is a whole positive number of the currency's smallest unit (cents for
    USD): an ``int`` or a string of ASCII digits (``2500`` / ``"2500"`` = $25.00). A float
    (even ``1.0``), a decimal (``"12.5"``), an exponent (``"1e3"``), a sign or zero is refused
    — the API would refuse it or read it otherwise. ``currency`` is one of
    ``BUDGET_CURRENCIES``.
    """
    if isinstance(max_list_cost, bool) or not isinstance(max_list_cost, int | str):
        return (
            "max_list_cost",
            f"must be a whole number of cents (an int or a digit string), got {max_list_cost!r}",
        )
    if isinstance(max_list_cost, str) and not _MINOR_UNITS.fullmatch(max_list_cost):
        return (
            "max_list_cost",
            f"must be a whole number of cents written with digits only, got {max_list_cost!r}",
        )
    if int(max_list_cost) <= 0:
        return ("max_list_cost", f"must be at least 1 cent, got {max_list_cost!r}")
    if not isinstance(currency, str) or currency not in BUDGET_CURRENCIES:
        accepted = ", ".join(sorted(BUDGET_CURRENCIES))
        return ("currency", f"must be one of {accepted} (what the API accepts), got {currency!r}")
    return None


def _minor_units(value: object) -> object:
    """An accepted amount in its wire form (``2500`` → ``"2500"``, ``"0100"`` → ``"100"``);
    anything else unchanged, for the validator to refuse."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if value > 0 else value
    if isinstance(value, str) and _MINOR_UNITS.fullmatch(value) and int(value) > 0:
        return str(int(value))
    return value


@attrs.frozen
class Budget:
    """A provider-enforced spending cap for a fresh managed session (S-72).

    Mirrors the Claude Managed Agents wire shape ``{"type": "limit", "max_list_cost":
    {"amount", "currency"}}``. ``max_list_cost`` is a whole number of the currency's smallest
    unit — cents: ``Budget(2500)`` or ``Budget("2500")`` caps list cost at $25.00 — kept as
    the digit string the API takes; anything else (``1.0``, ``"12.5"``, ``"1e3"``, a currency
    other than ``USD``) raises ``ValueError`` naming the field (``budget_problem``).
    Reaching it pauses the session with stop reason ``budget_reached``.
    """

    max_list_cost: str = attrs.field(converter=_minor_units)
    currency: str = "USD"

    def __attrs_post_init__(self) -> None:
        problem = budget_problem(self.max_list_cost, self.currency)
        if problem is not None:
            raise ValueError(f"budget.{problem[0]} {problem[1]}")

    def to_wire(self) -> dict[str, JSON]:
        return {"type": "limit", "max_list_cost": {"amount": self.max_list_cost, "currency": self.currency}}


TEXT_DELTA_TYPE = "rma.text_delta"
"""Type of the synthetic text-delta event forwarded to handlers, never stored (E-9, A.5)."""
