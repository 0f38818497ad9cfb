"""Issue 3: a Claude Managed Agents stream may drop at *any* position and the run still ends the same.

It holds for live sessions and, since issue #12 (R-14 Better), for one-shot runs (``run()``),
which reconnect the same way: every sweep runs both (``live``).

For any event script and any position at which the stream drops (every position, not a
sample), the reconnected run ends with the same ``SessionResult`` as the undisturbed one:
the same tool uses, each tool-use id executed at most once per batch, no event duplicated
or lost in ``result.events``.

The pure machine is driven directly by a simulated shell and a simulated CMA host (no trio,
no HTTP). The host speaks the real CMA vocabulary (``session.status_running``,
``agent.message``, ``agent.custom_tool_use``, ``span.model_request_end`` with
``model_usage``, ``session.status_idle`` with ``requires_action.event_ids`` / ``end_turn``,
and ``user.*`` echoes of what the client posted) and keeps the session's history: every
event it emits is appended to the history, and delivered only if a stream is subscribed.

A reconnect is answered exactly as ``rma_shell.machinery.driver.Driver._reconnect`` and
``rma_shell.providers.claude.provider.ClaudeManagedAgents.reconnect`` do: the new
stream is subscribed first (what it delivers before the listing is read waits in the
machine's queue), then the history is listed and ``consolidate(listing, seen, (),
attach=False)`` is handed to the machine, then the rest of the stream flows.

Knobs of a disturbed run (``Drop``): ``at`` — the stream dies after that many delivered
events (every value from 0 to the undisturbed run's count is tried); ``timing`` — the drop
is seen at once, before the shell answered the commands of the last delivered event
(``immediate``: a tool batch or a push may still be in flight, so the machine defers the
failure), or once the shell is quiescent (``settled``); ``offline`` — how many events the
host emits while no stream is subscribed (they land only in the history); ``buffered`` — how
many it emits between the new subscription and the listing (they are both streamed early
and listed). And one pacing knob shared by the runs compared (``Pace.early``): how many
events the host streams before a push's HTTP response reaches the shell.

``test_the_harness_notices_a_consolidation_that_forgets_the_open_turn`` keeps the
simulation honest: with a plausible but wrong consolidation swapped in, it must fail.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from returns.result import Success

from properties._world import scaled
from rma.errors import StreamDropped
from rma.providers.claude import codec as cma
from rma.providers.claude.codec import ClaudeManagedAgentsCodec, Consolidated, consolidate
from rma.session import commands as C
from rma.session.events import (
    Event,
    Opened,
    PushFinished,
    ReconnectFinished,
    ReconnectTimerFired,
    StreamConnected,
    StreamEvent,
    StreamFailed,
    ToolsFinished,
)
from rma.session.machine import Phase, State, initial_state, step
from rma.session.options import SessionConfig
from rma.vocabulary import JSON, SessionResult, ToolResult

SESSION_ID = "sesn_prop"
ALL = 10_000
"""``offline``/``buffered`` value meaning "everything the host has to say"."""

Timing = Literal["immediate", "settled"]


# ── the script: turns in the CMA vocabulary ───────────────────────────────────────────────


def running() -> JSON:
    return {"type": "session.status_running"}


def message(*texts: str) -> JSON:
    return {"type": "agent.message", "content": [{"type": "text", "text": t} for t in texts]}


def thinking() -> JSON:
    return {"type": "agent.thinking"}


def request_start() -> JSON:
    return {"type": "span.model_request_start"}


def request_end(inp: int, out: int, cache_read: int = 0, cache_write: int = 0) -> JSON:
    return {
        "type": "span.model_request_end",
        "model_usage": {
            "input_tokens": inp,
            "output_tokens": out,
            "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_write,
        },
    }


def server_tool(use_id: str, name: str = "web_search") -> list[JSON]:
    """A host-run tool (observe-only for the client): its use and its result."""
    return [
        {"id": use_id, "type": "agent.tool_use", "name": name, "input": {"q": use_id}},
        {
            "type": "agent.tool_result",
            "tool_use_id": use_id,
            "content": [{"type": "text", "text": f"found {use_id}"}],
            "is_error": False,
        },
    ]


def custom_tool_use(use_id: str, name: str, input: dict[str, JSON]) -> JSON:
    return {"id": use_id, "type": "agent.custom_tool_use", "name": name, "input": input}


def idle_requires_action(ids: Sequence[str]) -> JSON:
    return {"type": "session.status_idle", "stop_reason": {"type": "requires_action", "event_ids": list(ids)}}


def idle_end_turn() -> JSON:
    return {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}}


def with_ids(turns: Sequence[Sequence[JSON]]) -> tuple[tuple[JSON, ...], ...]:
    """Give every event without an id a unique ``sevt_…`` id, as the server does."""
    n = 0
    out = []
    for turn in turns:
        events = []
        for ev in turn:
            if "id" not in ev:
                n += 1
                ev = {"id": f"sevt_{n:04d}", **ev}
            events.append(ev)
        out.append(tuple(events))
    return tuple(out)


Script = tuple[tuple[JSON, ...], ...]
"""One tuple of host events per turn; every turn but the last ends ``requires_action``."""

_BODY_ITEMS = ("message", "thinking", "server_tool", "usage", "request_start")


@st.composite
def scripts(draw: Any) -> Script:
    n_turns = draw(st.integers(1, 4))
    turns: list[list[JSON]] = []
    for t in range(n_turns):
        last = t == n_turns - 1
        events: list[JSON] = [running()]
        for j, item in enumerate(draw(st.lists(st.sampled_from(_BODY_ITEMS), max_size=5))):
            if item == "message":
                blocks = draw(st.lists(st.sampled_from(["Hi", "there", "é✓", ""]), min_size=1, max_size=2))
                events.append(message(*(f"{b}{t}.{j}" for b in blocks)))
            elif item == "thinking":
                events.append(thinking())
            elif item == "server_tool":
                events.extend(server_tool(f"sevt_srv_{t}_{j}"))
            elif item == "usage":
                events.append(request_end(draw(st.integers(0, 500)), draw(st.integers(0, 200)), 3, 1))
            else:
                events.append(request_start())
        n_tools = 0 if last else draw(st.integers(1, 3))
        ids = [f"sevt_tool_{t}_{k}" for k in range(n_tools)]
        for k, tid in enumerate(ids):
            name = draw(st.sampled_from(["lookup", "calc", "finish"]))
            events.append(custom_tool_use(tid, name, {"turn": t, "k": k}))
        if draw(st.booleans()):
            events.append(request_end(draw(st.integers(0, 500)), draw(st.integers(0, 200))))
        events.append(idle_end_turn() if last else idle_requires_action(ids))
        turns.append(events)
    return with_ids(turns)


def hand_script_tools() -> Script:
    """Kickoff → two custom tools (with a server tool and text) → one more tool → end_turn."""
    return with_ids(
        [
            [
                running(),
                request_start(),
                thinking(),
                message("Let me look", " that up."),
                *server_tool("sevt_srv_a"),
                custom_tool_use("sevt_tool_a", "lookup", {"q": "a"}),
                custom_tool_use("sevt_tool_b", "calc", {"x": 2}),
                request_end(120, 40, 7, 3),
                idle_requires_action(["sevt_tool_a", "sevt_tool_b"]),
            ],
            [
                running(),
                message("Now one more."),
                custom_tool_use("sevt_tool_c", "finish", {"done": True}),
                request_end(200, 10),
                idle_requires_action(["sevt_tool_c"]),
            ],
            [
                running(),
                thinking(),
                message("All done: ", "42."),
                request_end(300, 25, 100, 0),
                idle_end_turn(),
            ],
        ]
    )


def hand_script_text_only() -> Script:
    """A single end_turn turn: the drop can only hit the kickoff's turn."""
    return with_ids([[running(), message("Hello"), request_end(5, 6), message("world"), idle_end_turn()]])


