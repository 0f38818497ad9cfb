"""The session machine: every loop decision, as ``step(state, event) -> (state, commands)``.

One frozen ``State`` per session, one pure transition function. The shell turns I/O
into events (``rma.session.events``) and executes the commands returned here
(``rma.session.commands``); it decides nothing. Behaviour ids in comments refer to the
catalogue in ``shared/reference/behaviors.md``.

Phases. A session is always in exactly one phase:

=============  ==========================================================================
CONNECTING     streaming, waiting for the first "connected" (kickoff waits for it, S-21)
AWAITING       a turn is in flight: stream events or a poll result will arrive
PUSHING        a push is outstanding (streaming)
TOOLS          the handler is running a batch of tool uses
GUARD          the turn guard is being consulted
BACKOFF        waiting before a reconnect attempt (R-12)
RECONNECTING   consolidating after a drop or on reattach
IDLE           live session between requests
DONE           a sync run has its one result; every later event is ignored
=============  ==========================================================================

Inputs that arrive while the session is busy wait in ``deferred`` and are replayed, in
order, as soon as it is not (S-90, S-91, S-70 Better), so stream events that arrive
while tools run belong to the next turn and a follow-up never interrupts a turn.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from rma._persistent import AppendLog, SeenIds
from rma._unchecked import field_setters, usage_of
from rma._unchecked import new as _new
from rma.errors import (
    GuardFailed,
    Halted,
    MalformedResponse,
    MaxTurnsExceeded,
    OutputInvalid,
    SessionError,
    StreamDropped,
    Timeout,
    UnresolvedRequiresAction,
    Unsupported,
)
from rma.live import ToolCallFinished, TurnFinished
from rma.provider import DEFAULT_PROMPT, Input, Mode
from rma.session.commands import (
    CallGuard,
    Command,
    DeliverUpdate,
    Emit,
    Finish,
    Log,
    PollTurn,
    PushInput,
    Reconnect,
    Reply,
    RunTools,
    ScheduleReconnect,
    deliver_event,
    emit,
)
from rma.session.events import (
    EVENT_TYPES,
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
    UpdatesWanted,
    UserMessage,
)
from rma.session.options import SessionConfig
from rma.session.resilience import SYNC_RECONNECT_ATTEMPTS, gave_up, no_terminal_coming, worth_reconnecting
from rma.vocabulary import (
    JSON,
    TEXT_DELTA_TYPE,
    SessionResult,
    Terminal,
    ToolResult,
    ToolUse,
    TurnResult,
    Usage,
)

REPROMPT_TEMPLATE = (
    "You returned a response without calling {tool}. You MUST call {tool} now to finish — "
    "produce the result via {tool}."
)
"""The terminal-tool re-prompt, verbatim (A.1)."""

NO_TERMINAL_TOOL = "no_terminal_tool"

BACKOFF_BASE_MS = 500
BACKOFF_MAX_EXPONENT = 7
BACKOFF_CAP_MS = 3_600_000


def reconnect_backoff_ms(attempt: int) -> int:
    """Delay before reconnect attempt ``attempt`` (0-based): 500 ms doubling, capped (R-12)."""
    return min(BACKOFF_BASE_MS * (1 << min(attempt, BACKOFF_MAX_EXPONENT)), BACKOFF_CAP_MS)


class Phase(enum.Enum):
    CONNECTING = "connecting"
    AWAITING = "awaiting"
    PUSHING = "pushing"
    TOOLS = "tools"
    GUARD = "guard"
    BACKOFF = "backoff"
    RECONNECTING = "reconnecting"
    IDLE = "idle"
    DONE = "done"


# The enum members the hot paths test, as module globals. On CPython 3.11 reading
# ``Phase.AWAITING`` goes through EnumType.__getattr__'s slot hook (about as costly as a
# function call); a global is a dict hit. Cold paths keep the qualified names.
_AWAITING, _PUSHING, _TOOLS, _DONE = Phase.AWAITING, Phase.PUSHING, Phase.TOOLS, Phase.DONE
_STREAMING, _REQUEST_RESPONSE = Mode.STREAMING, Mode.REQUEST_RESPONSE
_END_TURN, _REQUIRES_ACTION = Terminal.END_TURN, Terminal.REQUIRES_ACTION

_STREAM_EVENTS = (StreamEvent, StreamConnected, StreamClosed, StreamFailed)
# Phases during which stream inputs wait: the session handles one input at a time.
# Tuples, not sets: membership compares by identity, where a set would call Enum.__hash__,
# a Python function, on every stream event.
_STREAM_BUSY = (Phase.PUSHING, Phase.TOOLS, Phase.GUARD, Phase.RECONNECTING)
_SEND_BUSY = (Phase.PUSHING, Phase.TOOLS, Phase.GUARD, Phase.BACKOFF, Phase.RECONNECTING, Phase.CONNECTING)
# Exactly these classes (not subclasses, which take the isinstance path) never wait.
_NEVER_DEFERRED = frozenset(set(EVENT_TYPES) - {*_STREAM_EVENTS, UserMessage, SendEventRequested})


@attrs.frozen(slots=True)
class Accumulated:
    """Request-scoped accumulators (S-30, S-32), each append O(1) amortized (S-33 Better)."""

    events: AppendLog[JSON] = attrs.field(factory=AppendLog)
    custom_tool_uses: AppendLog[ToolUse] = attrs.field(factory=AppendLog)
    server_tool_uses: AppendLog[JSON] = attrs.field(factory=AppendLog)
    usage: Usage = attrs.field(factory=Usage)
    """Token totals; the raw usage entries live in ``usage_raw``."""
    usage_raw: AppendLog[JSON] = attrs.field(factory=AppendLog)
    last_text: str = ""
    """The text of the request's last completed turn (a partial result's ``text``)."""

    def add_turn(self, events: Sequence[JSON], tr: TurnResult) -> Accumulated:
        usage, raw = self.usage, self.usage_raw
        u = tr.usage
        if u is not None:
            usage = _usage_sum(usage, u)
            raw = raw.extend(u.raw)
        uses, server = tr.custom_tool_uses, tr.server_tool_uses
        # Built field by field (no checks to skip: Accumulated has none), once per turn.
        acc: Accumulated = _new(Accumulated)
        _acc_events(acc, self.events.extend(events))
        _acc_uses(acc, self.custom_tool_uses.extend(uses) if uses else self.custom_tool_uses)
        _acc_server(acc, self.server_tool_uses.extend(server) if server else self.server_tool_uses)
        _acc_usage(acc, usage)
        _acc_raw(acc, raw)
        _acc_text(acc, tr.text)
        return acc

    def add_new_tool_uses(self, uses: Sequence[ToolUse]) -> Accumulated:
        """Append only uses whose id is not accumulated yet (S-54: no duplicate ids)."""
        known = {u.id for u in self.custom_tool_uses}
        fresh = []
        for u in uses:
            if u.id not in known:
                known.add(u.id)
                fresh.append(u)
        if not fresh:
            return self
        return attrs.evolve(self, custom_tool_uses=self.custom_tool_uses.extend(fresh))

    def total_usage(self) -> Usage:
        return attrs.evolve(self.usage, raw=self.usage_raw.to_tuple())


_acc_events, _acc_uses, _acc_server, _acc_usage, _acc_raw, _acc_text = field_setters(
    Accumulated, "events", "custom_tool_uses", "server_tool_uses", "usage", "usage_raw", "last_text"
)


def _usage_sum(a: Usage, b: Usage) -> Usage:
    """The token totals of ``a`` and ``b`` (raw entries left out, as ``Accumulated`` keeps them).

    Sums of two valid Usage values are valid, so Usage's checks are not run again: this runs
    once per turn. ``tests/session/test_machine_fast_paths.py`` pins it against the checked
    constructor.
    """
    return usage_of(
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.cache_read_input_tokens + b.cache_read_input_tokens,
        a.cache_creation_input_tokens + b.cache_creation_input_tokens,
        (),
    )


@attrs.frozen(slots=False)
class State:
    config: SessionConfig
    phase: Phase = Phase.CONNECTING
    session_id: str | None = None
    resumed: bool = False
    resuming: bool = False
    """The initial reattach has not completed yet (R-10)."""
    request_open: bool = False
    """A request (kickoff, message, resume) is in progress and owes exactly one result."""
    kicked_off: bool = False
    gen: int = 0
    seen: SeenIds = attrs.field(factory=SeenIds)
    turn_events: AppendLog[JSON] = attrs.field(factory=AppendLog)
    acc: Accumulated = attrs.field(factory=Accumulated)
    turns: int = 0
    reprompts_left: int = 0
    terminal_answered: bool = False
    """This request's output tool has been called with an answer that validated."""
    reconnect_attempts: int = 0
    losses_in_a_row: int = 0
    """Stream losses (and failed reconnects) since the request last made progress (R-14 Better)."""
    progress_mark: tuple[int, int] = (0, 0)
    """(turns, events of the open turn) when the stream was last lost: a later loss that finds
    the request further along resets ``losses_in_a_row``."""
    last_loss: SessionError | None = None
    """Why the stream was last lost: what a sync run that gives up reports."""
    live_forwarded: int = 0
    updates: bool = False
    """Whether live updates (``rma.live``) are computed: ``config.deliver_updates`` or a
    consumer that subscribed (``UpdatesWanted``)."""
    pending_message: str | None = None
    pending_turn: TurnResult | None = None
    pending_uses: tuple[ToolUse, ...] = ()
    pending_confirmations: tuple[ToolUse, ...] = ()
    batch: int = 0
    push_purpose: str | None = None
    push_request: int | None = None
    phase_before_push: Phase | None = None
    deferred: tuple[Event, ...] = ()
    emits: dict[tuple[JSON, str | None], Emit] = attrs.field(factory=dict, init=False, eq=False, repr=False)
    """A memo of ``rma.stream.event`` commands, shared by every version of the state (see
    ``_stream_telemetry``); not part of the state's value."""


