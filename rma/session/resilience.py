"""What a one-shot run does about a lost stream (R-14 Better, issue #12): pure rules.

A live session reconnects after every loss and never gives up. A sync ``run()`` reconnects the
same way, but only after a loss a reconnect can cure, and only so many times in a row without
progress; the session machine (``rma.session.machine``) keeps the count and asks these.
"""

from __future__ import annotations

from rma.errors import HttpError, SessionError, StreamDropped, TransportError
from rma.retry import is_transient_status

SYNC_RECONNECT_ATTEMPTS = 6
"""A one-shot run gives up after this many stream losses in a row without progress: with the
R-12 backoff that is 31.5 s of waiting (0.5 + 1 + … + 16 s). Progress is the request getting
further than at the previous loss (a completed turn, or more events of its open turn)."""


def worth_reconnecting(error: SessionError) -> bool:
    """Whether a sync run reconnects after this loss: a drop, a clean close, a connection that
    failed, or a transient HTTP answer (408, 429, 5xx, 529). An SSE error frame, an
    authentication failure or any other definite answer ends the run with that error."""
    if isinstance(error, StreamDropped | TransportError):
        return True
    return isinstance(error, HttpError) and is_transient_status(error.status)


def gave_up(error: SessionError, attempts: int) -> SessionError:
    """The error a sync run ends with after ``attempts`` fruitless reconnects: a drop says how
    many; any other loss is reported as itself."""
    if isinstance(error, StreamDropped):
        detail = f"{error.detail}; gave up after {attempts} reconnect attempts".lstrip("; ")
        return StreamDropped(detail=detail, clean_close=error.clean_close)
    return error


def no_terminal_coming(last_loss: SessionError | None) -> StreamDropped:
    """The error of a sync run whose reconnect found the host idle with the request open:
    nothing will ever end it (S-25 Better)."""
    lost = last_loss if isinstance(last_loss, StreamDropped) else StreamDropped()
    detail = f"{lost.detail}; reconnected, but the host is idle and the request has no terminal"
    return StreamDropped(detail=detail.lstrip("; "), clean_close=lost.clean_close)
