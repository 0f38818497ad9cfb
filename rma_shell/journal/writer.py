"""Writing one session's journal as it runs, and running its tools against that journal.

``SessionJournal`` is what the driver (``rma_shell.session``) writes through: the header, each
event before the core takes it (with the provider's reattach snapshot when a poll, an open or
a reconnect changed it), each tool call's start and result, a pause, the final outcome. What
it writes is pending until a ``flush`` commits it, in one transaction: the driver flushes before
any command acts outside the process, a call's start flushes before the tool runs, so nothing
happens that the journal would not know of after a crash, at two commits per Local turn or
Claude tool round trip instead of one per record. Those two go through the store's group
commit when it has one (``SQLiteJournal``): many sessions' flushes in one transaction
(``rma_shell.journal.group``) — ``commit`` waits for it, ``commit_soon`` joins it and leaves
the commit to the task the driver spawns for what the records lead to (on asyncio).
``JournaledTools`` runs a batch of tool calls so that a journaled result is never run again,
a call that started but left no result runs again with the same idempotency key (or, when it
is at-most-once, is answered as interrupted), and a call that needs an approval waits for one.

Records carry ``at`` (the wall clock, for the durations ``rma inspect`` shows; nothing reads
it back to decide anything).

What this is not: the store (``rma_shell.journal.store``) or the resume (``rma_shell.journal.resume``).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
from returns.result import Result, Success

from rma import journal as fmt
from rma import snapshots
from rma._persistent import AppendLog
from rma.errors import SessionError
from rma.journal import Decision, Loaded, PendingApproval
from rma.recording import encode, encode_plain
from rma.session.endings import outcome_result, replace_transcript
from rma.session.events import Event, ToolsFinished
from rma.vocabulary import JSON, SessionInfo, SessionResult, ToolResult, ToolUse
from rma_shell.handler import Capabilities, HandlerAdapter
from rma_shell.journal.group import Batch, BatchStore, GroupCommit
from rma_shell.journal.store import JournalStore

if TYPE_CHECKING:
    from rma_shell.journal.setup import Held

log = logging.getLogger("rma.handler")

INTERRUPTED = (
    "tool error: interrupted: {name} had started when the session's process stopped, and it is "
    "at-most-once, so it was not run again; whether it took effect is unknown"
)
DENIED = "denied by the approver: {reason}"


class _Done:
    """An awaitable that is done at once (no checkpoint): a commit with nothing to wait for."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


_DONE = _Done()