# ── the simulated CMA host ────────────────────────────────────────────────────────────────


@attrs.define
class Host:
    """The server side: history, the turn script, inputs answered by releasing the next turn."""

    script: Script
    history: list[JSON] = attrs.field(factory=list)
    to_emit: deque[JSON] = attrs.field(factory=deque)
    next_turn: int = 0
    outstanding: list[str] = attrs.field(factory=list)
    answered: set[str] = attrs.field(factory=set)
    violations: list[str] = attrs.field(factory=list)
    posted_results: Counter[str] = attrs.field(factory=Counter)

    def accept(self, inputs: JSON, stream: Stream | None) -> None:
        """POST /events: echo each input into the history (and the stream), maybe start a turn."""
        if not isinstance(inputs, list) or not inputs:
            self.violations.append(f"refusable input {inputs!r}")
            return
        start_turn = False
        for raw in inputs:
            kind = raw.get("type")
            if kind == "user.message":
                echo_id = f"sevt_echo_msg_{self.next_turn}"
                if self.outstanding or self.next_turn != 0:
                    self.violations.append(f"unexpected user.message at turn {self.next_turn}")
                start_turn = True
            elif kind == "user.custom_tool_result":
                ref = raw.get("custom_tool_use_id")
                self.posted_results[ref] += 1
                echo_id = f"sevt_echo_{ref}_{self.posted_results[ref]}"
                if ref in self.answered or ref not in self.outstanding:
                    self.violations.append(f"result for {ref!r} not awaited (outstanding {self.outstanding})")
                    continue
                self.answered.add(ref)
                if all(i in self.answered for i in self.outstanding):
                    start_turn = True
            else:
                self.violations.append(f"unexpected input type {kind!r}")
                continue
            self.emit({**raw, "id": echo_id}, stream)
        if start_turn:
            if self.next_turn >= len(self.script):
                self.violations.append("input after the script ended")
                return
            turn = self.script[self.next_turn]
            self.next_turn += 1
            idle = turn[-1]["stop_reason"]
            self.outstanding = list(idle.get("event_ids", []))
            self.to_emit.extend(turn)

    def emit(self, ev: JSON, stream: Stream | None) -> None:
        self.history.append(ev)
        if stream is not None:
            stream.inflight.append(ev)

    def emit_some(self, n: int, stream: Stream | None) -> int:
        done = 0
        while self.to_emit and done < n:
            self.emit(self.to_emit.popleft(), stream)
            done += 1
        return done


