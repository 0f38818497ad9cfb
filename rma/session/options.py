"""Start-time option validation and the session's static configuration.

Validation runs before anything remote is created, in the reference's order (S-8:
turn_guard → terminal_tool → outcome shape → outcome support → budget), then the handler
(S-15 Better) and the numeric limits. Each failure is a typed ``SessionError`` naming the
option. This module inspects callables' signatures (pure) but never calls user code.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from rma.errors import (
    BudgetUnsupported,
    InvalidOpts,
    InvalidTurnGuard,
    OutcomeUnsupported,
    SessionError,
)
from rma.provider import ProviderCodec
from rma.session.events import GuardVerdict
from rma.session.option_checks import check_seconds
from rma.vocabulary import JSON, Budget, Outcome, _frozen_map, _minor_units, budget_problem

DEFAULT_MAX_TURNS = 50
DEFAULT_MAX_REPROMPTS = 2
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_STOP_GRACE_S = 1.0
"""Seconds a run's stop of the host's loop may take past its deadline (``stop_grace``)."""
DEFAULT_MAX_CONCURRENCY = 8
DEFAULT_SEEN_WINDOW = 65_536


@attrs.frozen
class SessionConfig:
    """Everything about a session that does not change while it runs."""

    codec: ProviderCodec = attrs.field(eq=False)
    live: bool = False
    prompt: str | None = None
    outcome: Outcome | None = None
    max_turns: int = DEFAULT_MAX_TURNS
    terminal_tool: str | None = None
    """The enforced terminal tool (None unless ``require_terminal_tool``)."""
    max_reprompts: int = DEFAULT_MAX_REPROMPTS
    has_turn_guard: bool = False
    metadata: Mapping[str, JSON] = attrs.field(factory=dict, converter=_frozen_map)
    text_deltas: bool = True
    deliver_events: bool = True
    """Whether anything consumes ``DeliverEvent`` (the shell sets False when the handler has no
    ``handle_event``): the machine then builds no delivery commands and no text deltas — on a
    streamed event those were most of its work, for nobody."""
    seen_window: int = DEFAULT_SEEN_WINDOW
    provider_name: str = ""
    output_tool: bool = False
    """The terminal tool carries a typed final answer (``output_type=``): only a call of it
    whose result is not an error satisfies it; each error result (the answer failed
    validation) uses one re-prompt, and past ``max_reprompts`` the request fails with
    ``OutputInvalid``."""
    deliver_updates: bool = False
    """Whether ``DeliverUpdate`` (``rma.live``) is consumed from the start: the handler has a
    ``handle_update``. A live session's ``updates()`` iterator turns it on later with the
    ``UpdatesWanted`` event; while it is off the machine computes no updates."""


CONTINUE = "continue"
"""What a turn guard returns to let the session go on."""


@attrs.frozen
class Halt:
    """What a turn guard returns to stop the request with ``Halted(reason)``."""

    reason: JSON = None


def interpret_guard(value: object) -> GuardVerdict:
    """Map whatever a turn guard returned to a verdict (S-39, S-43 Better).

    Accepted: ``CONTINUE`` (or the reference's ``"cont"``), ``Halt(reason)`` or a
    ``("halt", reason)`` pair. Anything else — including ``None`` from a guard that forgot
    to return — is a ``guard_failed`` verdict, so a buggy budget guard cannot silently
    let spending continue.
    """
    if value == CONTINUE or value == "cont":
        return GuardVerdict("continue")
    if isinstance(value, Halt):
        return GuardVerdict("halt", reason=value.reason)
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "halt":
        return GuardVerdict("halt", reason=value[1])
    return GuardVerdict(
        "failed",
        error_type="InvalidGuardReturn",
        detail=f"turn_guard must return rma.CONTINUE or rma.Halt(reason), got {value!r}"[:500],
    )


def _accepts_positional(fn: Callable[..., Any], n: int) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True  # builtins without signatures: let the call decide
    try:
        sig.bind(*([None] * n))
    except TypeError:
        return False
    return True


@attrs.frozen
class CallShape:
    """How a handler, or one of its hooks, is called: as the object's method or as the
    callable itself (``method``), and with the ``info`` argument last or without it."""

    method: bool
    takes_info: bool


_OBJECT4, _OBJECT3 = CallShape(method=True, takes_info=True), CallShape(method=True, takes_info=False)
_CALLABLE4, _CALLABLE3 = CallShape(method=False, takes_info=True), CallShape(method=False, takes_info=False)


def handler_shape(handler: object) -> CallShape | None:
    """How a handler is called, or None when it is not a valid handler (T-2, T-3).

    An object whose ``handle_tool_call`` takes (name, input, ctx[, info]) is called through
    that method; a plain callable of 3 or 4 arguments is called itself. The four-argument form
    wins when both bind.

    Remembered per plain function: ``inspect.signature`` costs tens of microseconds and a
    process usually runs many sessions with one handler. What a function accepts is fixed by
    its code and defaults, so the answer is reused while those are the very same objects;
    anything else (partials, callable objects, functions carrying ``__wrapped__`` or
    ``__signature__``) is inspected every time.
    """
    method = getattr(handler, "handle_tool_call", None)
    as_method = method is not None and callable(method)
    # A bound method's function; a plain handler is its own (other callables: no memo).
    func = (
        handler if not as_method else getattr(method, "__func__", None) if inspect.ismethod(method) else None
    )
    if not inspect.isfunction(func) or hasattr(func, "__wrapped__") or hasattr(func, "__signature__"):
        return _inspect_shape(handler)
    known = _SHAPES.get(func)
    if (
        known is not None
        and known[0] is func.__code__
        and known[1] is func.__defaults__
        and known[2] is func.__kwdefaults__
        and known[3] is as_method  # one function may serve as a method and as a plain handler
    ):
        return known[4]
    shape = _inspect_shape(handler)
    _SHAPES[func] = (func.__code__, func.__defaults__, func.__kwdefaults__, as_method, shape)
    return shape


_SHAPES: weakref.WeakKeyDictionary[
    Callable[..., Any], tuple[object, object, object, bool, CallShape | None]
] = weakref.WeakKeyDictionary()


def _inspect_shape(handler: object) -> CallShape | None:
    method = getattr(handler, "handle_tool_call", None)
    if method is not None and callable(method):
        if _accepts_positional(method, 4):
            return _OBJECT4
        if _accepts_positional(method, 3):
            return _OBJECT3
        return None
    if callable(handler) and not inspect.isclass(handler):
        if _accepts_positional(handler, 4):
            return _CALLABLE4
        if _accepts_positional(handler, 3):
            return _CALLABLE3
    return None


def _hook_shape(handler: object, name: str) -> CallShape | None:
    method = getattr(handler, name, None)
    if method is None or not callable(method):
        return None
    if _accepts_positional(method, 3):
        return _OBJECT4  # (payload, ctx, info)
    if _accepts_positional(method, 2):
        return _OBJECT3  # (payload, ctx)
    return None


def event_hook_shape(handler: object) -> CallShape | None:
    """How ``handle_event(event, ctx[, info])`` is called when the handler observes events
    (E-1), else None (E-2)."""
    return _hook_shape(handler, "handle_event")


def update_hook_shape(handler: object) -> CallShape | None:
    """How ``handle_update(update, ctx[, info])`` is called, when the handler has it."""
    return _hook_shape(handler, "handle_update")


def _coerce_outcome(value: object) -> Outcome | None:
    if isinstance(value, Outcome):
        return value
    if isinstance(value, Mapping) and set(value) <= {"description", "rubric", "max_iterations"}:
        try:
            return Outcome(**dict(value))
        except (TypeError, ValueError):
            return None
    return None


_BUDGET_KEYS = frozenset({"max_list_cost", "currency"})


def _coerce_budget(value: object) -> Result[Budget, InvalidOpts]:
    """A budget the API accepts, or ``InvalidOpts`` naming the field (``budget.max_list_cost``,
    ``budget.currency``) — checked here, before anything is created (item 3 of issue #12)."""
    if isinstance(value, Budget):
        return Success(value)
    if not isinstance(value, Mapping) or "max_list_cost" not in value or not set(value) <= _BUDGET_KEYS:
        return Failure(
            InvalidOpts("budget", "expected rma.Budget or a mapping with max_list_cost[, currency]")
        )
    problem = budget_problem(_minor_units(value["max_list_cost"]), value.get("currency", "USD"))
    if problem is not None:
        return Failure(InvalidOpts(f"budget.{problem[0]}", problem[1]))
    return Success(Budget(**dict(value)))


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def validate(
    codec: ProviderCodec,
    *,
    handler: object,
    prompt: object = None,
    turn_guard: object = None,
    require_terminal_tool: object = False,
    terminal_tool: object = None,
    max_reprompts: object = DEFAULT_MAX_REPROMPTS,
    outcome: object = None,
    budget: object = None,
    session_id: object = None,
    max_turns: object = DEFAULT_MAX_TURNS,
    timeout: object = DEFAULT_TIMEOUT_S,
    max_concurrency: object = DEFAULT_MAX_CONCURRENCY,
    metadata: object = None,
    model_config: object = None,
    live: bool = False,
) -> Result[tuple[SessionConfig, Budget | None], SessionError]:
    """Check every start option and build the config; the first failure wins (S-8)."""
    if turn_guard is not None and not (callable(turn_guard) and _accepts_positional(turn_guard, 1)):
        return Failure(InvalidTurnGuard(value=repr(turn_guard)[:200]))
    if require_terminal_tool and not isinstance(terminal_tool, str):
        return Failure(
            InvalidOpts("terminal_tool", "terminal_tool_required: require_terminal_tool needs a tool name")
        )
    parsed_outcome = None
    if outcome is not None:
        parsed_outcome = _coerce_outcome(outcome)
        if parsed_outcome is None:
            return Failure(
                InvalidOpts(
                    "outcome", "expected rma.Outcome or a mapping with description, rubric[, max_iterations]"
                )
            )
        if not codec.supports_outcomes:
            return Failure(OutcomeUnsupported(provider=codec.name))
    parsed_budget = None
    if budget is not None:
        if not codec.supports_budget:
            return Failure(BudgetUnsupported(provider=codec.name))
        coerced = _coerce_budget(budget)
        if isinstance(coerced, Failure):
            return Failure(coerced.failure())
        parsed_budget = coerced.unwrap()
        if session_id is not None:
            return Failure(
                InvalidOpts("budget", "a budget applies to a fresh session; it cannot be set on resume")
            )
    if handler_shape(handler) is None:
        return Failure(
            InvalidOpts(
                "handler",
                "expected an object with handle_tool_call(name, input, ctx[, info]) "
                "or a callable taking 3 or 4 "
                f"arguments, got {type(handler).__name__}",
            )
        )
    update_hook = getattr(handler, "handle_update", None)
    if update_hook is not None and (not callable(update_hook) or update_hook_shape(handler) is None):
        return Failure(
            InvalidOpts(
                "handler", "handle_update must be a method taking (update, ctx) or (update, ctx, info)"
            )
        )
    if prompt is not None and not isinstance(prompt, str):
        return Failure(InvalidOpts("prompt", f"expected a string, got {type(prompt).__name__}"))
    if not _positive_int(max_turns):
        return Failure(InvalidOpts("max_turns", f"expected an int >= 1, got {max_turns!r}"))
    if not (isinstance(max_reprompts, int) and not isinstance(max_reprompts, bool) and max_reprompts >= 0):
        return Failure(InvalidOpts("max_reprompts", f"expected an int >= 0, got {max_reprompts!r}"))
    if isinstance(check_seconds(timeout, "timeout", allow_none=True, allow_inf=True), Failure):
        # NaN, negative, zero and non-numbers; infinity is "no deadline", like None.
        return Failure(InvalidOpts("timeout", f"expected seconds > 0 or None, got {timeout!r}"))
    if not _positive_int(max_concurrency):
        return Failure(InvalidOpts("max_concurrency", f"expected an int >= 1, got {max_concurrency!r}"))
    if metadata is not None and not isinstance(metadata, Mapping):
        return Failure(InvalidOpts("metadata", "expected a mapping"))
    meta: dict[str, JSON] = dict(metadata or {})
    if isinstance(model_config, Mapping) and isinstance(model_config.get("metadata"), Mapping):
        meta.update(model_config["metadata"])  # S-16: model_config wins on conflict
    assert isinstance(max_turns, int) and isinstance(max_reprompts, int)
    config = SessionConfig(
        codec=codec,
        live=live,
        prompt=prompt,
        outcome=parsed_outcome,
        max_turns=max_turns,
        terminal_tool=terminal_tool if require_terminal_tool and isinstance(terminal_tool, str) else None,
        max_reprompts=max_reprompts,
        has_turn_guard=turn_guard is not None,
        metadata=meta,
        text_deltas=codec.has_text_delta,
        provider_name=codec.name,
    )
    return Success((config, parsed_budget))


def lift_handles(opts: Mapping[str, Any]) -> dict[str, Any]:
    """S-13: ``agent=``/``environment=`` handles become ``agent_id``/``environment_id``.

    A handle is a mapping with the id key, the API's own object (``{"type": "agent", "id"}``)
    or an object with the id attribute (what provisioning returns). An explicit id wins.
    """
    out = dict(opts)
    for handle_key, id_key in (("agent", "agent_id"), ("environment", "environment_id")):
        handle = out.get(handle_key)
        if out.get(id_key) is not None or handle is None:
            continue
        if isinstance(handle, Mapping):
            value = handle.get(id_key)
            if value is None and handle.get("type") == handle_key:
                value = handle.get("id")  # the API's own agent/environment object
        else:
            value = getattr(handle, id_key, None)
        if value is not None:
            out[id_key] = value
    return out
