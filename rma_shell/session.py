"""Running sessions: ``run`` (to completion) and ``open_session`` (live), on anyio (trio or asyncio).

The public entry points: they check the options, build the session's driver
(``rma_shell.machinery.driver``: the loop that feeds the core's ``step`` and executes its commands) and
turn its outcome into the run's one result, or a live session's results.

What this is not: the driver itself, nor the core's rules (``rma.session``).
"""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Unpack

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.errors import Closed, Crashed, InvalidOpts, SessionError
from rma.journal import InFlight
from rma.session.events import (
    UserMessage,
)
from rma.session.machine import (
    Phase,
)
from rma.session.option_checks import check_seconds
from rma.session.options import (
    lift_handles,
    validate,
)
from rma.vocabulary import JSON, SessionInfo, SessionResult
from rma_shell.handler import DEFAULT_MAX_RESULT_CHARS
from rma_shell.journal.setup import begin_journal, check_new, request_record
from rma_shell.journal.writer import SessionJournal
from rma_shell.machinery.driver import (
    Driver,
    DriverOptions,
    Outcome_,
    crash_error,
)
from rma_shell.machinery.interrupt import keyboard_interrupt
from rma_shell.machinery.remote_stop import stop_host
from rma_shell.machinery.updates import UpdateStream
from rma_shell.options import check_run_options, owners_of, take_renamed
from rma_shell.providers.base import OpenRequest, Provider
from rma_shell.results import ok
from rma_shell.run_options import OWN_RUN_OPTIONS, RunOptions, spelled_out, split
from rma_shell.telemetry import default as default_telemetry

log = logging.getLogger("rma.session")

SessionFailed = SessionError
"""Deprecated alias: ``open_session`` raises the ``SessionError`` itself (an exception since
issue #13), so ``except SessionError`` covers it; ``except SessionFailed`` keeps working."""


DEFAULT_MAX_TOOL_RESULT_CHARS = DEFAULT_MAX_RESULT_CHARS
"""The default ``max_tool_result_chars`` of a run: the handler's one cap (100,000 characters)."""


_ON_DRIVER: contextvars.ContextVar[Callable[[Driver[Any]], None] | None] = contextvars.ContextVar(
    "rma_on_driver", default=None
)


@contextmanager
def on_next_driver(hook: Callable[[Driver[Any]], None]) -> Iterator[None]:
    """Within the block, the next ``run`` (or ``resume``) started in this context calls ``hook``
    with its driver before the session opens (``Agent.stream`` subscribes to its updates there).
    Taken once: a run started by a tool of that run does not see it."""
    token = _ON_DRIVER.set(hook)
    try:
        yield
    finally:
        _ON_DRIVER.reset(token)


def announce_driver(driver: Driver[Any]) -> None:
    """Hand ``driver`` to the hook of ``on_next_driver``, if one waits, and take the hook away."""
    hook = _ON_DRIVER.get()
    if hook is not None:
        _ON_DRIVER.set(None)  # this run's own: the tasks it spawns copy the context from here
        hook(driver)


def check_tool_limits(tool_timeout: object, max_chars: object) -> None:
    """``tool_timeout`` (positive seconds or None) and ``max_tool_result_chars`` (a positive
    int or None), or ``InvalidOpts`` naming the one that is wrong."""
    if tool_timeout is not None:
        ok(check_seconds(tool_timeout, "tool_timeout"))
        if tool_timeout == 0:
            raise InvalidOpts("tool_timeout", "must be a positive number of seconds or None")
    if max_chars is not None and (
        not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 1
    ):
        raise InvalidOpts("max_tool_result_chars", f"must be a positive int or None, got {max_chars!r}")


def check_stop_grace(value: object) -> float:
    """``stop_grace``: positive, finite seconds. Not zero — even a stop nobody waits for needs
    its request's round trip, so a zero grace would be a stop never asked — and not infinity: a
    stop with no bound would hold a run past its deadline for as long as the host likes (a
    Claude session that never reads idle)."""
    grace = ok(check_seconds(value, "stop_grace"))
    assert grace is not None  # allow_none is off
    return grace


def output_tool_for(output_type: Any, terminal_tool: str | None) -> Any:
    """The terminal tool for ``output_type`` (None without one), or ``InvalidOpts`` saying why
    it cannot be built."""

    if output_type is None:
        return None
    try:
        from rma_shell.tools.output import OutputTool
    except ImportError:
        raise InvalidOpts(
            "output_type", "typed output needs the tools extra: pip install 'rma-agents[tools]'"
        ) from None
    if terminal_tool is not None:
        raise InvalidOpts(
            "terminal_tool", "output_type brings its own terminal tool (final_result): give one or the other"
        )
    try:
        return OutputTool(output_type)
    except TypeError as exc:
        raise InvalidOpts("output_type", str(exc)) from None


