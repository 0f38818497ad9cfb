"""Carrying a journaled session on: ``resume``, ``approve`` and ``pending_approvals``.

``resume(journal, key, provider=..., handler=...)`` reads the key's records, checks them
(``rma.journal.load``: a damaged journal, or one of another session, is a typed error and
nothing is sent), reattaches to the host (``Provider.restore``: Claude's session, AgentCore's
runtime session, Local's conversation), replays the events through the core to the state the
stopped process had, and carries on what was in flight (``Driver.serve(in_flight=...)``):
a tool batch runs against the journal (a journaled result is never run again), a model turn is
asked again, a push is posted only when the host does not have it, a stream is reattached as
after a drop. A journal whose session already ended returns its outcome without a request —
unless it is a timeout whose stop of the host's loop was not confirmed (``unconfirmed`` or
``failed``: the run's ``stop_grace`` ran out first): then the host is asked to stop again
(``_finish_stop``) and what came of it is journaled and returned.

What the journal cannot hold is given again: the provider (credentials), the handler and
context (code), the turn guard, ``output_type``, telemetry and a ``model_config`` (it may carry
a key); every other option is the journaled run's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Unpack

import anyio
from returns.result import Failure, Result, Success

from rma.errors import Closed, InvalidOpts, RemoteStop, SessionError, Timeout
from rma.journal import (
    Decision,
    JournalMismatch,
    Loaded,
    PendingApproval,
    approval_record,
    load,
)
from rma.session.option_checks import LIVE_ELSEWHERE, check_names
from rma.session.options import (
    handler_shape,
)
from rma.vocabulary import SessionResult
from rma_shell.journal.setup import Held, check_key, hold, opened, request_from, resumable
from rma_shell.journal.store import JournalStore, JournalStoreError
from rma_shell.journal.writer import SessionJournal
from rma_shell.machinery.driver import Driver, DriverOptions, Outcome_
from rma_shell.machinery.interrupt import keyboard_interrupt
from rma_shell.machinery.remote_stop import (
    REMOTE_STOP_TIMEOUT_S,
    UNFINISHED,
    ask_host,
    stamp,
)
from rma_shell.providers.base import Provider
from rma_shell.results import ok
from rma_shell.run_options import HANDLER_OPTIONS, HandlerOptions, spelled_out, split
from rma_shell.session import (
    LiveSession,
    announce_driver,
    check_stop_grace,
    check_tool_limits,
    drive_to_end,
    output_tool_for,
    serve_reporting,
)
from rma_shell.telemetry import default as default_telemetry

log = logging.getLogger("rma.session")


def _loaded(store: JournalStore, key: str, provider: Provider[Any]) -> Loaded:
    try:
        rows = store.rows(key)
    except JournalStoreError as exc:
        raise InvalidOpts("journal", str(exc)) from None
    loaded = ok(load(key, rows, lambda _name: provider.codec))
    journaled = loaded.config.provider_name
    if journaled != provider.codec.name:
        raise JournalMismatch(
            key=key,
            detail=f"it holds a {journaled!r} session, and this provider runs {provider.codec.name!r}",
        )
    return loaded


def _handler_options(given: Mapping[str, Any], where: str, *, live: bool = False) -> dict[str, Any]:
    """The handler options given to ``resume``/``resume_session``, defaulted; a name it does not
    take (a misspelling, a run's option that resuming cannot change) is ``InvalidOpts``."""
    accepted = HANDLER_OPTIONS - {"timeout"} if live else HANDLER_OPTIONS
    ok(check_names(given, accepted, where=where, elsewhere=LIVE_ELSEWHERE if live else None))
    return split(given, accepted)[0]


def _resumed_driver(
    journal: Any,
    key: str,
    *,
    provider: Provider[Any],
    handler: object,
    options: Mapping[str, Any],
    live: bool,
) -> tuple[Driver[Any], Loaded]:
    """The driver that carries the journaled session on (its outcome, when it ended), or the
    ``SessionError`` raised that says why not."""
    ok(check_key(key))
    if not resumable(provider):
        raise InvalidOpts("provider", f"{type(provider).__name__} sessions cannot be resumed")
    held = ok(hold(journal, key))  # the key's lease: before reading, so two resumes never both run it
    try:
        return _driver_holding(held, key, provider=provider, handler=handler, options=options, live=live)
    except SessionError:
        held.release()
        raise


def _driver_holding(
    held: Held,
    key: str,
    *,
    provider: Provider[Any],
    handler: object,
    options: Mapping[str, Any],
    live: bool,
) -> tuple[Driver[Any], Loaded]:
    o = options  # the handler options, defaulted (``rma_shell.run_options.split``)
    loaded = _loaded(held.store, key, provider)
    config = loaded.config
    if config.live != live:
        how = "open_session (resume it with resume_session)" if config.live else "run (resume it with resume)"
        raise InvalidOpts("journal_key", f"{key!r} holds a session started with {how}")
    if config.has_turn_guard and o["turn_guard"] is None:
        raise InvalidOpts("turn_guard", "the journaled run has a turn guard: pass it to resume too")
    if not config.has_turn_guard and o["turn_guard"] is not None:
        raise InvalidOpts("turn_guard", "the journaled run had no turn guard")
    check_tool_limits(o["tool_timeout"], o["max_tool_result_chars"])
    grace = check_stop_grace(o["stop_grace"])
    output_tool = output_tool_for(o["output_type"], None)
    if config.output_tool != (output_tool is not None):
        need = "had an output_type: pass it again" if config.output_tool else "had no output_type"
        raise InvalidOpts("output_type", f"the journaled run {need}")
    opts = DriverOptions(
        handler=handler,
        context=o["context"],
        turn_guard=o["turn_guard"],
        max_concurrency=o["max_concurrency"],
        telemetry=o["telemetry"] or default_telemetry,
        record=None,
        open_request=request_from(loaded.request, o["model_config"], output_tool),
        output=output_tool,
        tool_timeout=o["tool_timeout"],
        max_tool_result_chars=o["max_tool_result_chars"],
        journal=SessionJournal(held.store, key, loaded, held=held),
        stop_grace=grace,
    )
    if handler_shape(handler) is None:
        raise InvalidOpts("handler", f"{type(handler).__name__} is not a handler")
    return Driver.restored(provider, loaded, opts), loaded


@spelled_out()
async def resume(
    journal: Any,
    key: str,
    *,
    provider: Provider[Any],
    handler: object,
    **options: Unpack[HandlerOptions],
) -> Result[SessionResult, SessionError]:
    """Carry on the ``run`` journaled under ``key`` and return its one result, like ``run``.

    Safe to call again after any failure or crash, and on a session that already ended (its
    outcome comes back, nothing is sent — but for a run that timed out while its host's stop
    went unconfirmed or failed: the host is asked again, for up to ``REMOTE_STOP_TIMEOUT_S``,
    and the ``Timeout`` comes back saying what came of it). A paused session
    (``AwaitingApproval``) carries on once ``approve`` has decided its calls; undecided ones
    pause it again. ``timeout`` bounds this call, as ``run``'s bounds a run, and
    ``stop_grace`` the stop of the host's loop when it passes, as for a run.
    """
    try:
        mine = _handler_options(options, "resume()")
        driver, loaded = _resumed_driver(
            journal, key, provider=provider, handler=handler, options=mine, live=False
        )
    except SessionError as error:  # the one place a resume's preparation becomes a value
        return Failure(error.with_traceback(None))
    timeout = mine["timeout"]
    announce_driver(driver)
    try:
        if loaded.outcome is not None:  # it ended: the outcome, as it was returned
            return driver.typed(await _finish_stop(driver, loaded, loaded.outcome, timeout))
        return await drive_to_end(driver, timeout, lambda: driver.reattach(loaded), what="resumed session")
    except BaseException as exc:
        interrupt = keyboard_interrupt(exc)
        if interrupt is not None and interrupt is not exc:
            raise interrupt from None
        raise
    finally:
        await driver.close()


@spelled_out(without=frozenset({"timeout"}))
@asynccontextmanager
async def resume_session(
    journal: Any,
    key: str,
    *,
    provider: Provider[Any],
    handler: object,
    **options: Unpack[HandlerOptions],
) -> AsyncIterator[LiveSession]:
    """Reopen the live session (``open_session``) journaled under ``key``, where it was.

    Like ``open_session``, a failure to start raises the ``SessionError`` (a damaged journal,
    a host that refuses the reattach); once open, every request's outcome is a value. A
    request the old process had open carries on and its result is the session's next one.
    """
    mine = _handler_options(options, "resume_session()", live=True)
    driver, loaded = _resumed_driver(
        journal, key, provider=provider, handler=handler, options=mine, live=True
    )
    try:
        if loaded.outcome is not None:
            raise Closed().with_traceback(None)  # it ended for good (a pause, a journal failure)
        in_flight = await driver.reattach(loaded)
        if isinstance(in_flight, Failure):
            raise in_flight.failure().with_traceback(None)
        async with anyio.create_task_group() as nursery:
            await nursery.start(serve_reporting, driver, in_flight.unwrap())
            try:
                yield LiveSession(driver)
            finally:
                nursery.cancel_scope.cancel()
    except BaseException as exc:
        interrupt = keyboard_interrupt(exc)
        if interrupt is not None and interrupt is not exc:
            raise interrupt from None
        raise
    finally:
        await driver.close()


async def _finish_stop(
    driver: Driver[Any], loaded: Loaded, outcome: Outcome_, timeout: float | None
) -> Outcome_:
    """A run that timed out while its host's stop was not confirmed (issue #23: the run's
    ``stop_grace`` ran out, or the host could not be reached): reattach, ask the host to stop
    again, and journal what came of it — a second ``end`` record, the same outcome with the new
    ``remote_stop`` (the last ``end`` is the one a journal holds, and a journal written before
    this reads as it did). Nobody is past a deadline here: the stop gets
    ``REMOTE_STOP_TIMEOUT_S`` (and no more than this call's ``timeout``). Any other outcome —
    a journal written before the stop was journaled included (``remote_stop`` None) — is
    returned as it is, nothing sent."""
    error = outcome.failure() if isinstance(outcome, Failure) else None
    if (
        not isinstance(error, Timeout)
        or error.operation != "run"
        or error.remote_stop not in UNFINISHED
        or loaded.snapshot is None
    ):
        return outcome
    within = REMOTE_STOP_TIMEOUT_S if timeout is None else min(timeout, REMOTE_STOP_TIMEOUT_S)
    deadline = anyio.current_time() + within
    restored: Result[Any, SessionError] | None = None
    with anyio.CancelScope(deadline=deadline):
        restored = await driver.provider.restore(driver.opts.open_request, loaded.snapshot)
    if not isinstance(restored, Success):
        why = "it took the whole wait" if restored is None else restored.failure().message
        log.warning(
            "cannot reattach to stop the host's loop: %s",
            why,
            extra={"journal_key": loaded.key, "provider": driver.config.provider_name},
        )
        return outcome
    conn = restored.unwrap()
    driver.adopt(conn)
    stop: RemoteStop = await ask_host(driver, conn, "resume", max(deadline - anyio.current_time(), 0.0))
    finished = stamp(outcome, stop)
    if stop != error.remote_stop:
        driver.end_journal(finished)
    return finished


def approve(
    journal: Any, key: str, tool_use_id: str, decision: Decision, reason: str | None = None
) -> Result[None, SessionError]:
    """Decide a call that waits for approval: ``"allow"`` runs it on ``resume``, ``"deny"``
    answers the model with an error naming ``reason``. Written to the journal at once, from any
    process; a call that does not wait there, or an unknown decision, is ``InvalidOpts``."""
    try:
        _approve(journal, key, tool_use_id, decision, reason)
    except SessionError as error:
        return Failure(error.with_traceback(None))
    return Success(None)


def _approve(journal: Any, key: str, tool_use_id: str, decision: Decision, reason: str | None) -> None:
    if decision not in ("allow", "deny"):
        raise InvalidOpts("decision", f"must be 'allow' or 'deny', got {decision!r}")
    if reason is not None and not isinstance(reason, str):
        raise InvalidOpts("reason", f"must be a string or None, got {type(reason).__name__}")
    waiting = _waiting(journal, key)
    if tool_use_id not in {p.tool_use_id for p in waiting}:
        ids = ", ".join(p.tool_use_id for p in waiting) or "none"
        raise InvalidOpts(
            "tool_use_id", f"{tool_use_id!r} does not wait for approval in {key!r} (waiting: {ids})"
        )
    held = ok(opened(journal))
    try:
        held.store.append(key, [approval_record(tool_use_id, decision, reason, at=time.time())])
    except JournalStoreError as exc:
        raise InvalidOpts("journal", str(exc)) from None
    finally:
        held.release()


def pending_approvals(journal: Any, key: str) -> Result[tuple[PendingApproval, ...], SessionError]:
    """The calls of ``key`` that wait for a decision, with their inputs (empty: none wait)."""
    try:
        return Success(_waiting(journal, key))
    except SessionError as error:
        return Failure(error.with_traceback(None))


def _waiting(journal: Any, key: str) -> tuple[PendingApproval, ...]:
    ok(check_key(key))
    held = ok(opened(journal))
    try:
        rows = held.store.rows(key)
    except JournalStoreError as exc:
        raise InvalidOpts("journal", str(exc)) from None
    finally:
        held.release()
    return ok(load(key, rows, _any_codec)).waiting


def _any_codec(name: str) -> Any:
    # Importing a provider codec module registers it by name (rma.provider.register_codec).
    import rma.providers.agentcore.codec
    import rma.providers.claude.codec
    import rma.providers.local.codec
    import rma.providers.scripted  # noqa: F401
    from rma.provider import codec_for

    return codec_for(name)
