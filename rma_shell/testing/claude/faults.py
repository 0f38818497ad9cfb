"""The Claude Managed Agents emulator's faults: ``CMAFault`` and the functions that build one.

Each fault is armed (``CMAEmulator(faults=…)`` or ``inject``) for ``times`` occurrences,
globally or for one session; the server, stream and turn code consult them where they apply.
Not where the faults take effect (``server``, ``streams``).
"""

from __future__ import annotations

import math
from typing import Literal

import attrs

FaultKind = Literal[
    "status",
    "drop_stream",
    "error_frame",
    "earlier_batch",
    "terminal_disconnected",
    "trickle",
    "drop_budget",
    "close_idle",
    "slow_interrupt",
    "cut_head",
    "cut_preview",
]


@attrs.frozen
class CMAFault:
    """A fault; build with ``status_once``, ``drop_stream_after``, ``error_frame``,
    ``requires_action_from_earlier_batch``, ``terminal_while_disconnected``, ``trickle``,
    ``budget_not_echoed``, ``close_idle_connection``, ``slow_interrupt`` or ``cut_response_head``."""

    kind: FaultKind
    times: int = 1
    status: int = 0
    retry_after: str | None = None
    retry_after_ms: str | None = None
    error_type: str | None = None
    message: str | None = None
    method: str | None = None
    path: str | None = None
    after: int = 0
    delay: float | None = 0.05
    drop_stream: bool = False
    size: int = 0
    head: str = ""
    reset: bool = True


def status_once(
    code: int,
    *,
    retry_after: float | str | None = None,
    retry_after_ms: float | None = None,
    error_type: str | None = None,
    message: str | None = None,
    method: str | None = None,
    path: str | None = None,
    times: int = 1,
) -> CMAFault:
    """Answer the next matching request(s) with HTTP ``code`` and the API's error envelope.

    ``method`` (e.g. "POST") and ``path`` (a regex searched in the path, query excluded)
    narrow which requests match; ``retry_after`` sets ``retry-after`` (seconds),
    ``retry_after_ms`` sets ``retry-after-ms``."""
    return CMAFault(
        "status",
        times=times,
        status=code,
        retry_after=None if retry_after is None else _num(retry_after),
        retry_after_ms=None if retry_after_ms is None else _num(retry_after_ms),
        error_type=error_type,
        message=message,
        method=method.upper() if method else None,
        path=path,
    )


def drop_stream_after(n: int, *, times: int = 1) -> CMAFault:
    """Close the next SSE connection abruptly (no final chunk) after it carried ``n`` events.
    Events emitted afterwards still go to the history."""
    return CMAFault("drop_stream", times=times, after=max(0, n))


def cut_preview(after_deltas: int = 1, *, times: int = 1) -> CMAFault:
    """Close the next SSE connection that previews an ``agent.message`` abruptly, mid-preview:
    after its ``event_start`` and ``after_deltas`` of its ``event_delta`` frames, before the
    final event (which still goes to the history)."""
    return CMAFault("cut_preview", times=times, after=max(0, after_deltas))


def error_frame(
    after: int = 0,
    *,
    error_type: str = "overloaded_error",
    message: str = "Overloaded",
    times: int = 1,
) -> CMAFault:
    """On the next SSE connection, after ``after`` events, send an ``event: error`` frame whose
    data is the error envelope, then end the stream."""
    return CMAFault("error_frame", times=times, after=max(0, after), error_type=error_type, message=message)


def requires_action_from_earlier_batch(
    *, delay: float | None = 0.05, drop_stream: bool = False, times: int = 1
) -> CMAFault:
    """In the next turn holding a ``requires_action`` idle, emit the events before the idle at
    once and hold the idle (and the rest of the turn) back, so it reaches the client in a later
    batch than the tool uses it references. The held events are released when a new stream
    subscribes, when the client sends events, or after ``delay`` seconds (``None``: never by
    time). ``drop_stream=True`` also drops every open stream of the session right after the
    tool uses, and then only a new subscription or a send releases the idle."""
    return CMAFault("earlier_batch", times=times, delay=delay, drop_stream=drop_stream)


def terminal_while_disconnected(*, times: int = 1) -> CMAFault:
    """In the next turn holding a terminal event (an idle other than ``requires_action``, or
    ``session.status_terminated``), drop every open stream of the session just before it, so
    that event lands in the history while no stream is connected."""
    return CMAFault("terminal_disconnected", times=times)


def trickle(
    *,
    method: str | None = None,
    path: str | None = None,
    interval: float = 0.1,
    size: int = 4096,
    times: int = 1,
) -> CMAFault:
    """Serve the next matching request(s) as usual, but send the answer's body one byte every
    ``interval`` seconds, padded with JSON whitespace to ``size`` bytes: a server that never
    goes silent long enough for a per-read timeout to fire, yet takes ``interval × size``
    seconds to answer. ``method``/``path`` narrow the match as in ``status_once``."""
    return CMAFault(
        "trickle",
        times=times,
        method=method.upper() if method else None,
        path=path,
        delay=max(0.0, interval),
        size=max(1, size),
    )


def budget_not_echoed(*, times: int = 1) -> CMAFault:
    """The next session create(s) accept the request but keep no budget: the session is created
    uncapped and its ``budget`` is ``null`` (what a client must catch before prompting, S-73)."""
    return CMAFault("drop_budget", times=times)


def close_idle_connection(*, method: str | None = None, path: str | None = None, times: int = 1) -> CMAFault:
    """The keep-alive race: the next matching request that arrives on a connection which
    already served one finds it closed — the server drops the connection without answering
    and without processing the request (it is not in ``requests``; ``closed_idle`` counts
    it). ``method``/``path`` narrow the match as in ``status_once``."""
    return CMAFault("close_idle", times=times, method=method.upper() if method else None, path=path)


def slow_interrupt(seconds: float = math.inf, *, times: int = 1) -> CMAFault:
    """The next ``user.interrupt``(s) are taken — echoed, answered, the rest of the turn dropped —
    but the agent winds down for ``seconds`` (real time; ``inf``: until another interrupt) before
    the session reads ``idle``: a host that does not acknowledge an interrupt at once. An
    interrupt sent meanwhile (not itself slowed) stops it at once."""
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"slow_interrupt needs a non-negative number of seconds, got {seconds!r}")
    return CMAFault("slow_interrupt", times=times, delay=seconds)


def cut_response_head(
    *,
    method: str | None = None,
    path: str | None = None,
    head: str = "HTTP/1.1 200 ",
    reset: bool = True,
    times: int = 1,
) -> CMAFault:
    """A host that answered and lost the connection: the next matching request is served as
    usual — authenticated, processed, its events stored and its turn played — but of the
    response only ``head`` (the first bytes of its head) goes out before the connection is
    reset (``reset=False``: closed, a FIN). The reset waits until the client's side has
    acknowledged those bytes, so the client reads them first. The request is in ``requests``;
    ``cut_heads`` counts the answers cut. ``method``/``path`` narrow the match as in
    ``status_once``."""
    return CMAFault(
        "cut_head",
        times=times,
        method=method.upper() if method else None,
        path=path,
        head=head,
        reset=reset,
    )


def _num(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


@attrs.define
class _Armed:
    fault: CMAFault
    remaining: int
    session_id: str | None