def prepare_driver(
    provider: Provider[Any],
    *,
    live: bool,
    handler: object,
    prompt: str | None,
    options: Mapping[str, Any],
    provider_opts: Mapping[str, Any],
    approvals_elsewhere: bool = False,
) -> Driver[Any]:
    """The checked driver of a new session, or the ``SessionError`` raised that says why not
    (``run`` returns it in a ``Failure``, ``open_session`` lets it propagate)."""
    o = dict(options)  # rma's own options, defaulted (``rma_shell.run_options.split``)
    codec = getattr(provider, "codec", None)
    if codec is None:
        raise InvalidOpts("provider", f"{type(provider).__name__} is not an rma provider (no codec)")
    host_opts = ok(
        take_renamed(
            provider_opts,
            ["run", *owners_of(type(provider), ".run")],
            where="open_session()" if live else "run()",
            present=() if o["metadata"] is None else ("metadata",),
        )
    )
    # The older telemetry_metadata= labels the telemetry only (metadata= the host's session too).
    telemetry_metadata = host_opts.pop("telemetry_metadata", None)
    if telemetry_metadata is not None and not isinstance(telemetry_metadata, Mapping):
        raise InvalidOpts("telemetry_metadata", "expected a mapping")
    # A misspelled or misplaced name: before anything else.
    ok(check_run_options(provider, host_opts, live=live, model_config=o["model_config"]))
    check_tool_limits(o["tool_timeout"], o["max_tool_result_chars"])
    grace = check_stop_grace(o["stop_grace"])
    output_tool = output_tool_for(o["output_type"], o["terminal_tool"])
    if output_tool is not None:  # the session ends through the answer's tool (issue #14)
        o["require_terminal_tool"], o["terminal_tool"] = True, output_tool.name
    config, parsed_budget = ok(
        validate(
            codec,
            handler=handler,
            prompt=prompt,
            turn_guard=o["turn_guard"],
            require_terminal_tool=o["require_terminal_tool"],
            terminal_tool=o["terminal_tool"],
            max_reprompts=o["max_reprompts"],
            outcome=o["outcome"],
            budget=o["budget"],
            session_id=o["session_id"],
            max_turns=o["max_turns"],
            timeout=o["timeout"],
            max_concurrency=o["max_concurrency"],
            metadata=o["metadata"] if telemetry_metadata is None else telemetry_metadata,
            model_config=o["model_config"],
            live=live,
        )
    )
    extra = lift_handles(host_opts)
    if o["metadata"] is not None:  # labels the host's session too, where sessions carry metadata
        extra["metadata"] = o["metadata"]
    if o["model_config"] is not None:
        extra["model_config"] = o["model_config"]
    if output_tool is not None:
        config = attrs.evolve(config, output_tool=True)
        extra["output_tool"] = output_tool.spec  # declared beside the provider's tools
    request = OpenRequest(
        prompt=prompt,
        session_id=o["session_id"],
        max_turns=o["max_turns"],
        outcome=config.outcome,
        budget=parsed_budget,
        metadata=config.metadata,
        extra=extra,
    )
    # ``approvals_elsewhere``: a Temporal workflow waits for approvals in its own history.
    fresh = ok(check_new(o["journal"], o["journal_key"], provider, None if approvals_elsewhere else handler))
    session_journal: SessionJournal | None = None
    kept_request: dict[str, Any] = {}
    if fresh is not None:
        held, key = fresh
        try:
            kept_request = ok(request_record(request))
        except SessionError:
            held.release()
            raise
        session_journal = SessionJournal(held.store, key, held=held)  # closed with the driver
    opts = DriverOptions(
        handler=handler,
        context=o["context"],
        turn_guard=o["turn_guard"],
        max_concurrency=o["max_concurrency"],
        telemetry=o["telemetry"] or default_telemetry,
        record=o["record"],
        open_request=request,
        output=output_tool,
        tool_timeout=o["tool_timeout"],
        max_tool_result_chars=o["max_tool_result_chars"],
        journal=session_journal,
        stop_grace=grace,
    )
    driver = Driver(provider, config, opts)
    try:
        if session_journal is not None:
            ok(begin_journal(session_journal, driver.config, kept_request))
        if o["record"] is not None:
            ok(driver.start_recording(o["record"]))
    except SessionError:
        if session_journal is not None:
            session_journal.close()
        raise
    return driver


