"""The session as a Temporal workflow: the pure core inside, every I/O command an activity.

``SessionWorkflow`` is ``rma_shell.session``'s driver with Temporal underneath: it feeds events
to ``rma.session.machine.step`` and executes the commands it returns — ``PollTurn`` and
``PushInput`` as turn activities, ``RunTools`` as one activity per tool call (or, under
``fused_turns``, one with the turn after it: ``rma_shell.temporal.fusing``), ``CallGuard`` as
the guard activity, ``Reconnect`` as a consolidation, ``ScheduleReconnect`` as a durable timer.
``step`` is deterministic by construction (no clock, no randomness, no I/O), so a replay on
another worker rebuilds the very same state from the recorded activity results.

Decisions stay in the core; this module decides only what Temporal adds:

- a tool call whose result Temporal recorded is never run again, even when the machine
  redrives it after a reconnect (its recorded result answers);
- a tool that requires approval waits, durably, for the ``approve`` update;
- a live session takes follow-ups through the ``message`` update (which answers with that
  request's result) and ends with the ``close`` signal;
- telemetry the core asks for (``Emit``) is not emitted from workflow code (a replay would
  repeat it); tool telemetry is, from the tool activities; ``Log`` goes to ``workflow.logger``,
  which is silent during replay;
- a long session continues as new at a moment nothing is in flight, carrying its state
  (``rma_shell.temporal.continuing``); cheap steps, and the turns or every step as
  ``local_activities`` says (``rma_shell.temporal.placement``), are local activities
  (docs/temporal.md says what each costs in recovery).

The rma imports pass through Temporal's sandbox: the core is pure (attrs and returns only), so
one shared copy is safe, and re-importing it per workflow run would cost more than the run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    import attrs
    from returns.result import Failure, Result, Success

    from rma import snapshots
    from rma.codec_json import decode_result, from_jsonable, to_jsonable
    from rma.errors import Closed, Crashed, RemoteStop, SessionError, Timeout
    from rma.provider import Mode, codec_for
    from rma.replay import load_config
    from rma.session import commands as cmd
    from rma.session.events import (
        DeadlineReached,
        Event,
        GuardVerdict,
        Opened,
        PushFinished,
        Reconnected,
        ReconnectFinished,
        ReconnectTimerFired,
        StreamClosed,
        StreamConnected,
        StreamEvent,
        StreamFailed,
        ToolsFinished,
        TurnFailed,
        TurnPolled,
        UserMessage,
    )
    from rma.session.machine import Phase, State, carries_result, initial_state, step, with_transcript
    from rma.vocabulary import JSON, ToolResult, ToolUse
    from rma_shell.journal.writer import DENIED
    from rma_shell.temporal import carry
    from rma_shell.temporal.carry import CARRY_KEY, unpack
    from rma_shell.temporal.continuing import CONTINUE_AS_NEW_PATCH, ContinuesAsNew
    from rma_shell.temporal.fusing import FusedTurns, awaiting_entry
    from rma_shell.temporal.fusing import lost as _lost
    from rma_shell.temporal.placement import runs_local
    from rma_shell.temporal.spec import SessionSpec

WORKFLOW_NAME = "rma.session"

_NEED_CONN = frozenset(
    {"rma.poll", "rma.exchange", "rma.push", "rma.resync", "rma.transcript", "rma.stop", "rma.fused"}
)

INLINE_SNAP_BYTES = 64 * 1024
"""A snapshot larger than this (a Local conversation) goes to a turn by reference: the worker
that made it holds it; one that does not answers ``need_snap`` and is sent it inline."""

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

Outcome = Result[Any, SessionError]


@workflow.defn(name=WORKFLOW_NAME)
class SessionWorkflow(FusedTurns, ContinuesAsNew):
    """One rma session (``SessionSpec`` in, the encoded ``Result[SessionResult, SessionError]`` out)."""

    @workflow.init
    def __init__(self, spec_json: dict[str, Any]) -> None:
        # The spec is read here, not in ``run``: an update can reach the workflow in the very
        # first task, before ``run`` starts, and its validator needs to know the session.
        # A continued run's input is the spec plus what the previous run carried (``carry``).
        carried = spec_json.get(CARRY_KEY)
        self._carried: dict[str, Any] | None = None if carried is None else unpack(carried)
        self._spec_json = {k: v for k, v in spec_json.items() if k != CARRY_KEY}
        self._spec = SessionSpec.from_json(self._spec_json)
        self._timeouts = self._spec.timeouts
        self._inbox: list[Event] = []
        self._state: State | None = None
        self._snap: JSON = None
        self._version = 0
        self._gen = 0
        self._last_boundary: str | None = None
        self._last_boundary_at: str | None = None
        """The host's time on ``_last_boundary`` (its ``processed_at``): a turn's consolidation
        lists from there, not the whole session."""
        self._has_transcript = False
        self._fresh = False  # a session this workflow created (not reattached): see ``_exchange``
        self._final: Outcome | None = None
        self._results: list[Any] = []
        self._first = 0  # the index of ``_results[0]`` among all the session's results
        # Results come in request order: the kickoff's (when there is one), then each follow-up's.
        spec = self._spec
        self._expected = 1 if not spec.live or spec.prompt is not None or spec.outcome is not None else 0
        self._closing = False
        self._ended = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._recorded: dict[str, ToolResult] = {}
        self._awaiting: dict[str, dict[str, Any]] = {}
        self._approvals: dict[str, tuple[str, str | None]] = {}
        self._reporting = 0
        self._busy = 0  # activities and timers in flight: a run continues as new only at 0
        self._batches: dict[int, dict[str, Any]] = {}  # tool batches in flight, by batch number
        self._confirmed: dict[str, ToolResult] = {}  # host confirmations decided, by tool-use id
        self._key: str | None = None  # the conn cache's key: the first run's, kept when continued
        self._continuing = False  # whether this run may continue as new (not an older history)
        self._at_most_once: frozenset[str] = frozenset()  # tools never run as local activities
        self._snap_bytes = 0  # about how large the snapshot is (0: unknown, sent inline)
        self._fed = 0  # events fed in this run: a run continues only once it has made progress
        self._ahead = None  # a turn run with its tool batch (``fused_turns``), not yet fed
        if self._carried is not None:
            self._restore(self._carried)

    # ── the run ──

    @workflow.run
    async def run(self, spec_json: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._serve(self._spec)
        except asyncio.CancelledError:
            await self._stop_tasks()
            await self._stop_host()  # a cancelled session's host must not run (and bill) on
            raise

    async def _stop_host(self) -> RemoteStop:
        """``Provider.stop_remote`` when a request may still run on the host, as ``run()`` does
        on its timeout or cancellation: best effort, one attempt, and what came of it — within
        the spec's ``stop_grace``, confirmed or not (issue #23). The bound is the activity's
        schedule-to-close timeout, kept by the server: no timer of the workflow's own, so a
        history recorded before the grace replays with the same commands."""
        s = self._state
        if s is None or s.phase in (Phase.IDLE, Phase.DONE):
            return "not_needed"
        grace = self._spec.stop_grace
        try:
            out = await self._activity("rma.stop", {}, grace, attempts=1, schedule_to_close_s=grace)
        except ActivityError as exc:
            if isinstance(exc.cause, TemporalTimeoutError):  # asked, perhaps; not confirmed in time
                workflow.logger.warning("stopping the host's loop: no confirmation within %ss", grace)
                return "unconfirmed"
            workflow.logger.warning("stopping the host's loop failed", exc_info=True)
            return "failed"
        stopped: RemoteStop = out["remote_stop"]
        return stopped

    async def _serve(self, spec: SessionSpec) -> dict[str, Any]:
        info = workflow.info()
        self._key = self._key or f"{info.workflow_id}/{info.run_id}"
        timeout = None if spec.live else spec.timeout
        # Histories recorded before issue #28 replay as they ran: a timer per wait, and never
        # continuing as new. Later ones: one deadline timer per run, and continuing as new.
        patched = self._carried is not None or workflow.patched(CONTINUE_AS_NEW_PATCH)
        self._continuing = patched
        if self._carried is not None:
            deadline = self._resume(self._carried)
        else:
            opened = await self._activity(
                "rma.open", {}, self._timeouts.open, attempts=self._timeouts.open_attempts
            )
            outcome = decode_result(opened["outcome"])
            if isinstance(outcome, Failure):
                return {"result": to_jsonable(outcome), "results": [to_jsonable(outcome)]}
            body = opened["opened"]  # not decoded: the config's codec is found by name below
            config = load_config({"config": body["config"]}, codec_for)
            self._snap, self._has_transcript, self._fresh = (
                body["snap"],
                body["has_transcript"],
                not body["resumed"],
            )
            self._snap_bytes = int(body.get("snap_bytes") or 0)
            self._at_most_once = frozenset(body.get("at_most_once") or ())
            self._state = initial_state(config)
            self._post(Opened(body["session_id"], body["resumed"]))
            if body["streaming"] and not body["resumed"]:
                # The turn activity subscribes before it posts, so the kickoff may go at once.
                self._post(StreamConnected(0))
            deadline = None if timeout is None else workflow.now() + timedelta(seconds=timeout)
        expired = [False]
        if patched and deadline is not None:  # one timer for the run, not one per wait
            self._spawn(self._deadline_timer, deadline, expired)
        while not self._done():
            remaining = None if deadline is None else (deadline - workflow.now()).total_seconds()
            try:
                if patched:
                    await workflow.wait_condition(
                        lambda: bool(self._inbox) or self._done() or expired[0] or self._may_continue()
                    )
                    if expired[0]:
                        raise TimeoutError
                    if self._may_continue():
                        await self._continue_as_new(deadline)
                else:
                    await workflow.wait_condition(
                        lambda: bool(self._inbox) or self._done(),
                        timeout=None if remaining is None else max(remaining, 0.001),
                    )
            except TimeoutError:
                await self._stop_tasks()
                stopped = await self._stop_host()  # before the terminal, as run() orders it
                self._inbox.clear()
                self._feed(DeadlineReached(timeout_s=timeout))
                await self._settle()
                final = self._final or Failure(Timeout(timeout_s=timeout))
                error = final.failure() if isinstance(final, Failure) else None
                if isinstance(error, Timeout) and error.operation == "run":
                    final = Failure(attrs.evolve(error, remote_stop=stopped))
                self._final = final
                break
            while self._inbox and not self._done():
                self._feed(self._inbox.pop(0))
            if self._final is not None:
                await self._settle()
        self._ended = True
        # No goodbye activity: a conn left in a worker's cache is closed when the cache drops it.
        await self._stop_tasks()
        if self._final is not None:
            final = to_jsonable(self._final)
        elif spec.live:  # closed: its last request's result (Closed when there was none)
            final = self._results[-1] if self._results else to_jsonable(Failure(Closed()))
        else:
            final = to_jsonable(Failure(Crashed(error_type="SessionEnded", detail="no result")))
        # A live session's results since its last hop; a run's one result is ``result`` (twice
        # would double the largest payload a long request makes).
        return {"result": carry.pack_result(final), "results": list(self._results) if spec.live else []}

    def _done(self) -> bool:
        return self._final is not None or self._closing

    async def _deadline_timer(self, deadline: datetime, expired: list[bool]) -> None:
        remaining = (deadline - workflow.now()).total_seconds()
        await workflow.sleep(max(remaining, 0.001))
        expired[0] = True

    async def _settle(self) -> None:
        """Let a final result's report (its transcript) land before the run returns."""
        await workflow.wait_condition(lambda: self._reporting == 0)

    # ── the core ──

    def _post(self, ev: Event) -> None:
        self._inbox.append(ev)

    def _feed(self, ev: Event) -> None:
        assert self._state is not None
        self._fed += 1
        try:
            self._state, commands = step(self._state, ev)
        except Exception as exc:  # a bug in the core or a codec: surface it, never hang
            workflow.logger.exception("session machine failed on %s", type(ev).__name__)
            self._final = Failure(Crashed(error_type=type(exc).__name__, detail=str(exc)[:2000]))
            return
        for command in commands:
            self._execute(command)
        self._drop_ahead(ev)

    def _execute(self, c: cmd.Command) -> None:
        match c:
            case cmd.PollTurn(input=input):
                if not self._ran_ahead(input):
                    self._spawn(self._poll, input)
            case cmd.PushInput(input=input, purpose=purpose):
                if purpose == "send_event":
                    self._spawn(self._push, input)
                elif not self._ran_ahead(input):
                    self._spawn(self._exchange, input)
            case cmd.RunTools(batch=batch, uses=uses, confirmations=confirmations):
                if self._fuses(c):  # the batch and the turn after it: one activity (fusing.py)
                    assert self._state is not None
                    self._spawn(self._fused, batch, uses, self._state.pending_uses)
                else:
                    self._spawn(self._run_tools, batch, uses, confirmations)
            case cmd.CallGuard(payload=payload):
                self._spawn(self._guard, payload)
            case cmd.ScheduleReconnect(delay_ms=delay_ms):
                self._spawn(self._timer, delay_ms)
            case cmd.Reconnect(gen=gen, seen=seen):
                self._gen = gen
                self._spawn(self._resync, gen, seen)
            case cmd.Finish(outcome=outcome, final=final):
                self._reporting += 1
                self._spawn(self._report, outcome, final)
            case cmd.Log(level=level, message=message, fields=fields):
                workflow.logger.log(_LEVELS.get(level, logging.INFO), message, extra={"rma": dict(fields)})
            case _:
                # Emit, DeliverEvent, DeliverUpdate: nothing consumes them inside a workflow
                # (see the module docstring); Reply answers a send_event this workflow never asks.
                pass

    def _spawn(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        async def guarded() -> None:
            try:
                await fn(*args)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never a silent death: the session ends typed
                workflow.logger.exception("session task failed")
                if self._final is None:
                    self._final = Failure(Crashed(error_type=type(exc).__name__, detail=str(exc)[:2000]))

        task = asyncio.get_running_loop().create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _stop_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # ── activities ──

    async def _activity(
        self,
        name: str,
        fields: dict[str, Any],
        timeout_s: float,
        *,
        attempts: int,
        schedule_to_close_s: float | None = None,
    ) -> dict[str, Any]:
        info = workflow.info()
        arg = {
            "key": self._key or f"{info.workflow_id}/{info.run_id}",
            "scope": info.workflow_id,
            "spec": self._spec_json,
            "session_id": None if self._state is None else self._state.session_id,
            **fields,
        }
        by_reference = self._snap_bytes > INLINE_SNAP_BYTES and name != "rma.stop"
        if name in _NEED_CONN:  # the snapshot (Local: the conversation) only where a conn is used
            arg["snap"], arg["version"] = (
                (None, self._version) if by_reference else (self._snap, self._version)
            )
            if by_reference:
                arg["snap_ref"] = True
        self._busy += 1
        try:
            out: dict[str, Any] = await self._execute_activity(
                name, arg, timeout_s, attempts, schedule_to_close_s
            )
            if out.get("need_snap"):  # that worker does not hold it: once more, inline
                arg = {**arg, "snap": self._snap, "snap_ref": False, "after_attempt": out.get("attempt", 1)}
                out = await self._execute_activity(name, arg, timeout_s, attempts, schedule_to_close_s)
        finally:
            self._busy -= 1
        self._take_snap(out)
        return out

    def _take_snap(self, out: dict[str, Any]) -> None:
        """The snapshot as an activity (or a fused turn, once taken) left it."""
        if out.get("snap_bytes") is not None:
            self._snap_bytes = int(out["snap_bytes"])
        if out.get("snap") is not None:  # the whole snapshot (histories before issue #28)
            self._snap = out["snap"]
            self._version += 1
        elif out.get("snap_delta") is not None:  # what changed in it
            self._snap = snapshots.apply(self._snap, out["snap_delta"])
            self._version += 1

    async def _execute_activity(
        self,
        name: str,
        arg: dict[str, Any],
        timeout_s: float,
        attempts: int,
        schedule_to_close_s: float | None,
    ) -> dict[str, Any]:
        t = self._timeouts
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=t.retry_initial),
            maximum_interval=timedelta(seconds=t.retry_max),
            maximum_attempts=attempts,
        )
        tool = arg["use"].get("name") if name == "rma.tool" else None
        arg = carry.fit_input(name, arg)
        if runs_local(self._spec.local_activities, name, tool, self._at_most_once, self._continuing):
            # On the worker running this workflow task, recorded with the task's completion:
            # no round trip through the server's queues (see docs/temporal.md for what it costs).
            local: dict[str, Any] = await workflow.execute_local_activity(
                name,
                arg,
                start_to_close_timeout=timedelta(seconds=timeout_s),
                retry_policy=retry,
            )
            return carry.unpack_result(local)  # type: ignore[no-any-return]
        out: dict[str, Any] = await workflow.execute_activity(
            name,
            arg,
            start_to_close_timeout=timedelta(seconds=timeout_s),
            # Queueing included: a bound the caller waits on (the stop's grace), not the work's.
            schedule_to_close_timeout=None
            if schedule_to_close_s is None
            else timedelta(seconds=schedule_to_close_s),
            # Every activity heartbeats: a worker that dies is noticed in seconds whatever it ran,
            # even an activity Temporal dispatched to it eagerly, before any worker polled.
            heartbeat_timeout=timedelta(seconds=t.heartbeat),
            retry_policy=retry,
        )
        return carry.unpack_result(out)  # type: ignore[no-any-return]  # a long one comes packed

    async def _turn_activity(self, name: str, fields: dict[str, Any]) -> dict[str, Any]:
        t = self._timeouts
        return await self._activity(name, fields, t.turn, attempts=t.turn_attempts)

    async def _poll(self, input: JSON) -> None:
        try:
            out = await self._turn_activity("rma.poll", {"input": to_jsonable(input)})
        except ActivityError as exc:
            self._post(TurnFailed(_lost("the turn's workers were lost", exc)))
            return
        result = decode_result(out["result"])
        if isinstance(result, Success):
            self._post(TurnPolled(tuple(result.unwrap())))
        else:
            self._post(TurnFailed(result.failure()))

    async def _exchange(self, input: JSON) -> None:
        gen = self._gen
        try:
            # ``fresh``: every event the host lists is this workflow's (a local turn may then
            # ask whether its input landed before the session's first boundary).
            fields = {
                "input": to_jsonable(input),
                "after": self._last_boundary,
                "after_at": self._last_boundary_at,
                "fresh": self._fresh,
            }
            out = await self._turn_activity("rma.exchange", fields)
        except ActivityError as exc:
            self._post(PushFinished(Failure(_lost("the turn's workers were lost", exc))))
            return
        self._post(PushFinished(decode_result(out["push"])))
        self._stream_read(gen, from_jsonable(out["events"]), out["end"])

    def _stream_read(self, gen: int, events: list[JSON], end: Any) -> None:
        assert self._state is not None
        codec = self._state.config.codec
        for raw in events:
            self._post(StreamEvent(gen, raw))
            if codec.turn_boundary(raw) and isinstance(raw, dict) and isinstance(raw.get("id"), str):
                self._last_boundary = raw["id"]
                at = raw.get("processed_at")
                self._last_boundary_at = at if isinstance(at, str) else None
        if end is not None:
            ended = decode_result(end)
            self._post(
                StreamClosed(gen) if isinstance(ended, Success) else StreamFailed(gen, ended.failure())
            )

    async def _push(self, input: JSON) -> None:
        try:
            out = await self._turn_activity("rma.push", {"input": to_jsonable(input)})
        except ActivityError as exc:
            self._post(PushFinished(Failure(_lost("the push's workers were lost", exc))))
            return
        self._post(PushFinished(decode_result(out["outcome"])))

    async def _resync(self, gen: int, seen: tuple[str, ...]) -> None:
        assert self._state is not None
        try:
            out = await self._turn_activity("rma.resync", {"seen": list(seen)})
        except ActivityError as exc:
            self._post(ReconnectFinished(Failure(_lost("the reconnect's workers were lost", exc))))
            return
        if self._state.config.codec.mode is Mode.STREAMING:
            self._post(StreamConnected(gen))
        found = decode_result(out["outcome"])
        placed = found.unwrap() if isinstance(found, Success) else None
        if isinstance(placed, Reconnected) and placed.boundary is not None:
            # Where the consolidation placed the session (a reattached one: the host's last
            # boundary), so its next turn can ask from there whether its input landed.
            self._last_boundary, self._last_boundary_at = placed.boundary, placed.boundary_at
        self._post(ReconnectFinished(found))
        self._stream_read(gen, from_jsonable(out["events"]), out["end"])

    async def _timer(self, delay_ms: int) -> None:
        self._busy += 1
        try:
            await workflow.sleep(timedelta(milliseconds=delay_ms))
        finally:
            self._busy -= 1
        self._post(ReconnectTimerFired())

    async def _guard(self, payload: Any) -> None:
        t = self._timeouts
        try:
            out = await self._activity(
                "rma.guard", {"payload": to_jsonable(payload)}, t.guard, attempts=t.tool_attempts
            )
        except ActivityError as exc:
            self._post(GuardVerdict("failed", error_type="WorkerLost", detail=str(exc)[:2000]))
            return
        self._post(from_jsonable(out["verdict"]))

    async def _run_tools(
        self,
        batch: int,
        uses: tuple[ToolUse, ...],
        confirmations: tuple[ToolUse, ...],
        verdicts: list[ToolResult] | None = None,
        resumed: bool = False,
    ) -> None:
        """One batch: the host's permission asks first (``confirmations``), then the calls.
        A batch a previous run carried (``resumed``) skips what that run had done: the verdicts
        it had, the asks and calls a person is deciding, the results it recorded."""
        record: dict[str, Any] = {"uses": uses, "confirmations": confirmations, "verdicts": verdicts}
        self._batches[batch] = record
        if verdicts is None and confirmations and resumed:  # a person was deciding the asks
            verdicts = list(await asyncio.gather(*(self._host_confirmation(u) for u in confirmations)))
        elif verdicts is None and confirmations:
            t = self._timeouts
            try:
                out = await self._activity(
                    "rma.confirm",
                    {"uses": to_jsonable(list(confirmations))},
                    t.tool,
                    attempts=t.tool_attempts,
                )
            except ActivityError as exc:
                lost = _lost("confirmation lost", exc).detail
                out = {
                    "verdicts": to_jsonable(
                        [ToolResult(u.id, f"denied: {lost}", True) for u in confirmations]
                    )
                }
            if out.get("needs_approval"):  # the handler cannot decide: a person does, durably
                verdicts = list(await asyncio.gather(*(self._host_confirmation(u) for u in confirmations)))
            else:
                verdicts = from_jsonable(out["verdicts"])
        verdicts = verdicts or []
        record["verdicts"] = verdicts
        limit = asyncio.Semaphore(self._spec.max_concurrency)
        results = await asyncio.gather(*(self._one_tool(use, limit) for use in uses))
        del self._batches[batch]
        for use in confirmations:
            self._confirmed.pop(use.id or "", None)
        self._post(ToolsFinished(batch, tuple(results), tuple(verdicts)))

    async def _one_tool(self, use: ToolUse, limit: asyncio.Semaphore) -> ToolResult:
        if use.id is not None and use.id in self._recorded:  # recorded: never run again
            return self._recorded[use.id]
        result = None
        if use.id is None or use.id not in self._awaiting:  # else: asked before continuing as new
            async with limit:
                result = await self._call_tool(use, approved=False)
        if result is None:  # it waits for a person: the slot goes to the other calls meanwhile
            verdict, reason = await self._decision(use, host_confirmation=False)
            if verdict == "allow":
                async with limit:
                    result = await self._call_tool(use, approved=True)
            else:
                result = ToolResult(use.id, DENIED.format(reason=reason or "no reason given"), True)
            assert result is not None
        if use.id is not None:
            self._recorded[use.id] = result
        return result

    async def _decision(self, use: ToolUse, *, host_confirmation: bool) -> tuple[str, str | None]:
        """Wait, durably, for ``approve(use.id, …)``: as long as it takes, on any worker."""
        uid = use.id
        assert uid is not None
        self._awaiting[uid] = awaiting_entry(use, host_confirmation=host_confirmation)
        await workflow.wait_condition(lambda: uid in self._approvals)
        self._awaiting.pop(uid, None)
        return self._approvals.pop(uid)

    async def _host_confirmation(self, use: ToolUse) -> ToolResult:
        """A host-run call's permission ask, decided by a person (the host waits, idle)."""
        known = self._confirmed.get(use.id or "")
        if known is not None:  # decided before continuing as new
            return known
        verdict, reason = await self._decision(use, host_confirmation=True)
        if verdict == "allow":
            result = ToolResult(use.id, "", False)
        else:
            result = ToolResult(use.id, DENIED.format(reason=reason or "no reason given"), True)
        self._confirmed[use.id or ""] = result
        return result

    async def _call_tool(self, use: ToolUse, *, approved: bool) -> ToolResult | None:
        t = self._timeouts
        try:
            out = await self._activity(
                "rma.tool",
                {"use": to_jsonable(use), "approved": approved},
                t.tool,
                attempts=t.tool_attempts,
            )
        except ActivityError as exc:
            return ToolResult(
                use.id, f"tool error: {_lost(f'{use.name} could not complete', exc).detail}", True
            )
        if out.get("needs_approval"):
            return None
        result: ToolResult = from_jsonable(out["result"])
        return result

    async def _report(self, outcome: Outcome, final: bool) -> None:
        try:
            if carries_result(outcome):
                transcript = await self._transcript()
                if transcript is not None:
                    outcome = with_transcript(outcome, tuple(transcript))
            self._results.append(to_jsonable(outcome))
            if final:
                self._final = outcome
        finally:
            self._reporting -= 1

    async def _transcript(self) -> list[JSON] | None:
        if not self._has_transcript:
            return None
        t = self._timeouts
        out = await self._activity("rma.transcript", {}, t.guard, attempts=t.turn_attempts)
        value = carry.unpack_result(out.get("transcript"))  # a recorded one may be a plain list
        return None if value is None else list(value)

    # ── what callers can ask and send ──

    @workflow.query(name="status")
    def status(self) -> dict[str, Any]:
        """Where the session is: phase, turns, session id, results so far, calls awaiting
        approval, and how many runs the workflow has had (1, then one more per continue-as-new)."""
        s = self._state
        return {
            "phase": None if s is None else s.phase.value,
            "turns": 0 if s is None else s.turns,
            "session_id": None if s is None else s.session_id,
            "results": self._first + len(self._results),
            "awaiting_approval": list(self._awaiting.values()),
            "ended": self._ended,
            "runs": int((self._carried or {}).get("runs", 1)),
        }

    @workflow.query(name="results")
    def results(self) -> list[Any]:
        """Every request's encoded result so far, in order (``rma.codec_json``)."""
        return list(self._results)

    @workflow.update(name="message")
    async def message(self, text: str) -> Any:
        """A follow-up for a live session; answers with that request's encoded result."""
        index = self._expected
        self._expected += 1
        self._post(UserMessage(text))
        await workflow.wait_condition(lambda: self._first + len(self._results) > index or self._ended)
        if self._first + len(self._results) > index:
            return carry.pack_result(self._results[index - self._first])
        return to_jsonable(Failure(Closed()))

    @message.validator
    def _check_message(self, text: str) -> None:
        if not self._spec.live:
            raise ValueError("message: only a live session (SessionSpec(live=True)) takes follow-ups")
        if not isinstance(text, str):
            raise ValueError(f"message text must be a str, got {type(text).__name__}")
        if self._done():
            raise ValueError("message: the session is closed")

    @workflow.update(name="approve")
    async def approve(self, tool_use_id: str, verdict: str, reason: str | None = None) -> None:
        """Allow or deny a tool call waiting for approval (``status()["awaiting_approval"]``)."""
        self._approvals[tool_use_id] = (verdict, reason)

    @approve.validator
    def _check_approve(self, tool_use_id: str, verdict: str, reason: str | None = None) -> None:
        if verdict not in ("allow", "deny"):
            raise ValueError(f"approve: verdict must be 'allow' or 'deny', got {verdict!r}")
        if tool_use_id not in self._awaiting:
            raise ValueError(f"approve: no tool call {tool_use_id!r} is waiting for approval")

    @workflow.signal(name="close")
    def close(self) -> None:
        """End a live session (a run to completion ignores it: cancel that workflow instead)."""
        if self._spec.live:
            self._closing = True


def encoded_result(value: Any) -> Outcome:
    """A workflow's encoded result as the ``Result[SessionResult, SessionError]`` it stands for."""
    return decode_result(value)


__all__ = ["WORKFLOW_NAME", "SessionWorkflow", "encoded_result"]
