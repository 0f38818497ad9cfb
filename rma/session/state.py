"""The session machine's state: one frozen value per session, its phase and its accumulators.

``State`` is what ``rma.session.machine.step`` reads and returns. Every change makes a new
value (``evolve``); an old state stays valid, so a run can be replayed or forked. The
accumulators are persistent append-only logs (``rma._persistent``) so a long request stays
linear (S-33 Better). No decisions here: those are the machine's table and its handlers.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import attrs

from rma._persistent import AppendLog, SeenIds
from rma.errors import SessionError
from rma.live import NO_LIVE_TURN, LiveTurn
from rma.session.commands import Command
from rma.session.events import Event
from rma.session.options import SessionConfig
from rma.vocabulary import JSON, ToolUse, TurnResult, Usage


class Phase(enum.Enum):
    """Where a session is; ``rma.session.machine`` describes each and what it takes."""

    CONNECTING = "connecting"
    AWAITING = "awaiting"
    PUSHING = "pushing"
    TOOLS = "tools"
    GUARD = "guard"
    BACKOFF = "backoff"
    RECONNECTING = "reconnecting"
    IDLE = "idle"
    DONE = "done"


@attrs.frozen
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
        if tr.usage is not None:
            usage = _counts_sum(usage, tr.usage)
            raw = raw.extend(tr.usage.raw)
        return attrs.evolve(
            self,
            events=self.events.extend(events),
            custom_tool_uses=self.custom_tool_uses.extend(tr.custom_tool_uses),
            server_tool_uses=self.server_tool_uses.extend(tr.server_tool_uses),
            usage=usage,
            usage_raw=raw,
            last_text=tr.text,
        )

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


def _counts_sum(a: Usage, b: Usage) -> Usage:
    """The token counts of ``a`` and ``b``, without raw entries (``usage_raw`` keeps those)."""
    return Usage(
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.cache_read_input_tokens + b.cache_read_input_tokens,
        a.cache_creation_input_tokens + b.cache_creation_input_tokens,
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
    live: LiveTurn = NO_LIVE_TURN
    """What the open turn's live updates told consumers so far (previews, whether any spoke)."""
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
    """Inputs waiting for a phase that takes them, in arrival order (see the machine's lanes)."""
    telemetry: bool = attrs.field(default=True, eq=False)
    """Whether the per-turn telemetry (``rma.turn.start``/``.stop``, ``rma.session.tool_uses``,
    ``rma.stream.event``) is built: the shell turns it off while nothing subscribes
    (``machine.with_telemetry``), so a turn builds none of it for nobody. Not part of what a
    session is (``eq=False``): a journal's fold and the live state compare equal either way."""


def initial_state(config: SessionConfig) -> State:
    return State(
        config=config,
        reprompts_left=config.max_reprompts,
        seen=SeenIds(window=config.seen_window),
        updates=config.deliver_updates,
    )


_FIELDS = frozenset(f.name for f in attrs.fields(State))


def evolve(s: State, **changes: Any) -> State:
    """``attrs.evolve(s, **changes)``, made as a copy of the instance dict (State has no
    validators or converters to run, which is why it is ``slots=False``).

    The core's one kept fast path (issue #17: a trick stays where it buys ≥ 5% end to end).
    ``attrs.evolve`` re-runs ``__init__`` over State's 28 fields, about 15,000 instructions a
    copy, and the session copies its state once or twice per event. Counted under callgrind
    (docs/benchmarks.md, "Plain core"): with ``attrs.evolve`` here a Claude Managed Agents tool
    round trip costs 17% more instructions end to end and a Local turn 6% more.
    """
    fields = s.__dict__.copy()
    size = len(fields)
    fields.update(changes)
    if len(fields) != size:  # a misspelt field adds a key
        raise TypeError(f"State has no field(s) {sorted(changes.keys() - _FIELDS)}")
    copy: State = object.__new__(State)
    object.__setattr__(copy, "__dict__", fields)  # past the frozen __setattr__, as attrs does
    return copy


Step = tuple[State, tuple[Command, ...]]
"""What ``step`` and every handler return: the next state and the commands for the shell."""