def initial_state(config: SessionConfig) -> State:
    s = State(
        config=config,
        reprompts_left=config.max_reprompts,
        seen=SeenIds(window=config.seen_window),
        updates=config.deliver_updates,
    )
    # __init__ leaves a key-sharing ("split") instance dict, and every copy of it stays split:
    # CPython 3.11 cannot specialize attribute reads on those, which made every ``s.x`` on
    # the hot path about five times slower. An ordinary dict, once; its copies stay ordinary.
    _set_dict(s, {**s.__dict__})
    return s


Step = tuple[State, tuple[Command, ...]]


_STATE_FIELDS = frozenset(f.name for f in attrs.fields(State))


def _evolve(s: State, **changes: Any) -> State:
    """``attrs.evolve`` for State, on the hot path of every event.

    State is a frozen dict-backed class with no validators, so a copy-with-changes is a
    C-level dict copy handed to a bare instance; ``attrs.evolve`` re-runs ``__init__`` field
    by field instead.
    """
    fields = s.__dict__.copy()
    size = len(fields)
    fields.update(changes)
    if len(fields) != size:  # a misspelt field adds a key
        raise TypeError(f"State has no field(s) {sorted(changes.keys() - _STATE_FIELDS)}")
    new = _new(State)
    _set_dict(new, fields)
    return new


_set_dict = State.__dict__["__dict__"].__set__
# Copying the instance dict and attaching the copy costs half of filling a fresh instance's
# own dict (``new.__dict__.update(...)``), which materializes an empty dict first.


# ── the one public entry point ─────────────────────────────────────────────────────


def step(s: State, ev: Event) -> Step:
    """Apply one event. Total: any event in any phase yields a state (unknowns are ignored)."""
    if ev.__class__ is StreamEvent and not s.deferred:
        # The hot path: a stream event of the current generation, nothing waiting, a phase
        # that takes it — what the general path below would dispatch, minus its lane checks.
        phase = s.phase
        if (
            (phase is _AWAITING or (phase is not _DONE and phase not in _STREAM_BUSY))
            and ev.gen == s.gen
            and s.config.codec.mode is _STREAMING
        ):
            done = _on_stream_event(s, ev.event)
            after = done[0]
            if after.deferred and after.phase is not _DONE:
                return _drain(after, list(done[1]))
            return done
    if s.phase is _DONE:
        return s, ()
    if _must_defer(s, ev) or (s.deferred and _lane_waits(s, _lane(ev))):
        return _evolve(s, deferred=(*s.deferred, ev)), ()
    s, cmds = _dispatch(s, ev)
    if s.deferred and s.phase is not _DONE:
        return _drain(s, list(cmds))
    return s, cmds


