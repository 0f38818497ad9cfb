"""The AgentCore emulator's faults: ``AgentCoreFault`` and the functions that build one.

Status faults answer a request with an AWS error; stream faults break a 200 event stream
after ``n`` frames (drop, truncate, bad CRC, exception frame, stall). Each is armed for
``times`` requests, globally or for one runtime session, optionally for one operation. Not
where they take effect (``stream``, ``invoke``, ``commands``, ``control``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from rma_shell.testing._loopback import LoopbackHandler
from rma_shell.testing.agentcore._common import _AwsError

# --------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------

FaultKind = Literal["status", "drop", "truncate", "bad_crc", "exception", "stall", "hang"]
ControlOperation = Literal[
    "CreateHarness",
    "GetHarness",
    "ListHarnesses",
    "UpdateHarness",
    "DeleteHarness",
    "CreateHarnessEndpoint",
    "GetHarnessEndpoint",
    "ListHarnessEndpoints",
    "DeleteHarnessEndpoint",
]
Operation = Literal[
    "InvokeHarness",
    "InvokeAgentRuntimeCommand",
    "StopRuntimeSession",
    "CreateHarness",
    "GetHarness",
    "ListHarnesses",
    "UpdateHarness",
    "DeleteHarness",
    "CreateHarnessEndpoint",
    "GetHarnessEndpoint",
    "ListHarnessEndpoints",
    "DeleteHarnessEndpoint",
]


@attrs.frozen
class AgentCoreFault:
    """A fault; build with ``throttle_once``, ``server_error_once``, ``error_once``,
    ``drop_after``, ``truncate_frame_after``, ``bad_crc_after``, ``exception_frame`` or
    ``stall``."""

    kind: FaultKind
    times: int = 1
    operation: Operation | None = None
    status: int = 0
    code: str = ""
    message: str = ""
    fields: Mapping[str, Any] = attrs.Factory(dict)
    after: int = 0
    seconds: float = 0.0
    echo_authorization: bool = False
    retry_after: str | None = None
    """A ``Retry-After`` header (seconds, or an HTTP-date) on the error answer."""
    kept: bool = False
    """A stream fault after which the harness still finishes the turn and keeps it in the
    session's conversation (the client lost the reply, not the turn): a retry of the same
    messages is then refused as a repeat."""


def error_once(
    status: int,
    code: str,
    message: str | None = None,
    *,
    fields: Mapping[str, Any] | None = None,
    times: int = 1,
    operation: Operation | None = None,
    echo_authorization: bool = False,
    retry_after: float | str | None = None,
) -> AgentCoreFault:
    """Answer the next matching request(s) with HTTP ``status`` and error ``code``
    (``RetryableConflictException`` 409, ``AccessDeniedException`` 403, …), with a
    ``Retry-After`` header when ``retry_after`` is given. ``echo_authorization`` appends
    `` Authorization=<the request's header>`` to the message, as AWS does in some signature
    errors (it carries ``Credential=<access key id>/…``)."""
    return AgentCoreFault(
        "status",
        times=times,
        operation=operation,
        status=status,
        code=code,
        message=message or f"{code} (injected by the agentcore emulator)",
        fields=dict(fields or {}),
        echo_authorization=echo_authorization,
        retry_after=None if retry_after is None else str(retry_after),
    )


def _fault_message(fault: AgentCoreFault, h: LoopbackHandler) -> str:
    if not fault.echo_authorization:
        return fault.message
    return f"{fault.message} Authorization={h.headers.get('Authorization', '')}"


def throttle_once(
    *,
    times: int = 1,
    operation: Operation | None = None,
    message: str = "Rate exceeded",
    retry_after: float | str | None = None,
) -> AgentCoreFault:
    """429 ``ThrottlingException`` (botocore retries it)."""
    return error_once(
        429, "ThrottlingException", message, times=times, operation=operation, retry_after=retry_after
    )


def server_error_once(
    status: int = 500,
    *,
    times: int = 1,
    operation: Operation | None = None,
    message: str = "An internal error occurred. Try again.",
    retry_after: float | str | None = None,
) -> AgentCoreFault:
    """``status`` (500 by default) ``InternalServerException`` (botocore retries it)."""
    return error_once(
        status, "InternalServerException", message, times=times, operation=operation, retry_after=retry_after
    )


def drop_after(
    n_frames: int, *, times: int = 1, operation: Operation | None = None, kept: bool = False
) -> AgentCoreFault:
    """Close the connection after ``n_frames`` frames of a 200 stream (no terminating chunk).
    ``kept``: the harness still finishes the turn and keeps it (by default a cut turn is not
    kept, and the same messages can be sent again)."""
    return AgentCoreFault("drop", times=times, operation=operation, after=max(0, n_frames), kept=kept)


def truncate_frame_after(
    n: int, *, times: int = 1, operation: Operation | None = None, kept: bool = False
) -> AgentCoreFault:
    """After ``n`` frames, write the first half of the next frame, then close the connection
    (``kept``: as for ``drop_after``)."""
    return AgentCoreFault("truncate", times=times, operation=operation, after=max(0, n), kept=kept)


def bad_crc_after(
    n: int, *, times: int = 1, operation: Operation | None = None, kept: bool = False
) -> AgentCoreFault:
    """Send frame number ``n`` (0-based) with a corrupted message CRC; the stream goes on
    (``kept``: the turn is kept in the conversation although the client could not read it)."""
    return AgentCoreFault("bad_crc", times=times, operation=operation, after=max(0, n), kept=kept)


def exception_frame(
    exception_type: str,
    message: str,
    *,
    after: int = 0,
    fields: Mapping[str, Any] | None = None,
    times: int = 1,
    operation: Operation | None = None,
) -> AgentCoreFault:
    """After ``after`` frames, an exception frame (``internalServerException``,
    ``runtimeClientError``, ``throttlingException`` …) with ``{"message", **fields}``;
    the stream then ends cleanly."""
    return AgentCoreFault(
        "exception",
        times=times,
        operation=operation,
        code=exception_type,
        message=message,
        fields=dict(fields or {}),
        after=max(0, after),
    )


def stall(
    seconds: float, *, after: int = 0, times: int = 1, operation: Operation | None = None
) -> AgentCoreFault:
    """After ``after`` frames, go silent for ``seconds`` (the connection stays open), then go
    on. Ends early when the client goes away or the emulator closes."""
    return AgentCoreFault("stall", times=times, operation=operation, after=max(0, after), seconds=seconds)


def hang_stop(seconds: float = math.inf, *, times: int = 1) -> AgentCoreFault:
    """Hold the next ``StopRuntimeSession`` request(s) unanswered and unprocessed for
    ``seconds`` (``math.inf``: until the client gives up or the emulator closes), then serve it
    as usual: a stop that hangs. A client that gives up meanwhile gets nothing, and nothing
    is stopped. (Fail a stop with ``error_once(…, operation="StopRuntimeSession")``.)"""
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"hang_stop needs a non-negative number of seconds, got {seconds!r}")
    return AgentCoreFault("hang", times=times, operation="StopRuntimeSession", seconds=seconds)


@attrs.define
class _Armed:
    fault: AgentCoreFault
    remaining: int
    session_id: str | None


def _fault_error(fault: AgentCoreFault, h: LoopbackHandler) -> _AwsError:
    error = _AwsError(fault.status, fault.code, _fault_message(fault, h), **fault.fields)
    if fault.retry_after is not None:
        error.headers["Retry-After"] = fault.retry_after
    return error
