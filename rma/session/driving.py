"""Starting turns: opening, the kickoff, follow-ups, pushes and ``send_event`` (S-19…S-23, S-67…S-69).

Handlers of the machine's table (``on_…``) and the one way a turn is driven (``drive``): a
request/response session polls (``PollTurn``, to AWAITING), a streaming one pushes
(``PushInput``, to PUSHING, then AWAITING once the host took it). Not what a turn's events
do (``rma.session.receiving``) nor what its end leads to (``rma.session.completing``).
"""

from __future__ import annotations

from typing import Any, Literal

from returns.result import Failure

from rma.errors import Unsupported
from rma.provider import DEFAULT_PROMPT, Input, Mode
from rma.session.commands import Command, PollTurn, PushInput, Reconnect, Reply
from rma.session.endings import fail
from rma.session.events import Opened, PushFinished, SendEventRequested, StreamConnected, UserMessage
from rma.session.state import Accumulated, Phase, State, Step, evolve
from rma.session.telemetry import stream_lifecycle, turn_start
from rma.vocabulary import JSON

Purpose = Literal["kickoff", "message", "resume", "reprompt"]


def on_opened(s: State, ev: Opened) -> Step:
    cfg = s.config
    s = evolve(s, session_id=ev.session_id, resumed=ev.resumed)
    if ev.resumed:
        # S-19 / R-1: no kickoff; consolidate first. Only a resume arms the prompt.
        s = evolve(
            s,
            kicked_off=True,
            resuming=True,
            request_open=True,
            pending_message=cfg.prompt,
            phase=Phase.RECONNECTING,
            gen=s.gen + 1,
        )
        return s, (Reconnect(s.gen, s.seen.ids()),)
    if cfg.codec.mode is Mode.STREAMING:
        return evolve(s, phase=Phase.CONNECTING), ()  # the kickoff waits for "connected" (S-21)
    return kickoff_or_idle(s)


def kickoff_or_idle(s: State) -> Step:
    """Send the kickoff — unless a live session was opened with nothing to say: then IDLE."""
    s = evolve(s, kicked_off=True)
    cfg = s.config
    if cfg.live and cfg.prompt is None and cfg.outcome is None:
        return evolve(s, phase=Phase.IDLE), ()
    s = evolve(s, request_open=True)
    if cfg.outcome is not None:
        content: dict[str, JSON] = {"input": cfg.outcome.description}
    else:
        content = {"input": cfg.prompt if cfg.prompt is not None else DEFAULT_PROMPT}
    return drive(s, cfg.codec.kickoff_input(cfg.prompt, cfg.outcome), "kickoff", content)


def on_connected(s: State, ev: StreamConnected) -> Step:
    """The stream is up: the first time, kick off; later "connected" signals never do (S-21)."""
    commands: tuple[Command, ...] = ()
    if not s.kicked_off:
        s, commands = kickoff_or_idle(s)
    return s, (*commands, stream_lifecycle(s, "rma.stream.connected"))


def drive(
    s: State, input: Input, purpose: Purpose, content: dict[str, JSON] | None = None, **changes: Any
) -> Step:
    """Drive turn ``s.turns + 1``: poll or push its input, and announce it (``rma.turn.start``).

    The announcement follows the command, so a command list still starts with what moves the
    session; the shell only spawns the poll/push task, so the event still fires before any I/O.
    ``changes`` are the caller's own state changes, made in the same step.
    """
    start = turn_start(s, purpose, content or {})
    if s.config.codec.mode is Mode.REQUEST_RESPONSE:
        s = evolve(s, phase=Phase.AWAITING, live_forwarded=0, **changes)
        return s, (PollTurn(input, purpose), *start)
    s = evolve(
        s, phase=Phase.PUSHING, push_purpose=purpose, push_request=None, phase_before_push=None, **changes
    )
    return s, (PushInput(input, purpose), *start)


def on_push_finished(s: State, ev: PushFinished) -> Step:
    """The host took (or refused) a push: a turn is now in flight, or a send_event is answered."""
    purpose, request, before = s.push_purpose, s.push_request, s.phase_before_push
    s = evolve(s, push_purpose=None, push_request=None, phase_before_push=None)
    if purpose == "send_event":
        assert request is not None and before is not None
        return evolve(s, phase=before), (Reply(request, ev.outcome),)
    if isinstance(ev.outcome, Failure):
        # S-23 Better: a refused push ends the request with its error, live or not.
        return fail(s, ev.outcome.failure())
    return evolve(s, phase=Phase.AWAITING), ()


def push_send_event(s: State, ev: SendEventRequested) -> Step:
    """S-67: pushed verbatim, no reset; S-92: mid-turn it goes out at once."""
    s = evolve(
        s,
        phase=Phase.PUSHING,
        push_purpose="send_event",
        push_request=ev.request,
        phase_before_push=s.phase,
    )
    return s, (PushInput([ev.event], "send_event"),)


def refuse_send_event(s: State, ev: SendEventRequested) -> Step:
    """A request/response host has no stream to push a raw event into."""
    return s, (Reply(ev.request, Failure(Unsupported(operation="send_event"))),)


def on_user_message(s: State, ev: UserMessage) -> Step:
    return deliver_message(s, ev.text)


def deliver_message(s: State, text: str) -> Step:
    """A follow-up (or a resume's armed prompt) starts a fresh request (S-69, R-6)."""
    s = evolve(
        s,
        acc=Accumulated(),
        turns=0,
        reprompts_left=s.config.max_reprompts,
        terminal_answered=False,
        request_open=True,
        pending_message=None,
    )
    return drive(s, s.config.codec.user_input(text), "message", {"input": text})
