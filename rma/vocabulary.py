"""The shared vocabulary: frozen values every provider normalizes into and every result is made of.

Raw provider events stay raw (decoded JSON values) and travel beside the normalized fields:
normalization is additive, never lossy. Every value here is JSON-encodable through
``rma.codec_json`` (D-7). This module holds data only — no loop logic, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

JSON = Any
"""A decoded JSON value (dict, list, str, int, float, bool or None)."""


def _json_tuple(items: Iterable[JSON]) -> tuple[JSON, ...]:
    return tuple(items)


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
    """A tool call the model asked for. ``id`` may be None for providers without ids (D-2)."""

    id: str | None
    name: str = attrs.field(validator=_required_str)
    # Mappings are not hashable: equality compares the input, hashing leaves it out.
    input: Mapping[str, JSON] = attrs.field(factory=dict, converter=_input_map, hash=False)


@attrs.frozen
class ToolResult:
    """The text a handler returned for one tool use (D-3)."""

    tool_use_id: str | None
    text: str = ""
    is_error: bool = False


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
    transcript: tuple[JSON, ...] | None = None
    reason: str | None = None
    resumed: bool = False


@attrs.frozen
class SessionInfo:
    """Session identity handed to handlers (D-6, S-17). Grows by fields, never by arity."""

    session_id: str | None = None
    provider: str | None = None
    metadata: Mapping[str, JSON] = attrs.field(factory=dict, converter=_frozen_map, hash=False)


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


def _decimal_amount(_inst: object, attribute: attrs.Attribute[str], value: object) -> None:
    import decimal

    try:
        ok = isinstance(value, str) and decimal.Decimal(value) > 0
    except decimal.InvalidOperation:
        ok = False
    if not ok:
        raise ValueError(f"budget.{attribute.name} must be a positive decimal string, got {value!r}")


@attrs.frozen
class Budget:
    """A provider-enforced spending cap for a fresh managed session (S-72).

    Mirrors the Claude Managed Agents wire shape ``{"type": "limit", "max_list_cost":
    {"amount", "currency"}}``; the amount is kept as the decimal string the API takes.
    Reaching it pauses the session with stop reason ``budget_reached``.
    """

    max_list_cost: str = attrs.field(converter=str, validator=_decimal_amount)
    currency: str = "USD"

    def to_wire(self) -> dict[str, JSON]:
        return {"type": "limit", "max_list_cost": {"amount": self.max_list_cost, "currency": self.currency}}


TEXT_DELTA_TYPE = "rma.text_delta"
"""Type of the synthetic text-delta event forwarded to handlers, never stored (E-9, A.5)."""