def _lane(ev: Event) -> int:
    """Inputs that must keep their order among themselves: the stream, follow-ups, raw events.

    Lanes are independent: a follow-up waiting for the request to end must not hold back
    the stream events that will end it.
    """
    lane = _LANES.get(ev.__class__)
    if lane is not None:
        return lane
    if isinstance(ev, _STREAM_EVENTS):
        return 0
    if isinstance(ev, UserMessage):
        return 1
    if isinstance(ev, SendEventRequested):
        return 2
    return 3


_LANES: dict[type, int] = {
    StreamEvent: 0,
    StreamConnected: 0,
    StreamClosed: 0,
    StreamFailed: 0,
    UserMessage: 1,
    SendEventRequested: 2,
}


def _lane_waits(s: State, lane: int) -> bool:
    return bool(s.deferred) and any(_lane(d) == lane for d in s.deferred)


def _drain(s: State, out: list[Command]) -> Step:
    """Replay waiting inputs, lane by lane in order, until none can go (one may unblock another)."""
    progress = True
    while progress and s.deferred and s.phase is not Phase.DONE:
        progress = False
        queue, s = s.deferred, _evolve(s, deferred=())
        blocked: set[int] = set()
        kept: list[Event] = []
        for ev in queue:
            lane = _lane(ev)
            if s.phase is Phase.DONE or lane in blocked or _must_defer(s, ev):
                blocked.add(lane)
                kept.append(ev)
                continue
            s, cmds = _dispatch(s, ev)
            out.extend(cmds)
            progress = True
        if s.phase is Phase.DONE:
            return _evolve(s, deferred=()), tuple(out)
        s = _evolve(s, deferred=(*kept, *s.deferred))
    return s, tuple(out)


def _must_defer(s: State, ev: Event) -> bool:
    if ev.__class__ in _NEVER_DEFERRED:
        return False
    if isinstance(ev, _STREAM_EVENTS):
        return ev.gen == s.gen and s.phase in _STREAM_BUSY
    if isinstance(ev, UserMessage):
        return s.phase is not Phase.IDLE
    if isinstance(ev, SendEventRequested):
        return s.config.codec.mode is _STREAMING and s.phase in _SEND_BUSY
    return False


def _dispatch(s: State, ev: Event) -> Step:
    # The event classes are disjoint, so the order of the cases is free: the frequent first.
    match ev:
        case StreamEvent(gen=gen, event=raw):
            if gen != s.gen or s.config.codec.mode is not _STREAMING:
                return s, ()
            return _on_stream_event(s, raw)
        case ToolsFinished(batch=batch, results=results, verdicts=verdicts):
            if s.phase is not _TOOLS or batch != s.batch:
                return s, ()
            return _answer_tools(s, results, verdicts)
        case PushFinished(outcome=outcome):
            return _on_push_finished(s, outcome) if s.phase is _PUSHING else (s, ())
        case LiveEvent(event=raw):
            return _on_live_event(s, raw)
        case TurnPolled(events=events):
            if s.phase is not _AWAITING or s.config.codec.mode is not _REQUEST_RESPONSE:
                return s, ()
            return _on_polled(s, events)
        case TurnFailed(error=error):
            return _fail(s, error) if s.phase is _AWAITING else (s, ())
        case GuardVerdict():
            return _on_guard(s, ev) if s.phase is Phase.GUARD else (s, ())
        case StreamConnected(gen=gen):
            if gen != s.gen:
                return s, ()
            s, cmds = _on_connected(s)
            return s, (*cmds, _stream_lifecycle(s, "rma.stream.connected"))
        case StreamClosed(gen=gen):
            if gen != s.gen:
                return s, ()
            # S-25 Better: a clean close without a terminal is a drop, not "nothing".
            done = _stream_lifecycle(s, "rma.stream.done")
            s, cmds = _on_stream_lost(s, StreamDropped(detail="server closed the stream", clean_close=True))
            return s, (done, *cmds)
        case StreamFailed(gen=gen, error=error):
            if gen != s.gen:
                return s, ()
            failed = _stream_lifecycle(s, "rma.stream.error", reason=error.kind)
            s, cmds = _on_stream_lost(s, error)
            return s, (failed, *cmds)
        case ReconnectTimerFired():
            if s.phase is not Phase.BACKOFF:
                return s, ()
            return _evolve(s, phase=Phase.RECONNECTING), (Reconnect(s.gen, s.seen.ids()),)
        case ReconnectFinished(outcome=outcome):
            return _on_reconnected(s, outcome) if s.phase is Phase.RECONNECTING else (s, ())
        case UserMessage(text=text):
            return _deliver_message(s, text)
        case SendEventRequested(request=request, event=raw):
            return _on_send_event(s, request, raw)
        case Opened():
            return _on_opened(s, ev)
        case UpdatesWanted(wanted=wanted):
            return _evolve(s, updates=wanted or s.config.deliver_updates), ()
        case DeadlineReached(timeout_s=timeout_s):
            # M-7 Better: a timed-out run ends like every other error, telemetry included.
            return _fail(_evolve(s, deferred=()), Timeout(timeout_s=timeout_s))
    return s, (Log("debug", "ignored event", {"event": type(ev).__name__}),)


# ── opening and kickoff ─────────────────────────────────────────────────────────────


def _on_opened(s: State, ev: Opened) -> Step:
    cfg = s.config
    s = _evolve(s, session_id=ev.session_id, resumed=ev.resumed)
    if ev.resumed:
        # S-19 / R-1: no kickoff; consolidate first. Only a resume arms the prompt.
        s = _evolve(
            s,
            kicked_off=True,
            resuming=True,
            request_open=True,
            pending_message=cfg.prompt,
            phase=Phase.RECONNECTING,
            gen=s.gen + 1,
        )
        return s, (Reconnect(s.gen, s.seen.ids()),)
    if cfg.codec.mode is Mode.STREAMING:
        return _evolve(s, phase=Phase.CONNECTING), ()
    return _kickoff_or_idle(s)