@attrs.define
class Stream:
    gen: int
    inflight: deque[JSON] = attrs.field(factory=deque)
    """Emitted, not yet delivered to the client (lost if the stream dies)."""


# ── the simulated shell ───────────────────────────────────────────────────────────────────


@attrs.frozen
class Drop:
    at: int
    timing: Timing = "immediate"
    offline: int = ALL
    buffered: int = 0


@attrs.frozen
class Pace:
    """How the host's answers interleave with the shell's (the same for every run compared)."""

    early: int = 0
    """Turn events the host streams before a push's HTTP response arrives (the machine is
    still PUSHING, so they wait in its queue): 0, some, or ``ALL``."""


@attrs.define
class Run:
    """What one run produced."""

    finishes: list[C.Finish]
    executions: list[tuple[int, str]]
    """(batch, tool-use id) per handler call, in order."""
    delivered: int
    host: Host
    state: State
    dropped_in: Phase | None = None
    replayed: int = 0
    offline_emitted: int = 0
    buffered_emitted: int = 0
    pending_redriven: int = 0
    posted: list[JSON] = attrs.field(factory=list)


def config(live: bool = True) -> SessionConfig:
    codec = ClaudeManagedAgentsCodec()
    return SessionConfig(codec=codec, live=live, prompt="go", provider_name=codec.name)


def result_text(use_id: str | None) -> str:
    return f"result of {use_id}"