@spelled_out(host_options=True)
async def run(
    provider: Provider[Any],
    *,
    handler: object,
    prompt: str | None = None,
    **options: Unpack[RunOptions],
) -> Result[SessionResult, SessionError]:
    """Run a session to its terminal and return its one result (S-1, S-65).

    Never raises for expected failures: invalid options, provider errors, timeouts and
    handler failures all come back as ``Failure(SessionError)``. ``timeout`` (seconds,
    None for none) bounds the whole run; on expiry every tool call, poll and stream of
    the session is cancelled, the host's loop is stopped (best effort, issue #15) and
    ``Failure(Timeout)`` returned — its ``remote_stop`` says whether the host confirmed.
    The stop takes at most ``stop_grace`` seconds, so a timed-out run returns within
    ``timeout + stop_grace`` (issue #23), confirmed or not; a journaled run's stop that
    was not confirmed is finished by ``resume``.

    Args:
        provider: where the loop runs (``Local``, ``ClaudeManagedAgents``, ``BedrockAgentCore``).
        handler: runs your tools: ``handle_tool_call(name, input, ctx[, info])`` (sync or
            async) or a plain callable of 3 or 4 arguments; returns ``str``, a JSON
            ``dict``/``list``, ``Success(...)`` or ``Failure(...)``.
        prompt: the first user message (None when reattaching with nothing to add).
        context: handed to every handler call as ``ctx``, as is; default None.
        max_turns: turns the session may drive (default 50); never exceeded.
        timeout: seconds for the whole run (default 600; None: no limit).
        metadata: labels for the session (a JSON mapping): in its telemetry, logs and
            result (``SessionInfo.metadata``), and on hosts whose sessions carry metadata
            (Claude Managed Agents: string values) in the session itself.
        turn_guard: called after every turn; returns ``CONTINUE`` or ``Halt(reason)``.
        max_concurrency: tool calls of one turn run at once (default 8).
        record: a path or text stream for a replayable JSON-lines log.
        journal: a ``JournalStore`` or the path of an SQLite file: the session is written
            durably as it goes, so ``resume(journal, journal_key, ...)`` carries it on after a
            crash without running a journaled tool again (docs/durable.md).
        journal_key: the session's name in the journal (required with ``journal=``; new).
        stop_grace: seconds stopping the host's loop may take once the run stops driving a
            request in flight — past ``timeout``, or when the run is cancelled (default 1.0;
            a positive number). Past it the stop is ``unconfirmed``, and the run returns.
        options: ``RunOptions`` (``rma_shell.run_options``, docs/options.md), and the host's
            per-run options (``agent=``, ``runtime_session_id=``, …), checked against it.
    """
    mine, provider_opts = split(options, OWN_RUN_OPTIONS)
    try:
        driver = prepare_driver(
            provider, live=False, handler=handler, prompt=prompt, options=mine, provider_opts=provider_opts
        )
    except SessionError as error:  # the one place a run's preparation becomes a value
        return Failure(error.with_traceback(None))
    announce_driver(driver)
    ended: Outcome_ | None = None
    stopped: str | None = None
    try:
        ended = await drive_to_end(driver, mine["timeout"], lambda: _opened(driver))
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


async def drive_to_end(
    driver: Driver[Any],
    timeout: float | None,
    start: Callable[[], Awaitable[Result[InFlight | None, SessionError]]],
    *,
    what: str = "session",
) -> Outcome_:
    """Start ``driver`` (``start``: open it, or reattach a journaled one, saying what was in
    flight) and serve it to its outcome within ``timeout``; past it, stop the host's loop and
    feed the deadline. A crash is the outcome ``Crashed``, logged as ``what`` crashed. Shared by
    ``run`` and ``resume``."""
    try:
        with _run_deadline(timeout) as scope:
            started = await start()
            if isinstance(started, Failure):
                return Failure(started.failure())
            if driver.final is None:  # a reattached session may have ended already
                await driver.serve(in_flight=started.unwrap())
        if driver.final is not None:
            return driver.final
        if scope.cancelled_caught:
            # Issue #15: the host's loop too, within the grace (issue #23); before the deadline
            # is fed, so the journal's end record says what came of it (``resume`` finishes it).
            return await driver.past_deadline(timeout, await stop_host(driver, "timeout"))
        return Failure(Crashed(error_type="SessionEnded", detail="the session ended without a result"))
    except Exception as exc:
        log.exception("%s crashed", what, extra={"session_id": driver.info.session_id})
        return Failure(crash_error(exc))


async def _opened(driver: Driver[Any]) -> Result[InFlight | None, SessionError]:
    opened = await driver.open()
    return Failure(opened.failure()) if isinstance(opened, Failure) else Success(None)


