"""The session driver: the imperative shell around ``rma.session.machine.step``.

One inbound channel (the session's mailbox, N-1) receives every fact — stream events, poll
results, tool results, guard verdicts, timers, follow-ups — and a single loop feeds them to the
core and executes the commands it returns. Every background task (poll, push, stream, tools,
guard, reconnect timer) lives in the session's task group, so cancelling the run's scope — its
timeout, or leaving ``open_session`` — cancels all of them, tools and HTTP streams included
(S-81, S-84 Better). The driver decides nothing.

What this is not: the public entry points (``run``, ``open_session``, ``LiveSession``, in
``rma_shell.session``), which validate options, build a driver and report its outcome; nor the
core's rules (``rma.session``).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Generic, TypeVar

import anyio
import attrs
import sniffio
from returns.result import Failure, Result, Success

from rma.errors import (
    Crashed,
    ProviderError,
    RemoteStop,
    SessionError,
    StreamDropped,
    Timeout,
    stamp_remote_stop,
)
from rma.journal import AwaitingApproval, InFlight, JournalUnavailable, Loaded, PendingApproval, fold
from rma.provider import Mode
from rma.session import commands as cmd
from rma.session.events import (
    DeadlineReached,
    Event,
    GuardVerdict,
    LiveEvent,
    Opened,
    PushFinished,
    ReconnectFinished,
    ReconnectTimerFired,
    SendEventRequested,
    StreamClosed,
    StreamConnected,
    StreamEvent,
    StreamFailed,
    ToolsFinished,
    TurnFailed,
    TurnPolled,
)
from rma.session.machine import (
    Phase,
    State,
    carries_result,
    initial_state,
    step,
    with_progress,
    with_telemetry,
    with_transcript,
)
from rma.session.option_checks import check_seconds
from rma.session.options import (
    DEFAULT_STOP_GRACE_S,
    SessionConfig,
    interpret_guard,
)
from rma.session.receiving import live_event_forwards
from rma.vocabulary import JSON, SessionInfo, SessionResult
from rma_shell.handler import HandlerAdapter
from rma_shell.journal.writer import JournaledTools, Paused, SessionJournal
from rma_shell.logging import log_fields
from rma_shell.machinery.mailbox import Mailbox
from rma_shell.machinery.tasks import TaskGroup, open_task_group
from rma_shell.machinery.updates import UpdateHub
from rma_shell.providers.base import OpenRequest, Provider
from rma_shell.recording import Recordable, Recorder, open_recorder
from rma_shell.telemetry import Telemetry

log = logging.getLogger("rma.session")

C = TypeVar("C")
Outcome_ = Result[SessionResult, SessionError]

_LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


RESUMED_STREAM = "resumed from a journal: the stream of the process that stopped is reopened"


def crash_error(exc: BaseException) -> Crashed:
    return Crashed(error_type=type(exc).__name__, detail=str(exc)[:2000])


def _provider_error(exc: BaseException) -> ProviderError:
    return ProviderError(detail=str(exc)[:2000], error_type=type(exc).__name__)


@attrs.define
class DriverOptions:
    """Validated per-session settings the shell itself needs."""

    handler: object
    context: object
    turn_guard: Callable[[Mapping[str, Any]], Any] | None
    max_concurrency: int
    telemetry: Telemetry
    record: Recordable
    open_request: OpenRequest
    output: Any = None
    """The ``OutputTool`` of ``output_type=``, or None."""
    tool_timeout: float | None = None
    max_tool_result_chars: int | None = None
    journal: SessionJournal | None = None
    """Where the session is journaled (``journal=``), bound to its key; None: not journaled."""
    stop_grace: float = DEFAULT_STOP_GRACE_S
    """Seconds stopping the host's loop may take (``rma_shell.machinery.remote_stop``), confirmed or not."""


# The events after which the provider's reattach snapshot may have changed (a journal keeps it).
_SNAPSHOT_EVENTS = (Opened, TurnPolled, TurnFailed, ReconnectFinished)

