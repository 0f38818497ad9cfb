"""``Worker``: a self-hosted Claude environment worker — claims work items, serves each
session's tools from a local workspace through the ordinary session machine, and gives the
items back.

    async with Worker(environment_id="env_…", workspaces="/srv/ws", api_key=…) as worker:
        await worker.serve()                        # until cancelled; or serve(drain=True)

The wire (``rma_shell.providers.claude.work``): ``poll`` claims the next item, ``ack`` takes
it, ``heartbeat`` holds its lease while the session is served, ``stop`` gives it back. Per
item, under one task group: a heartbeat loop, and the session driven by ``rma_shell.session.run``
(or ``resume`` of its journal) on ``ClaudeSelfHosted`` — so journal, approvals, telemetry and
recording are the same as for any run — with a ``Toolbox`` of the session's own
``rma_shell.workspace.Workspace`` (one directory and one sandboxed bash per session) and any
extra tools. Many items run at once, at most ``max_sessions``.

Decisions, as the SDK's ``EnvironmentWorker`` makes them: a heartbeat that reads ``stopping``
/``stopped`` or ``lease_extended: false`` ends that session's work and stops the item; a 412
(the lease moved on) or no successful heartbeat for a whole lease TTL ends it *without*
stopping the item — it belongs to the queue or another worker now; another 4xx ends it and
stops the item. A crashed worker stops nothing: its lease runs out and the next worker's poll
claims the item, reattaches to the session and carries on (a journal, when given, keeps the
calls that already ran from running again). A session that pauses on an approval
(``evaluated_permission: ask`` with no ``confirm=`` policy, or ``require_approval``) keeps its
lease while it waits; ``approve`` from any process, and the worker resumes it.

What this is not: a scheduler across machines (the host's queue is), or a sandbox itself.
"""

from __future__ import annotations

import enum
import logging
import math
import os
import random
import socket
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.errors import HttpError, InvalidOpts, SessionError
from rma.journal import AwaitingApproval
from rma.vocabulary import SessionResult
from rma_shell.journal.setup import opened
from rma_shell.providers.claude.self_hosted import ClaudeSelfHosted
from rma_shell.providers.claude.work import NO_HEARTBEAT, POLL_BLOCK_MS, Heartbeat, WorkQueue, lease_lost
from rma_shell.resuming import pending_approvals, resume
from rma_shell.session import run
from rma_shell.tools.toolbox import Toolbox
from rma_shell.workspace import Sandbox, Workspace

log = logging.getLogger("rma.worker")

HEARTBEAT_CAP_S = 30.0
DEFAULT_TTL_S = 90.0
APPROVAL_POLL_S = 2.0
BEAT_TIMEOUT_S = 10.0


class Ending(enum.StrEnum):
    """Why the worker stopped serving an item."""

    DONE = "done"  # the session's turn ended (or the run failed): the item is stopped
    STOPPED = "stopped"  # the heartbeat read stopping/stopped or lease_extended false
    LEASE_LOST = "lease_lost"  # 412: the item is the queue's or another worker's
    ASSUMED_LOST = "assumed_lost"  # no heartbeat succeeded for a lease TTL
    REJECTED = "heartbeat_rejected"  # another 4xx: the item is stopped
    SKIPPED = "skipped"  # not a session item, or the ack failed
    CANCELLED = "cancelled"  # the worker shut down
    CRASHED = "crashed"  # serving it raised (logged); the item is stopped, the worker goes on


_LOST = (Ending.LEASE_LOST, Ending.ASSUMED_LOST)


