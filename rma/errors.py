"""The closed family of session errors: every expected failure is one of these values.

Each error is a frozen attrs value with a stable ``kind`` tag (the reference's error atom)
and a payload that stays JSON-encodable, so it can be recorded, replayed, logged and sent
over telemetry. This module is data only: it never raises these errors, callers receive
them inside ``returns.result.Failure``.

**Progress is never thrown away.** Every error has ``result``: None, or — when the error
ended a request after at least one of its turns completed — the terminated ``SessionResult``
of what those turns did (turns, usage with its raw entries, events, tool uses, the last
turn's text, and the transcript on Local). ``result.reason`` is the error's ``kind``
(``halted``, ``max_turns_exceeded``, ``http_error``, ``timeout`` …). The session machine
attaches it (S-77, S-79 Better; issue #12): an HTTP error, a dropped stream or a timeout on
turn five keeps the usage and history of turns one to four.

Every error is also an ``Exception`` (so ``raise err`` and ``except SessionError`` work,
``rma_shell.run_or_raise`` and ``open_session`` raise them, and ``Failure(err).unwrap()``
chains the error as its cause). They stay values: equal and hashed by type and fields (not
identity), picklable, and ``str(err)`` is one line: ``kind: message``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import attrs
from returns.result import Failure, Result

from rma.vocabulary import JSON, SessionResult, Usage


def _field_values(error: SessionError) -> tuple[object, ...]:
    return tuple(getattr(error, f.name) for f in attrs.fields(type(error)))


def _rebuild(cls: type[SessionError], fields: dict[str, Any]) -> SessionError:
    """Unpickle an error from its init fields (BaseException's reduce would lose them)."""
    return cls(**fields)


def _origin(host: str | None, request_id: str | None) -> str:
    parts = [f"host {host}"] if host else []
    if request_id:
        parts.append(f"request id {request_id}")
    return f" ({', '.join(parts)})" if parts else ""


def _one_line(text: str) -> str:
    return " ".join(text.split()) if ("\n" in text or "\r" in text) else text


@attrs.frozen
class SessionError(Exception):
    """Base of every session error. ``kind`` is the stable tag to branch on.

    An exception and a value at once: ``raise`` it, or compare it like any frozen attrs
    value. ``message`` is the human text; ``str()`` is ``"<kind>: <message>"`` on one line.

    ``result`` is what the request had done when the error ended it — the terminated result of
    its completed turns — or None when no turn had completed (or the error is not a request's
    ending: a start-time option check, an open that failed). Keyword-only, on every error.
    """

    kind: ClassVar[str] = "session_error"
    result: SessionResult | None = attrs.field(default=None, kw_only=True)

    @property
    def message(self) -> str:
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in attrs.fields(type(self))
            if f.name != "result" and getattr(self, f.name) not in (None, "", (), {})
        )
        return f"{self.kind.replace('_', ' ')}" + (f" ({shown})" if shown else "")

    def __str__(self) -> str:
        text = _one_line(self.message).rstrip(": ")  # an empty detail leaves no dangling ": "
        return f"{self.kind}: {text or self.kind.replace('_', ' ')}"

    # Exceptions compare and hash by identity; these errors are values, whatever ``auto_exc``
    # does to the subclasses' generated methods (they inherit these).
    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _field_values(self) == _field_values(other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash((self.__class__, _field_values(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {f.alias or f.name: getattr(self, f.name) for f in attrs.fields(type(self)) if f.init}
        return (_rebuild, (type(self), fields))


RemoteStop = Literal["confirmed", "unconfirmed", "failed", "not_needed"]
"""What became of stopping the host's loop after a run's deadline or cancellation (issue #15):
``confirmed`` (the host said it stopped: an interrupted Claude session reads idle, AgentCore's
``StopRuntimeSession`` answered 200), ``unconfirmed`` (asked, but no confirmation within the
stop's own deadline), ``failed`` (the host refused or could not be reached: its loop may still
run, and bill) or ``not_needed`` (nothing was running on a host: Local's loop is in this
process, or no request was in flight)."""

_REMOTE_STOP_TEXT: dict[str, str] = {
    "confirmed": "the host's loop was stopped (confirmed)",
    "unconfirmed": "the host was asked to stop its loop, without confirmation",
    "failed": "stopping the host's loop failed: it may still be running",
    "not_needed": "no host loop to stop",
}


@attrs.frozen
class Timeout(SessionError):
    """The run's deadline elapsed; in-flight tools and streams were cancelled (X-8)."""

    kind: ClassVar[str] = "timeout"
    timeout_s: float | None = None
    operation: str = "run"
    """What timed out: ``run`` (the whole session), ``send_event`` (waiting for its reply) or
    ``delete_session`` (the cleanup of an unconfirmed budget, ``BudgetNotConfirmed``)."""
    remote_stop: RemoteStop | None = None
    """For a ``run``: whether the host's loop was stopped too (``RemoteStop``; ``not_needed``
    when no request was in flight). None for the other operations."""

    @property
    def message(self) -> str:
        text = f"{self.operation} timed out"
        if self.timeout_s is not None:
            text += f" after {self.timeout_s}s"
        if self.remote_stop is not None:
            text += f"; {_REMOTE_STOP_TEXT.get(self.remote_stop, self.remote_stop)}"
        return text


@attrs.frozen
class MaxTurnsExceeded(SessionError):
    """Driving another turn would exceed ``max_turns`` (X-9, S-35 Better)."""

    kind: ClassVar[str] = "max_turns_exceeded"
    max_turns: int = 0

    @property
    def message(self) -> str:
        return f"max_turns ({self.max_turns}) exceeded"


@attrs.frozen
class Halted(SessionError):
    """The turn guard halted the request (X-10)."""

    kind: ClassVar[str] = "halted"
    reason: JSON = None

    @property
    def message(self) -> str:
        return f"halted by turn_guard: {self.reason!r}"


@attrs.frozen
class GuardFailed(SessionError):
    """The turn guard raised or returned something other than continue/halt (S-43 Better)."""

    kind: ClassVar[str] = "guard_failed"
    error_type: str = ""
    detail: str = ""

    @property
    def message(self) -> str:
        return f"turn_guard failed: {self.error_type}: {self.detail}"


@attrs.frozen
class OutputInvalid(SessionError):
    """The model's final answer (``output_type``'s terminal tool) failed validation more times
    than ``max_reprompts`` allows; ``detail`` is the last validation error it was sent."""

    kind: ClassVar[str] = "output_invalid"
    tool: str = ""
    detail: str = ""

    @property
    def message(self) -> str:
        return f"the final answer ({self.tool}) never validated: {self.detail}"


@attrs.frozen
class ContextWindowExceeded(SessionError):
    """The conversation no longer fits the model's context window and could not be made to:
    Local's request was refused for its length again after it was compacted and retried once,
    or AgentCore's harness stopped with ``model_context_window_exceeded``. ``window`` and
    ``tokens`` as the host said (None where it did not); ``usage`` is the request's so far."""

    kind: ClassVar[str] = "context_window_exceeded"
    window: int | None = None
    tokens: int | None = None
    host: str | None = None
    """Which loop host (its codec's name): ``local`` or ``bedrock_agentcore``."""
    detail: str = ""

    @property
    def usage(self) -> Usage | None:
        """The tokens the request's completed turns used (its partial result's usage)."""
        return self.result.usage if self.result is not None else None

    @property
    def message(self) -> str:
        text = "the conversation exceeds the model's context window"
        if self.window is not None:
            text += f" of {self.window} tokens"
        if self.tokens is not None:
            text += f" (the request has {self.tokens})"
        return text + (f": {self.detail}" if self.detail else "")


WINDOW_EXCEEDED_STOP = "model_context_window_exceeded"
"""The stop reason a host ends a turn with when the window is full (AgentCore's harness)."""


@attrs.frozen
class UnresolvedRequiresAction(SessionError):
    """requires_action with no tool use to answer and nothing recoverable (X-11)."""

    kind: ClassVar[str] = "unresolved_requires_action"
    stop_reason: JSON = None

    @property
    def message(self) -> str:
        return f"requires_action with nothing to answer (stop_reason={self.stop_reason!r})"


@attrs.frozen
class ProviderError(SessionError):
    """The provider failed a turn: a raised exception, a bad response, a refused input (X-12)."""

    kind: ClassVar[str] = "provider_error"
    detail: str = ""
    error_type: str | None = None
    payload: JSON = None
    host: str | None = None
    """The host that answered (``api.anthropic.com``, ``127.0.0.1:8000``), when one did."""
    request_id: str | None = None
    """The host's id for the request (``request-id``, ``x-amzn-RequestId``, ``x-request-id``)."""

    @property
    def message(self) -> str:
        prefix = f"{self.error_type}: " if self.error_type else ""
        return f"provider error: {prefix}{self.detail}{_origin(self.host, self.request_id)}"


@attrs.frozen
class HttpError(SessionError):
    """A non-2xx HTTP answer that retries did not cure (X-15)."""

    kind: ClassVar[str] = "http_error"
    status: int = 0
    body: JSON = None
    method: str | None = None
    url: str | None = None
    host: str | None = None
    """The host that answered (with its port when not the scheme's default)."""
    code: str | None = None
    """The provider's error code: Anthropic's ``error.type``, AWS's ``x-amzn-ErrorType``,
    OpenAI's ``error.code`` (else ``error.type``)."""
    request_id: str | None = None
    """The host's id for the request (``request-id``, ``x-amzn-RequestId``, ``x-request-id``)."""

    @property
    def message(self) -> str:
        """``HTTP <status> <code>[ from <host>][ on <method> <url>][ (request id …)]: <text>``.

        ``<text>`` is the host's own error message read from ``body`` (``_host_error``); a body
        that names none is shown as it came — a string as is, anything else as JSON — so
        the line never ends with a Python repr. Its type fills in for a missing ``code``.
        """
        kind, _ = _host_error(self.body)
        code = self.code or kind
        code = f" {code}" if code else ""
        host = f" from {self.host}" if self.host else ""
        target = " ".join(x for x in (self.method, self.url) if x)
        target = f" on {target}" if target else ""
        rid = f" (request id {self.request_id})" if self.request_id else ""
        shown = error_text(self.body)
        shown = f": {shown}" if shown else ""
        return f"HTTP {self.status}{code}{host}{target}{rid}{shown}"


_HOST_TEXT_CHARS = 300
"""How much of a host's error text a message shows (the error's ``body`` keeps all of it)."""


def error_text(body: JSON) -> str:
    """What an error body says, on one line and at most ``_HOST_TEXT_CHARS`` long: the host's
    own message (``_host_error``), else the body as it came — a string as is, other JSON as
    JSON text (never a Python repr) — else ``""``."""
    _, text = _host_error(body)
    if text is None:
        if body is None or body == "":
            return ""
        text = body if isinstance(body, str) else json.dumps(body, default=str)
    text = _one_line(text)
    return text if len(text) <= _HOST_TEXT_CHARS else text[:_HOST_TEXT_CHARS] + "…"


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _host_error(body: JSON) -> tuple[str | None, str | None]:
    """The error type and message a host wrote in an error body, each None where it has none.

    Anthropic and OpenAI nest them: ``{"error": {"type"|"code", "message"}}`` (OpenAI's
    ``code`` first, as ``rma.origin.error_code`` reads it); some OpenAI-compatible servers send
    ``{"error": "text"}``. AWS puts ``message``/``Message`` at the top level with the type in
    ``__type`` (``namespace#Name``) or ``code``; vLLM-style servers use ``type`` and
    ``message`` there too; FastAPI-style ones a string ``detail``.
    """
    if not isinstance(body, Mapping):
        return None, None
    inner = body.get("error")
    if isinstance(inner, Mapping):
        kind = _string(inner.get("code")) or _string(inner.get("type"))
        return kind, _string(inner.get("message"))
    if _string(inner) is not None:
        return None, _string(inner)
    kind = next((v for k in ("code", "Code", "__type", "type") if (v := _string(body.get(k)))), None)
    text = _string(body.get("message")) or _string(body.get("Message")) or _string(body.get("detail"))
    return (kind.rsplit("#", 1)[-1] if kind else None), text


@attrs.frozen
class TransportError(SessionError):
    """The connection failed (refused, reset, read timeout) after retries (X-14)."""

    kind: ClassVar[str] = "transport_error"
    detail: str = ""
    error_type: str | None = None
    host: str | None = None
    """The host the connection was for."""
    port: int | None = None
    """Its port, as dialled (the URL's, else the scheme's default)."""
    request_id: str | None = None
    """The host's id for the request, when the connection broke after the response began."""

    @property
    def message(self) -> str:
        kind = f" ({self.error_type})" if self.error_type else ""
        where = ""
        if self.host is not None:
            where = f" to {self.host}" + (f":{self.port}" if self.port is not None else "")
        detail = f": {self.detail}" if self.detail else ""
        rid = f" (request id {self.request_id})" if self.request_id else ""
        return f"transport error{kind}{where}{detail}{rid}"


@attrs.frozen
class StreamDropped(SessionError):
    """A stream failed or closed before the request reached a terminal (R-14, S-25 Better)."""

    kind: ClassVar[str] = "stream_dropped"
    detail: str = ""
    clean_close: bool = False
    host: str | None = None
    """The host whose stream it was."""
    request_id: str | None = None
    """The host's id for the streaming request, when it sent one."""

    @property
    def message(self) -> str:
        how = "closed without a terminal" if self.clean_close else "dropped"
        text = f"stream {how}: {self.detail}".strip().rstrip(":")
        return text + _origin(self.host, self.request_id)


@attrs.frozen
class MalformedResponse(SessionError):
    """A provider answered with a shape it does not speak (X-18, malformed frames)."""

    kind: ClassVar[str] = "malformed_response"
    detail: str = ""
    response: JSON = None
    host: str | None = None
    """The host that answered, when known."""
    request_id: str | None = None
    """The host's id for the request, when it sent one."""

    @property
    def message(self) -> str:
        return f"malformed response: {self.detail}{_origin(self.host, self.request_id)}"


@attrs.frozen
class InvalidOpts(SessionError):
    """An option failed validation; ``option`` names it (X-2, X-3 and every option check)."""

    kind: ClassVar[str] = "invalid_opts"
    option: str = ""
    detail: str = ""
    suggestion: str | None = None
    """For an unknown option name: the closest accepted name ("did you mean …?"), if any."""

    @property
    def message(self) -> str:
        hint = f"; did you mean {self.suggestion!r}?" if self.suggestion else ""
        return f"invalid option {self.option!r}: {self.detail}{hint}"


@attrs.frozen
class InvalidTurnGuard(SessionError):
    """``turn_guard`` is neither None nor a one-argument callable (X-1)."""

    kind: ClassVar[str] = "invalid_turn_guard"
    value: str = ""

    @property
    def message(self) -> str:
        return f"turn_guard must be None or a one-argument callable, got {self.value}"


@attrs.frozen
class ToolContentUnsupported(SessionError):
    """A tool result held content the host cannot take in a tool result (an image on AgentCore,
    a document or a file id on an OpenAI-compatible server): ``content`` names it."""

    kind: ClassVar[str] = "tool_content_unsupported"
    provider: str = ""
    content: str = ""
    tool_use_id: str | None = None

    @property
    def message(self) -> str:
        return (
            f"the result of tool use {self.tool_use_id!r} holds {self.content}, which {self.provider} "
            "cannot take in a tool result (see docs/tools.md: rich results per host)"
        )


@attrs.frozen
class OutcomeUnsupported(SessionError):
    """An outcome was given to a provider without native outcomes (X-4)."""

    kind: ClassVar[str] = "outcome_unsupported"
    provider: str = ""

    @property
    def message(self) -> str:
        return f"provider {self.provider!r} does not support outcomes"


@attrs.frozen
class BudgetUnsupported(SessionError):
    """A budget was given to a provider that cannot enforce one (X-5)."""

    kind: ClassVar[str] = "budget_unsupported"
    provider: str = ""

    @property
    def message(self) -> str:
        return f"provider {self.provider!r} does not support budgets"


@attrs.frozen
class BudgetNotConfirmed(SessionError):
    """The provider did not echo the requested budget before any prompt was sent (S-73).

    No prompt went out. ``session_id`` names the session the create made anyway; ``cleanup``
    says what became of it: ``deleted``, ``failed`` (``cleanup_error`` is the delete's error)
    or ``timed_out`` (the delete did not finish within its total deadline; ``cleanup_error``
    is that ``Timeout``) — a session left behind is uncapped, so it is worth knowing.
    """

    kind: ClassVar[str] = "budget_not_confirmed"
    requested: JSON = None
    confirmed: JSON = None
    session_id: str | None = None
    cleanup: str = ""
    cleanup_error: SessionError | None = None

    @property
    def message(self) -> str:
        text = f"budget not confirmed: requested {self.requested!r}, the provider echoed {self.confirmed!r}"
        if self.session_id is not None:
            text += f"; session {self.session_id}"
        if self.cleanup:
            text += f" cleanup {self.cleanup}"
        if self.cleanup_error is not None:
            text += f" ({self.cleanup_error.message})"
        return text


@attrs.frozen
class AuthenticationError(SessionError):
    """Credentials were missing, rejected or about to expire (X-56).

    When a server rejected them, the error says what was rejected and by whom: ``status`` (401,
    or 403 for AgentCore's signature errors), the provider's ``error_code``
    (``authentication_error``, ``invalid_api_key``, ``InvalidSignatureException`` …) and
    ``error_message``, and the ``host`` that answered. They are None when no request was made
    (no key, an expiring token file).
    """

    kind: ClassVar[str] = "authentication_error"
    detail: str = ""
    status: int | None = None
    error_code: str | None = None
    error_message: str | None = None
    host: str | None = None

    @property
    def message(self) -> str:
        where = f" ({self.host} answered HTTP {self.status})" if self.host and self.status else ""
        return f"authentication error{where}: {self.detail}"


@attrs.frozen
class Unsupported(SessionError):
    """The operation does not exist for this provider (X-13: send_event on request/response)."""

    kind: ClassVar[str] = "unsupported"
    operation: str = ""

    @property
    def message(self) -> str:
        return f"unsupported operation: {self.operation}"


@attrs.frozen
class Crashed(SessionError):
    """An unexpected exception inside the library or user code outside a tool (X-7)."""

    kind: ClassVar[str] = "crashed"
    error_type: str = ""
    detail: str = ""

    @property
    def message(self) -> str:
        return f"session crashed: {self.error_type}: {self.detail}"


@attrs.frozen
class Closed(SessionError):
    """The live session was closed while a request was still in flight."""

    kind: ClassVar[str] = "closed"

    @property
    def message(self) -> str:
        return "the live session was closed"


@attrs.frozen
class NotFound(SessionError):
    """A named remote thing does not exist (an artifact, a file, a harness)."""

    kind: ClassVar[str] = "not_found"
    resource: str = ""
    name: str = ""

    @property
    def message(self) -> str:
        return f"{self.resource or 'resource'} not found: {self.name}"


@attrs.frozen
class StreamException(ProviderError):
    """The host sent an exception (or error) frame on a turn's response stream: AgentCore's
    ``internalServerException``, ``runtimeClientError``… ``error_type`` is the frame's
    exception type, ``detail`` its message, ``payload`` its body. Never retried: it is the
    host's verdict on the turn (B-9)."""

    kind: ClassVar[str] = "stream_exception"

    @property
    def message(self) -> str:
        return f"exception frame {self.error_type or '?'} on the turn's stream: {self.detail}" + _origin(
            self.host, self.request_id
        )


@attrs.frozen
class CommandException(ProviderError):
    """An exception (or error) frame on a runtime command's stream (AgentCore
    ``InvokeAgentRuntimeCommand``); fields as ``StreamException``."""

    kind: ClassVar[str] = "command_exception"

    @property
    def message(self) -> str:
        return f"exception frame {self.error_type or '?'} on the command's stream: {self.detail}" + _origin(
            self.host, self.request_id
        )


@attrs.frozen
class EarlyTermination(ProviderError):
    """A turn's stream kept ending before its terminal frame (dropped, or cut mid-frame)
    until the retries ran out (B-10); ``attempts`` is how many streams were tried."""

    kind: ClassVar[str] = "early_termination"
    error_type: str | None = "early_termination"
    attempts: int = 0

    @property
    def message(self) -> str:
        return f"the stream ended early {self.attempts} time(s): {self.detail}" + _origin(
            self.host, self.request_id
        )


@attrs.frozen
class MalformedFrame(MalformedResponse):
    """A binary frame that cannot be read: a bad prelude or message CRC, a bad header (damage
    in transit, re-invoked like a drop until the retries run out), or a frame payload that is
    not JSON. ``reason`` is the decoder's (``bad_crc``, ``bad_prelude``, ``bad_json``…)."""

    kind: ClassVar[str] = "malformed_frame"
    reason: str = ""

    @property
    def message(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return f"malformed frame{why}: {self.detail}{_origin(self.host, self.request_id)}"


@attrs.frozen
class TurnLost(SessionError):
    """A model turn the host had taken whose reply never arrived, on a host that keeps the
    conversation (AgentCore): asked again, the host refused the repeat (``detail``: its
    refusal, whose type is ``error_type``). Two ways there: resuming a run whose turn was in
    flight when its process died (the reply died with it), or, ``stream_dropped``, a turn
    whose stream was cut mid-reply and whose retry in the same run was refused (the harness
    had kept the turn). The host offers no way to read the reply back, so the run ends here:
    every tool result before stays applied once, nothing ran twice. ``runtime_session_id`` is
    the host session that holds the lost reply."""

    kind: ClassVar[str] = "turn_lost"
    runtime_session_id: str = ""
    detail: str = ""
    error_type: str | None = None
    stream_dropped: bool = False

    @property
    def message(self) -> str:
        kind = f" ({self.error_type})" if self.error_type else ""
        lost = (
            "the turn whose stream was cut mid-reply"
            if self.stream_dropped
            else "the turn in flight when the process stopped"
        )
        where = "with the stream" if self.stream_dropped else "with that process"
        return (
            f"{lost} had been taken by the host (runtime session {self.runtime_session_id}), "
            f"and its reply was lost {where}; asked again, the host refused it{kind}: {self.detail}"
        )


class SessionErrorKind(enum.StrEnum):
    """What a Claude Managed Agents ``session.error`` says went wrong (its ``error.type``, SDK
    2.10.0); ``UNKNOWN`` for ``unknown_error`` and any type a newer host invents."""

    UNKNOWN = "unknown_error"
    MODEL_OVERLOADED = "model_overloaded_error"
    MODEL_RATE_LIMITED = "model_rate_limited_error"
    MODEL_REQUEST_FAILED = "model_request_failed_error"
    MCP_CONNECTION_FAILED = "mcp_connection_failed_error"
    MCP_AUTHENTICATION_FAILED = "mcp_authentication_failed_error"
    BILLING = "billing_error"
    CREDENTIAL_HOST_UNREACHABLE = "credential_host_unreachable_error"
    TOOL_USE_LIMIT_REACHED = "tool_use_limit_reached_error"
    COMPACTION_LIMIT_REACHED = "compaction_limit_reached_error"
    REPOSITORY_AUTHENTICATION = "repository_authentication_error"
    REPOSITORY_FORBIDDEN = "repository_forbidden_error"
    REPOSITORY_NOT_FOUND = "repository_not_found_error"
    REPOSITORY_CHECKOUT = "repository_checkout_error"
    REPOSITORY_CLONE = "repository_clone_error"


@attrs.frozen
class HostSessionError(ProviderError):
    """A ``session.error`` the host reported (Claude Managed Agents): ``error_kind`` types it
    (``SessionErrorKind`` values; ``error_type`` keeps the raw type, which a newer host may
    extend), ``retry_status`` says what follows — ``retrying`` (the host goes on),
    ``exhausted`` (a ``retries_exhausted`` idle) or ``terminal`` (the session ends) — and
    ``mcp_server_name`` / ``repository_url`` name what failed where the kind has one."""

    kind: ClassVar[str] = "host_session_error"
    error_kind: str = SessionErrorKind.UNKNOWN.value
    retry_status: str | None = None
    mcp_server_name: str | None = None
    repository_url: str | None = None

    @property
    def message(self) -> str:
        then = f" (retry_status: {self.retry_status})" if self.retry_status else ""
        return f"host session error: {self.error_type or self.error_kind}: {self.detail}{then}"


ERROR_TYPES: tuple[type[SessionError], ...] = (
    Timeout,
    MaxTurnsExceeded,
    Halted,
    GuardFailed,
    UnresolvedRequiresAction,
    ProviderError,
    HttpError,
    TransportError,
    StreamDropped,
    MalformedResponse,
    InvalidOpts,
    InvalidTurnGuard,
    OutcomeUnsupported,
    ToolContentUnsupported,
    BudgetUnsupported,
    BudgetNotConfirmed,
    AuthenticationError,
    Unsupported,
    Crashed,
    Closed,
    NotFound,
    StreamException,
    CommandException,
    EarlyTermination,
    MalformedFrame,
    TurnLost,
    HostSessionError,
)
"""Every concrete error, for decoders and exhaustive tests."""

ERRORS_BY_KIND: dict[str, type[SessionError]] = {t.kind: t for t in ERROR_TYPES}


def describe(exc: BaseException) -> tuple[str, str]:
    """(type name, message) of an exception, for error payloads that must stay JSON."""
    return type(exc).__name__, str(exc)


def stamp_remote_stop(
    outcome: Result[SessionResult, SessionError], stop: RemoteStop | None
) -> Result[SessionResult, SessionError]:
    """``outcome`` with ``remote_stop`` set to ``stop`` when it is a run's ``Timeout`` and
    ``stop`` is known; any other outcome as it is."""
    if stop is None or not isinstance(outcome, Failure):
        return outcome
    error = outcome.failure()
    if not isinstance(error, Timeout) or error.operation != "run":
        return outcome
    return Failure(attrs.evolve(error, remote_stop=stop))