# Commands before which the driver does not make the journal durable: those that act only
# inside the process (an event that causes nothing else — most stream events — waits for the
# next flush), and RunTools: the driver writes the start records of the calls that start at
# once ahead and commits them with the turn (``JournaledTools.start_ahead``), and a batch whose
# calls wait first has its task flush before its first effect (a call's start record, a
# confirmation's verdict, a pause). Either way a turn and its first call's start share a commit.
_IN_PROCESS = frozenset({cmd.Emit, cmd.Log, cmd.DeliverEvent, cmd.DeliverUpdate, cmd.RunTools})

# Commands that act outside the process only from a task the driver spawns for them: on
# asyncio the driver does not wait for the journal before them, it joins the group's batch and
# each task makes that batch durable first thing (``Driver._durable``). The others (a finish, a
# reply) act as they execute, and on trio every one: the driver awaits the commit.
_SPAWNED = frozenset(
    {cmd.PollTurn, cmd.PushInput, cmd.RunTools, cmd.CallGuard, cmd.ScheduleReconnect, cmd.Reconnect}
)
_SPAWNED_OR_IN_PROCESS = _SPAWNED | _IN_PROCESS


def typed_output(output: Any, result: SessionResult, tools: HandlerAdapter) -> Any:
    """The last answer of this request that validated (the core ended it only after one did),
    as the handler adapter validated it — not validated a second time."""
    for use in reversed(result.custom_tool_uses):
        if use.name == output.name and use.id in tools.answers:
            return tools.answers[use.id]
    return None


def _declared_tools(provider: object, request: OpenRequest) -> Sequence[object]:
    declared = getattr(provider, "declared_tools", None)
    if declared is None:
        return ()
    try:
        tools = declared(request)
    except Exception:  # a provider bug costs the argument check, not the session
        log.exception("provider declared_tools failed")
        return ()
    return tuple(tools) if isinstance(tools, list | tuple) else ()