class LiveSession:
    """A live session (``open_session``): follow-ups, raw events, and its results in order."""

    def __init__(self, driver: Driver[Any]) -> None:
        self._driver = driver
        self.stream_error: SessionError | None = None
        """Why the last ``thread_stream`` ended, when it failed."""

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

    async def threads(self) -> Result[list[JSON], SessionError]:
        """The session's threads — a Claude multi-agent session's primary thread and each
        sub-agent's (``session_thread`` resources); ``Unsupported`` on other hosts."""
        conn = self._driver.conn
        if conn is None:
            return Failure(Closed())
        return await self._driver.provider.threads(conn)

    async def thread_events(self, thread_id: str) -> Result[list[JSON], SessionError]:
        """One thread's events so far, oldest first (raw; the session's own results are
        unaffected); ``Unsupported`` on hosts without threads."""
        conn = self._driver.conn
        if conn is None:
            return Failure(Closed())
        return await self._driver.provider.thread_events(conn, thread_id)

    @asynccontextmanager
    async def thread_stream(self, thread_id: str) -> AsyncIterator[AsyncIterator[JSON]]:
        """One thread's live events, raw, from now until the block is left or the stream ends
        (``async with session.thread_stream(tid) as events: async for e in events: …``).
        Watching a thread changes nothing of the session: its machine reads the primary
        stream, where sub-agent tool calls are cross-posted and answered once. A stream that
        fails ends the iteration; ``stream_error`` then says why."""
        conn = self._driver.conn
        send, receive = anyio.create_memory_object_stream[JSON](256)
        box: list[SessionError] = []

        async def pump() -> None:
            async with send:
                if conn is None:
                    box.append(Closed())
                    return
                outcome = await self._driver.provider.thread_stream(conn, thread_id, send.send)
                if isinstance(outcome, Failure):
                    box.append(outcome.failure())

        async with anyio.create_task_group() as tg, receive:
            tg.start_soon(pump)
            self.stream_error = None
            try:
                yield _errors_into(receive, box, self)
            finally:
                tg.cancel_scope.cancel()

    async def _iterate(self) -> AsyncIterator[Result[SessionResult, SessionError]]:
        while True:
            try:
                outcome = await self._driver.results.next()
            except anyio.EndOfStream:
                return
            yield outcome


async def _errors_into(
    events: AsyncIterator[JSON], box: list[SessionError], session: LiveSession
) -> AsyncIterator[JSON]:
    async for event in events:
        yield event
    if box:
        session.stream_error = box[0]


@spelled_out(host_options=True, without=frozenset({"timeout"}))
@asynccontextmanager
async def open_session(
    provider: Provider[Any],
    *,
    handler: object,
    prompt: str | None = None,
    **options: Unpack[RunOptions],
) -> AsyncIterator[LiveSession]:
    """Open a live session (S-2): it stays up after each result, reconnects after drops.

    When it cannot start (invalid options, the provider's open failing) it raises the
    ``SessionError`` that ``run`` would have returned in a ``Failure`` — the same typed value,
    so ``except SessionError as err`` / ``match err`` handle both. Once open, every request's
    outcome is a value again (``next_result``). Leaving the block cancels everything the
    session runs, stops the host's loop if a request is in flight (waiting at most
    ``stop_grace`` seconds for the host to confirm), and closes its connections.
    """
    # No overall deadline on a live session: a timeout= is left to the name checks, which
    # point at anyio's deadlines instead.
    mine, provider_opts = split(options, OWN_RUN_OPTIONS - {"timeout"})
    mine["timeout"] = None
    try:
        driver = prepare_driver(
            provider, live=True, handler=handler, prompt=prompt, options=mine, provider_opts=provider_opts
        )
    finally:
        # This frame lives as long as the session: keep only what it needs (at 1,000 idle
        # sessions the option mappings were ~1.5 KiB each).
        del options, mine, provider_opts
    ended: Outcome_ | None = None
    stopped: str | None = None
    try:
        opened = await driver.open()
        if isinstance(opened, Failure):
            ended = Failure(opened.failure())
            raise opened.failure().with_traceback(None)
        async with anyio.create_task_group() as nursery:
            await nursery.start(serve_reporting, driver)
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


async def serve_reporting(
    driver: Driver[Any],
    in_flight: InFlight | None = None,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve a live session; a crash is reported to its results, never a silent death (S-66)."""
    try:
        await driver.serve(task_status=task_status, in_flight=in_flight)
    except Exception as exc:
        log.exception("live session crashed", extra={"session_id": driver.info.session_id})
        driver.report_crash(exc)
