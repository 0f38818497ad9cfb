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
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from rma.vocabulary import JSON, SessionResult


@attrs.frozen
class SessionError:
    """Base of every session error. ``kind`` is the stable tag to branch on.

    ``result`` is what the request had done when the error ended it — the terminated result of
    its completed turns — or None when no turn had completed (or the error is not a request's
    ending: a start-time option check, an open that failed). Keyword-only, on every error.
    """

    kind: ClassVar[str] = "session_error"
    result: SessionResult | None = attrs.field(default=None, kw_only=True)

    @property
    def message(self) -> str:
        return self.kind

    def __str__(self) -> str:
        return self.message


@attrs.frozen
class Timeout(SessionError):
    """The run's deadline elapsed; in-flight tools and streams were cancelled (X-8)."""

    kind: ClassVar[str] = "timeout"
    timeout_s: float | None = None
    operation: str = "run"
    """What timed out: ``run`` (the whole session), ``send_event`` (waiting for its reply) or
    ``delete_session`` (the cleanup of an unconfirmed budget, ``BudgetNotConfirmed``)."""

    @property
    def message(self) -> str:
        return f"{self.operation} timed out after {self.timeout_s}s"


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

    @property
    def message(self) -> str:
        prefix = f"{self.error_type}: " if self.error_type else ""
        return f"provider error: {prefix}{self.detail}"


@attrs.frozen
class HttpError(SessionError):
    """A non-2xx HTTP answer that retries did not cure (X-15)."""

    kind: ClassVar[str] = "http_error"
    status: int = 0
    body: JSON = None
    method: str | None = None
    url: str | None = None

    @property
    def message(self) -> str:
        return f"HTTP {self.status} from {self.method} {self.url}: {str(self.body)[:300]}"


@attrs.frozen
class TransportError(SessionError):
    """The connection failed (refused, reset, read timeout) after retries (X-14)."""

    kind: ClassVar[str] = "transport_error"
    detail: str = ""
    error_type: str | None = None

    @property
    def message(self) -> str:
        return f"transport error: {self.error_type or ''} {self.detail}".strip()


@attrs.frozen
class StreamDropped(SessionError):
    """A stream failed or closed before the request reached a terminal (R-14, S-25 Better)."""

    kind: ClassVar[str] = "stream_dropped"
    detail: str = ""
    clean_close: bool = False

    @property
    def message(self) -> str:
        how = "closed without a terminal" if self.clean_close else "dropped"
        return f"stream {how}: {self.detail}".strip().rstrip(":")


@attrs.frozen
class MalformedResponse(SessionError):
    """A provider answered with a shape it does not speak (X-18, malformed frames)."""

    kind: ClassVar[str] = "malformed_response"
    detail: str = ""
    response: JSON = None

    @property
    def message(self) -> str:
        return f"malformed response: {self.detail}"


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


@attrs.frozen
class NotFound(SessionError):
    """A named remote thing does not exist (an artifact, a file, a harness)."""

    kind: ClassVar[str] = "not_found"
    resource: str = ""
    name: str = ""

    @property
    def message(self) -> str:
        return f"{self.resource or 'resource'} not found: {self.name}"


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
    BudgetUnsupported,
    BudgetNotConfirmed,
    AuthenticationError,
    Unsupported,
    Crashed,
    Closed,
    NotFound,
)
"""Every concrete error, for decoders and exhaustive tests."""

ERRORS_BY_KIND: dict[str, type[SessionError]] = {t.kind: t for t in ERROR_TYPES}


def describe(exc: BaseException) -> tuple[str, str]:
    """(type name, message) of an exception, for error payloads that must stay JSON."""
    return type(exc).__name__, str(exc)
