"""Live updates: one small, host-independent vocabulary of what a session is doing right now.

Raw provider events differ by host (a CMA ``agent.message``, an AgentCore
``contentBlockDelta``, a Local ``local.text_delta``); a UI that renders progress wants the
same few facts whichever host runs the loop. These frozen values are those facts:

- ``TextDelta(text)`` — model text, as it arrives (the host's granularity, E-10);
- ``ToolCallStarted(id, name)`` — the model began a call of a custom tool (one the handler
  runs); for Local with ``stream=True`` this comes when the call's name arrives, before its
  arguments are complete;
- ``ToolCallFinished(id, name, is_error, input, output)`` — that call was answered (by the
  handler, or by rma itself for a call it refused to run: bad or cut-off arguments, an unknown
  tool, a duplicate), with the input it ran on and the text the model was told, where known;
- ``TurnFinished(turn, terminal, stop_reason, usage)`` — a model turn ended (its own usage,
  not the running sum);
- ``AttemptDiscarded(attempt, error)`` — the turn's attempt in flight failed and is being
  re-sent (a dropped stream, a 5xx): the text deltas and tool-call starts since the last
  ``TurnFinished`` belong to no turn and a UI should clear them.

Codecs produce the first two (and ``AttemptDiscarded``) from raw events
(``ProviderCodec.live_updates``); the session machine adds ``ToolCallFinished`` and
``TurnFinished``, which only it knows. Updates travel beside the raw events — ``handle_event``
is unchanged — to ``handle_update(update, ctx[, info])`` and ``LiveSession.updates()``. Pure
data, no logic beyond parsing the transports' discard marker.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from rma.vocabulary import JSON, Terminal, Usage

ATTEMPT_DISCARDED_TYPE = "rma.attempt_discarded"
"""The raw event a request/response transport sends live when an attempt that already sent
events live failed and the turn is re-sent (or given up): ``{"type": …, "attempt": n,
"error": kind}``. Like ``rma.text_delta`` it reaches ``handle_event`` but is never stored in a
turn's events (E-8)."""


@attrs.frozen
class TextDelta:
    """Model text as it arrived."""

    text: str


@attrs.frozen
class ToolCallStarted:
    """The model began a call of a custom tool (one the handler would run)."""

    id: str | None
    name: str


@attrs.frozen
class ToolCallFinished:
    """A custom tool call was answered; ``is_error`` as the model was told.

    ``input`` (the arguments the call ran on) and ``output`` (the result's text, as the model
    was told it) ride along for a UI that shows them — the stream adapters
    (``rma_shell.ui``) need both; None where the answer was rma's own and had none (a call cut
    off before its arguments were whole). They are left out of equality: the update *is* the
    call's id, name and outcome, as ``SessionResult.output`` is left out of the result's.
    """

    id: str | None
    name: str
    is_error: bool
    input: Mapping[str, JSON] | None = attrs.field(default=None, eq=False, kw_only=True)
    output: str | None = attrs.field(default=None, eq=False, kw_only=True)


@attrs.frozen
class TurnFinished:
    """A model turn ended: its number in the request, terminal, raw stop reason, own usage."""

    turn: int
    terminal: Terminal
    stop_reason: JSON = None
    usage: Usage | None = None


@attrs.frozen
class AttemptDiscarded:
    """The attempt in flight failed; what it streamed since the last ``TurnFinished`` is void."""

    attempt: int = 0
    error: str | None = None


LiveUpdate = TextDelta | ToolCallStarted | ToolCallFinished | TurnFinished | AttemptDiscarded

UPDATE_TYPES: tuple[type, ...] = (
    TextDelta,
    ToolCallStarted,
    ToolCallFinished,
    TurnFinished,
    AttemptDiscarded,
)


def attempt_discarded_event(attempt: int, error: str | None) -> dict[str, JSON]:
    """The raw ``rma.attempt_discarded`` event a transport sends live (see the constant)."""
    return {"type": ATTEMPT_DISCARDED_TYPE, "attempt": attempt, "error": error}


def common_updates(event: JSON) -> tuple[LiveUpdate, ...]:
    """Updates every host shares: the transports' ``rma.attempt_discarded`` marker."""
    if isinstance(event, Mapping) and event.get("type") == ATTEMPT_DISCARDED_TYPE:
        attempt = event.get("attempt")
        error = event.get("error")
        return (
            AttemptDiscarded(
                attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0,
                error if isinstance(error, str) else None,
            ),
        )
    return ()