class Driver(Generic[C]):
    def __init__(self, provider: Provider[C], config: SessionConfig, opts: DriverOptions) -> None:
        self.provider = provider
        self.opts = opts
        self.telemetry = opts.telemetry
        self.tools = HandlerAdapter(
            opts.handler,
            opts.context,
            max_concurrency=opts.max_concurrency,
            telemetry=self.telemetry,
            metadata=config.metadata,
            declared_tools=_declared_tools(provider, opts.open_request),
            output=opts.output,
            tool_timeout=opts.tool_timeout,
            max_result_chars=opts.max_tool_result_chars,
        )
        if not self.tools.observes_events:
            config = attrs.evolve(config, deliver_events=False)  # nothing would take them
        if self.tools.observes_updates:
            config = attrs.evolve(config, deliver_updates=True)
        self.config = config
        self.state: State = initial_state(config)
        self.inbox: Mailbox[Event] = Mailbox()
        self.results: Mailbox[Outcome_] = Mailbox()
        self.conn: C | None = None
        self.info = SessionInfo(provider=config.provider_name, metadata=config.metadata)
        self.final: Outcome_ | None = None
        self.nursery: TaskGroup | None = None
        self.stream_scope: anyio.CancelScope | None = None
        self.replies: dict[int, tuple[anyio.Event, list[Result[None, SessionError]]]] = {}
        self.next_request = 0
        self.recorder: Recorder | None = None
        """Set by ``prepare_driver`` when ``record=`` is given (``rma_shell.recording``)."""
        self.started_at: float | None = None
        """perf_counter() when the provider opened (``rma.session.start`` was emitted)."""
        self.updates = UpdateHub(self.post)
        """The open ``LiveSession.updates()`` iterators."""
        self.journal = opts.journal
        self._commits_in_tasks = False
        """Whether the tasks the driver spawns commit what it joined (asyncio), or the driver
        waits for the commit itself (trio): ``serve`` decides, by the backend it runs on."""
        self.journaled_tools = (
            JournaledTools(self.tools, opts.journal, opts.handler, opts.context) if opts.journal else None
        )
        self.reconnect_now = False
        """Resuming a stream from a journal: the first reconnect goes at once, without backoff."""
        self.host_stop: RemoteStop | None = None
        """What stopping the host's loop came to at the run's deadline, set before the deadline
        is fed: the journal's end record carries it, so ``resume`` can finish a stop the host
        did not confirm within the grace. The recording keeps the machine's own outcome."""

    @classmethod
    def restored(cls, provider: Provider[C], loaded: Loaded, opts: DriverOptions) -> Driver[C]:
        """A driver for the session ``loaded`` from a journal (``resume``): the journaled
        config — the one its events were folded with —, the tool calls the journal holds, and
        the typed answers the old process had accepted. ``reattach`` then connects it."""
        driver = cls(provider, loaded.config, opts)
        driver.config = loaded.config  # not re-derived from the handler: the journal's own
        if driver.journaled_tools is not None:
            driver.journaled_tools.restore(loaded)
        output = opts.output
        if output is not None:
            folded = fold(loaded.config, loaded.events)
            for use in folded.state.acc.custom_tool_uses:
                result = loaded.results.get(use.id or "")
                if use.name == output.name and result is not None and not result.is_error:
                    answer = output.validate(use.input)
                    if isinstance(answer, Success):
                        driver.tools.answers[use.id] = answer.unwrap()
        return driver

    # ── lifecycle ──

    async def reattach(self, loaded: Loaded) -> Result[InFlight | None, SessionError]:
        """Reconnect to the host and bring the machine to the journal's state; what was in
        flight (None: the session never opened, and has now been opened afresh)."""
        if loaded.snapshot is None:  # it never opened: open now, as the run would have
            opened = await self.open()
            return Failure(opened.failure()) if isinstance(opened, Failure) else Success(None)
        restored = await self.provider.restore(self.opts.open_request, loaded.snapshot)
        if isinstance(restored, Failure):
            return Failure(restored.failure())
        self.conn = restored.unwrap()
        self._session_started(self.conn, 0.0)
        folded = fold(loaded.config, loaded.events)
        self.state = folded.state
        if folded.outcome is not None:  # it ended as the old process stopped
            self._report(folded.outcome, final=True, folds=True)
        elif folded.in_flight is not None and folded.in_flight.poll is not None:
            # The turn is asked again; the dead process may have sent it and the host taken it.
            self.conn = self.provider.turn_in_doubt(self.conn)
        return Success(folded.in_flight)

    def adopt(self, conn: C) -> None:
        """Use ``conn`` (a connection restored outside a session: finishing a journaled stop)."""
        self.conn = conn
        self.info = attrs.evolve(self.info, session_id=self.provider.session_id(conn))

    def typed(self, outcome: Outcome_) -> Outcome_:
        """``outcome`` with its typed output (``output_type``): a journaled outcome as the run
        returned it — the answer the run accepted, validated by the ``output_type`` given now
        (the journal keeps the answer's arguments, not the user's type)."""
        if isinstance(outcome, Success) and self.opts.output is not None:
            result = outcome.unwrap()
            return Success(attrs.evolve(result, output=typed_output(self.opts.output, result, self.tools)))
        return outcome

    async def past_deadline(self, timeout: float | None, stop: RemoteStop) -> Outcome_:
        """The run's deadline passed and stopping the host's loop came to ``stop``: feed the
        deadline — the journal's end record carries ``stop``, so ``resume`` can finish a stop
        the host did not confirm — and return the run's outcome, its ``Timeout`` saying what
        became of the host's loop."""
        self.host_stop = stop
        await self.feed(DeadlineReached(timeout_s=timeout))
        outcome = self.final or Failure(Timeout(timeout_s=timeout))
        stamped = stamp_remote_stop(outcome, stop)
        if stamped is not outcome and self.final is outcome:
            self.final = stamped
        return stamped

    def report_crash(self, exc: BaseException) -> None:
        """A live session's serving task crashed: its results say so (never a silent death)."""
        self._report(Failure(crash_error(exc)), final=True)

    def start_recording(self, record: Recordable) -> Result[None, SessionError]:
        """Record the session's events to ``record`` (a path or text stream; ``record=``)."""
        recorder = open_recorder(record, self.config)
        if isinstance(recorder, Failure):
            return Failure(recorder.failure())
        self.recorder = recorder.unwrap()
        return Success(None)

    def end_journal(self, outcome: Outcome_) -> None:
        """Write ``outcome`` as the journal's last end record (a finished stop, on resume)."""
        if self.journal is None:
            return
        try:
            self.journal.end(outcome)
        except Exception as exc:  # the caller still learns it; the next resume asks again
            log.error("journal end record failed: %s", exc, extra={"session_id": self.info.session_id})

    async def open(self) -> Result[None, SessionError]:
        t0 = time.perf_counter()
        if self.journal is not None:  # its header, durable before the host hears of the session
            try:
                await self.journal.commit()
            except Exception as exc:
                error = JournalUnavailable(key=self.journal.key, detail=str(exc)[:2000])
                self._open_failed(error, time.perf_counter() - t0)
                return Failure(error)
        try:
            opened = await self.provider.open(self.opts.open_request)
        except Exception as exc:
            opened = Failure(_provider_error(exc))
        if isinstance(opened, Failure):
            error = opened.failure()
            self._open_failed(error, time.perf_counter() - t0)
            return Failure(error)  # S-14: the provider's own error, unwrapped
        self.conn = opened.unwrap()
        self._session_started(self.conn, time.perf_counter() - t0)
        return Success(None)

    def _session_meta(self, session_id: str | None) -> dict[str, Any]:
        return {**self.config.metadata, "session_id": session_id, "provider": self.config.provider_name}

    def _session_started(self, conn: C, open_duration: float) -> None:
        """``rma.session.start``: the provider opened; what it knows about the session rides along."""
        self.started_at = time.perf_counter()
        if not self.telemetry.listening():
            return
        try:
            described = dict(self.provider.describe(conn))
        except Exception:  # a describe bug must not cost the session
            log.exception("provider describe failed", extra={"provider": self.config.provider_name})
            described = {}
        meta = {
            **{k: v for k, v in described.items() if v is not None},
            **self._session_meta(self.provider.session_id(conn)),
            "resumed": self.provider.resumed(conn),
            "live": self.config.live,
        }
        measurements = {"system_time": time.time(), "open_duration": open_duration}
        self.telemetry.emit("rma.session.start", measurements, meta)

    def _open_failed(self, error: SessionError, duration: float) -> None:
        """A session that never opened still ends visibly: a terminal with ``phase: open``."""
        session_id = self.opts.open_request.session_id
        log.warning(
            "session failed to open: %s",
            error.kind,
            extra={"session_id": session_id, "provider": self.config.provider_name, "error": error.kind},
        )
        meta = {**self._session_meta(session_id), "terminal": "error", "error": error.kind, "phase": "open"}
        self.telemetry.emit("rma.session.terminal", {"duration": duration}, meta)

    async def serve(
        self,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
        *,
        in_flight: InFlight | None = None,
    ) -> None:
        """Run the loop until a sync run's result or cancellation. Owns the task nursery.

        ``in_flight``: resuming from a journal — the state is already the journal's, and what
        was in flight when its process stopped is carried on instead of opening afresh."""
        assert self.conn is not None
        # Measured (issue #28, docs/benchmarks.md): at 1,000 journaled sessions, leaving a
        # turn's commit to the task the driver spawns halves the journal's cost on asyncio,
        # where the driver's wait kept the collector ~50% busier, and raises it on trio, whose
        # collector then runs ~70% more often than with the driver waiting.
        self._commits_in_tasks = sniffio.current_async_library() == "asyncio"
        async with open_task_group() as nursery:
            self.nursery = nursery
            task_status.started()
            conn = self.conn
            if in_flight is not None:
                self._carry_on(in_flight)
            else:
                await self.feed(Opened(self.provider.session_id(conn), self.provider.resumed(conn)))
                if self.config.codec.mode is Mode.STREAMING and not self.provider.resumed(conn):
                    self._start_stream(self.state.gen)
            while self.final is None:
                await self.feed(await self.inbox.get())
            nursery.cancel_scope.cancel()

    async def feed(self, ev: Event) -> None:
        if self.recorder:
            self.recorder.event(ev)
        if self.journal is not None and not self._journaled(ev):
            return
        # The turn's telemetry is built only while a subscriber could take it (checked per
        # event: one may attach or detach while the session runs). −45,000 instructions per
        # AgentCore tool turn with nobody subscribed (docs/decisions.md, issue #17).
        self.state = with_telemetry(self.state, self.telemetry.listening())
        try:
            self.state, commands = step(self.state, ev)
        except Exception as exc:  # a bug in the core or a codec: surface it, never hang
            log.exception(
                "session machine failed on %s",
                type(ev).__name__,
                extra={"session_id": self.info.session_id, "provider": self.config.provider_name},
            )
            self._report(Failure(crash_error(exc)), final=True)
            return
        if self.info.session_id != self.state.session_id:
            self.info = attrs.evolve(self.info, session_id=self.state.session_id)  # S-17
        if self.journal is not None and self._needs_commit(commands):
            # The journal made durable before a command acts outside the process, in one
            # transaction with other sessions' flushes when they share the store.
            try:
                if self._commits_in_tasks and all(type(c) in _SPAWNED_OR_IN_PROCESS for c in commands):
                    self.journal.commit_soon()  # made durable by the tasks these spawn (_durable)
                else:
                    await self.journal.commit()
            except Exception as exc:
                self._journal_failed(exc)
                return
        for command in commands:
            await self.execute(command)

    def _durable(self) -> bool:
        """First thing in each task the driver spawns for a command: what the driver joined
        to the group's batch is durable (committed now, when no flush of the batch committed it
        yet). False: it cannot be, and the session ends (the task must not act)."""
        journal = self.opts.journal  # the session's, even once it ended or its journal failed
        if journal is None:
            return True
        try:
            journal.durable()
        except Exception as exc:
            self._journal_failed(exc)
            return False
        return True

    def _needs_commit(self, commands: Sequence[cmd.Command]) -> bool:
        """Whether the journal must be durable before ``commands`` run: one acts outside the
        process, or is a tool batch whose calls' start records this writes ahead, now
        (``JournaledTools.start_ahead``)."""
        outside = False
        for c in commands:
            if type(c) is cmd.RunTools:
                if self.journaled_tools is not None:
                    outside = self.journaled_tools.start_ahead(c.uses, c.confirmations) or outside
            elif type(c) not in _IN_PROCESS:
                outside = True
        return outside

    def _journaled(self, ev: Event) -> bool:
        """Write ``ev`` (and a changed snapshot) before the core takes it; False: it cannot be."""
        assert self.journal is not None
        snapshot = None
        if self.conn is not None and isinstance(ev, _SNAPSHOT_EVENTS):
            snapshot = self.provider.snapshot(self.conn)
        try:
            self.journal.event(ev, snapshot)
        except Exception as exc:  # a full disk, a locked file, a store bug: stop, recorded so far
            self._journal_failed(exc)
            return False
        return True

    def _journal_failed(self, exc: BaseException) -> None:
        if self.journal is None:  # the session ended while its flush waited: reported already
            return
        log.error("journal write failed: %s", exc, extra={"session_id": self.info.session_id})
        error = with_progress(self.state, JournalUnavailable(key=self.journal.key, detail=str(exc)[:2000]))
        self.journal = None  # nothing more is written, the end included
        self._stop(Failure(error))

    def _stop(self, outcome: Outcome_) -> None:
        """End the session from a task (a pause, a journal failure): report, then cancel the loop."""
        self._report(outcome, final=True)
        if self.nursery is not None:
            self.nursery.cancel_scope.cancel()

    def _pause(self, waiting: tuple[PendingApproval, ...]) -> None:
        assert self.journal is not None
        try:
            self.journal.waiting(waiting)
        except Exception as exc:
            self._journal_failed(exc)
            return
        journal, self.journal = self.journal, None  # paused: no end record, resume carries on
        self._stop(Failure(with_progress(self.state, AwaitingApproval(key=journal.key, waiting=waiting))))

    def _carry_on(self, flight: InFlight) -> None:
        """Resume what a journal's process had in flight when it stopped (``rma_shell.journal``)."""
        if flight.tools is not None:
            self._spawn(self._run_tools, flight.tools.batch, flight.tools.uses, flight.tools.confirmations)
        if flight.poll is not None:
            self._spawn(self._poll, flight.poll.input)  # a model turn: asked again (at least once)
        if flight.guard is not None:
            self._spawn(self._guard, flight.guard.payload)
        if flight.push is not None:
            self._spawn(self._push_unless_landed, flight.push.input)
        if self.config.codec.mode is not Mode.STREAMING:
            return
        self.reconnect_now = True
        if flight.timer is not None:
            self._spawn(self._timer, 0)
        elif flight.reconnect is not None:
            self._spawn(self._reconnect, flight.reconnect.gen, flight.reconnect.seen)
        elif self.state.phase not in (Phase.BACKOFF, Phase.RECONNECTING, Phase.DONE) and (
            self.config.live or self.state.phase is not Phase.IDLE
        ):
            # The old process's stream died with it: to the core that is a dropped stream, and
            # its reconnect — subscribe, list, dedupe, recover unanswered calls — reattaches.
            self.post(StreamFailed(self.state.gen, StreamDropped(detail=RESUMED_STREAM)))

    async def _push_unless_landed(self, input: JSON) -> None:
        """A push the old process may or may not have made: post it only if the host lacks it."""
        assert self.conn is not None
        landed = getattr(self.config.codec, "input_landed", None)
        if landed is not None:
            try:
                listed = await self.provider.reconnect(self.conn, self.state.seen.ids())
            except Exception:
                listed = None
            if isinstance(listed, Success):
                _conn, found = listed.unwrap()
                waiting = (d.event for d in self.state.deferred if isinstance(d, StreamEvent))
                seen = (*found.replay, *self.state.turn_events.to_tuple(), *waiting)
                if landed(input, seen):
                    self.post(PushFinished(Success(None)))
                    return
        await self._push(input)

    def post(self, ev: Event) -> None:
        self.inbox.put(ev)

    def _spawn(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        assert self.nursery is not None
        self.nursery.start_soon(fn, *args)

    # ── commands ──

    async def execute(self, c: cmd.Command) -> None:
        match c:
            case cmd.DeliverEvent(event=event):
                # Built only when the handler observes events (SessionConfig.deliver_events).
                await self.tools.deliver(event, self.info)
            case cmd.DeliverUpdate(update=update):
                # Built only while something consumes updates (handle_update, an iterator).
                self.updates.publish(update)
                await self.tools.deliver_update(update, self.info)
            case cmd.Emit(name=name, measurements=measurements, metadata=metadata, content=content):
                if self.telemetry.listening(name):
                    # The core reuses one Emit for every stream event of a type: each emission
                    # gets maps of its own, so no subscriber can alter what a later one sees.
                    self.telemetry.emit(name, dict(measurements), dict(metadata), content)
            case cmd.Log(level=level, message=message, fields=fields):
                log.log(
                    _LOG_LEVELS[level],
                    message,
                    extra=log_fields(
                        fields, session_id=self.info.session_id, provider=self.config.provider_name
                    ),
                )
            case cmd.PollTurn(input=input):
                self._spawn(self._poll, input)
            case cmd.PushInput(input=input):
                self._spawn(self._push, input)
            case cmd.RunTools(batch=batch, uses=uses, confirmations=confirmations):
                self._spawn(self._run_tools, batch, uses, confirmations)
            case cmd.CallGuard(payload=payload):
                self._spawn(self._guard, payload)
            case cmd.ScheduleReconnect(delay_ms=delay_ms):
                if self.stream_scope is not None:
                    self.stream_scope.cancel()
                self._spawn(self._timer, delay_ms)
            case cmd.Reconnect(gen=gen, seen=seen):
                if self.stream_scope is not None:
                    self.stream_scope.cancel()
                self._spawn(self._reconnect, gen, seen)
            case cmd.Finish(outcome=outcome, final=final):
                self._report(outcome, final, folds=True)
            case cmd.Reply(request=request, outcome=outcome):
                waiter = self.replies.pop(request, None)
                if waiter is not None:
                    waiter[1].append(outcome)
                    waiter[0].set()

    def _report(self, outcome: Outcome_, final: bool, *, folds: bool = False) -> None:
        """``outcome`` to the caller (and, when ``final``, the journal). ``folds``: it is the
        core's own, which the journal's events lead to (its end record may refer to them)."""
        # A success, and a failure carrying its completed turns' result, get the transcript.
        if self.conn is not None and carries_result(outcome):
            transcript = self.provider.transcript(self.conn)
            if self.recorder:
                self.recorder.transcript(transcript)
            outcome = with_transcript(outcome, transcript)
        if self.recorder:
            self.recorder.result(outcome)
        if self.opts.output is not None and isinstance(outcome, Success):
            outcome = Success(
                attrs.evolve(
                    outcome.unwrap(), output=typed_output(self.opts.output, outcome.unwrap(), self.tools)
                )
            )
        if final:
            self.final = outcome
            if self.journal is not None:
                try:
                    stamped = stamp_remote_stop(outcome, self.host_stop)
                    self.journal.end(stamped, folds=folds and stamped is outcome)
                except Exception as exc:  # the outcome still reaches the caller
                    log.error(
                        "journal end record failed: %s", exc, extra={"session_id": self.info.session_id}
                    )
                self.journal = None
        self.results.put(outcome)

    # ── background work: each reports back with an event ──

    async def _poll(self, input: JSON) -> None:
        assert self.conn is not None
        if not self._durable():
            return

        first = True

        async def live(event: JSON) -> None:
            nonlocal first
            if first or self._live_wanted():
                first = False
                self.post(LiveEvent(event))

        try:
            polled = await self.provider.poll_turn(self.conn, input, live)
        except Exception as exc:  # S-22: a raising poll is a provider error, not a crash
            self.post(TurnFailed(_provider_error(exc)))
            return
        self.conn = polled.conn
        result = polled.result
        self.post(
            TurnPolled(result.unwrap()) if isinstance(result, Success) else TurnFailed(result.failure())
        )

    def _live_wanted(self) -> bool:
        """Whether a live event after a turn's first must reach the core: something takes it
        (``live_event_forwards``: ``handle_event``, live updates, or an update iterator just
        opened), a subscriber wants its ``rma.stream.event``, or a recording or journal keeps
        every event. Otherwise the core would only count it again (the first is always posted:
        E-5's batch delivery hangs on it) — ~40,000 instructions a frame for nothing."""
        return (
            live_event_forwards(self.state)
            or self.updates.wanted
            or self.recorder is not None
            or self.journal is not None
            or self.telemetry.listening("rma.stream.event")
        )

    async def _push(self, input: JSON) -> None:
        if not self._durable():
            return
        assert self.conn is not None
        try:
            pushed = await self.provider.push_input(self.conn, input)
        except Exception as exc:
            pushed = Failure(_provider_error(exc))
        self.post(PushFinished(pushed))

    async def _run_tools(self, batch: int, uses: Any, confirmations: Any) -> None:
        if not self._durable():
            return
        if self.journaled_tools is not None:
            try:
                ran = await self.journaled_tools.run(uses, confirmations, self.info)
            except Exception as exc:  # the journal's store failed (a tool's own error is a result)
                self._journal_failed(exc)
                return
            if isinstance(ran, Paused):
                self._pause(ran.waiting)
                return
            results, verdicts = ran
        else:
            verdicts = await self.tools.confirm_batch(confirmations, self.info) if confirmations else ()
            results = await self.tools.run_batch(uses, self.info)
        self.post(ToolsFinished(batch, results, verdicts))

    async def _guard(self, payload: Mapping[str, Any]) -> None:
        if not self._durable():
            return
        guard = self.opts.turn_guard
        assert guard is not None
        try:
            value = guard(dict(payload))
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # S-43 Better: a raising guard is a typed error
            self.post(GuardVerdict("failed", error_type=type(exc).__name__, detail=str(exc)[:2000]))
            return
        self.post(interpret_guard(value))

    async def _timer(self, delay_ms: int) -> None:
        if not self._durable():
            return
        if self.reconnect_now:  # resuming from a journal: reattach at once
            self.reconnect_now, delay_ms = False, 0
        await anyio.sleep(delay_ms / 1000)
        self.post(ReconnectTimerFired())

    async def _reconnect(self, gen: int, seen: tuple[str, ...]) -> None:
        if not self._durable():
            return
        assert self.conn is not None
        if self.config.codec.mode is Mode.STREAMING:
            # R-19 Better: subscribe first, then consolidate. Whatever the new stream delivers
            # meanwhile waits in the machine's queue and is deduplicated against the ids the
            # consolidation reports, so no event falls between listing and subscribing.
            ready = anyio.Event()
            self._start_stream(gen, ready)
            with anyio.move_on_after(30):
                await ready.wait()
        try:
            outcome = await self.provider.reconnect(self.conn, seen)
        except Exception as exc:
            self.post(ReconnectFinished(Failure(_provider_error(exc))))
            return
        if isinstance(outcome, Failure):
            self.post(ReconnectFinished(Failure(outcome.failure())))
            return
        conn, reconnected = outcome.unwrap()
        self.conn = conn
        self.post(ReconnectFinished(Success(reconnected)))

    def _start_stream(self, gen: int, ready: anyio.Event | None = None) -> None:
        scope = anyio.CancelScope()
        self.stream_scope = scope
        self._spawn(self._stream, gen, scope, ready)

    async def _stream(self, gen: int, scope: anyio.CancelScope, ready: anyio.Event | None) -> None:
        assert self.conn is not None
        conn = self.conn

        async def connected() -> None:
            if ready is not None:
                ready.set()
            self.post(StreamConnected(gen))

        async def event(raw: JSON) -> None:
            self.post(StreamEvent(gen, raw))

        with scope:
            try:
                ended = await self.provider.stream(conn, connected, event)
            except Exception as exc:  # S-86: a crashed consumer is a failed stream
                self.post(StreamFailed(gen, _provider_error(exc)))
                return
            finally:
                if ready is not None:
                    ready.set()  # a stream that never connected must not hold up a reconnect
            self.post(StreamClosed(gen) if isinstance(ended, Success) else StreamFailed(gen, ended.failure()))

    # ── live-session API ──

    async def send_event(self, event: JSON, timeout: float) -> Result[None, SessionError]:
        checked = check_seconds(timeout, "timeout", allow_inf=True)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        self.next_request += 1
        request = self.next_request
        done = anyio.Event()
        box: list[Result[None, SessionError]] = []
        self.replies[request] = (done, box)
        self.post(SendEventRequested(request, event))
        with anyio.move_on_after(timeout):
            await done.wait()
        if not box:
            self.replies.pop(request, None)
            return Failure(Timeout(timeout_s=timeout, operation="send_event"))
        return box[0]

    def end_recording(self, outcome: Outcome_ | None, stopped: str | None, *, live: bool = False) -> None:
        """The log's end record: what the run returned when the core did not produce it."""
        if self.recorder is None:
            return
        if stopped is not None or (outcome is None and not live):
            self.recorder.end(stopped=stopped or "cancelled")
        elif outcome is None or outcome is self.final:
            self.recorder.end()
        else:  # a failure at open, a crash, a deadline the core did not see
            self.recorder.end(outcome, at="open" if self.conn is None else None)

    async def close(self) -> None:
        try:
            await self._close()
        finally:
            if self.opts.journal is not None:
                self.opts.journal.close()  # the key's lease, last; and a store opened from a path

    async def _close(self) -> None:
        self.updates.close()
        if self.recorder:
            self.recorder.close()
            self.recorder = None
        self.results.close()
        if self.conn is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                try:
                    await self.provider.aclose(self.conn)
                except Exception:
                    log.exception(
                        "provider aclose failed",
                        extra={"session_id": self.info.session_id, "provider": self.config.provider_name},
                    )
        if self.started_at is not None:
            # ``rma.session.stop``: the session is over (a run's end, or leaving open_session);
            # subscribers keeping per-session state release it here.
            duration = time.perf_counter() - self.started_at
            self.started_at = None
            meta = self._session_meta(self.state.session_id or self.info.session_id)
            self.telemetry.emit("rma.session.stop", {"duration": duration}, meta)