def _wants_kickoff(s: State) -> bool:
    cfg = s.config
    return not cfg.live or cfg.prompt is not None or cfg.outcome is not None


def _kickoff_or_idle(s: State) -> Step:
    s = _evolve(s, kicked_off=True)
    if not _wants_kickoff(s):
        return _evolve(s, phase=Phase.IDLE), ()
    cfg = s.config
    s = _evolve(s, request_open=True)
    if cfg.outcome is not None:
        content: dict[str, JSON] = {"input": cfg.outcome.description}
    else:
        content = {"input": cfg.prompt if cfg.prompt is not None else DEFAULT_PROMPT}
    return _drive(s, cfg.codec.kickoff_input(cfg.prompt, cfg.outcome), "kickoff", content)


def _on_connected(s: State) -> Step:
    if s.kicked_off:  # S-21: later "connected" signals never kick off again
        return s, ()
    return _kickoff_or_idle(s)


# ── driving a turn ───────────────────────────────────────────────────────────────────


def _drive(
    s: State, input: Input, purpose: str, content: dict[str, JSON] | None = None, **changes: Any
) -> Step:
    """Drive turn ``s.turns + 1``: poll or push its input, and announce it (``rma.turn.start``).

    The announcement follows the command, so a command list still starts with what moves the
    session; the shell only spawns the poll/push task, so the event still fires before any I/O.
    ``changes`` are the caller's own state changes, folded into the one copy made here.
    """
    meta = _meta_copy(s.config.metadata)
    meta["turn"] = s.turns + 1
    meta["purpose"] = purpose
    meta["session_id"] = s.session_id
    start = emit("rma.turn.start", {}, meta, content or {})
    if s.config.codec.mode is _REQUEST_RESPONSE:
        s = _evolve(s, phase=_AWAITING, live_forwarded=0, **changes)
        return s, (PollTurn(input, purpose), start)  # type: ignore[arg-type]
    s = _evolve(s, phase=_PUSHING, push_purpose=purpose, push_request=None, phase_before_push=None, **changes)
    return s, (PushInput(input, purpose), start)  # type: ignore[arg-type]


def _results_content(results: Sequence[ToolResult]) -> list[JSON]:
    return [{"id": r.tool_use_id, "text": r.text, "is_error": r.is_error} for r in results]


def _stop_kind(stop_reason: JSON) -> str | None:
    """A stop reason as one string: itself, or a provider map's ``type`` (``{"type": "end_turn"}``)."""
    if isinstance(stop_reason, str):
        return stop_reason
    if stop_reason.__class__ is dict or isinstance(stop_reason, Mapping):
        kind = stop_reason.get("type")
        return kind if isinstance(kind, str) else None
    return None


def _turn_stop_telemetry(s: State, tr: TurnResult) -> Emit:
    """``rma.turn.stop``: the turn that just completed, with its own usage (not the running sum)."""
    meta = _meta_copy(s.config.metadata)
    meta["turn"] = s.turns
    meta["terminal"] = tr.terminal.value
    meta["stop_reason"] = _stop_kind(tr.stop_reason)
    meta["session_id"] = s.session_id
    u = tr.usage
    measurements = (
        {}
        if u is None
        else {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
        }
    )
    calls = [{"id": c.id, "name": c.name, "arguments": dict(c.input)} for c in tr.custom_tool_uses]
    return emit("rma.turn.stop", measurements, meta, {"output": tr.text, "tool_calls": calls})


def _on_push_finished(s: State, outcome: object) -> Step:
    purpose, request, before = s.push_purpose, s.push_request, s.phase_before_push
    if purpose == "send_event":
        assert request is not None and before is not None
        reply = Reply(request, outcome)  # type: ignore[arg-type]
        return _evolve(s, **_PUSH_SETTLED, phase=before), (reply,)
    if outcome.__class__ is not Success and isinstance(outcome, Failure):
        # S-23 Better: a refused push ends the request with its error, live or not.
        return _fail(_evolve(s, **_PUSH_SETTLED), outcome.failure())
    return _evolve(s, **_PUSH_SETTLED, phase=_AWAITING), ()


_PUSH_SETTLED: dict[str, Any] = {"push_purpose": None, "push_request": None, "phase_before_push": None}


def _on_send_event(s: State, request: int, raw: JSON) -> Step:
    if s.config.codec.mode is not Mode.STREAMING:
        return s, (Reply(request, Failure(Unsupported(operation="send_event"))),)
    # S-67: pushed verbatim, no reset; S-92: mid-turn it goes out at once.
    s = _evolve(
        s,
        phase=Phase.PUSHING,
        push_purpose="send_event",
        push_request=request,
        phase_before_push=s.phase,
    )
    return s, (PushInput([raw], "send_event"),)


def _deliver_message(s: State, text: str) -> Step:
    """A follow-up (or a resume's armed prompt) starts a fresh request (S-69, R-6)."""
    s = _evolve(
        s,
        acc=Accumulated(),
        turns=0,
        reprompts_left=s.config.max_reprompts,
        terminal_answered=False,
        request_open=True,
        pending_message=None,
    )
    return _drive(s, s.config.codec.user_input(text), "message", {"input": text})


# ── receiving events ─────────────────────────────────────────────────────────────────


def _forward(s: State, raw: JSON, out: list[Command]) -> None:
    cfg = s.config
    if cfg.deliver_events:
        out.append(deliver_event(raw))
        if cfg.text_deltas:
            chunk = cfg.codec.text_delta(raw)
            if isinstance(chunk, str) and chunk:
                out.append(deliver_event({"type": TEXT_DELTA_TYPE, "text": chunk}))  # E-9
    if s.updates:
        _live_updates(s, raw, out)