def simulate(
    script: Script, drop: Drop | None, pace: Pace = Pace(), *, live: bool = True, max_steps: int = 10_000
) -> Run:
    """Drive ``step`` with a simulated shell and host until nothing more can happen."""
    host = Host(script)
    state = initial_state(config(live))
    pending: deque[C.Command] = deque()
    run = Run([], [], 0, host, state)
    stream: Stream | None = Stream(gen=0)
    dropped = False

    def feed(ev: Event) -> None:
        nonlocal state
        state, cmds = step(state, ev)
        pending.extend(cmds)

    def do_drop() -> None:
        nonlocal stream, dropped
        assert stream is not None
        dropped = True
        run.dropped_in = state.phase
        gen = stream.gen
        stream = None  # whatever was in flight is lost
        feed(StreamFailed(gen, StreamDropped(detail="connection reset")))

    def deliver_one() -> None:
        assert stream is not None
        feed(StreamEvent(stream.gen, stream.inflight.popleft()))
        run.delivered += 1
        if drop is not None and not dropped and drop.timing == "immediate" and run.delivered == drop.at:
            do_drop()

    def answer(c: C.Command) -> None:
        nonlocal stream
        match c:
            case C.PushInput(input=inputs):
                run.posted.extend(inputs)
                host.accept(inputs, stream)
                if pace.early:  # the echo and the turn's start overtake the POST's response
                    host.emit_some(pace.early, stream)
                    while stream is not None and stream.inflight:
                        deliver_one()
                feed(PushFinished(Success(None)))
            case C.RunTools(batch=batch, uses=uses, confirmations=confirmations):
                assert not confirmations, confirmations
                run.executions.extend((batch, str(u.id)) for u in uses)
                feed(ToolsFinished(batch, [ToolResult(u.id, result_text(u.id)) for u in uses]))
            case C.ScheduleReconnect():
                run.offline_emitted += host.emit_some(drop.offline if drop else 0, None)
                feed(ReconnectTimerFired())
            case C.Reconnect(gen=gen, seen=seen):
                # Driver._reconnect: subscribe the new stream first ...
                stream = Stream(gen=gen)
                feed(StreamConnected(gen))
                run.buffered_emitted += host.emit_some(drop.buffered if drop else 0, stream)
                while stream.inflight:  # ... its early events wait in the machine's queue ...
                    feed(StreamEvent(gen, stream.inflight.popleft()))
                # ... then ClaudeManagedAgents.reconnect lists the history and consolidates.
                found = consolidate(list(host.history), seen, (), attach=False)
                run.replayed += len(found.replay)
                run.pending_redriven += len(found.pending)
                feed(ReconnectFinished(Success(found.reconnected(SESSION_ID))))
            case C.Finish():
                run.finishes.append(c)
            case C.PollTurn() | C.CallGuard() | C.Reply():
                raise AssertionError(f"unexpected command {c!r}")
            case _:
                pass  # telemetry, logs, deliveries to handle_event

    feed(Opened(SESSION_ID))
    feed(StreamConnected(0))  # -> PushInput(kickoff)
    if drop is not None and drop.at == 0 and drop.timing == "immediate":
        do_drop()
    for _ in range(max_steps):
        if pending:
            answer(pending.popleft())
            continue
        # Settled: at the first quiescent point once ``at`` events are in (early deliveries
        # inside a push may carry the count past ``at``).
        settled_drop = drop is not None and drop.timing == "settled" and run.delivered >= drop.at
        if settled_drop and not dropped and stream is not None:
            do_drop()
            continue
        if stream is not None and stream.inflight:
            deliver_one()
            continue
        if host.to_emit:
            host.emit_some(1, stream)
            continue
        break
    else:
        raise AssertionError(f"no quiescence after {max_steps} steps (phase {state.phase})")
    run.state = state
    return run


# ── the comparison ────────────────────────────────────────────────────────────────────────


def the_result(run: Run, label: str) -> SessionResult:
    assert len(run.finishes) == 1, (
        f"{label}: {len(run.finishes)} results; phase {run.state.phase}, deferred {run.state.deferred}"
    )
    finish = run.finishes[0]
    outcome = finish.outcome
    assert isinstance(outcome, Success), f"{label}: {outcome}"
    assert finish.final is not run.state.config.live, f"{label}: final={finish.final}"
    result = outcome.unwrap()
    assert isinstance(result, SessionResult)
    return result


def event_ids(result: SessionResult) -> list[str]:
    return [str(e.get("id")) for e in result.events]


