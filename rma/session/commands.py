"""Commands: what the session machine asks the shell to do next.

The shell executes each command and reports back with an event; commands that need no
answer (telemetry, logs, deliveries) are fire-and-forget. A command never carries a
decision for the shell to make.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import attrs
from returns.result import Result

from rma.errors import SessionError
from rma.live import LiveUpdate
from rma.provider import Input
from rma.vocabulary import JSON, SessionResult, ToolUse


def _uses(items: Iterable[ToolUse]) -> tuple[ToolUse, ...]:
    return tuple(items)


def _strs(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


@attrs.frozen
class PushInput:
    """Streaming: post ``input`` to the host; answer with ``PushFinished``."""

    input: Input
    purpose: Literal["kickoff", "message", "resume", "reprompt", "send_event"]


@attrs.frozen
class PollTurn:
    """Request/response: run one turn with ``input``; answer with ``TurnPolled``/``TurnFailed``."""

    input: Input
    purpose: Literal["kickoff", "message", "resume", "reprompt"]


@attrs.frozen
class RunTools:
    """Run the handler on each use (at most N at once), answer ``ToolsFinished(batch, …)``."""

    batch: int
    uses: tuple[ToolUse, ...] = attrs.field(converter=_uses)
    confirmations: tuple[ToolUse, ...] = attrs.field(default=(), converter=_uses)
    """Host-run calls awaiting the handler's allow/deny (``confirm_tool_use``)."""


@attrs.frozen
class CallGuard:
    """Call the turn guard with ``{usage, turns, session_id}``; answer ``GuardVerdict``."""

    payload: Mapping[str, JSON]


@attrs.frozen
class DeliverEvent:
    """Forward a raw (or synthetic text-delta) event to the handler's ``handle_event``."""

    event: JSON


@attrs.frozen
class DeliverUpdate:
    """Forward a live update (``rma.live``) to ``handle_update`` and ``updates()`` iterators."""

    update: LiveUpdate


@attrs.frozen
class Emit:
    """Telemetry: an event name under ``rma.`` with measurements and metadata.

    ``content`` holds what the session said and heard (prompts, model output, tool calls) for
    subscribers that opted into content capture; the shell hands it to no one else.
    """

    name: str
    measurements: Mapping[str, float | int]
    metadata: Mapping[str, JSON]
    content: Mapping[str, JSON] = attrs.field(factory=dict)


@attrs.frozen
class Log:
    level: Literal["debug", "info", "warning", "error"]
    message: str
    fields: Mapping[str, JSON] = attrs.field(factory=dict)


@attrs.frozen
class ScheduleReconnect:
    """Sleep ``delay_ms`` then answer ``ReconnectTimerFired`` (R-12)."""

    delay_ms: int
    attempt: int


@attrs.frozen
class Reconnect:
    """Reconnect: consolidate against ``seen`` and open stream generation ``gen``."""

    gen: int
    seen: tuple[str, ...] = attrs.field(converter=_strs)


@attrs.frozen
class Finish:
    """A request ended. ``final`` means the session is over (a sync run's one result)."""

    outcome: Result[SessionResult, SessionError]
    final: bool


@attrs.frozen
class Reply:
    """The answer to ``SendEventRequested(request)``."""

    request: int
    outcome: Result[None, SessionError]


Command = (
    PushInput
    | PollTurn
    | RunTools
    | CallGuard
    | DeliverEvent
    | DeliverUpdate
    | Emit
    | Log
    | ScheduleReconnect
    | Reconnect
    | Finish
    | Reply
)
