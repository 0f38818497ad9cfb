"""Events: the facts the shell feeds into the session machine.

Each is a frozen value holding only what the core needs to decide; connection objects,
sockets and callables stay in the shell. Every event is JSON-encodable through
``rma.codec_json`` so a run can be recorded and replayed (``rma replay``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import attrs
from returns.result import Result

from rma.errors import SessionError
from rma.vocabulary import JSON, ToolResult, ToolUse


def _json_tuple(items: Iterable[JSON]) -> tuple[JSON, ...]:
    return tuple(items)


def _results_tuple(items: Iterable[ToolResult]) -> tuple[ToolResult, ...]:
    return tuple(items)


def _uses_tuple(items: Iterable[ToolUse]) -> tuple[ToolUse, ...]:
    return tuple(items)


def _str_tuple(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


@attrs.frozen
class Opened:
    """The provider opened (or reattached to) a session."""

    session_id: str | None
    resumed: bool = False


@attrs.frozen
class StreamConnected:
    """The stream of generation ``gen`` is connected (streaming providers)."""

    gen: int = 0


@attrs.frozen
class StreamEvent:
    """One decoded event from the stream of generation ``gen``."""

    gen: int
    event: JSON


@attrs.frozen
class StreamClosed:
    """The stream of generation ``gen`` ended cleanly (server closed it)."""

    gen: int


@attrs.frozen
class StreamFailed:
    """The stream of generation ``gen`` failed (drop, error frame, idle timeout)."""

    gen: int
    error: SessionError


@attrs.frozen
class LiveEvent:
    """A request/response provider forwarded an event mid-turn (E-4)."""

    event: JSON


@attrs.frozen
class TurnPolled:
    """A request/response turn completed with these raw events."""

    events: tuple[JSON, ...] = attrs.field(converter=_json_tuple)


@attrs.frozen
class TurnFailed:
    """A request/response turn failed after the transport's retries."""

    error: SessionError


@attrs.frozen
class PushFinished:
    """A push (kickoff, follow-up, resume or send_event) was accepted or refused."""

    outcome: Result[None, SessionError]


@attrs.frozen
class ToolsFinished:
    """The handler answered every tool use of batch ``batch``, in tool-use order."""

    batch: int
    results: tuple[ToolResult, ...] = attrs.field(converter=_results_tuple)
    verdicts: tuple[ToolResult, ...] = attrs.field(default=(), converter=_results_tuple)
    """One per confirmation asked: ``is_error`` False allows, True denies with ``text``."""


@attrs.frozen
class GuardVerdict:
    """What the turn guard answered (interpreted by ``rma.session.options.interpret_guard``)."""

    verdict: Literal["continue", "halt", "failed"]
    reason: JSON = None
    error_type: str = ""
    detail: str = ""


@attrs.frozen
class Reconnected:
    """What a reconnect found: the provider-side view after consolidation (R-3).

    ``pending`` are unanswered tool uses to redrive; ``seen`` the ids already processed;
    ``replay`` listed events the client never saw, folded through the normal path (R-18
    Better); ``idle`` whether the remote session is idle (nothing will arrive unprompted).
    """

    session_id: str | None
    pending: tuple[ToolUse, ...] = attrs.field(default=(), converter=_uses_tuple)
    seen: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    replay: tuple[JSON, ...] = attrs.field(default=(), converter=_json_tuple)
    idle: bool = True
    boundary: str | None = None
    """The id of the turn boundary the consolidation placed the client at (the last one it had
    processed; on a reattach, the host's last), when the host listed one: a shell that reads a
    turn at a time asks from there whether its next input already landed."""
    boundary_at: str | None = None
    """The host's time on ``boundary`` (its ``processed_at``), when it has one."""


@attrs.frozen
class ReconnectFinished:
    outcome: Result[Reconnected, SessionError]


@attrs.frozen
class ReconnectTimerFired:
    """The backoff before a reconnect attempt elapsed."""


@attrs.frozen
class DeadlineReached:
    """The run's deadline elapsed; the shell has already cancelled the session's work."""

    timeout_s: float | None = None


@attrs.frozen
class UserMessage:
    """A follow-up message for a live session (S-69)."""

    text: str


@attrs.frozen
class UpdatesWanted:
    """Whether something consumes live updates now (a live session's ``updates()`` iterator
    started, or the last one ended); the machine computes them only while it is so."""

    wanted: bool


@attrs.frozen
class SendEventRequested:
    """A caller asked to push a raw event (S-67); answered by a ``Reply`` with ``request``."""

    request: int
    event: JSON


Event = (
    Opened
    | StreamConnected
    | StreamEvent
    | StreamClosed
    | StreamFailed
    | LiveEvent
    | TurnPolled
    | TurnFailed
    | PushFinished
    | ToolsFinished
    | GuardVerdict
    | ReconnectFinished
    | ReconnectTimerFired
    | UserMessage
    | SendEventRequested
    | DeadlineReached
    | UpdatesWanted
)

EVENT_TYPES: tuple[type, ...] = (
    Opened,
    StreamConnected,
    StreamEvent,
    StreamClosed,
    StreamFailed,
    LiveEvent,
    TurnPolled,
    TurnFailed,
    PushFinished,
    ToolsFinished,
    GuardVerdict,
    ReconnectFinished,
    ReconnectTimerFired,
    UserMessage,
    SendEventRequested,
    DeadlineReached,
    UpdatesWanted,
)