@attrs.frozen
class WorkerEvent:
    """One line of progress: ``kind`` (claimed, ended, poll_failed, …), the item and session,
    and for ``ended`` the ending and the run's outcome (a ``SessionResult`` or ``SessionError``)."""

    kind: str
    work_id: str | None = None
    session_id: str | None = None
    ending: Ending | None = None
    outcome: SessionResult | SessionError | None = None
    detail: str | None = None

    def line(self) -> str:
        """The event on one line, as ``rma worker`` prints it."""
        where = " ".join(p for p in (self.work_id, self.session_id and f"session={self.session_id}") if p)
        what = self.kind + (f" ({self.ending.value})" if self.ending else "")
        tail = ""
        if isinstance(self.outcome, SessionResult):
            tail = f": {self.outcome.terminal.value}, {len(self.outcome.custom_tool_uses)} tool call(s)"
        elif isinstance(self.outcome, SessionError):
            tail = f": {str(self.outcome).splitlines()[0]}"
        if self.detail:
            tail += f" — {self.detail}"
        return f"{what} {where}{tail}".strip()


class _Lease:
    def __init__(self) -> None:
        self.ending: Ending | None = None
        self.ended = anyio.Event()

    def finish(self, ending: Ending) -> None:
        if self.ending is None:
            self.ending = ending
        self.ended.set()


