"""How a request ends: its ``SessionResult``, its ``Finish`` and the phase after it (S-60, S-66).

A request ends with a result (``finish``) or an error (``fail``); either way the session
reports it once and goes to IDLE (live) or DONE (a sync run, whose one result it was). An
error after a completed turn carries those turns' result (issue #12). ``with_transcript`` and
``carries_result`` let the shell put a provider's transcript on a result the core built;
``replace_transcript``, ``outcome_result`` and ``tupled_transcript`` serve a journal or a
workflow that keeps the transcript apart or reads it back from JSON.
"""

from __future__ import annotations

import attrs
from returns.result import Failure, Result, Success

from rma.errors import SessionError
from rma.session.commands import Emit, Finish
from rma.session.state import Phase, State, Step, evolve
from rma.vocabulary import JSON, SessionResult, Terminal, TurnResult


def result_of(
    s: State, tr: TurnResult, terminal: Terminal, stop_reason: JSON, reason: str | None
) -> SessionResult:
    """The request's result, ending on turn ``tr``."""
    return _result(s, terminal, stop_reason, tr.text, reason)


def _result(s: State, terminal: Terminal, stop_reason: JSON, text: str, reason: str | None) -> SessionResult:
    acc = s.acc
    return SessionResult(
        terminal=terminal,
        stop_reason=stop_reason,
        session_id=s.session_id,
        text=text,
        custom_tool_uses=acc.custom_tool_uses.to_tuple(),
        server_tool_uses=acc.server_tool_uses.to_tuple(),
        usage=acc.total_usage(),
        turns=s.turns,
        events=acc.events.to_tuple(),
        transcript=None,
        reason=reason,
        resumed=s.resumed,
    )


def terminated(s: State, tr: TurnResult, reason: str) -> SessionResult:
    """The result an error carries when the machine itself stops the request at turn ``tr``."""
    return result_of(s, tr, Terminal.TERMINATED, tr.stop_reason, reason)


def with_partial(s: State, error: SessionError) -> SessionError:
    """``error`` carrying what the request's completed turns did, ``reason`` its kind."""
    partial = _result(s, Terminal.TERMINATED, None, s.acc.last_text, error.kind)
    try:
        return attrs.evolve(error, result=partial)
    except Exception:  # a provider's own error class that cannot take one: the error as it came
        return error


def with_progress(s: State, error: SessionError) -> SessionError:
    """``error`` carrying what the open request's turns did so far (as every error ending a request
    does): for a shell that ends a run itself — a journal's pause for an approval."""
    return with_partial(s, error)


def with_transcript(
    outcome: Result[SessionResult, SessionError], transcript: tuple[JSON, ...] | None
) -> Result[SessionResult, SessionError]:
    """``outcome`` with the provider's ``transcript`` on its result — a success's, or the partial
    result a failure carries — unchanged when there is no result or no transcript (Local keeps
    one; the managed hosts keep theirs server-side)."""
    return outcome if transcript is None else replace_transcript(outcome, transcript)


def replace_transcript(
    outcome: Result[SessionResult, SessionError], transcript: tuple[JSON, ...] | None
) -> Result[SessionResult, SessionError]:
    """``outcome`` with its result's transcript set to ``transcript``, None included (a journal
    that keeps the transcript elsewhere); unchanged when it carries no result."""
    if isinstance(outcome, Success):
        return Success(attrs.evolve(outcome.unwrap(), transcript=transcript))
    error = outcome.failure()
    if error.result is None:
        return outcome
    return Failure(attrs.evolve(error, result=attrs.evolve(error.result, transcript=transcript)))


def outcome_result(outcome: Result[SessionResult, SessionError]) -> SessionResult | None:
    """The result ``outcome`` carries: a success's, or a failure's partial one (or None)."""
    return outcome.unwrap() if isinstance(outcome, Success) else outcome.failure().result


def tupled_transcript(outcome: Result[SessionResult, SessionError]) -> Result[SessionResult, SessionError]:
    """JSON has no tuples: ``outcome`` decoded from JSON, its result's transcript the tuple the
    run returned."""
    result = outcome_result(outcome)
    if result is None or not isinstance(result.transcript, list):
        return outcome
    return replace_transcript(outcome, tuple(result.transcript))


def carries_result(outcome: Result[SessionResult, SessionError]) -> bool:
    """Whether ``outcome`` has a result a transcript belongs to (see ``with_transcript``)."""
    return isinstance(outcome, Success) or outcome.failure().result is not None


def after_request(s: State) -> State:
    """The request is over: a live session waits in IDLE, a sync run is DONE (nothing waits)."""
    if s.config.live:
        return evolve(s, phase=Phase.IDLE, request_open=False, resuming=False)
    return evolve(s, phase=Phase.DONE, request_open=False, resuming=False, deferred=())


def finish(s: State, tr: TurnResult, stop_reason: JSON = None, reason: str | None = None) -> Step:
    """S-60: telemetry, result, reset the reconnect counter (R-13), report."""
    final_reason = tr.stop_reason if stop_reason is None else stop_reason
    result = result_of(s, tr, tr.terminal, final_reason, reason)
    meta = {**s.config.metadata, "terminal": tr.terminal.value, "session_id": s.session_id}
    emit = Emit("rma.session.terminal", {}, meta, {"output": result.text})
    s = after_request(evolve(s, reconnect_attempts=0))
    return s, (emit, Finish(Success(result), final=not s.config.live))


def fail(s: State, error: SessionError) -> Step:
    """End the request with an error; live sessions report it and stay usable (S-66 Better).

    Progress is never thrown away: an error ending a request after at least one completed
    turn carries those turns' terminated result (issue #12), unless it brought one already.
    """
    if s.turns and error.result is None:
        error = with_partial(s, error)
    meta = {**s.config.metadata, "terminal": "error", "error": error.kind, "session_id": s.session_id}
    emit = Emit("rma.session.terminal", {}, meta)  # M-7 Better: error endings are visible
    s = after_request(s)
    return s, (emit, Finish(Failure(error), final=not s.config.live))
