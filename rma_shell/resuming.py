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
from rma_shell.run_options import HANDLER_OPTIONS, HandlerOptions, spelled_out, split
from rma_shell.session import (
    LiveSession,
    check_stop_grace,
    check_tool_limits,
    drive_to_end,
    output_tool_for,
    serve_reporting,
)
from rma_shell.telemetry import default as default_telemetry

log = logging.getLogger("rma.session")


def _loaded(store: JournalStore, key: str, provider: Provider[Any]) -> Result[Loaded, SessionError]:
    try:
        rows = store.rows(key)
    except JournalStoreError as exc:
        return Failure(InvalidOpts("journal", str(exc)))
    loaded = load(key, rows, lambda _name: provider.codec)
    if isinstance(loaded, Failure):
        return loaded
    journaled = loaded.unwrap().config.provider_name
    if journaled != provider.codec.name:
        return Failure(
            JournalMismatch(
                key=key,
                detail=f"it holds a {journaled!r} session, and this provider runs {provider.codec.name!r}",
            )
        )
    return loaded


def _handler_options(
    given: Mapping[str, Any], where: str, *, live: bool = False
) -> Result[dict[str, Any], SessionError]:
    """The handler options given to ``resume``/``resume_session``, defaulted; a name it does not
    take (a misspelling, a run's option that resuming cannot change) is ``InvalidOpts``."""
    accepted = HANDLER_OPTIONS - {"timeout"} if live else HANDLER_OPTIONS
    named = check_names(given, accepted, where=where, elsewhere=LIVE_ELSEWHERE if live else None)
    if isinstance(named, Failure):
        return Failure(named.failure())
    return Success(split(given, accepted)[0])


def _resumed_driver(
    journal: Any,
    key: str,
    *,
    provider: Provider[Any],
    handler: object,
    options: Mapping[str, Any],
    live: bool,
) -> Result[tuple[Driver[Any], Loaded], SessionError]:
    """The driver that carries the journaled session on (its outcome, when it ended), or why not."""
    checked = check_key(key)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    if not resumable(provider):
        return Failure(InvalidOpts("provider", f"{type(provider).__name__} sessions cannot be resumed"))
    held = hold(journal, key)  # the key's lease: before reading, so two resumes never both run it
    if isinstance(held, Failure):
        return Failure(held.failure())
    built = _driver_holding(
        held.unwrap(), key, provider=provider, handler=handler, options=options, live=live
    )
    if isinstance(built, Failure):
        held.unwrap().release()
    return built


def _driver_holding(
    held: Held,
    key: str,
    *,
    provider: Provider[Any],
    handler: object,
    options: Mapping[str, Any],
    live: bool,
) -> Result[tuple[Driver[Any], Loaded], SessionError]:
    o = options  # the handler options, defaulted (``rma_shell.run_options.split``)
    loaded_ = _loaded(held.store, key, provider)
    if isinstance(loaded_, Failure):
        return Failure(loaded_.failure())
    loaded = loaded_.unwrap()
    config = loaded.config
    if config.live != live:
        how = "open_session (resume it with resume_session)" if config.live else "run (resume it with resume)"
        return Failure(InvalidOpts("journal_key", f"{key!r} holds a session started with {how}"))
    if config.has_turn_guard and o["turn_guard"] is None:
        return Failure(InvalidOpts("turn_guard", "the journaled run has a turn guard: pass it to resume too"))
    if not config.has_turn_guard and o["turn_guard"] is not None:
        return Failure(InvalidOpts("turn_guard", "the journaled run had no turn guard"))
    limits = check_tool_limits(o["tool_timeout"], o["max_tool_result_chars"])
    if isinstance(limits, Failure):
        return Failure(limits.failure())
    grace = check_stop_grace(o["stop_grace"])
    if isinstance(grace, Failure):
        return Failure(grace.failure())
    output = output_tool_for(o["output_type"], None)
    if isinstance(output, Failure):
        return Failure(output.failure())
    output_tool = output.unwrap()
    if config.output_tool != (output_tool is not None):
        need = "had an output_type: pass it again" if config.output_tool else "had no output_type"
        return Failure(InvalidOpts("output_type", f"the journaled run {need}"))
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
        stop_grace=grace.unwrap(),
    )
    if handler_shape(handler) is None:
        return Failure(InvalidOpts("handler", f"{type(handler).__name__} is not a handler"))
    return Success((Driver.restored(provider, loaded, opts), loaded))


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
    mine = _handler_options(options, "resume()")
    if isinstance(mine, Failure):
        return Failure(mine.failure())
    timeout = mine.unwrap()["timeout"]
    built = _resumed_driver(
        journal, key, provider=provider, handler=handler, options=mine.unwrap(), live=False
    )
    if isinstance(built, Failure):
        return Failure(built.failure())
    driver, loaded = built.unwrap()
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
    if isinstance(mine, Failure):
        raise mine.failure().with_traceback(None)
    built = _resumed_driver(
        journal, key, provider=provider, handler=handler, options=mine.unwrap(), live=True
    )
    if isinstance(built, Failure):
        raise built.failure().with_traceback(None)
    driver, loaded = built.unwrap()
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
    if decision not in ("allow", "deny"):
        return Failure(InvalidOpts("decision", f"must be 'allow' or 'deny', got {decision!r}"))
    if reason is not None and not isinstance(reason, str):
        return Failure(InvalidOpts("reason", f"must be a string or None, got {type(reason).__name__}"))
    waiting = pending_approvals(journal, key)
    if isinstance(waiting, Failure):
        return Failure(waiting.failure())
    if tool_use_id not in {p.tool_use_id for p in waiting.unwrap()}:
        ids = ", ".join(p.tool_use_id for p in waiting.unwrap()) or "none"
        return Failure(
            InvalidOpts(
                "tool_use_id", f"{tool_use_id!r} does not wait for approval in {key!r} (waiting: {ids})"
            )
        )
    held = opened(journal)
    if isinstance(held, Failure):
        return Failure(held.failure())
    try:
        held.unwrap().store.append(key, [approval_record(tool_use_id, decision, reason, at=time.time())])
    except JournalStoreError as exc:
        return Failure(InvalidOpts("journal", str(exc)))
    finally:
        held.unwrap().release()
    return Success(None)


def pending_approvals(journal: Any, key: str) -> Result[tuple[PendingApproval, ...], SessionError]:
    """The calls of ``key`` that wait for a decision, with their inputs (empty: none wait)."""
    checked = check_key(key)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    held = opened(journal)
    if isinstance(held, Failure):
        return Failure(held.failure())
    try:
        rows = held.unwrap().store.rows(key)
    except JournalStoreError as exc:
        return Failure(InvalidOpts("journal", str(exc)))
    finally:
        held.unwrap().release()
    loaded = load(key, rows, _any_codec)
    if isinstance(loaded, Failure):
        return Failure(loaded.failure())
    return Success(loaded.unwrap().waiting)


def _any_codec(name: str) -> Any:
    # Importing a provider codec module registers it by name (rma.provider.register_codec).
    import rma.providers.bedrock_agentcore
    import rma.providers.claude_managed_agents
    import rma.providers.local
    import rma.providers.scripted  # noqa: F401
    from rma.provider import codec_for

    return codec_for(name)