class Worker:
    """A self-hosted environment worker. See the module docstring.

    Args:
        environment_id: the ``self_hosted`` environment whose queue to serve.
        workspaces: the directory under which each session gets its own workspace
            (``<workspaces>/<session id>``, created as needed and kept afterwards).
        host: a ``ClaudeSelfHosted`` to reach the API; or give its settings (``api_key=``,
            ``base_url=``, …) as keyword arguments instead.
        sandbox, network: the workspaces' bash sandbox (docs/workspace.md).
        tools: more tools (typed functions, tool sources) beside the workspace's six.
        confirm: the approval policy for calls the host asks to confirm
            (``evaluated_permission: ask``): ``confirm(name, input)`` → True/"allow" or
            False/"deny" (sync or async). Without it, such a call waits as a durable pending
            approval (with ``journal=``), or is denied.
        require_approval: tool names whose every call waits for ``approve`` (with ``journal=``).
        journal: a journal (path or store) shared by the worker's sessions; each item is the
            journal key ``<session id>/<work id>``, so a reclaimed item resumes where it was.
        max_sessions: items served at once.
        heartbeat_interval: seconds between heartbeats (default: half the lease TTL, at most 30).
        block_ms: how long one poll waits for work (1–999; None: not at all).
        on_event: called with each ``WorkerEvent`` (progress).
        run_options: more ``run`` options for every session (``telemetry=``, ``record=``, …).
        approval_poll: seconds between looks at the journal while a session awaits approval.
    """

    def __init__(
        self,
        *,
        environment_id: str,
        workspaces: str | os.PathLike[str],
        host: ClaudeSelfHosted | None = None,
        sandbox: Sandbox | str = Sandbox.AUTO,
        network: bool = False,
        tools: Sequence[Any] = (),
        confirm: Callable[..., Any] | None = None,
        require_approval: Collection[str] = (),
        journal: Any = None,
        max_sessions: int = 8,
        heartbeat_interval: float | None = None,
        block_ms: int | None = POLL_BLOCK_MS,
        worker_id: str | None = None,
        on_event: Callable[[WorkerEvent], object] | None = None,
        run_options: Mapping[str, Any] | None = None,
        approval_poll: float = APPROVAL_POLL_S,
        **host_settings: Any,
    ) -> None:
        if not isinstance(environment_id, str) or not environment_id:
            raise InvalidOpts("environment_id", "must be a non-empty string")
        if not isinstance(max_sessions, int) or isinstance(max_sessions, bool) or max_sessions < 1:
            raise InvalidOpts("max_sessions", f"must be a positive int, got {max_sessions!r}")
        if heartbeat_interval is not None and not (
            isinstance(heartbeat_interval, int | float) and 0 < heartbeat_interval < math.inf
        ):
            raise InvalidOpts(
                "heartbeat_interval", f"must be a positive number of seconds, got {heartbeat_interval!r}"
            )
        if block_ms is not None and not (isinstance(block_ms, int) and 1 <= block_ms <= 999):
            raise InvalidOpts("block_ms", f"must be an int from 1 to 999 or None, got {block_ms!r}")
        if host is not None and host_settings:
            raise InvalidOpts("host", f"give host= or its settings ({sorted(host_settings)}), not both")
        if host is not None and not isinstance(host, ClaudeSelfHosted):
            raise InvalidOpts("host", f"must be a ClaudeSelfHosted, got {type(host).__name__}")
        root = os.fspath(workspaces)
        if not os.path.isdir(root):
            raise InvalidOpts("workspaces", f"{root!r} is not a directory")
        self._own_host = host is None
        self.host = host if host is not None else ClaudeSelfHosted(**host_settings)
        self.environment_id = environment_id
        self.workspaces = os.path.realpath(root)
        self.sandbox = Sandbox(sandbox)
        self.network = network
        self.tools = tuple(tools)
        self.confirm = confirm
        self.require_approval = frozenset(require_approval)
        self.journal = journal
        self.max_sessions = max_sessions
        self.heartbeat_interval = heartbeat_interval
        self.block_ms = block_ms
        self.worker_id = worker_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"
        self.on_event = on_event
        self.run_options = dict(run_options or {})
        self.approval_poll = approval_poll
        self.active: dict[str, str] = {}
        """Items being served now: work id → session id."""
        self.served = 0
        self._queue: WorkQueue | None = None
        self._stop = anyio.Event()

    def __repr__(self) -> str:
        return f"Worker(environment_id={self.environment_id!r}, worker_id={self.worker_id!r})"

    async def __aenter__(self) -> Worker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_host:
            await self.host.close()

    def stop(self) -> None:
        """Stop claiming new items; ``serve`` returns once the items in hand are done."""
        self._stop.set()

    def _work_queue(self) -> WorkQueue:
        if self._queue is None:
            client = self.host.client()
            if isinstance(client, Failure):
                raise client.failure()
            self._queue = WorkQueue(client.unwrap(), self.environment_id)
        return self._queue

    def _emit(self, event: WorkerEvent) -> None:
        log.info("%s", event.line(), extra={"work_id": event.work_id, "session_id": event.session_id})
        if self.on_event is not None:
            self.on_event(event)

    # -- the poll loop --

    async def serve(self, *, drain: bool = False, max_items: int | None = None) -> int:
        """Claim and serve items until ``stop()``, cancellation, ``max_items`` claimed, or —
        with ``drain`` — the first empty poll; then wait for the items in hand. Returns how
        many items were served. A poll the API refuses for good (401, 403, 404) raises its
        ``SessionError``; transient failures back off and poll again."""
        queue = self._work_queue()
        slots = anyio.Semaphore(self.max_sessions)
        claimed = 0
        failures = 0
        fatal: SessionError | None = None
        async with anyio.create_task_group() as tg:
            while not self._stop.is_set() and (max_items is None or claimed < max_items):
                await slots.acquire()
                got = await queue.poll(block_ms=self.block_ms)
                if isinstance(got, Failure):
                    slots.release()
                    error = got.failure()
                    if isinstance(error, HttpError) and error.status in (400, 401, 403, 404):
                        fatal = error  # raised once the items in hand are done, not as a group
                        break
                    failures += 1
                    wait = min(60.0, 0.5 * 2**failures) * (0.5 + random.random() / 2)
                    self._emit(WorkerEvent("poll_failed", detail=f"{error}; again in {wait:.1f}s"))
                    await anyio.sleep(wait)
                    continue
                failures = 0
                item = got.unwrap()
                if item is None:
                    slots.release()
                    if drain:
                        break
                    with anyio.move_on_after(1.0 + random.random() * 2.0):
                        await self._stop.wait()
                    continue
                claimed += 1
                tg.start_soon(self._serve_slot, item, slots)
        if fatal is not None:
            raise fatal
        return claimed

    async def _serve_slot(self, item: dict[str, Any], slots: anyio.Semaphore) -> None:
        try:
            await self.handle(item)
        finally:
            slots.release()

    # -- one item --

    async def handle(self, item: Mapping[str, Any]) -> Ending:
        """Serve one claimed item (from ``poll``): ack, heartbeat and serve, give it back."""
        queue = self._work_queue()
        work_id = str(item.get("id"))
        data = item.get("data")
        session_id = data.get("id") if isinstance(data, Mapping) and data.get("type") == "session" else None
        if not isinstance(session_id, str):
            await self._stop_quietly(queue, work_id)
            self._emit(WorkerEvent("ended", work_id, None, Ending.SKIPPED, detail="not a session work item"))
            return Ending.SKIPPED
        acked = await queue.ack(work_id)
        if isinstance(acked, Failure):
            error = acked.failure()
            if isinstance(error, HttpError) and 400 <= error.status < 500:
                await self._stop_quietly(queue, work_id)
            self._emit(WorkerEvent("ended", work_id, session_id, Ending.SKIPPED, error, "ack failed"))
            return Ending.SKIPPED
        self.active[work_id] = session_id
        self._emit(WorkerEvent("claimed", work_id, session_id))
        lease = _Lease()
        outcome: Result[SessionResult, SessionError] | None = None
        crash: str | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._heartbeat, queue, work_id, lease, tg.cancel_scope)
                outcome = await self._drive(session_id, work_id, lease)
                lease.finish(Ending.DONE)
                tg.cancel_scope.cancel()
        except Exception as exc:  # a bug or a workspace that cannot be made: this item only
            lease.finish(Ending.CRASHED)
            first = _first_cause(exc)
            crash = f"{type(first).__name__}: {first}"
            log.error("serving work %s crashed", work_id, exc_info=exc)
        except BaseException:
            lease.finish(Ending.CANCELLED)
            raise
        finally:
            self.active.pop(work_id, None)
            if lease.ending not in _LOST:
                await self._stop_quietly(queue, work_id)
            ending = lease.ending or Ending.CANCELLED
            result: SessionResult | SessionError | None = None
            if isinstance(outcome, Success):
                result = outcome.unwrap()
            elif isinstance(outcome, Failure):
                result = outcome.failure()
            self.served += 1
            self._emit(WorkerEvent("ended", work_id, session_id, ending, result, crash))
        return ending

    async def _stop_quietly(self, queue: WorkQueue, work_id: str) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10.0):
            stopped = await queue.stop(work_id, force=True)
            if isinstance(stopped, Failure):
                error = stopped.failure()
                if not (isinstance(error, HttpError) and error.status == 409):
                    log.warning("stopping work %s failed: %s", work_id, error)

    async def _heartbeat(
        self, queue: WorkQueue, work_id: str, lease: _Lease, scope: anyio.CancelScope
    ) -> None:
        expected = NO_HEARTBEAT
        ttl = DEFAULT_TTL_S
        interval = self.heartbeat_interval or HEARTBEAT_CAP_S
        last_ok = anyio.current_time()
        try:
            while not lease.ended.is_set():
                beat: Result[Heartbeat, SessionError] | None = None  # None: the beat itself timed out
                # Bounded, but never tighter than BEAT_TIMEOUT_S: a beat cut off after the server
                # recorded it loses its answer, and the next beat then reads as a lost lease.
                with anyio.move_on_after(max(interval, BEAT_TIMEOUT_S)):
                    beat = await queue.heartbeat(work_id, expected)
                if isinstance(beat, Success):
                    hb = beat.unwrap()
                    expected, last_ok = hb.last_heartbeat, anyio.current_time()
                    if hb.ttl_seconds > 0:
                        ttl = float(hb.ttl_seconds)
                        interval = self.heartbeat_interval or max(1.0, min(ttl / 2, HEARTBEAT_CAP_S))
                    if hb.state in ("stopping", "stopped") or not hb.lease_extended:
                        lease.finish(Ending.STOPPED)
                        return
                elif isinstance(beat, Failure) and lease_lost(beat.failure()):
                    lease.finish(Ending.LEASE_LOST)
                    return
                elif isinstance(beat, Failure) and _rejected(beat.failure()):
                    lease.finish(Ending.REJECTED)
                    return
                elif anyio.current_time() - last_ok > ttl:
                    lease.finish(Ending.ASSUMED_LOST)
                    return
                else:
                    self._emit(
                        WorkerEvent(
                            "heartbeat_failed", work_id, detail=str(beat.failure() if beat else "timed out")
                        )
                    )
                with anyio.move_on_after(interval):
                    await lease.ended.wait()
        finally:
            scope.cancel()  # whatever ended the lease ends the session's work

    # -- the session --

    async def _drive(
        self, session_id: str, work_id: str, lease: _Lease
    ) -> Result[SessionResult, SessionError]:
        path = os.path.join(self.workspaces, _safe_name(session_id))
        os.makedirs(path, exist_ok=True)
        workspace = Workspace(path, sandbox=self.sandbox, network=self.network)
        box = Toolbox(workspace, *self.tools, require_approval=self.require_approval)
        if self.confirm is not None:
            box.confirm_tool_use = _confirming(self.confirm)  # type: ignore[attr-defined]
        async with box:
            options: dict[str, Any] = {"timeout": None, **self.run_options}
            if self.journal is None:
                return await run(self.host, handler=box, session_id=session_id, **options)
            key = f"{session_id}/{work_id}"
            outcome = (
                await resume(self.journal, key, provider=self.host, handler=box, **_handler_options(options))
                if _journaled(self.journal, key)
                else await run(
                    self.host,
                    handler=box,
                    session_id=session_id,
                    journal=self.journal,
                    journal_key=key,
                    **options,
                )
            )
            while isinstance(outcome, Failure) and isinstance(outcome.failure(), AwaitingApproval):
                self._emit(WorkerEvent("awaiting_approval", work_id, session_id, outcome=outcome.failure()))
                await self._until_decided(key)
                outcome = await resume(
                    self.journal, key, provider=self.host, handler=box, **_handler_options(options)
                )
            return outcome

    async def _until_decided(self, key: str) -> None:
        while True:
            waiting = pending_approvals(self.journal, key)
            if isinstance(waiting, Success) and not waiting.unwrap():
                return
            await anyio.sleep(self.approval_poll)


def _first_cause(exc: BaseException) -> BaseException:
    """The first exception under a (nested) exception group: what a task group's crash says."""
    inner = getattr(exc, "exceptions", None)
    return _first_cause(inner[0]) if inner else exc


def _rejected(error: SessionError) -> bool:
    return isinstance(error, HttpError) and 400 <= error.status < 500 and error.status not in (408, 409, 429)


def _safe_name(session_id: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in session_id)
    return cleaned.lstrip(".") or "session"


def _journaled(journal: Any, key: str) -> bool:
    held = opened(journal)
    if isinstance(held, Failure):
        return False
    store = held.unwrap()
    try:
        return bool(store.store.rows(key))
    finally:
        store.release()


_HANDLER_OPTIONS = (
    "context",
    "max_concurrency",
    "telemetry",
    "timeout",
    "tool_timeout",
    "max_tool_result_chars",
)


def _handler_options(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k in _HANDLER_OPTIONS}


def _confirming(policy: Callable[..., Any]) -> Callable[..., Any]:
    async def confirm_tool_use(name: str, input: Mapping[str, Any], ctx: object) -> Any:
        value = policy(name, input)
        if hasattr(value, "__await__"):
            value = await value
        return value

    return confirm_tool_use