def _live_updates(s: State, raw: JSON, out: list[Command]) -> None:
    """The codec's ``rma.live`` updates of ``raw`` (computed only while someone consumes them)."""
    try:
        updates = s.config.codec.live_updates(raw)
    except Exception as exc:  # a codec must be total; a bug here costs the updates, not the session
        out.append(Log("warning", "live_updates failed", {"error": f"{type(exc).__name__}: {exc}"[:300]}))
        return
    for update in updates:
        out.append(DeliverUpdate(update))


def _event_type(raw: JSON) -> JSON:
    if isinstance(raw, dict):
        t = raw.get("type")
        if isinstance(t, str):
            return t
        return next(iter(raw), None)  # a Converse envelope is a single-key map (E-4)
    return None


def _stream_telemetry(s: State, raw: JSON) -> Emit:
    """``rma.stream.event``, one command per (event type, session id), reused.

    The command is a pure function of those two and the config, and building it afresh was a
    fifth of a streamed event's cost; the memo is bounded (hosts may invent types). Sharing
    the command shares its maps: the shell copies them for each emission.
    """
    kind = _event_type(raw)
    key = (kind, s.session_id)
    memo = s.emits
    command = memo.get(key)
    if command is None:
        meta = _meta_copy(s.config.metadata)
        meta["type"] = kind
        meta["session_id"] = s.session_id
        command = emit("rma.stream.event", {}, meta, {})
        if len(memo) < _EMITS_MEMO_SIZE:
            memo[key] = command
    return command


_EMITS_MEMO_SIZE = 256


def _meta_copy(metadata: Mapping[str, JSON]) -> dict[str, JSON]:
    """A fresh dict of the config's metadata (``{**metadata}``, in C for the usual read-only proxy)."""
    if isinstance(metadata, MappingProxyType):
        return metadata.copy()
    return dict(metadata)


def _on_stream_event(s: State, raw: JSON) -> Step:
    # _forward, _event_type and _stream_telemetry inlined for the usual dict event: this runs
    # once per streamed event, where each call and repeated lookup shows (bench/core_step.py).
    if raw.__class__ is not dict:
        return _on_stream_value(s, raw)
    seen = s.seen
    event_id = raw.get("id")
    if event_id.__class__ is str:
        added = seen.add_new(event_id)
        if added is None:  # E-11: already processed (re-delivered after a reconnect)
            return s, ()
        seen = added
    memo = s.emits
    key = (kind := raw.get("type"), s.session_id)
    telemetry = memo.get(key) if kind.__class__ is str else None
    if telemetry is None:  # a new type, or a Converse envelope keyed by its one key (E-4)
        telemetry = _stream_telemetry(s, raw)
    cfg = s.config
    codec = cfg.codec
    out: tuple[Command, ...]
    if s.updates:
        more_out: list[Command] = []
        _forward(s, raw, more_out)
        more_out.append(telemetry)
        out = tuple(more_out)
    elif not cfg.deliver_events:
        out = (telemetry,)
    else:
        delivery = deliver_event(raw)
        chunk = codec.text_delta(raw) if cfg.text_deltas else None
        if chunk.__class__ is str and chunk:
            delta = deliver_event({"type": TEXT_DELTA_TYPE, "text": chunk})  # E-9
            out = (delivery, delta, telemetry)
        else:
            out = (delivery, telemetry)
    buffer = s.turn_events.append(raw)
    # _evolve without its field-name check: the two names are spelled out here.
    fields = s.__dict__.copy()
    fields["seen"] = seen
    fields["turn_events"] = buffer
    new = _new(State)
    _set_dict(new, fields)
    if codec.turn_boundary(raw):
        new, more = _handle_turn(new, buffer.to_tuple())
        return new, (*out, *more)
    return new, out


def _on_stream_value(s: State, raw: JSON) -> Step:
    """A stream event that is not a JSON object: forwarded and kept, never deduplicated."""
    out: list[Command] = []
    _forward(s, raw, out)
    out.append(_stream_telemetry(s, raw))
    buffer = s.turn_events.append(raw)
    new = _evolve(s, turn_events=buffer)
    if s.config.codec.turn_boundary(raw):
        new, more = _handle_turn(new, buffer.to_tuple())
        out.extend(more)
    return new, tuple(out)


def _on_live_event(s: State, raw: JSON) -> Step:
    if s.phase is not Phase.AWAITING:
        return s, ()
    out: list[Command] = []
    _forward(s, raw, out)
    out.append(_stream_telemetry(s, raw))
    return _evolve(s, live_forwarded=s.live_forwarded + 1), tuple(out)


def _on_polled(s: State, events: tuple[JSON, ...]) -> Step:
    out: list[Command] = []
    if s.live_forwarded == 0:  # E-5: batch delivery only when nothing went out live
        for raw in events:
            _forward(s, raw, out)
    s, more = _handle_turn(_evolve(s, live_forwarded=0), events)
    out.extend(more)
    return s, tuple(out)


# ── one completed turn (S-29, S-31) ──────────────────────────────────────────────────


def _tool_uses_telemetry(s: State, uses: Sequence[ToolUse], out: list[Command]) -> None:
    ids = [u.id for u in uses]
    meta = _meta_copy(s.config.metadata)
    meta["turn"] = s.turns
    meta["tool_use_ids"] = ids
    meta["session_id"] = s.session_id
    out.append(emit("rma.session.tool_uses", {"tool_use_count": len(ids)}, meta, {}))
    if len(ids) > 1 and len(set(ids)) != len(ids):  # T-12 sentinel: O(n), nothing is deduplicated
        dups = sorted({str(i) for i, n in Counter(ids).items() if n > 1})
        out.append(
            Log(
                "warning",
                f"duplicate tool_use id(s) {dups} at turn {s.turns} — "
                "providers reject resumes carrying duplicates",
                {"turn": s.turns, "duplicates": dups},
            )
        )