class SessionJournal:
    """The journal of one session (``store`` under ``key``), written as the session goes."""

    def __init__(
        self, store: JournalStore, key: str, loaded: Loaded | None = None, *, held: Held | None = None
    ) -> None:
        self.store = store
        self.key = key
        self.held = held
        """The key's lease, and the store when the run opened it from a path: ``close``."""
        self._snapshot: Mapping[str, JSON] | None = loaded.snapshot if loaded is not None else None
        """The snapshot the journal holds last, as the provider gave it (its logs are views, not
        copies): the next one is written as what changed since (``rma.snapshots``), and ``end``
        compares the transcript with its history."""
        self.format = loaded.format if loaded is not None else fmt.FORMAT
        """The format of the journal being written: one an older rma began is continued in its
        own (whole snapshots, whole outcomes, every result in a record of its own), so the
        rma that began it can still read it."""
        self._pending: list[str | tuple[ToolResult, float]] = []
        """Records written but not yet durable: they go with the next ``flush``, in one
        transaction. A (``ToolResult``, ``at``) in it is a batch's last result, held back unencoded: the
        batch's ``ToolsFinished`` carries it in the same transaction, and then it is dropped
        without ever being encoded (it would otherwise be encoded twice per turn); anything
        else flushes it as its own record."""
        self._held = 0
        """How many results ``_pending`` holds back."""
        group = getattr(store, "group", None)
        self._group = group if isinstance(group, GroupCommit) and hasattr(store, "append_batch") else None
        self._joined: Batch | None = None
        """The batch ``commit_soon`` joined last: ``close`` commits it if nobody has."""
        if self._group is not None:
            self._group.enter()

    def flush(self) -> None:
        """Make every pending record durable, in one transaction, at once. What a batch of the
        group commit gathers on this thread is committed first: nothing overtakes a record
        flushed earlier."""
        if self._pending:
            records = self._taken()
            if self._group is not None:
                self._group.drain()
            self.store.append(self.key, records)

    def commit(self) -> Awaitable[None]:
        """Make every pending record durable, with other sessions' when they flush too: await
        it. The driver does before a command acts outside the process (a request, a tool, a
        result handed back): what an event caused happens only once the event is durable, as
        when each record was its own transaction, at a commit per effect instead of one per
        record, and one per batch of sessions instead of one per session.

        Not a coroutine itself: it hands back the group's (or nothing to wait for), so a
        session waiting for a shared commit holds one coroutine less for the collector to walk
        — with 1,000 sessions, every object alive across a wait makes collections more
        frequent, and each walks every session's state (issue #28)."""
        # In the batch now, before anything is awaited: a flush after this one commits it first.
        batch = self._join()
        return _DONE if batch is None else batch.group.settle(batch)

    def _join(self) -> Batch | None:
        """Every pending record into the group's gathering batch, and that batch; None: durable
        already (nothing pending, or written at once: no group, or no other session on it)."""
        if not self._pending:
            return None
        records = self._taken()
        if self._group is None:
            self.store.append(self.key, records)
            return None
        return self._group.join(cast(BatchStore, self.store), self.key, records)

    def commit_soon(self) -> Batch | None:
        """Every pending record into the group's batch gathering now, and that batch, made
        durable by ``durable()`` — called at the start of each task the driver spawns for what
        the records lead to, before the task acts. A task starts
        only after the tasks already runnable ran, so other sessions' flushes join the batch
        meanwhile, as they do during ``commit``'s wait, without the driver waiting at all.
        None: durable already (nothing pending, or written alone: no other session shares the
        store). A batch joined before that failed to commit raises its ``GroupCommitFailed``
        here."""
        earlier = self._joined
        if earlier is not None and earlier.closed:
            earlier.durable()  # committed already; raises if that commit failed
        if not self._pending:
            return None  # nothing joined: the batch joined last still stands
        # A batch still gathering is the one joined (one per thread), so the batch joined last
        # holds whatever an earlier join's tasks still need.
        self._joined = self._join()
        return self._joined

    def durable(self) -> None:
        """What ``commit_soon`` joined is committed when this returns — by this call, when none
        of its batch's flushes has yet; ``GroupCommitFailed`` when that commit failed."""
        if self._joined is not None:
            self._joined.durable()

    def _taken(self) -> list[str]:
        """The pending records, as text (a result held back is encoded now); none pending after."""
        pending, self._pending = self._pending, []
        if not self._held:
            return cast(list[str], pending)
        self._held = 0
        return [r if isinstance(r, str) else fmt.tool_result_record(r[0], at=r[1]) for r in pending]

    def _write(self, record: str, *, now: bool = True) -> None:
        self._pending.append(record)
        if now:
            self.flush()

    def begin(self, provider: str, config_json: str, request: Mapping[str, JSON]) -> None:
        """The header, pending: the driver commits it before the open acts outside the process,
        with other sessions' flushes when they share the store's group commit."""
        self._write(fmt.header_record(self.key, provider, config_json, request, at=time.time()), now=False)

    def event(self, event: Event, snapshot: Mapping[str, JSON] | None = None) -> None:
        """The event, and in its record ``snapshot`` when that changed: what changed only, so a
        turn costs what it added, not the whole transcript again. Pending until the next
        ``flush``."""
        conn: str | None = None
        delta = False
        if self._held and isinstance(event, ToolsFinished):
            self._drop_carried(event.results)
        if snapshot is not None:
            # Untagged JSON: a snapshot is read back as it is, whatever its keys.
            if self._snapshot is None:
                conn = encode_plain(snapshots.plain(snapshot))
            else:
                change = snapshots.delta(self._snapshot, snapshot)
                if snapshots.changed(change):
                    if self.format < 3:  # its readers know no deltas: whole, as they wrote it
                        conn = encode_plain(snapshots.plain(snapshot))
                    else:
                        conn, delta = encode_plain(change), True
            self._snapshot = snapshot
        self._write(fmt.event_record(encode(event), conn, at=time.time(), delta=delta), now=False)

    def _drop_carried(self, results: Sequence[ToolResult]) -> None:
        """Drop the held results ``results`` carries: its record, committed with them, holds them."""
        carried = {r.tool_use_id: r for r in results}
        kept = [r for r in self._pending if isinstance(r, str) or carried.get(r[0].tool_use_id) != r[0]]
        self._held -= len(self._pending) - len(kept)
        self._pending = kept

    def tool_start(self, use: ToolUse, attempt: int) -> Awaitable[None]:
        """Durable once awaited, with everything pending (the turn that asked for it): the tool
        runs next. (The commit's awaitable, as ``commit``.)"""
        if use.id is not None:
            self.tool_start_ahead(use.id, attempt)
        return self.commit()

    def tool_start_ahead(self, tool_use_id: str, attempt: int) -> None:
        """A call's start, pending: the driver's commit before it hands the batch to its tools
        makes it durable (``JournaledTools.start_ahead``)."""
        self._pending.append(fmt.tool_start_record(tool_use_id, attempt, at=time.time()))

    def tool_result(self, result: ToolResult, *, confirm: bool = False, now: bool = True) -> None:
        """``now=False``: pending, for the batch's last result — the batch's end follows at once
        and is flushed before the results go to the host; when that end carries the result,
        its record is all that is written (``load`` reads results from both)."""
        if result.tool_use_id is None:
            return
        # Format 1's readers find results in their own records only.
        if not now and not confirm and self.format >= 2:
            self._pending.append((result, time.time()))
            self._held += 1
            return
        self._write(fmt.tool_result_record(result, confirm=confirm, at=time.time()), now=now)

    def waiting(self, waiting: Sequence[PendingApproval]) -> None:
        self._write(fmt.waiting_record(waiting, at=time.time()))

    def close(self) -> None:
        """The session is over in this process: let the key go (and close a store it opened).
        What it joined to a batch that is still gathering — the session cancelled before the
        task that would have committed it started — is committed on its way out, as a flush
        cancelled while it waits is: nothing acted on those records, and the journal keeps
        them all the same."""
        joined, self._joined = self._joined, None
        if joined is not None and not joined.closed:
            try:
                joined.durable()
            except Exception as exc:  # the session is over: nothing is left to act on them
                log.error("journal commit on close failed: %s", exc)
        group, self._group = self._group, None
        if group is not None:
            group.leave()
        if self.held is not None:
            self.held.release()

    def end(self, outcome: object, *, folds: bool = False) -> None:
        """The final outcome. ``folds``: it is the core's own (its ``Finish``, plus the
        transcript and typed output the driver adds), so the journal's events lead to it and,
        when its transcript is none or the journaled history, the record refers to them
        instead of holding a second copy of the result (``rma.journal.end_record``)."""
        # A typed output (``output_type=``) is the user's type, with no JSON form the journal
        # can read back: it is kept as the answer's tool result, and ``resume`` validates that
        # again with the ``output_type`` it is given.
        if isinstance(outcome, Success) and getattr(outcome.unwrap(), "output", None) is not None:
            outcome = Success(attrs.evolve(outcome.unwrap(), output=None))
        # A transcript that is the history already journaled (Local's) is not written again:
        # at 1,000 sessions its encoding was most of the end record's cost (issue #28).
        ended = cast(Result[SessionResult, SessionError], outcome)
        transcript = getattr(outcome_result(ended), "transcript", None)
        written = self._snapshot.get("history") if self._snapshot is not None else None
        same = (
            transcript is not None
            and isinstance(written, list | tuple | AppendLog)
            and tuple(transcript) == tuple(written)
        )
        if folds and self.format >= 2 and (same or transcript is None):
            self._write(fmt.end_record(fmt.FOLDED, at=time.time(), transcript_is_history=same))
            return
        if same:
            outcome = replace_transcript(ended, None)
        self._write(fmt.end_record(encode(outcome), at=time.time(), transcript_is_history=same))


