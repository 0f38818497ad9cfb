"""Running sessions: ``run`` (to completion) and ``open_session`` (live), on anyio (trio or asyncio).

The public entry points: they check the options, build the session's driver
(``rma_shell.driver``: the loop that feeds the core's ``step`` and executes its commands) and
turn its outcome into the run's one result, or a live session's results.

What this is not: the driver itself, nor the core's rules (``rma.session``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.errors import Closed, Crashed, SessionError, Timeout
from rma.journal import InFlight
from rma.session.events import (
    DeadlineReached,
    UserMessage,
)
from rma.session.machine import (
    Phase,
)
from rma.session.option_checks import check_seconds
from rma.session.options import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_REPROMPTS,
    DEFAULT_MAX_TURNS,
    DEFAULT_TIMEOUT_S,
    lift_handles,
    validate,
)
from rma.vocabulary import JSON, Budget, SessionInfo, SessionResult
from rma_shell._interrupt import keyboard_interrupt
from rma_shell.driver import (
    Outcome_,
    _crash,
    _Driver,
    _Options,
)
from rma_shell.handler import DEFAULT_MAX_RESULT_CHARS
from rma_shell.journal.setup import begin_journal, check_new, request_record
from rma_shell.journal.writer import SessionJournal
from rma_shell.options import check_run_options
from rma_shell.providers.base import OpenRequest, Provider
from rma_shell.recording import Recordable, open_recorder
from rma_shell.remote_stop import stop_host, with_remote_stop
from rma_shell.telemetry import Telemetry
from rma_shell.telemetry import default as default_telemetry
from rma_shell.updates import UpdateStream

log = logging.getLogger("rma.session")

SessionFailed = SessionError
"""Deprecated alias: ``open_session`` raises the ``SessionError`` itself (an exception since
issue #13), so ``except SessionError`` covers it; ``except SessionFailed`` keeps working."""


DEFAULT_MAX_TOOL_RESULT_CHARS = DEFAULT_MAX_RESULT_CHARS
"""The default ``max_tool_result_chars`` of a run: the handler's one cap (100,000 characters)."""


def _tool_limits(tool_timeout: object, max_chars: object) -> Result[None, SessionError]:
    from rma.errors import InvalidOpts

    if tool_timeout is not None:
        checked = check_seconds(tool_timeout, "tool_timeout")
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        if tool_timeout == 0:
            return Failure(InvalidOpts("tool_timeout", "must be a positive number of seconds or None"))
    if max_chars is not None and (
        not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 1
    ):
        return Failure(
            InvalidOpts("max_tool_result_chars", f"must be a positive int or None, got {max_chars!r}")
        )
    return Success(None)


def _output_tool(output_type: Any, terminal_tool: str | None) -> Result[Any, SessionError]:
    """The terminal tool for ``output_type`` (None without one), or why it cannot be built."""
    from rma.errors import InvalidOpts

    if output_type is None:
        return Success(None)
    try:
        from rma_shell.tools.output import OutputTool
    except ImportError:
        return Failure(
            InvalidOpts("output_type", "typed output needs the tools extra: pip install 'rma-agents[tools]'")
        )
    if terminal_tool is not None:
        return Failure(
            InvalidOpts(
                "terminal_tool",
                "output_type brings its own terminal tool (final_result): give one or the other",
            )
        )
    try:
        return Success(OutputTool(output_type))
    except TypeError as exc:
        return Failure(InvalidOpts("output_type", str(exc)))


def _prepare(
    provider: Provider[Any],
    *,
    live: bool,
    handler: object,
    prompt: str | None,
    context: object,
    max_turns: int,
    timeout: float | None,
    turn_guard: Callable[[Mapping[str, Any]], Any] | None,
    require_terminal_tool: bool,
    terminal_tool: str | None,
    max_reprompts: int,
    outcome: Any,
    budget: Budget | Mapping[str, Any] | None,
    session_id: str | None,
    telemetry_metadata: Mapping[str, JSON] | None,
    model_config: Mapping[str, Any] | None,
    max_concurrency: int,
    telemetry: Telemetry | None,
    record: Recordable,
    provider_opts: Mapping[str, Any],
    output_type: Any = None,
    tool_timeout: float | None = None,
    max_tool_result_chars: int | None = None,
    journal: object = None,
    journal_key: object = None,
    approvals_elsewhere: bool = False,
) -> Result[_Driver[Any], SessionError]:
    codec = getattr(provider, "codec", None)
    if codec is None:
        from rma.errors import InvalidOpts

        return Failure(
            InvalidOpts("provider", f"{type(provider).__name__} is not an rma provider (no codec)")
        )
    names = check_run_options(provider, provider_opts, live=live, model_config=model_config)
    if isinstance(names, Failure):
        return Failure(names.failure())  # a misspelled or misplaced name: before anything else
    limits = _tool_limits(tool_timeout, max_tool_result_chars)
    if isinstance(limits, Failure):
        return Failure(limits.failure())
    output = _output_tool(output_type, terminal_tool)
    if isinstance(output, Failure):
        return Failure(output.failure())
    output_tool = output.unwrap()
    if output_tool is not None:  # the session ends through the answer's tool (issue #14)
        require_terminal_tool, terminal_tool = True, output_tool.name
    validated = validate(
        codec,
        handler=handler,
        prompt=prompt,
        turn_guard=turn_guard,
        require_terminal_tool=require_terminal_tool,
        terminal_tool=terminal_tool,
        max_reprompts=max_reprompts,
        outcome=outcome,
        budget=budget,
        session_id=session_id,
        max_turns=max_turns,
        timeout=timeout,
        max_concurrency=max_concurrency,
        telemetry_metadata=telemetry_metadata,
        model_config=model_config,
        live=live,
    )
    if isinstance(validated, Failure):
        return Failure(validated.failure())
    config, parsed_budget = validated.unwrap()
    extra = lift_handles(provider_opts)
    if model_config is not None:
        extra["model_config"] = model_config
    if output_tool is not None:
        config = attrs.evolve(config, output_tool=True)
        extra["output_tool"] = output_tool.spec  # declared beside the provider's tools
    request = OpenRequest(
        prompt=prompt,
        session_id=session_id,
        max_turns=max_turns,
        outcome=config.outcome,
        budget=parsed_budget,
        metadata=config.metadata,
        extra=extra,
    )
    # ``approvals_elsewhere``: a Temporal workflow waits for approvals in its own history.
    journaled = check_new(journal, journal_key, provider, None if approvals_elsewhere else handler)
    if isinstance(journaled, Failure):
        return Failure(journaled.failure())
    session_journal: SessionJournal | None = None
    kept_request: dict[str, Any] = {}
    fresh = journaled.unwrap()
    if fresh is not None:
        held, key = fresh
        kept = request_record(request)
        if isinstance(kept, Failure):
            held.release()
            return Failure(kept.failure())
        kept_request = kept.unwrap()
        session_journal = SessionJournal(held.store, key, held=held)  # closed with the driver
    opts = _Options(
        handler=handler,
        context=context,
        turn_guard=turn_guard,
        max_concurrency=max_concurrency,
        telemetry=telemetry or default_telemetry,
        record=record,
        open_request=request,
        output=output_tool,
        tool_timeout=tool_timeout,
        max_tool_result_chars=max_tool_result_chars,
        journal=session_journal,
    )
    driver = _Driver(provider, config, opts)
    if session_journal is not None:
        began = begin_journal(session_journal, driver.config, kept_request)
        if isinstance(began, Failure):
            session_journal.close()
            return Failure(began.failure())
    if record is not None:
        recorder = open_recorder(record, driver.config)
        if isinstance(recorder, Failure):
            if session_journal is not None:
                session_journal.close()
            return Failure(recorder.failure())
        driver.recorder = recorder.unwrap()
    return Success(driver)


async def run(
    provider: Provider[Any],
    *,
    handler: object,
    prompt: str | None = None,
    context: object = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    turn_guard: Callable[[Mapping[str, Any]], Any] | None = None,
    require_terminal_tool: bool = False,
    terminal_tool: str | None = None,
    max_reprompts: int = DEFAULT_MAX_REPROMPTS,
    outcome: Any = None,
    budget: Budget | Mapping[str, Any] | None = None,
    session_id: str | None = None,
    telemetry_metadata: Mapping[str, JSON] | None = None,
    model_config: Mapping[str, Any] | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    telemetry: Telemetry | None = None,
    record: Recordable = None,
    output_type: Any = None,
    tool_timeout: float | None = None,
    max_tool_result_chars: int | None = DEFAULT_MAX_TOOL_RESULT_CHARS,
    journal: Any = None,
    journal_key: str | None = None,
    **provider_opts: Any,
) -> Result[SessionResult, SessionError]:
    """Run a session to its terminal and return its one result (S-1, S-65).

    Never raises for expected failures: invalid options, provider errors, timeouts and
    handler failures all come back as ``Failure(SessionError)``. ``timeout`` (seconds,
    None for none) bounds the whole run; on expiry every tool call, poll and stream of
    the session is cancelled, the host's loop is stopped (best effort, issue #15) and
    ``Failure(Timeout)`` returned — its ``remote_stop`` says whether the host confirmed.

    Args:
        provider: where the loop runs (``Local``, ``ClaudeManagedAgents``, ``BedrockAgentCore``).
        handler: runs your tools: ``handle_tool_call(name, input, ctx[, info])`` (sync or
            async) or a plain callable of 3 or 4 arguments; returns ``str``, a JSON
            ``dict``/``list``, ``Success(...)`` or ``Failure(...)``.
        prompt: the first user message (None when reattaching with nothing to add).
        context: handed to every handler call as ``ctx``, as is; default None.
        max_turns: turns the session may drive (default 50); never exceeded.
        timeout: seconds for the whole run (default 600; None: no limit).
        turn_guard: called after every turn; returns ``CONTINUE`` or ``Halt(reason)``.
        max_concurrency: tool calls of one turn run at once (default 8).
        record: a path or text stream for a replayable JSON-lines log.
        journal: a ``JournalStore`` or the path of an SQLite file: the session is written
            durably as it goes, so ``resume(journal, journal_key, ...)`` carries it on after a
            crash without running a journaled tool again (docs/durable.md).
        journal_key: the session's name in the journal (required with ``journal=``; new).
        provider_opts: per-run provider options (``agent=``, ``runtime_session_id=``, …).
    """
    prepared = _prepare(
        provider,
        live=False,
        handler=handler,
        prompt=prompt,
        context=context,
        max_turns=max_turns,
        timeout=timeout,
        turn_guard=turn_guard,
        require_terminal_tool=require_terminal_tool,
        terminal_tool=terminal_tool,
        max_reprompts=max_reprompts,
        outcome=outcome,
        budget=budget,
        session_id=session_id,
        telemetry_metadata=telemetry_metadata,
        model_config=model_config,
        max_concurrency=max_concurrency,
        telemetry=telemetry,
        record=record,
        provider_opts=provider_opts,
        output_type=output_type,
        tool_timeout=tool_timeout,
        max_tool_result_chars=max_tool_result_chars,
        journal=journal,
        journal_key=journal_key,
    )
    if isinstance(prepared, Failure):
        return Failure(prepared.failure())
    driver = prepared.unwrap()
    ended: Outcome_ | None = None
    stopped: str | None = None
    try:
        ended = await _run_to_end(driver, timeout)
        return ended
    except BaseException as exc:
        interrupt = keyboard_interrupt(exc)
        stopped = "KeyboardInterrupt" if interrupt is not None else "cancelled"
        if interrupt is not None and interrupt is not exc:
            raise interrupt from None  # Ctrl-C reaches the caller as itself, not in a group
        raise
    finally:
        await stop_host(driver, stopped or "ended")  # issue #15: a host still running is stopped
        driver.end_recording(ended, stopped)
        await driver.close()


def _run_deadline(timeout: float | None) -> anyio.CancelScope:
    """The scope that ends a run after ``timeout`` seconds. A module-level seam, not an option:
    tests replace it to end a run by its timeout at a point of a real-time exchange with a
    host emulator they choose, on either backend, rather than race a clock against it."""
    return anyio.move_on_after(math.inf if timeout is None else timeout)


async def _run_to_end(driver: _Driver[Any], timeout: float | None) -> Outcome_:
    try:
        with _run_deadline(timeout) as scope:
            opened = await driver.open()
            if isinstance(opened, Failure):
                return Failure(opened.failure())
            await driver.serve()
        if driver.final is not None:
            return driver.final
        if scope.cancelled_caught:
            stop = await stop_host(driver, "timeout")  # issue #15: the host's loop too
            await driver.feed(DeadlineReached(timeout_s=timeout))
            return with_remote_stop(driver, driver.final or Failure(Timeout(timeout_s=timeout)), stop)
        return Failure(Crashed(error_type="SessionEnded", detail="the session ended without a result"))
    except Exception as exc:
        log.exception("session crashed", extra={"session_id": driver.info.session_id})
        return Failure(_crash(exc))


class LiveSession:
    """A live session (``open_session``): follow-ups, raw events, and its results in order."""

    def __init__(self, driver: _Driver[Any]) -> None:
        self._driver = driver

    @property
    def info(self) -> SessionInfo:
        return self._driver.info

    @property
    def session_id(self) -> str | None:
        return self._driver.info.session_id

    @property
    def idle(self) -> bool:
        return self._driver.state.phase is Phase.IDLE

    async def message(self, text: str) -> None:
        """Send a follow-up; it starts a fresh request once the current one ends (S-69, S-70)."""
        if not isinstance(text, str):
            raise TypeError(f"message text must be a str, got {type(text).__name__}")
        self._driver.post(UserMessage(text))
        await anyio.lowlevel.checkpoint()

    async def send_event(self, event: JSON, *, timeout: float = 5.0) -> Result[None, SessionError]:
        """Push a raw provider event verbatim (S-67); ``Unsupported`` on request/response hosts."""
        return await self._driver.send_event(event, timeout)

    async def next_result(self) -> Result[SessionResult, SessionError]:
        """The next request's result; ``Failure(Closed)`` once the session is closed."""
        try:
            return await self._driver.results.next()
        except anyio.EndOfStream:
            return Failure(Closed())

    def __aiter__(self) -> AsyncIterator[Result[SessionResult, SessionError]]:
        return self._iterate()

    def updates(self) -> UpdateStream:
        """The session's live updates (``rma.live``: text deltas, tool calls started and
        finished, turns finished, discarded attempts) from the moment of the call, in order,
        until the session closes or the stream is closed. Several may run at once; each gets
        every update. Updates are computed only while one is open (or the handler has
        ``handle_update``). Use ``async with session.updates() as updates: async for u in
        updates: …`` so leaving early unsubscribes; a plain ``async for`` works too.
        """
        return UpdateStream(self._driver.updates, ended=self._driver.final is not None)

    async def _iterate(self) -> AsyncIterator[Result[SessionResult, SessionError]]:
        while True:
            try:
                outcome = await self._driver.results.next()
            except anyio.EndOfStream:
                return
            yield outcome


@asynccontextmanager
async def open_session(
    provider: Provider[Any],
    *,
    handler: object,
    prompt: str | None = None,
    context: object = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    turn_guard: Callable[[Mapping[str, Any]], Any] | None = None,
    require_terminal_tool: bool = False,
    terminal_tool: str | None = None,
    max_reprompts: int = DEFAULT_MAX_REPROMPTS,
    outcome: Any = None,
    budget: Budget | Mapping[str, Any] | None = None,
    session_id: str | None = None,
    telemetry_metadata: Mapping[str, JSON] | None = None,
    model_config: Mapping[str, Any] | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    telemetry: Telemetry | None = None,
    record: Recordable = None,
    output_type: Any = None,
    tool_timeout: float | None = None,
    max_tool_result_chars: int | None = DEFAULT_MAX_TOOL_RESULT_CHARS,
    journal: Any = None,
    journal_key: str | None = None,
    **provider_opts: Any,
) -> AsyncIterator[LiveSession]:
    """Open a live session (S-2): it stays up after each result, reconnects after drops.

    When it cannot start (invalid options, the provider's open failing) it raises the
    ``SessionError`` that ``run`` would have returned in a ``Failure`` — the same typed value,
    so ``except SessionError as err`` / ``match err`` handle both. Once open, every request's
    outcome is a value again (``next_result``). Leaving the block cancels everything the
    session runs, stops the host's loop if a request is in flight, and closes its connections.
    """
    prepared = _prepare(
        provider,
        live=True,
        handler=handler,
        prompt=prompt,
        context=context,
        max_turns=max_turns,
        timeout=None,
        turn_guard=turn_guard,
        require_terminal_tool=require_terminal_tool,
        terminal_tool=terminal_tool,
        max_reprompts=max_reprompts,
        outcome=outcome,
        budget=budget,
        session_id=session_id,
        telemetry_metadata=telemetry_metadata,
        model_config=model_config,
        max_concurrency=max_concurrency,
        telemetry=telemetry,
        record=record,
        provider_opts=provider_opts,
        output_type=output_type,
        tool_timeout=tool_timeout,
        max_tool_result_chars=max_tool_result_chars,
        journal=journal,
        journal_key=journal_key,
    )
    if isinstance(prepared, Failure):
        raise prepared.failure().with_traceback(None)
    driver = prepared.unwrap()
    ended: Outcome_ | None = None
    stopped: str | None = None
    try:
        opened = await driver.open()
        if isinstance(opened, Failure):
            ended = Failure(opened.failure())
            raise opened.failure().with_traceback(None)
        async with anyio.create_task_group() as nursery:
            await nursery.start(_serve_reporting, driver)
            try:
                yield LiveSession(driver)
            finally:
                nursery.cancel_scope.cancel()
    except BaseException as exc:
        interrupt = keyboard_interrupt(exc)
        if interrupt is not None:
            stopped = "KeyboardInterrupt"
            if interrupt is not exc:
                raise interrupt from None  # Ctrl-C reaches the caller as itself, not in a group
        raise
    finally:
        await stop_host(driver, stopped or "closed")  # issue #15: a request in flight is stopped
        driver.end_recording(ended, stopped, live=True)
        await driver.close()


async def _serve_reporting(
    driver: _Driver[Any],
    in_flight: InFlight | None = None,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve a live session; a crash is reported to its results, never a silent death (S-66)."""
    try:
        await driver.serve(task_status=task_status, in_flight=in_flight)
    except Exception as exc:
        log.exception("live session crashed", extra={"session_id": driver.info.session_id})
        driver._report(Failure(_crash(exc)), final=True)