def check_well_formed(run: Run, label: str) -> None:
    assert not run.host.violations, f"{label}: host saw {run.host.violations}"
    ended = Phase.IDLE if run.state.config.live else Phase.DONE
    assert run.state.phase is ended, f"{label}: ends in {run.state.phase}"
    assert run.state.deferred == (), f"{label}: left queued {run.state.deferred}"
    per_batch = Counter(run.executions)
    twice = {k: n for k, n in per_batch.items() if n > 1}
    assert not twice, f"{label}: tool uses run more than once in one batch: {twice}"
    posted = Counter(
        p.get("custom_tool_use_id") for p in run.posted if p.get("type") == "user.custom_tool_result"
    )
    assert all(n == 1 for n in posted.values()), f"{label}: results posted more than once: {posted}"


def check_same(base: Run, disturbed: Run, label: str) -> None:
    check_well_formed(disturbed, label)
    want, got = the_result(base, "undisturbed"), the_result(disturbed, label)
    ids = event_ids(got)
    dups = sorted(i for i, n in Counter(ids).items() if n > 1)
    assert not dups, f"{label}: events duplicated in result.events: {dups}"
    got_ids, want_ids = set(ids), set(event_ids(want))
    missing = [i for i in event_ids(want) if i not in got_ids]
    extra = [i for i in ids if i not in want_ids]
    assert not missing and not extra, f"{label}: events missing {missing}, unexpected {extra}"
    assert ids == event_ids(want), f"{label}: events out of order\n got {ids}\nwant {event_ids(want)}"
    assert got.events == want.events, f"{label}: events differ in content"
    assert (got.terminal, got.stop_reason) == (want.terminal, want.stop_reason), label
    assert got.text == want.text, f"{label}: text {got.text!r} != {want.text!r}"
    got_uses, want_uses = [u.id for u in got.custom_tool_uses], [u.id for u in want.custom_tool_uses]
    assert got.custom_tool_uses == want.custom_tool_uses, f"{label}: tool uses {got_uses} != {want_uses}"
    assert got.server_tool_uses == want.server_tool_uses, f"{label}: server tool uses differ"
    assert got.usage == want.usage, f"{label}: usage {got.usage} != {want.usage}"
    assert got.turns == want.turns, f"{label}: turns {got.turns} != {want.turns}"
    assert (got.session_id, got.resumed, got.reason) == (want.session_id, want.resumed, want.reason), label
    # Every tool-use id runs exactly as often as undisturbed (once), never twice in one batch.
    assert Counter(i for _, i in disturbed.executions) == Counter(i for _, i in base.executions), (
        f"{label}: executions {disturbed.executions} != {base.executions}"
    )


def undisturbed(script: Script, pace: Pace = Pace(), *, live: bool = True) -> Run:
    base = simulate(script, None, pace, live=live)
    check_well_formed(base, "undisturbed")
    result = the_result(base, "undisturbed")
    # The baseline itself must be what the script says (a sanity check of the simulation).
    every = [e for turn in script for e in turn]
    script_ids = {e["id"] for e in every}
    assert {e["id"] for e in result.events} >= script_ids
    want_uses = [e["id"] for e in every if e["type"] == "agent.custom_tool_use"]
    assert [u.id for u in result.custom_tool_uses] == want_uses
    assert sorted(i for _, i in base.executions) == sorted(want_uses)
    assert result.turns == len(script)
    assert base.delivered == len(base.host.history)
    return base


def drops(n: int, timings: Sequence[Timing], offline: int, buffered: int) -> Iterator[Drop]:
    for at in range(n + 1):
        for timing in timings:
            yield Drop(at, timing, offline, buffered)


def sweep(
    script: Script,
    timings: Sequence[Timing],
    offline: int,
    buffered: int,
    pace: Pace = Pace(),
    *,
    live: bool = True,
) -> list[Run]:
    base = undisturbed(script, live=live)
    if pace != Pace():  # pacing alone never changes the result
        check_same(base, undisturbed(script, pace, live=live), f"undisturbed at {pace}")
    runs = []
    kind = "live" if live else "run()"
    for drop in drops(base.delivered, timings, offline, buffered):
        disturbed = simulate(script, drop, pace, live=live)
        assert disturbed.dropped_in is not None, f"drop {drop} never happened"
        check_same(base, disturbed, f"{kind}: drop {drop} at {pace}")
        runs.append(disturbed)
    return runs