@attrs.frozen
class Paused:
    """A batch that cannot finish until a person decides: the calls that wait."""

    waiting: tuple[PendingApproval, ...]


class JournaledTools:
    """Runs tool batches through ``adapter`` against a journal (see the module docstring)."""

    def __init__(
        self, adapter: HandlerAdapter, journal: SessionJournal, handler: object, context: object
    ) -> None:
        self.adapter = adapter
        self.journal = journal
        self.handler = handler
        self.context = context
        self.results: dict[str, ToolResult] = {}
        self.verdicts: dict[str, ToolResult] = {}
        self.starts: dict[str, int] = {}
        self.approvals: dict[str, tuple[Decision, str | None]] = {}
        self._running = 0
        """Calls of the current batch still running."""
        self._ahead: set[str] = set()
        """Calls whose start records ``start_ahead`` wrote: they start without a commit of their own."""
        adapter.key_scope = journal.key
        adapter.on_start = self._started
        adapter.on_finish = self._finished
        caps = Capabilities.of(handler)
        self._at_most_once = caps.at_most_once if caps is not None else frozenset()
        self._requires_approval = caps.requires_approval if caps is not None else None
        self._asks_approval = callable(self._requires_approval)

    def restore(self, loaded: Loaded) -> None:
        """What an earlier process journaled: results, verdicts, starts and decisions."""
        self.results.update(loaded.results)
        self.verdicts.update(loaded.verdicts)
        self.starts.update(loaded.starts)
        self.approvals.update(loaded.approvals)
        self.adapter.attempts.update({i: n + 1 for i, n in loaded.starts.items() if i not in loaded.results})

    def approve(self, tool_use_id: str, decision: Decision, reason: str | None) -> None:
        self.approvals[tool_use_id] = (decision, reason)

    def start_ahead(self, uses: Sequence[ToolUse], confirmations: Sequence[ToolUse]) -> bool:
        """Write, pending, the start records of the calls of a batch about to be handed to its
        tools that will surely start at once, and say whether it wrote any: the driver then
        commits them with the turn that asked for them, before it spawns the batch's task, and
        the task starts them without a wait of its own.

        Why: a wait in the tool task keeps that task and its frames alive across the group
        commit, and with 1,000 sessions every object alive across a wait brings the cyclic
        collector sooner (issue #28); the driver's own wait costs nothing of the kind. What a
        start record means is unchanged — the call may have started, so after a crash it runs
        again with the same idempotency key, or is answered as interrupted when it is
        at-most-once. A batch whose calls wait on something first (a person's approval, a
        confirmation's verdict, a free slot when it has more calls than ``max_concurrency``)
        writes each start when the call starts, as before; so does a call answered without
        running (journaled, denied, interrupted, refused by its schema, the typed answer)."""
        if confirmations or self._asks_approval or len(uses) > self.adapter.max_concurrency:
            return False
        for use in uses:
            uid = use.id
            # As ``run`` decides, for the calls it runs: not journaled, not denied, not interrupted.
            if uid is None or uid in self.results or (uid in self.starts and use.name in self._at_most_once):
                continue
            decision = self.approvals.get(uid)
            if decision is not None and decision[0] == "deny":
                continue
            if self.adapter.will_call(use):
                self.journal.tool_start_ahead(uid, self.adapter.attempts.get(uid, 1))
                self._ahead.add(uid)
        return bool(self._ahead)

    def _started(self, use: ToolUse, attempt: int) -> Awaitable[None]:
        # Noted before it is durable: if it cannot be made durable, the session ends here.
        if use.id is not None:
            self.starts[use.id] = attempt
            if use.id in self._ahead:  # durable already: the turn's commit carried it
                self._ahead.discard(use.id)
                return _DONE
        return self.journal.tool_start(use, attempt)

    def _finished(self, result: ToolResult) -> None:
        if result.tool_use_id is not None and result.tool_use_id not in self.results:
            # A result that ends the batch goes with the batch's end (its ToolsFinished, flushed
            # before the results reach the host); one that finishes while others run, at once.
            self._running = max(0, self._running - 1)
            self.journal.tool_result(result, now=self._running > 0)
            self.results[result.tool_use_id] = result

    def _record(self, result: ToolResult) -> ToolResult:
        self._finished(result)
        return result

    async def run(
        self, uses: Sequence[ToolUse], confirmations: Sequence[ToolUse], info: SessionInfo
    ) -> tuple[tuple[ToolResult, ...], tuple[ToolResult, ...]] | Paused:
        waiting: list[PendingApproval] = []
        verdicts = await self._verdicts(confirmations, info, waiting) if confirmations else ()
        decided: dict[int, ToolResult] = {}
        runnable: list[tuple[int, ToolUse]] = []
        for i, use in enumerate(uses):
            uid = use.id
            if uid is None:
                runnable.append((i, use))
                continue
            if uid in self.results:
                decided[i] = self.results[uid]  # journaled: never run again
                continue
            decision = self.approvals.get(uid)
            if decision is None and self._asks_approval and await self._needs_approval(use, info):
                waiting.append(PendingApproval(uid, use.name, dict(use.input)))
                continue
            if decision is not None and decision[0] == "deny":
                decided[i] = self._record(
                    ToolResult(uid, DENIED.format(reason=decision[1] or "no reason given"), True)
                )
                continue
            if uid in self.starts and use.name in self._at_most_once:
                decided[i] = self._record(ToolResult(uid, INTERRUPTED.format(name=use.name), True))
                continue
            runnable.append((i, use))
        if runnable:
            self._running = len(runnable)
            try:
                ran = await self.adapter.run_batch([u for _, u in runnable], info)
            finally:
                self._ahead.clear()  # a call cancelled before it started keeps no claim
            if len(ran) == len(uses) and not waiting:  # the common batch: every call ran, in order
                return ran, verdicts
            decided.update({i: r for (i, _), r in zip(runnable, ran, strict=True)})
        if waiting:
            return Paused(tuple(waiting))
        return tuple(decided[i] for i in range(len(uses))), verdicts

    async def _verdicts(
        self, confirmations: Sequence[ToolUse], info: SessionInfo, waiting: list[PendingApproval]
    ) -> tuple[ToolResult, ...]:
        verdicts: list[ToolResult] = []
        asks = callable(getattr(self.handler, "confirm_tool_use", None))
        for use in confirmations:
            uid = use.id
            if uid is not None and uid in self.verdicts:
                verdicts.append(self.verdicts[uid])
                continue
            decision = self.approvals.get(uid) if uid is not None else None
            if decision is not None:
                allowed, reason = decision[0] == "allow", decision[1]
                verdict = ToolResult(
                    uid, "" if allowed else DENIED.format(reason=reason or "no reason given"), not allowed
                )
            elif asks or uid is None:
                (verdict,) = await self.adapter.confirm_batch([use], info)
            else:  # nobody here can decide: a person will (the host waits)
                waiting.append(PendingApproval(uid, use.name, dict(use.input), host_confirmation=True))
                continue
            if uid is not None:
                self.journal.tool_result(verdict, confirm=True)
                self.verdicts[uid] = verdict
            verdicts.append(verdict)
        return tuple(verdicts)

    async def _needs_approval(self, use: ToolUse, info: SessionInfo) -> bool:
        fn = self._requires_approval
        if not callable(fn):
            return False
        args: tuple[Any, ...] = (use.name, dict(use.input), self.context)
        try:
            inspect.signature(fn).bind(*args, info)
            args = (*args, info)
        except (TypeError, ValueError):
            pass
        try:
            value = fn(*args)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # undecidable: a person decides, the call is not run unasked
            log.warning("requires_approval raised %r; %s waits for approval", exc, use.name, exc_info=exc)
            return True
        return bool(value)


def declares_approvals(handler: object) -> bool:
    """Whether ``handler`` may ask for approvals (and so needs a journal to wait in)."""
    caps = Capabilities.of(handler)
    return caps is not None and caps.asks_approval
