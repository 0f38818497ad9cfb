"""``run_or_raise`` and ``unwrap``: for callers who want an exception instead of a ``Result``.

``run`` returns ``Success(SessionResult)`` or ``Failure(SessionError)`` and never raises for
expected failures. ``run_or_raise`` takes exactly the same arguments and returns the
``SessionResult``, or raises the ``SessionError`` itself — a typed exception whose message
names what failed (``http_error: HTTP 529 overloaded_error from api.anthropic.com …``), not a
bare ``UnwrapFailedError``. Nothing else differs: same validation, same timeout, same
cleanup.

``unwrap(result)`` does the same for any other ``Result`` rma returns (``next_result()``,
the control-plane clients, artifacts, provisioning): the value, or the error raised as
itself. ``result.unwrap()`` from ``returns`` raises ``UnwrapFailedError`` instead (with the
error only as its ``__cause__``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from returns.result import Failure, Result

from rma.session.options import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_REPROMPTS,
    DEFAULT_MAX_TURNS,
    DEFAULT_STOP_GRACE_S,
    DEFAULT_TIMEOUT_S,
)
from rma.vocabulary import JSON, Budget, SessionResult
from rma_shell.providers.base import Provider
from rma_shell.recording import Recordable
from rma_shell.session import DEFAULT_MAX_TOOL_RESULT_CHARS, run
from rma_shell.telemetry import Telemetry

T = TypeVar("T")


def unwrap(result: Result[T, Any]) -> T:
    """The value of a ``Success``; for a ``Failure``, its error raised as itself.

    A ``SessionError`` (every rma error) is raised directly, so ``except HttpError as err``
    sees its fields; a failure that is not an exception (e.g. an ``OTelError``) falls back to
    ``returns``' ``UnwrapFailedError``.
    """
    if isinstance(result, Failure):
        error = result.failure()
        if isinstance(error, BaseException):
            raise error.with_traceback(None)
    return result.unwrap()


async def run_or_raise(
    provider: Provider[Any],
    *,
    handler: object,
    prompt: str | None = None,
    context: object = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    turn_guard: Callable[[Mapping[str, Any]], Any] | None = None,
    require_terminal_tool: bool = False,
    terminal_tool: str | None = None,
    max_reprompts: int = DEFAULT_MAX_REPROMPTS,
    outcome: Any = None,
    budget: Budget | Mapping[str, Any] | None = None,
    session_id: str | None = None,
    metadata: Mapping[str, JSON] | None = None,
    model_config: Mapping[str, Any] | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    telemetry: Telemetry | None = None,
    record: Recordable = None,
    output_type: Any = None,
    tool_timeout: float | None = None,
    max_tool_result_chars: int | None = DEFAULT_MAX_TOOL_RESULT_CHARS,
    journal: Any = None,
    journal_key: str | None = None,
    stop_grace: float = DEFAULT_STOP_GRACE_S,
    **provider_opts: Any,
) -> SessionResult:
    """Run a session like ``run``; return its ``SessionResult`` or raise its ``SessionError``.

    The raised error is the very value ``run`` would have put in its ``Failure``: catch it
    with ``except SessionError as err`` (or one of its classes, e.g. ``except HttpError``)
    and read its fields (``err.kind``, ``err.status``, ``err.request_id``…).
    """
    outcome_ = await run(
        provider,
        handler=handler,
        prompt=prompt,
        context=context,
        max_turns=max_turns,
        timeout=timeout,
        turn_guard=turn_guard,
        require_terminal_tool=require_terminal_tool,
        terminal_tool=terminal_tool,
        max_reprompts=max_reprompts,
        outcome=outcome,
        budget=budget,
        session_id=session_id,
        metadata=metadata,
        model_config=model_config,
        max_concurrency=max_concurrency,
        telemetry=telemetry,
        record=record,
        output_type=output_type,
        tool_timeout=tool_timeout,
        max_tool_result_chars=max_tool_result_chars,
        journal=journal,
        journal_key=journal_key,
        stop_grace=stop_grace,
        **provider_opts,
    )
    if isinstance(outcome_, Failure):
        # A fresh traceback each time: the same error value may be raised more than once.
        raise outcome_.failure().with_traceback(None)
    return outcome_.unwrap()
