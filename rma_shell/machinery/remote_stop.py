"""Stopping the host's loop when rma stops driving a session (issues #15, #23).

Cancelling rma's side of a session — a run's deadline, a cancelled run, a live session left
while a request is in flight — does not stop a managed host: Claude Managed Agents keeps the
session running (and billing) until it is sent ``user.interrupt``, and an AgentCore harness
runs its invocation up to its own ``timeoutSeconds`` unless ``StopRuntimeSession`` stops the
runtime session. ``stop_host`` asks the provider to stop it (``Provider.stop_remote``) when a
request was in flight — best effort, shielded from the caller's cancellation and bounded by
the run's ``stop_grace`` (a deadline stays a deadline: confirmed or not, the run returns) — and
reports what became of it: the telemetry event ``rma.session.remote_stop``, a line on the
``rma.session`` log, and, for a timed-out run, the ``Timeout``'s ``remote_stop`` field
(``with_remote_stop``; a journal's end record keeps it, so ``resume`` finishes a stop that was
not confirmed: ``ask_host`` under ``REMOTE_STOP_TIMEOUT_S``).

What it is not: the stop requests themselves (each provider's ``stop_remote``), and no loop
decision — the session machine has ended (or been abandoned) by the time this runs.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import anyio
from returns.result import Result, Success

from rma.errors import RemoteStop, SessionError, stamp_remote_stop
from rma.session.machine import Phase
from rma_shell.logging import log_fields

if TYPE_CHECKING:
    from rma_shell.machinery.driver import Driver

log = logging.getLogger("rma.session")

REMOTE_STOP_TIMEOUT_S = 5.0
"""Seconds ``resume`` gives the stop it finishes (a journaled run that timed out with its host's
stop unconfirmed or failed; ``rma_shell.journal``): nobody is past a deadline there — the stop
is what the call is for — so it may wait for the confirmation longer than a run's
``stop_grace``, and still never hangs. A run's own stops are bounded by its ``stop_grace``."""

UNFINISHED: frozenset[RemoteStop] = frozenset({"unconfirmed", "failed"})
"""Stops whose host may still be running its loop: ``resume`` asks again."""

_SETTLED = (Phase.IDLE, Phase.DONE)
_DETAIL_CHARS = 500


async def stop_host(driver: Driver[Any], reason: str) -> RemoteStop:
    """Stop the host's loop if a request may still be running there; say what came of it.

    ``reason`` says why rma stopped driving the session (``timeout``, ``cancelled``,
    ``KeyboardInterrupt``, ``closed``, ``ended``). Nothing is asked — and ``not_needed``
    returned — when no provider connection exists or the session machine is idle or done;
    nor, but for a timeout, when the session ended with an outcome of its own (a pause awaiting
    approval, a crash) or is journaled and not ended: ``rma_shell.journal`` resumes it where it
    was, so its host is left to carry on.

    Every reason gets the same bound, the session's ``stop_grace``: a timeout is the caller's
    deadline; a cancellation is most often one too (a cancel scope around ``run``), or Ctrl-C,
    and leaving a live session is leaving — none of them should wait on a slow host for long.
    """
    conn = driver.conn
    if conn is None or driver.state.phase in _SETTLED:
        return "not_needed"
    if reason != "timeout" and (driver.final is not None or driver.journal is not None):
        return "not_needed"
    return await ask_host(driver, conn, reason, driver.opts.stop_grace)


async def ask_host(driver: Driver[Any], conn: Any, reason: str, within: float) -> RemoteStop:
    """``Provider.stop_remote`` on ``conn``, shielded and cut short after ``within`` seconds
    (``unconfirmed``: asked, no confirmation yet); reported on the log and in telemetry."""
    t0 = time.perf_counter()
    outcome: RemoteStop = "unconfirmed"
    detail: str | None = None
    error: str | None = None
    # Shielded: a cancelled run must still reach the host; bounded: never a hang of its own.
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(within) as deadline:
            try:
                stopped = await driver.provider.stop_remote(conn)
            except Exception as exc:  # a provider bug costs the stop, never the run's result
                outcome, error = "failed", "provider_error"
                detail = f"{type(exc).__name__}: {exc}"[:_DETAIL_CHARS]
            else:
                outcome, detail, error = _read(stopped)
        if deadline.cancelled_caught:
            outcome, detail = "unconfirmed", f"no confirmation within {within}s"
    _report(driver, reason, outcome, detail, error, time.perf_counter() - t0)
    return outcome


stamp = stamp_remote_stop
"""``outcome`` with ``remote_stop`` set when it is a run's ``Timeout`` (``rma.errors``)."""


def _read(stopped: Result[Any, SessionError]) -> tuple[RemoteStop, str | None, str | None]:
    if isinstance(stopped, Success):
        report = stopped.unwrap()
        return report.outcome, report.detail, None
    failure = stopped.failure()
    return "failed", str(failure)[:_DETAIL_CHARS], failure.kind


def _report(
    driver: Driver[Any],
    reason: str,
    outcome: RemoteStop,
    detail: str | None,
    error: str | None,
    duration: float,
) -> None:
    session_id = driver.state.session_id or driver.info.session_id
    provider = driver.config.provider_name
    level = logging.INFO if outcome in ("confirmed", "not_needed") else logging.WARNING
    log.log(
        level,
        "stopping the host's loop (%s): %s%s",
        reason,
        outcome,
        f" ({detail})" if detail else "",
        extra=log_fields(
            session_id=session_id,
            provider=provider,
            reason=reason,
            remote_stop=outcome,
            error=error,
            duration_s=round(duration, 3),
        ),
    )
    if not driver.telemetry.listening():
        return
    meta: dict[str, Any] = {
        **driver.config.metadata,
        "session_id": session_id,
        "provider": provider,
        "outcome": outcome,
        "reason": reason,
    }
    if detail is not None:
        meta["detail"] = detail
    if error is not None:
        meta["error"] = error
    driver.telemetry.emit("rma.session.remote_stop", {"duration": duration}, meta)