# ── the property ──────────────────────────────────────────────────────────────────────────


@settings(max_examples=scaled(40), deadline=None)
@given(
    script=scripts(),
    offline=st.sampled_from([0, 1, 2, ALL]),
    buffered=st.sampled_from([0, 1, 2, ALL]),
    early=st.sampled_from([0, 1, 3, ALL]),
    live=st.booleans(),
)
def test_a_drop_at_any_position_ends_with_the_undisturbed_result(
    script: Script, offline: int, buffered: int, early: int, live: bool
) -> None:
    """Live sessions and one-shot runs (R-14 Better) alike."""
    runs = sweep(script, ("immediate", "settled"), offline, buffered, Pace(early), live=live)
    event("live session" if live else "run()")
    for r in runs:
        event(f"dropped while {r.dropped_in.value if r.dropped_in else 'never'}")
        if r.offline_emitted:
            event("events landed only in history")
        if r.buffered_emitted:
            event("events streamed before the listing")


# ── hand-written scripts, every position, every knob ────────────────────────────────────


@pytest.mark.parametrize("live", [True, False], ids=["live", "run"])
@pytest.mark.parametrize("early", [0, ALL])
@pytest.mark.parametrize("buffered", [0, 1, ALL])
@pytest.mark.parametrize("offline", [0, 1, 5, ALL])
@pytest.mark.parametrize("script", [hand_script_tools(), hand_script_text_only()], ids=["tools", "text"])
def test_hand_written_scripts_survive_a_drop_anywhere(
    script: Script, offline: int, buffered: int, early: int, live: bool
) -> None:
    runs = sweep(script, ("immediate", "settled"), offline, buffered, Pace(early), live=live)
    # Every position: each script event and each echo (the kickoff's and one per tool result)
    # is delivered once undisturbed, and the stream is dropped before and after each of them.
    tool_uses = sum(1 for t in script for e in t if e["type"] == "agent.custom_tool_use")
    assert len(runs) == 2 * (sum(len(t) for t in script) + 1 + tool_uses + 1)


@pytest.mark.parametrize("live", [True, False], ids=["live", "run"])
def test_the_sweep_reaches_every_phase_a_drop_can_hit(live: bool) -> None:
    """Coverage guard: the hand-written sweep drops the stream in each busy phase (and, for a
    one-shot run, after its result, where the drop must change nothing)."""
    phases = {r.dropped_in for r in sweep(hand_script_tools(), ("immediate", "settled"), 1, 1, live=live)}
    after = Phase.IDLE if live else Phase.DONE
    assert {Phase.AWAITING, Phase.TOOLS, Phase.PUSHING, after} <= phases, phases


def test_a_run_reconnects_in_the_sweep_rather_than_failing() -> None:
    """The run() sweep is not vacuous: its drops before the result do reconnect."""
    runs = sweep(hand_script_tools(), ("settled",), 0, 0, live=False)
    reconnected = [r for r in runs if r.dropped_in is not Phase.DONE]
    assert reconnected and all(r.state.gen == 1 for r in reconnected)


def test_the_harness_notices_a_consolidation_that_forgets_the_open_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Replaying only the events the client never saw (the naive R-18) loses the open turn's
    already-seen events: the sweep must catch it at the very first positions."""

    def unseen_only(
        history: Sequence[JSON], seen: Sequence[str], buffered: Sequence[JSON] = (), *, attach: bool = False
    ) -> Consolidated:
        found = cma.consolidate(history, seen, buffered, attach=attach)
        prior = set(seen)
        return attrs.evolve(
            found,
            replay=tuple(e for e in found.replay if e.get("id") not in prior),
            seen=tuple(dict.fromkeys([*found.seen, *seen])),
        )

    monkeypatch.setattr(f"{__name__}.consolidate", unseen_only)
    with pytest.raises(AssertionError, match="events missing"):
        sweep(hand_script_tools(), ("immediate",), offline=0, buffered=0)