def _handle_turn(s: State, events: tuple[JSON, ...]) -> Step:
    try:
        tr = s.config.codec.normalize(events)
    except Exception as exc:  # a codec must be total; if it is not, fail typed, never escape
        return _fail(
            s, MalformedResponse(detail=f"could not normalize the turn: {type(exc).__name__}: {exc}")
        )
    s = _evolve(s, acc=s.acc.add_turn(events, tr), turns=s.turns + 1, turn_events=AppendLog())
    out: list[Command] = [_turn_stop_telemetry(s, tr)]
    if s.updates:
        out.append(DeliverUpdate(TurnFinished(s.turns, tr.terminal, tr.stop_reason, tr.usage)))
    _tool_uses_telemetry(s, tr.custom_tool_uses, out)
    if s.config.has_turn_guard:
        # The raw per-turn entries too, as SessionResult.usage has them: a spending guard may
        # need what the provider reported beyond the four counts (a cost, a cache breakdown).
        payload = {"usage": s.acc.total_usage(), "turns": s.turns, "session_id": s.session_id}
        s = _evolve(s, phase=Phase.GUARD, pending_turn=tr)
        out.append(CallGuard(payload))
        return s, tuple(out)
    s, more = _continue_turn(s, tr)
    out.extend(more)
    return s, tuple(out)


def _on_guard(s: State, verdict: GuardVerdict) -> Step:
    tr = s.pending_turn
    assert tr is not None
    s = _evolve(s, pending_turn=None)
    if verdict.verdict == "continue":
        return _continue_turn(s, tr)
    if verdict.verdict == "halt":
        result = _terminated(s, tr, "halted")
        return _fail(s, Halted(reason=verdict.reason, result=result))
    result = _terminated(s, tr, "guard_failed")
    return _fail(s, GuardFailed(error_type=verdict.error_type, detail=verdict.detail, result=result))


def _exceeds_max_turns(s: State) -> bool:
    """S-35 Better: refuse to drive turn max_turns + 1 rather than bill it and then fail."""
    return s.turns >= s.config.max_turns


def _max_turns_error(s: State, tr: TurnResult) -> Step:
    result = _terminated(s, tr, "max_turns_exceeded")
    return _fail(s, MaxTurnsExceeded(max_turns=s.config.max_turns, result=result))


def _continue_turn(s: State, tr: TurnResult) -> Step:
    cfg = s.config
    if tr.terminal is _REQUIRES_ACTION:
        return _requires_action(s, tr)
    if tr.terminal is _END_TURN and cfg.terminal_tool is not None and not _called(s, cfg.terminal_tool):
        if s.reprompts_left > 0:  # S-44
            if _exceeds_max_turns(s):
                return _max_turns_error(s, tr)
            s = _evolve(s, reprompts_left=s.reprompts_left - 1)
            text = REPROMPT_TEMPLATE.format(tool=cfg.terminal_tool)
            return _drive(s, cfg.codec.user_input(text), "reprompt", {"input": text})
        if cfg.output_tool:  # a typed answer was asked for: ending without one is a failure
            detail = f"the model ended without a valid {cfg.terminal_tool} call"
            return _fail(s, OutputInvalid(tool=cfg.terminal_tool, detail=detail))
        return _finish(s, tr, stop_reason=NO_TERMINAL_TOOL, reason=NO_TERMINAL_TOOL)  # S-45
    return _finish(s, tr)


def _called(s: State, tool: str) -> bool:
    if s.config.output_tool:  # a typed answer: only one that validated counts
        return s.terminal_answered
    # A call whose input was rejected did not call the tool: it never ran.
    return any(u.name == tool and u.input_error is None for u in s.acc.custom_tool_uses)


def _requires_action(s: State, tr: TurnResult) -> Step:
    out: list[Command] = []
    codec = s.config.codec
    uses = tr.custom_tool_uses
    try:
        # Host-run calls waiting for a confirmation go to the handler too, never a hang (§8.4).
        confirms = codec.confirmation_uses(tr.events)
        recovered: tuple[ToolUse, ...] = ()
        if not uses and not confirms:
            # S-52: the batch resolved to nothing; recover from the request's own history.
            history = s.acc.events.to_tuple()
            recovered = codec.pending_tool_uses(history)
            confirms = codec.confirmation_uses(history)
    except Exception as exc:  # a codec must be total; if it is not, fail typed, never escape
        error = MalformedResponse(detail=f"could not read the pending tool uses: {type(exc).__name__}: {exc}")
        return _fail(s, error)
    if not uses and recovered:
        _tool_uses_telemetry(s, recovered, out)
        s = _evolve(s, acc=s.acc.add_new_tool_uses(recovered))
        uses = recovered
    if not uses and not confirms:
        if codec.empty_resume_safe:
            # S-56 Better: the provider already answered everything; a bare resume is valid.
            if _exceeds_max_turns(s):
                return _max_turns_error(s, tr)
            s, more = _drive(s, codec.resume_input((), ()), "resume")
            return s, (*out, *more)
        else:
            # S-53: never send an empty resume.
            result = _terminated(s, tr, "unresolved_requires_action")
            s, more = _fail(s, UnresolvedRequiresAction(stop_reason=tr.stop_reason, result=result))
            return s, (*out, *more)
    if _exceeds_max_turns(s):
        # The resume would be turn max_turns + 1: do not run tools whose results go nowhere.
        s, more = _max_turns_error(s, tr)
        return s, (*out, *more)
    return _run_tools(s, uses, out, confirms)


def _run_tools(
    s: State, uses: Sequence[ToolUse], out: list[Command], confirms: Sequence[ToolUse] = ()
) -> Step:
    batch = s.batch + 1
    uses, confirms = tuple(uses), tuple(confirms)
    s = _evolve(s, phase=_TOOLS, batch=batch, pending_uses=uses, pending_confirmations=confirms)
    runnable = uses
    for use in uses:
        if use.input_error is not None:
            # Input the model did not send as an object never reaches a tool (issue #12): the
            # handler runs the others; this one is answered with its input_error.
            runnable = tuple(u for u in uses if u.input_error is None)
            rejected = [{"tool": u.name, "tool_use_id": u.id} for u in uses if u.input_error is not None]
            out.append(Log("warning", "tool input rejected: not a usable object", {"rejected": rejected}))
            break
    if not runnable and not confirms:
        s, more = _answer_tools(s, (), ())  # nothing for the handler: answer at once
        return s, (*out, *more)
    out.append(RunTools(batch, runnable, confirms))
    return s, tuple(out)


