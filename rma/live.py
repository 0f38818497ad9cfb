"""Live updates: one small, host-independent vocabulary of what a session is doing right now.

Raw provider events differ by host (a CMA ``agent.message``, an AgentCore
``contentBlockDelta``, a Local ``local.text_delta``); a UI that renders progress wants the
same few facts whichever host runs the loop. These frozen values are those facts:

- ``TextDelta(text, thread)`` — model text, as it arrives (the host's granularity, E-10;
  Claude with ``event_deltas`` previews: tokens); ``thread`` names the sub-agent thread that
  spoke, None for the session's own agent;
- ``ToolCallStarted(id, name)`` — the model began a call of a custom tool (one the handler
  runs); for Local with ``stream=True`` this comes when the call's name arrives, before its
  arguments are complete;
- ``ToolCallFinished(id, name, is_error, input, output)`` — that call was answered (by the
  handler, or by rma itself for a call it refused to run: bad or cut-off arguments, an unknown
  tool, a duplicate), with the input it ran on and the text the model was told, where known;
- ``TurnFinished(turn, terminal, stop_reason, usage)`` — a model turn ended (its own usage,
  not the running sum);
- ``AttemptDiscarded(attempt, error)`` — the turn's attempt in flight failed and is being
  re-sent (a dropped stream, a 5xx, a previewed message that never came): the text deltas and
  tool-call starts since the last ``TurnFinished`` belong to no turn and a UI should clear
  them. Whatever of them still stands is delivered again right after (a Claude stream
  re-delivers the turn's finished events);
- ``ContextCompacted(...)`` — the conversation's context was compacted to fit the model's
  window: by Local's policy (what it dropped and shortened, and the token counts), or by the
  host itself (Claude's ``agent.thread_context_compacted``: the numbers are then unknown);
- ``ThreadActivity(thread, activity, agent_name, …)`` — a sub-agent thread of a multi-agent
  session was created, ran, went idle, ended, or sent or received a message (Claude).

Codecs produce the first two (and ``AttemptDiscarded``, ``ThreadActivity``) from raw events
(``ProviderCodec.live_updates``, or ``live_fold`` for a host whose previews need what came
before: ``LiveTurn``); the session machine adds ``ToolCallFinished`` and
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
    """Model text as it arrived; ``thread`` is the sub-agent thread that spoke (None: the
    session's own agent)."""

    text: str
    thread: str | None = None


@attrs.frozen
class ToolCallStarted:
    """The model began a call of a custom tool (one the handler would run)."""

    id: str | None
    name: str
    thread: str | None = None
    """The sub-agent thread that made the call (Claude cross-posts it), None for the session's own."""


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


@attrs.frozen
class ContextCompacted:
    """The context was compacted to fit the window. ``dropped``/``shortened``: messages left out
    or shortened so far (Local); ``tokens_before``/``tokens_after``: the request's count before
    and after; ``window``: its size; ``reason``: ``"window"`` (planned), ``"refused"`` (the
    server refused the request for its length and it was compacted and retried), ``"summary"``
    (the model's summary of the dropped turns was placed) or ``"host"`` (the host compacted). None where the
    host does not say (Claude compacts server-side)."""

    dropped: int | None = None
    shortened: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    window: int | None = None
    reason: str | None = None
    summarized: bool = False
    """The dropped part was condensed into a summary by the model (Local's ``summarize``)."""


@attrs.frozen
class ThreadActivity:
    """A sub-agent thread's lifecycle or messages (Claude multi-agent sessions).

    ``thread`` is the sub-agent thread concerned; ``activity`` one of ``created``,
    ``running``, ``idle``, ``rescheduled``, ``terminated``, ``message_sent`` (the session's
    agent sent ``thread`` a message) or ``message_received`` (``thread`` sent the session's
    agent one). ``stop_reason`` is an idle's raw stop reason; ``text`` a message's text blocks
    joined."""

    thread: str
    activity: str
    agent_name: str | None = None
    stop_reason: JSON = None
    text: str | None = None


LiveUpdate = (
    TextDelta
    | ToolCallStarted
    | ToolCallFinished
    | TurnFinished
    | AttemptDiscarded
    | ContextCompacted
    | ThreadActivity
)

UPDATE_TYPES: tuple[type, ...] = (
    TextDelta,
    ToolCallStarted,
    ToolCallFinished,
    TurnFinished,
    AttemptDiscarded,
    ContextCompacted,
    ThreadActivity,
)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def context_compacted(event: Mapping[str, JSON]) -> ContextCompacted:
    """The update of a host's compaction event (the numbers it carries, None for the rest)."""
    reason = event.get("reason")
    return ContextCompacted(
        dropped=_int_or_none(event.get("dropped")),
        shortened=_int_or_none(event.get("shortened")),
        tokens_before=_int_or_none(event.get("tokens_before")),
        tokens_after=_int_or_none(event.get("tokens_after")),
        window=_int_or_none(event.get("window")),
        reason=reason if isinstance(reason, str) else None,
        summarized=event.get("summarized") is True,
    )


@attrs.frozen
class LiveTurn:
    """What live updates of the open turn already told a consumer (the machine keeps one).

    ``previews``: event id → the text its previews delivered so far, for events a host
    previews before sending them whole (Claude's ``event_start`` / ``event_delta``); None once
    an ``AttemptDiscarded`` voided what it delivered. ``spoke``: a ``TextDelta`` or
    ``ToolCallStarted`` went out since the last ``TurnFinished`` (a drop then discards them).
    """

    previews: Mapping[str, str | None] = attrs.field(factory=dict)
    spoke: bool = False


NO_LIVE_TURN = LiveTurn()


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