def _answer_tools(s: State, results: Sequence[ToolResult], verdicts: Sequence[ToolResult]) -> Step:
    """Resume with the batch's results, the rejected inputs' answers in their place."""
    uses, confirms = s.pending_uses, s.pending_confirmations
    results = _with_rejections(uses, results)
    if s.config.output_tool and s.config.terminal_tool is not None:
        checked = _check_output_answers(s, uses, results)
        if isinstance(checked, tuple):
            return checked
        s = checked
    answer = s.config.codec.answer_input(uses, results, confirms, verdicts)
    content = {"tool_results": _results_content(results)}
    if not s.updates:
        return _drive(s, answer, "resume", content, pending_uses=(), pending_confirmations=())
    finished: list[Command] = []
    by_id = {r.tool_use_id: r for r in results}
    for use in uses:
        result = by_id.get(use.id)
        if result is not None:
            finished.append(DeliverUpdate(ToolCallFinished(use.id, use.name, result.is_error)))
    s, more = _drive(s, answer, "resume", content, pending_uses=(), pending_confirmations=())
    return s, (*finished, *more)


def _check_output_answers(s: State, uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> State | Step:
    """Typed output (``output_type``): an answer that validated satisfies the terminal tool; one
    that did not goes back to the model as its error result and uses a re-prompt — past
    ``max_reprompts`` the request fails with ``OutputInvalid`` (its partial result kept)."""
    tool = s.config.terminal_tool
    by_id = {r.tool_use_id: r for r in results}
    for use in uses:
        if use.name != tool:
            continue
        result = by_id.get(use.id)
        if result is None:
            continue
        if not result.is_error:
            s = _evolve(s, terminal_answered=True)
        elif not s.terminal_answered:
            if s.reprompts_left <= 0:
                return _fail(s, OutputInvalid(tool=str(tool), detail=result.text[:4000]))
            s = _evolve(s, reprompts_left=s.reprompts_left - 1)
    return s


def _with_rejections(uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> Sequence[ToolResult]:
    """``results`` (of the uses that ran, in order) with an ``is_error`` result for each rejected
    use at its place, so every use has its answer in tool-use order (T-1)."""
    for use in uses:
        if use.input_error is not None:
            break
    else:
        return results  # the usual batch: every use ran
    ran = iter(results)
    merged: list[ToolResult] = []
    for use in uses:
        if use.input_error is not None:
            merged.append(ToolResult(use.id, use.input_error, True))
        else:
            result = next(ran, None)
            if result is not None:
                merged.append(result)
    return tuple(merged)


# ── endings ──────────────────────────────────────────────────────────────────────────


def _result(
    s: State, tr: TurnResult, terminal: Terminal, stop_reason: JSON, reason: str | None
) -> SessionResult:
    acc = s.acc
    return SessionResult(
        terminal=terminal,
        stop_reason=stop_reason,
        session_id=s.session_id,
        text=tr.text,
        custom_tool_uses=acc.custom_tool_uses.to_tuple(),
        server_tool_uses=acc.server_tool_uses.to_tuple(),
        usage=acc.total_usage(),
        turns=s.turns,
        events=acc.events.to_tuple(),
        transcript=None,
        reason=reason,
        resumed=s.resumed,
    )


def _terminated(s: State, tr: TurnResult, reason: str) -> SessionResult:
    return _result(s, tr, Terminal.TERMINATED, tr.stop_reason, reason)


def _with_partial(s: State, error: SessionError) -> SessionError:
    """``error`` carrying what the request's completed turns did, ``reason`` its kind."""
    acc = s.acc
    partial = SessionResult(
        terminal=Terminal.TERMINATED,
        stop_reason=None,
        session_id=s.session_id,
        text=acc.last_text,
        custom_tool_uses=acc.custom_tool_uses.to_tuple(),
        server_tool_uses=acc.server_tool_uses.to_tuple(),
        usage=acc.total_usage(),
        turns=s.turns,
        events=acc.events.to_tuple(),
        transcript=None,
        reason=error.kind,
        resumed=s.resumed,
    )
    try:
        return attrs.evolve(error, result=partial)
    except Exception:  # a provider's own error class that cannot take one: the error as it came
        return error


def with_transcript(
    outcome: Result[SessionResult, SessionError], transcript: tuple[JSON, ...] | None
) -> Result[SessionResult, SessionError]:
    """``outcome`` with the provider's ``transcript`` on its result — a success's, or the partial
    result a failure carries — unchanged when there is no result or no transcript (Local keeps
    one; the managed hosts keep theirs server-side)."""
    if transcript is None:
        return outcome
    if isinstance(outcome, Success):
        return Success(attrs.evolve(outcome.unwrap(), transcript=transcript))
    error = outcome.failure()
    if error.result is None:
        return outcome
    return Failure(attrs.evolve(error, result=attrs.evolve(error.result, transcript=transcript)))


def carries_result(outcome: Result[SessionResult, SessionError]) -> bool:
    """Whether ``outcome`` has a result a transcript belongs to (see ``with_transcript``)."""
    return isinstance(outcome, Success) or outcome.failure().result is not None


def _after_request(s: State) -> State:
    if s.config.live:
        return _evolve(s, phase=Phase.IDLE, request_open=False, resuming=False)
    return _evolve(s, phase=_DONE, request_open=False, resuming=False, deferred=())


def _finish(s: State, tr: TurnResult, stop_reason: JSON = None, reason: str | None = None) -> Step:
    """S-60: telemetry, result, reset the reconnect counter (R-13), report."""
    final_reason = tr.stop_reason if stop_reason is None else stop_reason
    result = _result(s, tr, tr.terminal, final_reason, reason)
    meta = {**s.config.metadata, "terminal": tr.terminal.value, "session_id": s.session_id}
    emit = Emit("rma.session.terminal", {}, meta, {"output": result.text})
    s = _after_request(_evolve(s, reconnect_attempts=0))
    return s, (emit, Finish(Success(result), final=not s.config.live))


def _fail(s: State, error: SessionError) -> Step:
    """End the request with an error; live sessions report it and stay usable (S-66 Better).

    Progress is never thrown away: an error ending a request after at least one completed
    turn carries those turns' terminated result (issue #12), unless it brought one already.
    """
    if s.turns and error.result is None:
        error = _with_partial(s, error)
    meta = {**s.config.metadata, "terminal": "error", "error": error.kind, "session_id": s.session_id}
    emit = Emit("rma.session.terminal", {}, meta)  # M-7 Better: error endings are visible
    live = s.config.live
    s = _after_request(s)
    return s, (emit, Finish(Failure(error), final=not live))


# ── drops, reconnects and resume (R-) ────────────────────────────────────────────────


def _stream_lifecycle(s: State, name: str, **fields: JSON) -> Emit:
    """``rma.stream.connected`` / ``.done`` / ``.error`` (M-4, C-48): the caller's metadata with
    the library's keys over it (M-8); ``gen`` counts the stream's reconnects."""
    meta = _meta_copy(s.config.metadata)
    meta.update(fields)
    meta["session_id"] = s.session_id
    meta["gen"] = s.gen
    return emit(name, {}, meta, {})


def _on_stream_lost(s: State, error: SessionError) -> Step:
    live = s.config.live
    if s.phase in (Phase.BACKOFF, Phase.RECONNECTING, Phase.IDLE) and not live:
        return s, ()
    if not live:
        # R-14 Better: a sync run reconnects like a live session, within a bound.
        if not worth_reconnecting(error):
            return _fail(s, error)
        mark = (s.turns, len(s.turn_events))
        losses = 0 if mark > s.progress_mark else s.losses_in_a_row
        s = _evolve(s, losses_in_a_row=losses, progress_mark=max(mark, s.progress_mark))
        if losses >= SYNC_RECONNECT_ATTEMPTS:
            return _fail(s, gave_up(error, losses))
        s = _evolve(s, losses_in_a_row=losses + 1, last_loss=error)
    return _schedule_reconnect(s, error)


def _schedule_reconnect(s: State, error: SessionError | None) -> Step:
    attempt = s.reconnect_attempts
    delay = reconnect_backoff_ms(attempt)
    # The dead stream's generation ends here: anything it still delivers is stale (S-24).
    s = _evolve(
        s, phase=Phase.BACKOFF, reconnect_attempts=attempt + 1, gen=s.gen + 1, turn_events=AppendLog()
    )
    fields: dict[str, JSON] = {"attempt": attempt, "delay_ms": delay}
    if error is not None:
        fields["error"] = error.kind
    return s, (
        Log("warning", f"stream lost; reconnecting in {delay} ms", fields),
        ScheduleReconnect(delay, attempt),
    )


def _settled_phase(s: State) -> Phase:
    if not s.kicked_off:
        return Phase.CONNECTING
    return Phase.AWAITING if s.request_open else Phase.IDLE


def _on_reconnected(s: State, outcome: object) -> Step:
    if isinstance(outcome, Failure):
        error = outcome.failure()
        if not s.config.live:
            # a definite answer ends a sync run; a transient one is another attempt.
            if not worth_reconnecting(error):
                return _fail(s, error)
            if s.losses_in_a_row >= SYNC_RECONNECT_ATTEMPTS:
                return _fail(s, gave_up(error, s.losses_in_a_row))
            s = _evolve(s, losses_in_a_row=s.losses_in_a_row + 1, last_loss=error)
        return _schedule_reconnect(s, error)
    assert isinstance(outcome, Success)
    r = outcome.unwrap()
    was_resuming = s.resuming
    s = _evolve(
        s,
        session_id=r.session_id,
        seen=SeenIds(window=s.config.seen_window).union(r.seen),
        turn_events=AppendLog(),
        resuming=False,
        phase=_settled_phase(s),
    )
    out: list[Command] = []
    turns_before = s.turns
    # R-18 Better: what happened while disconnected goes through the normal path.
    for i, raw in enumerate(r.replay):
        if s.phase is Phase.DONE:
            return s, tuple(out)
        if s.phase in _STREAM_BUSY:
            rest = tuple(StreamEvent(s.gen, e) for e in r.replay[i:])
            s = _evolve(s, deferred=(*rest, *s.deferred))
            return s, tuple(out)
        s, more = _on_stream_event(s, raw)
        out.extend(more)
    if s.turns != turns_before or s.phase not in (Phase.AWAITING, Phase.IDLE, Phase.CONNECTING):
        return s, tuple(out)  # the replay completed a turn; it drove the session on
    if r.pending:
        # R-4 with R-5 Better: a redrive is reported and accumulated like S-52 recovery.
        _tool_uses_telemetry(s, r.pending, out)
        s = _evolve(s, acc=s.acc.add_new_tool_uses(r.pending), request_open=True, phase=Phase.AWAITING)
        if _exceeds_max_turns(s):
            s, more = _max_turns_error(s, TurnResult(terminal=Terminal.REQUIRES_ACTION))
            return s, (*out, *more)
        return _run_tools(s, r.pending, out)
    if s.pending_message is not None and r.idle:  # R-6; R-9: nothing pending and the host idle
        s, more = _deliver_message(s, s.pending_message)
        return s, (*out, *more)
    if was_resuming and r.idle and not s.config.live:
        # R-10 Better: a sync reattach with nothing to do returns at once.
        tr = TurnResult(terminal=Terminal.END_TURN, stop_reason=None)
        s, more = _finish(s, tr, reason="resumed_idle")
        return s, (*out, *more)
    if was_resuming and r.idle:
        s = _evolve(s, request_open=False, phase=Phase.IDLE)
    elif (
        r.idle
        and not s.config.live
        and s.request_open
        and s.phase is Phase.AWAITING
        and not any(isinstance(d, StreamEvent) for d in s.deferred)
    ):
        # S-25 Better, after R-14 Better: the host is idle and nothing replayed ends the
        # request, so nothing ever will; fail now rather than at the run's timeout.
        s, more = _fail(s, no_terminal_coming(s.last_loss))
        return s, (*out, *more)
    return s, tuple(out)  # park


def with_progress(s: State, error: SessionError) -> SessionError:
    """``error`` carrying what the open request's turns did so far (as every error ending a request
    does): for a shell that ends a run itself — a journal's pause for an approval."""
    return _with_partial(s, error)
